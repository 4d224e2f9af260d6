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
  let html: string
  try {
    const buffer = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
    html = (await mammoth.convertToHtml({ buffer }, { convertImage: noImages, externalFileAccess: false })).value
  } catch (err) {
    throw new ParseError('parse_error', `the Word document could not be read: ${(err as Error)?.message ?? String(err)}`)
  }
  return htmlToBlocks(html)
}
