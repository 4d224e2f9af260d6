/**
 * Uploaded files → blocks (headings, paragraphs, table rows) for the chunker: one parser per format
 * under ./parse/, each with a well-kept library doing the format's hard part (marked, htmlparser2,
 * mammoth, pdf.js through unpdf, csv-parse). Every failure is a ParseError with a code the API maps
 * to a status; nothing else escapes, whatever the bytes.
 */
import { parseCsv } from './parse/csv'
import { parseHtml } from './parse/html'
import { parseJson } from './parse/json'
import { parseMarkdown } from './parse/markdown'
import { parseTxt } from './parse/text'
import { type Block, type DocType, ParseError, type ParsedDocument } from './parse/types'

export { type Block, type DocType, ParseError, type ParseErrorCode, type ParsedDocument } from './parse/types'

export const DOC_TYPES: Record<string, DocType> = {
  '.txt': 'txt',
  '.md': 'md',
  '.markdown': 'md',
  '.html': 'html',
  '.htm': 'html',
  '.pdf': 'pdf',
  '.docx': 'docx',
  '.csv': 'csv',
  '.json': 'json',
}

const PDF_MAGIC = [0x25, 0x50, 0x44, 0x46, 0x2d] // %PDF-
const ZIP_MAGIC = [0x50, 0x4b, 0x03, 0x04] // PK\x03\x04, a local file header: a .docx is a ZIP package

function startsWith(head: Uint8Array, magic: readonly number[]): boolean {
  return head.length >= magic.length && magic.every((byte, i) => head[i] === byte)
}

/** Text is UTF-8 without NUL bytes (a NUL means binary or UTF-16, which we do not read). */
function isText(head: Uint8Array): boolean {
  if (head.includes(0)) return false
  try {
    // stream: a character cut in two by the end of `head` is not an error, the rest of it is unseen.
    new TextDecoder('utf-8', { fatal: true }).decode(head, { stream: true })
    return true
  } catch {
    return false
  }
}

/**
 * The type a file is by its extension, checked against its first bytes (`head`, at least the first
 * 4 KiB or the whole file if shorter): null when the extension is not one of ours or the content
 * contradicts it (a .pdf that does not start with %PDF-, a .docx that is not a ZIP, a text type with NUL
 * bytes or invalid UTF-8 in head). The caller answers 415 for null.
 */
/** The type a file name's extension names (one of DOC_TYPES, case-insensitive), or null. */
export function typeOfName(filename: string): DocType | null {
  const dot = filename.lastIndexOf('.')
  if (dot <= 0) return null
  const ext = filename.slice(dot).toLowerCase()
  return Object.hasOwn(DOC_TYPES, ext) ? DOC_TYPES[ext]! : null
}

export function detectType(filename: string, head: Uint8Array): DocType | null {
  const type = typeOfName(filename)
  if (!type) return null
  if (type === 'pdf') return startsWith(head, PDF_MAGIC) ? type : null
  if (type === 'docx') return startsWith(head, ZIP_MAGIC) ? type : null
  return isText(head) ? type : null
}

const parsers: Record<DocType, (bytes: Uint8Array) => Block[] | Promise<Block[]>> = {
  txt: parseTxt,
  md: parseMarkdown,
  html: parseHtml,
  // Loaded by the first file of their type: mammoth (with JSZip) is ~17 MB resident, and the service's
  // own process, which imports this module for detectType, never parses (bench/README.memory.md).
  pdf: async (bytes) => (await import('./parse/pdf')).readPdf(bytes),
  docx: async (bytes) => (await import('./parse/docx')).parseDocx(bytes),
  csv: parseCsv,
  json: parseJson,
}

/**
 * Parses a whole file into blocks. A corrupt file → ParseError('parse_error', a clear message); a file
 * with no text at all (0 bytes, whitespace only, a PDF with no text) → ParseError('empty_document', ...).
 * Never throws anything else for bad input. No parser here has a time or memory limit of its own: the
 * service calls this in the document process (sandbox.ts), which has both.
 */
export async function parseDocument(type: DocType, bytes: Uint8Array): Promise<ParsedDocument> {
  const parse = parsers[type]
  if (!parse) throw new ParseError('unsupported_type', `documents of type ${String(type)} are not supported`)
  let blocks: Block[]
  try {
    blocks = await parse(bytes)
  } catch (err) {
    if (err instanceof ParseError) throw err
    // The libraries' own failures (and a stack overflow on absurdly deep nesting) are the file's fault.
    throw new ParseError('parse_error', `the ${type} file could not be parsed: ${(err as Error)?.message ?? String(err)}`)
  }
  blocks = blocks.filter((b) => b.text.trim() !== '')
  if (blocks.length === 0) throw new ParseError('empty_document', `the ${type} file has no text`)
  return { blocks }
}
