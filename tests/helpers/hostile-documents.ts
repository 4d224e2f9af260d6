import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { strToU8, unzipSync, zipSync } from 'fflate'

/**
 * The documents of the "one upload blocks the service" probe, made at test or bench time (never
 * committed): a text on one line, and a Word document whose text inflates hundreds of times.
 */

/** `bytes` of 'word ' with no line or sentence break: one block the chunker must cut by words. */
export const longLineText = (bytes: number): Uint8Array => strToU8('word '.repeat(Math.ceil(bytes / 5)).slice(0, bytes))

const SAMPLE_DOCX = join(import.meta.dir, '../fixtures/documents/sample.docx')

/**
 * The sample Word document with its word/document.xml replaced by `unpackedBytes` of paragraphs of
 * repeated words (100 KB paragraphs of 'word '): deflate packs it ~700 to 1, like the probe's file
 * (196 MB in ~290 KB).
 */
export function inflatingDocx(unpackedBytes: number): Uint8Array {
  const paragraph = `<w:p><w:r><w:t xml:space="preserve">${'word '.repeat(20_000)}</w:t></w:r></w:p>`
  const head = '<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>'
  const tail = '</w:body></w:document>'
  const n = Math.max(1, Math.floor((unpackedBytes - head.length - tail.length) / paragraph.length))
  const xml = new Uint8Array(head.length + n * paragraph.length + tail.length)
  const p = strToU8(paragraph)
  xml.set(strToU8(head), 0)
  for (let i = 0; i < n; i++) xml.set(p, head.length + i * p.length)
  xml.set(strToU8(tail), head.length + n * p.length)
  return zipSync({ ...unzipSync(new Uint8Array(readFileSync(SAMPLE_DOCX))), 'word/document.xml': xml }, { level: 9 })
}
