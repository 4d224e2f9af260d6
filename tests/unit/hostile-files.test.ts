import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { strToU8, unzipSync, zipSync } from 'fflate'
import { parseDocument, ParseError } from '../../src/domain/knowledge/parse'
import { DOCX_MAX_UNPACKED_BYTES, refuseLyingZip } from '../../src/domain/knowledge/parse/docx'
import { DocumentSandbox } from '../../src/domain/knowledge/sandbox'
import { DEFAULT_SANDBOX_LIMITS, SandboxFailure } from '../../src/domain/knowledge/sandbox-protocol'
import { cleanFileName } from '../../src/domain/knowledge/upload'

setDefaultTimeout(TEST_TIMEOUT_MS)

/** Hostile documents (docs/hardening.md): each is refused with a parse error, or read harmlessly; none hangs the process. */
const DOCX = readFileSync(join(import.meta.dir, '../fixtures/documents/sample.docx'))

async function failure(p: Promise<unknown>): Promise<ParseError> {
  try {
    await p
  } catch (err) {
    if (err instanceof ParseError) return err
    throw err
  }
  throw new Error('expected a ParseError')
}

/** The fixture's parts, with some replaced or added, zipped again. */
function docxWith(parts: Record<string, Uint8Array>): Uint8Array {
  return zipSync({ ...unzipSync(new Uint8Array(DOCX)), ...parts })
}

describe('zip bombs in DOCX', () => {
  test('a part declaring more than the limit unpacked is refused before mammoth unpacks it', async () => {
    // A real bomb's directory says what it unpacks to; this one says 3 GB for a small part.
    const zip = docxWith({ 'word/media/bomb.bin': new Uint8Array(1024) })
    const patched = declareSize(zip, 'word/media/bomb.bin', 3_000_000_000)
    const err = await failure(parseDocument('docx', patched))
    expect(err.code).toBe('parse_error')
    expect(err.message).toContain('zip bomb')
    expect(3_000_000_000).toBeGreaterThan(DOCX_MAX_UNPACKED_BYTES)
  })

  test('more than 10 000 parts is refused', async () => {
    const many: Record<string, Uint8Array> = {}
    for (let i = 0; i < 10_001; i++) many[`word/junk/${i}.xml`] = new Uint8Array(0)
    const err = await failure(parseDocument('docx', docxWith(many)))
    expect(err.message).toMatch(/in 100\d\d parts.*zip bomb/)
  })

  test('a directory that understates a part\'s size: refused while the part is inflated, before it is whole', async () => {
    // 8 MB of zeros (a few KB compressed) whose directory says 1 KB: the directory sum passes.
    const zip = declareSize(docxWith({ 'word/media/lying.bin': new Uint8Array(8 * 1024 * 1024) }), 'word/media/lying.bin', 1024)
    const limit = 1024 * 1024
    const err = await failure(refuseLyingZip(zip, limit))
    expect(err.code).toBe('parse_error')
    expect(err.message).toBe(`the Word document unpacks to more than ${limit} bytes, more than its zip directory says: refused as a zip bomb`)
    // The same zip within the limit is inflated whole; the reader then finds the size mismatch.
    const whole = await failure(refuseLyingZip(zip, 64 * 1024 * 1024))
    expect(whole.message).toStartWith('the Word document could not be read: ')
    // Through the parser, with the real limit: a clear parse error, never mammoth's output.
    expect((await failure(parseDocument('docx', zip))).code).toBe('parse_error')
  })

  test('the fixture itself passes the check and is read', async () => {
    await refuseLyingZip(new Uint8Array(DOCX), 1024 * 1024)
    const parsed = await parseDocument('docx', new Uint8Array(DOCX))
    expect(parsed.blocks.length).toBeGreaterThan(0)
  })
})

describe('XML bombs in DOCX', () => {
  test('billion laughs in word/document.xml: the entities are not expanded', async () => {
    const levels = Array.from({ length: 9 }, (_, i) => `<!ENTITY lol${i + 1} "${`&lol${i};`.repeat(10)}">`).join('')
    const xml = `<?xml version="1.0"?><!DOCTYPE w:document [<!ENTITY lol0 "lol">${levels}]>` +
      '<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body><w:p><w:r><w:t>&lol9;</w:t></w:r></w:p></w:body></w:document>'
    const result = await parseDocument('docx', docxWith({ 'word/document.xml': strToU8(xml) })).then(
      (p) => p.blocks.map((b) => b.text).join(' '),
      (err) => (err instanceof ParseError ? '' : Promise.reject(err)),
    )
    // 10^9 "lol"s would be 3 GB; whatever came out is small.
    expect(result.length).toBeLessThan(10_000)
  })
})

describe('PDFs that take too long', () => {
  const PDF = new Uint8Array(readFileSync(join(import.meta.dir, '../fixtures/documents/sample.pdf')))
  const settings = { chunk_size: 256, chunk_overlap: 32 }

  test('are read in the document process, killed at the time limit: processing_timeout, the next one read', async () => {
    // No PDF here loops pdf.js; a limit shorter than any reading shows the process being stopped.
    const fast = new DocumentSandbox({ ...DEFAULT_SANDBOX_LIMITS, timeoutMs: 1 })
    const sandbox = new DocumentSandbox()
    try {
      const err = await fast.process('pdf', async () => PDF, settings).then(
        () => null,
        (e) => e,
      )
      expect(err).toBeInstanceOf(SandboxFailure)
      expect(err).toMatchObject({ code: 'processing_timeout', message: 'parsing and chunking the document took longer than 0.001 s' })
      // The same file, with the default limit, reads as before, and so does the next one.
      expect((await sandbox.process('pdf', async () => PDF, settings)).length).toBeGreaterThan(0)
      expect((await sandbox.process('pdf', async () => PDF, settings)).length).toBeGreaterThan(0)
    } finally {
      await Promise.all([fast.close(), sandbox.close()])
    }
  }, 20_000)
})

describe('file names', () => {
  test('the last path segment, without control characters or bidirectional overrides, at most 255 characters', () => {
    expect(cleanFileName('../../etc/passwd.txt')).toBe('passwd.txt')
    expect(cleanFileName('C:\\Users\\me\\report.pdf')).toBe('report.pdf')
    expect(cleanFileName('a\r\nb\u0000.txt')).toBe('ab.txt')
    expect(cleanFileName('invoice\u202Etxt.md')).toBe('invoicetxt.md')
    expect(cleanFileName('..')).toBe('')
    expect(cleanFileName('  spaced.md  ')).toBe('spaced.md')
    const long = cleanFileName(`${'x'.repeat(300)}.docx`)
    expect(long.length).toBe(255)
    expect(long.endsWith('.docx')).toBe(true)
  })
})

/**
 * Rewrites the uncompressed size that the central directory (and the local header) declare for one
 * entry: what a zip bomb's directory honestly says, without building gigabytes here.
 */
function declareSize(zip: Uint8Array, name: string, size: number): Uint8Array {
  const out = new Uint8Array(zip)
  const view = new DataView(out.buffer)
  const target = strToU8(name)
  for (let i = 0; i + 46 < out.length; i++) {
    const sig = view.getUint32(i, true)
    const header = sig === 0x02014b50 ? 46 : sig === 0x04034b50 ? 30 : 0
    if (!header) continue
    const nameLength = view.getUint16(i + (header === 46 ? 28 : 26), true)
    const entry = out.subarray(i + header, i + header + nameLength)
    if (entry.length === target.length && entry.every((b, k) => b === target[k])) view.setUint32(i + (header === 46 ? 24 : 22), size, true)
  }
  return out
}
