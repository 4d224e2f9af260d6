import { unzipSync } from 'fflate'
import mammoth from 'mammoth'
import { htmlToBlocks } from './html'
import { type Block, ParseError } from './types'

// Images are neither read nor inlined as data: URIs (mammoth's default): the text is all we keep,
// and a 5 MB photo would otherwise be base64-encoded into the HTML for nothing.
const noImages = mammoth.images.imgElement(async () => ({ src: '' }))

/**
 * Word documents with mammoth: to HTML, where its default style map has turned the "Heading 1".."Heading
 * 6" paragraph styles into <h1>..<h6>, lists into <ul>/<ol> and tables into <table>; then the HTML path.
 * Linked (external) files are never opened.
 */
export async function parseDocx(bytes: Uint8Array): Promise<Block[]> {
  refuseZipBomb(bytes)
  let html: string
  try {
    const buffer = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
    html = (await mammoth.convertToHtml({ buffer }, { convertImage: noImages, externalFileAccess: false })).value
  } catch (err) {
    throw new ParseError('parse_error', `the Word document could not be read: ${(err as Error)?.message ?? String(err)}`)
  }
  return htmlToBlocks(html)
}

/** What a Word document may unpack to: far above real ones (text XML, images), far below a bomb's. */
export const DOCX_MAX_UNPACKED_BYTES = 256 * 1024 * 1024
const DOCX_MAX_ENTRIES = 10_000

/**
 * A zip bomb (a few MB that unpack to gigabytes) is refused before mammoth unpacks anything: fflate
 * reads the central directory only (every entry filtered out), and the sizes it declares are summed.
 * A zip whose directory lies about its sizes is not caught here; MAX_UPLOAD_BYTES bounds what it
 * can hold.
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
    throw new ParseError('parse_error', `the Word document could not be read: ${(err as Error)?.message ?? String(err)}`)
  }
  if (total > DOCX_MAX_UNPACKED_BYTES || entries > DOCX_MAX_ENTRIES) {
    throw new ParseError('parse_error', `the Word document unpacks to ${total} bytes in ${entries} parts (at most ${DOCX_MAX_UNPACKED_BYTES} bytes and ${DOCX_MAX_ENTRIES} parts): refused as a zip bomb`)
  }
}
