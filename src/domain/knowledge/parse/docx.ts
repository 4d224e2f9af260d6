import { unzipSync } from 'fflate'
import JSZip from 'jszip'
import mammoth from 'mammoth'
import { htmlToBlocks } from './html'
import { type Block, ParseError } from './types'

// Images are neither read nor inlined as data: URIs (mammoth's default): the text is all we keep,
// and a 5 MB photo would otherwise be base64-encoded into the HTML for nothing.
const noImages = mammoth.images.imgElement(async () => ({ src: '' }))

const readError = (err: unknown) => new ParseError('parse_error', `the Word document could not be read: ${(err as Error)?.message ?? String(err)}`)

/**
 * Word documents with mammoth: to HTML, where its default style map has turned the "Heading 1".."Heading
 * 6" paragraph styles into <h1>..<h6>, lists into <ul>/<ol> and tables into <table>; then the HTML path.
 * Linked (external) files are never opened.
 */
export async function parseDocx(bytes: Uint8Array): Promise<Block[]> {
  refuseZipBomb(bytes)
  await refuseLyingZip(bytes)
  let html: string
  try {
    const buffer = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
    html = (await mammoth.convertToHtml({ buffer }, { convertImage: noImages, externalFileAccess: false })).value
  } catch (err) {
    throw readError(err)
  }
  return htmlToBlocks(html)
}

/**
 * What a Word document's parts may unpack to, all together: the largest upload (MAX_UPLOAD_BYTES,
 * 50 MiB) is mostly images when it is that large, and images do not deflate, so they unpack to about
 * their size; 64 MiB leaves the XML room beside them. Parts that are not XML are only ever inflated
 * as a counted stream (refuseLyingZip), never parsed: they cost time, not memory.
 */
export const DOCX_MAX_UNPACKED_BYTES = 64 * 1024 * 1024
/**
 * What the XML parts (document, headers, footnotes, styles...: what mammoth parses) may unpack to.
 * mammoth holds a tree of the XML and then the HTML: measured (bun --smol, peak RSS of the process,
 * one long paragraph per 1 KB of XML) 128 MB for 4 MiB, 304 MB for 16 MiB, 498 MB for 32 MiB, 984 MB
 * for 64 MiB: ~15 bytes of memory per byte of XML. A real document needs far less: Word writes
 * ~300 bytes of markup per paragraph and ~100 per run of formatting, so a 1 300-page novel (3 MB of
 * text, ~12 000 paragraphs) is ~8 MiB of XML. 16 MiB is twice that, and ~300 MB to read, under the
 * document process' memory limit (DEFAULT_SANDBOX_LIMITS in src/domain/knowledge/sandbox-protocol.ts).
 * The probe's 287 KB file that inflates to 196 MB (it took the process to 14 GB under the old 256 MiB
 * cap) is refused from its zip directory in milliseconds.
 */
export const DOCX_MAX_XML_BYTES = 16 * 1024 * 1024
const DOCX_MAX_ENTRIES = 10_000

/** The parts mammoth parses (XML and relationships); media and the rest are never parsed. */
const isXmlPart = (name: string) => /\.(xml|rels)$/i.test(name)

/**
 * A zip bomb (a few MB that unpack to gigabytes) is refused before mammoth unpacks anything: fflate
 * reads the central directory only (every entry filtered out), and the sizes it declares are summed.
 * A directory that lies about its sizes is caught next, by refuseLyingZip.
 */
function refuseZipBomb(bytes: Uint8Array): void {
  let total = 0
  let xml = 0
  let entries = 0
  try {
    unzipSync(bytes, {
      filter: (file) => {
        total += file.originalSize
        if (isXmlPart(file.name)) xml += file.originalSize
        entries++
        return false
      },
    })
  } catch (err) {
    throw readError(err)
  }
  if (total > DOCX_MAX_UNPACKED_BYTES || entries > DOCX_MAX_ENTRIES) {
    throw new ParseError('parse_error', `the Word document unpacks to ${total} bytes in ${entries} parts (at most ${DOCX_MAX_UNPACKED_BYTES} bytes and ${DOCX_MAX_ENTRIES} parts): refused as a zip bomb`)
  }
  if (xml > DOCX_MAX_XML_BYTES) {
    throw new ParseError('parse_error', `the Word document's XML unpacks to ${xml} bytes (at most ${DOCX_MAX_XML_BYTES}): refused as too large to read`)
  }
}

/**
 * A zip whose directory understates its sizes passes refuseZipBomb, and mammoth's reader (JSZip)
 * would inflate each part whole before noticing the mismatch: gigabytes in memory. So every part is
 * first inflated here by the same reader (the same entries, found the same way), as a stream whose
 * pieces are counted and dropped, and the document is refused once they pass `limit`. Costs one more
 * inflate of a real document (measured 9-45 ms for the 19 KB fixture: JSZip yields to the event loop
 * between pieces); its memory stays at one piece.
 */
export async function refuseLyingZip(bytes: Uint8Array, limit = DOCX_MAX_UNPACKED_BYTES, xmlLimit = DOCX_MAX_XML_BYTES): Promise<void> {
  let zip: JSZip
  try {
    zip = await JSZip.loadAsync(bytes)
  } catch (err) {
    throw readError(err)
  }
  let total = 0
  let xml = 0
  for (const file of Object.values(zip.files)) {
    if (file.dir) continue
    const parsed = isXmlPart(file.name)
    await new Promise<void>((resolve, reject) => {
      // JSZip's own stream of a part (typed in its sources, not in its .d.ts): pieces of ~16 KB.
      const stream = (file as unknown as { internalStream(type: 'uint8array'): PartStream }).internalStream('uint8array')
      stream
        .on('data', (piece) => {
          total += piece.length
          if (parsed) xml += piece.length
          if (total <= limit && xml <= xmlLimit) return
          stream.pause()
          if (total > limit) reject(new ParseError('parse_error', `the Word document unpacks to more than ${limit} bytes, more than its zip directory says: refused as a zip bomb`))
          else reject(new ParseError('parse_error', `the Word document's XML unpacks to more than ${xmlLimit} bytes, more than its zip directory says: refused as too large to read`))
        })
        .on('error', (err) => reject(readError(err)))
        .on('end', () => resolve())
        .resume()
    })
  }
}

interface PartStream {
  on(event: 'data', fn: (piece: Uint8Array) => void): PartStream
  on(event: 'error', fn: (err: unknown) => void): PartStream
  on(event: 'end', fn: () => void): PartStream
  resume(): PartStream
  pause(): PartStream
}
