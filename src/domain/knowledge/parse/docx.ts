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

/** What a Word document may unpack to: far above real ones (text XML, images), far below a bomb's. */
export const DOCX_MAX_UNPACKED_BYTES = 256 * 1024 * 1024
const DOCX_MAX_ENTRIES = 10_000

/**
 * A zip bomb (a few MB that unpack to gigabytes) is refused before mammoth unpacks anything: fflate
 * reads the central directory only (every entry filtered out), and the sizes it declares are summed.
 * A directory that lies about its sizes is caught next, by refuseLyingZip.
 */
function refuseZipBomb(bytes: Uint8Array): void {
  let total = 0
  let entries = 0
  try {
    unzipSync(bytes, {
      filter: (file) => {
        total += file.originalSize
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
}

/**
 * A zip whose directory understates its sizes passes refuseZipBomb, and mammoth's reader (JSZip)
 * would inflate each part whole before noticing the mismatch: gigabytes in memory. So every part is
 * first inflated here by the same reader (the same entries, found the same way), as a stream whose
 * pieces are counted and dropped, and the document is refused once they pass `limit`. Costs one more
 * inflate of a real document (measured 9-45 ms for the 19 KB fixture: JSZip yields to the event loop
 * between pieces); its memory stays at one piece.
 */
export async function refuseLyingZip(bytes: Uint8Array, limit = DOCX_MAX_UNPACKED_BYTES): Promise<void> {
  let zip: JSZip
  try {
    zip = await JSZip.loadAsync(bytes)
  } catch (err) {
    throw readError(err)
  }
  let total = 0
  for (const file of Object.values(zip.files)) {
    if (file.dir) continue
    await new Promise<void>((resolve, reject) => {
      // JSZip's own stream of a part (typed in its sources, not in its .d.ts): pieces of ~16 KB.
      const stream = (file as unknown as { internalStream(type: 'uint8array'): PartStream }).internalStream('uint8array')
      stream
        .on('data', (piece) => {
          total += piece.length
          if (total <= limit) return
          stream.pause()
          reject(new ParseError('parse_error', `the Word document unpacks to more than ${limit} bytes, more than its zip directory says: refused as a zip bomb`))
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
