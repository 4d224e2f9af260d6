import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { join } from 'node:path'
import { type Block, type DocType, detectType, parseDocument, ParseError, type ParseErrorCode } from '../../src/domain/knowledge/parse'

setDefaultTimeout(TEST_TIMEOUT_MS)

const DIR = join(import.meta.dir, '../fixtures/documents')
const fixture = async (name: string) => new Uint8Array(await Bun.file(join(DIR, name)).arrayBuffer())
const head = (bytes: Uint8Array) => bytes.subarray(0, 4096)
const utf8 = (s: string) => new TextEncoder().encode(s)
const blocks = async (type: DocType, bytes: Uint8Array | string) => (await parseDocument(type, typeof bytes === 'string' ? utf8(bytes) : bytes)).blocks

async function parseFailure(type: DocType, bytes: Uint8Array | string): Promise<ParseError> {
  try {
    await parseDocument(type, typeof bytes === 'string' ? utf8(bytes) : bytes)
  } catch (err) {
    expect(err).toBeInstanceOf(ParseError)
    return err as ParseError
  }
  throw new Error('expected a ParseError')
}

const text = (t: string): Block => ({ kind: 'text', text: t })
const h = (t: string, level: number): Block => ({ kind: 'heading', text: t, level })

describe('detectType', () => {
  test.each([
    ['sample.txt', 'txt'],
    ['empty.txt', 'txt'],
    ['sample.md', 'md'],
    ['sample.html', 'html'],
    ['sample.pdf', 'pdf'],
    ['corrupt.pdf', 'pdf'],
    ['no-text.pdf', 'pdf'],
    ['encrypted.pdf', 'pdf'],
    ['sample.docx', 'docx'],
    ['sample.csv', 'csv'],
    ['sample.json', 'json'],
  ])('%s is %s', async (name, type) => {
    expect(detectType(name, head(await fixture(name)))).toBe(type as DocType)
  })

  test.each([
    ['REPORT.PDF', 'sample.pdf', 'pdf'],
    ['Policy.DocX', 'sample.docx', 'docx'],
    ['notes.Markdown', 'sample.md', 'md'],
    ['page.HTM', 'sample.html', 'html'],
    ['archive.2024.json', 'sample.json', 'json'],
  ])('%s (extension case and extra dots do not matter)', async (name, file, type) => {
    expect(detectType(name, head(await fixture(file)))).toBe(type as DocType)
  })

  test.each([
    ['unknown extension', 'data.xlsx', 'sample.docx'],
    ['no extension', 'README', 'sample.md'],
    ['a dot but no known extension', 'notes.txt.bak', 'sample.txt'],
    ['a .pdf that is text', 'report.pdf', 'sample.txt'],
    ['a .pdf that is a ZIP', 'report.pdf', 'sample.docx'],
    ['a .docx that is not a ZIP', 'policy.docx', 'sample.pdf'],
    ['a .docx that is text', 'policy.docx', 'sample.md'],
    ['a PDF named .txt (binary bytes in its head)', 'sample.txt', 'sample.pdf'],
    ['a .docx named .md (NUL bytes)', 'sample.md', 'sample.docx'],
    ['an empty .pdf', 'empty.pdf', 'empty.txt'],
  ])('refuses %s', async (_, name, file) => {
    expect(detectType(name, head(await fixture(file)))).toBeNull()
  })

  test.each([
    ['NUL bytes in a .txt', 'a.txt', new Uint8Array([0x68, 0x69, 0x00, 0x21])],
    ['UTF-16 (NULs) in a .csv', 'a.csv', new Uint8Array([0xff, 0xfe, 0x61, 0x00, 0x2c, 0x00])],
    ['invalid UTF-8 in a .md', 'a.md', new Uint8Array([0x23, 0x20, 0xc3, 0x28, 0x41])],
    ['Latin-1 in a .json', 'a.json', new Uint8Array([0x7b, 0x22, 0xe9, 0x22, 0x7d])],
  ])('refuses %s', (_, name, bytes) => {
    expect(detectType(name, bytes)).toBeNull()
  })

  test('a character cut in two at the end of the head is not invalid UTF-8', () => {
    const bytes = utf8('café au lait')
    const cut = bytes.indexOf(0xc3) + 1
    expect(detectType('menu.txt', bytes.subarray(0, cut))).toBe('txt')
    expect(detectType('menu.txt', new Uint8Array([...bytes.subarray(0, cut), 0x41]))).toBeNull()
  })
})

describe('parseDocument on the fixtures', () => {
  test('txt: paragraphs on blank lines, BOM and CRLF gone, line breaks inside a paragraph kept', async () => {
    expect(await blocks('txt', await fixture('sample.txt'))).toEqual([
      text('Meeting notes, 3 March'),
      text('Attendees: Ada, Grace and Linus.\nApologies: none.'),
      text('Decision: ship the parser this week.'),
    ])
  })

  test('md: the same tokens as marked\'s own lexer, with and without lines that could underline a setext heading', async () => {
    const { lexer } = await import('marked')
    const { lexMarkdown } = await import('../../src/domain/knowledge/parse/markdown')
    const inputs = [
      await fixture('sample.md'),
      '# Title\n\nA paragraph\nof two lines.\n\n- a list\n  - nested\n\n> a quote\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n---\n\nend *em* `code` [link](x)\n',
      'Setext\n======\n\ntext\n',
      '> quoted\n> ---\n',
      '- item\n  text\n  ---\n',
      'lazy\n> quote\n===\n',
      'no underline here - just a dash\n\n= and an equals sign\n',
    ]
    for (const input of inputs) {
      const md = typeof input === 'string' ? input : new TextDecoder().decode(input)
      expect(JSON.stringify(lexMarkdown(md))).toBe(JSON.stringify(lexer(md, { gfm: true })))
    }
  })

  test('md: ATX and setext headings, decoration stripped, lists, code, quotes and tables as text', async () => {
    expect(await blocks('md', await fixture('sample.md'))).toEqual([
      h('Knowledge Bases', 1),
      text('A knowledge base holds documents that agents can search.\nSee the API reference for details.'),
      h('Uploading', 2),
      text('Upload files with POST /v1/documents:'),
      text('PDF, Word and HTML files'),
      text('Markdown, CSV and JSON files'),
      text('nested item'),
      text('curl -F file=@guide.pdf /v1/documents'),
      text('Uploads are processed in the background.'),
      h('Chunking', 2),
      text('Setting: chunk_size; Default: 256'),
      text('Setting: chunk_overlap; Default: 32'),
      h('Overlap', 3),
      text('Consecutive chunks share a few tokens diagram of context.'),
    ])
  })

  test('html: headings kept, chrome and code skipped, entities decoded, whitespace collapsed', async () => {
    expect(await blocks('html', await fixture('sample.html'))).toEqual([
      h('Release Notes', 1),
      text('Version 2.4 brings faster indexing and a new reranker.'),
      h('Indexing', 2),
      text('Documents are parsed, chunked & embedded in one pass.\nLarge files stream from disk.'),
      text('PDF files up to 50 MB'),
      text('Word files (.docx)'),
      h('Limits', 3),
      text('Plan: Free; Documents: 100'),
      text('Plan: Team; Documents: 10 000'),
      text('curl -X POST /v1/knowledge-bases\n  -d \'{"name": "docs"}\''),
      text('Search quality improved by 12% on our benchmark.'),
      text('Questions? Write to support.'),
    ])
  })

  test('docx: Heading 1/2 styles become headings, lists and table rows text', async () => {
    expect(await blocks('docx', await fixture('sample.docx'))).toEqual([
      h('Travel Policy', 1),
      text('This policy applies to every employee who travels for work.'),
      h('Booking', 2),
      text('Book flights at least 14 days in advance.'),
      text('Economy class for flights under 6 hours'),
      text('Business class for longer flights'),
      h('Expenses', 2),
      text('Submit receipts within 30 days of your return.'),
      text('Item | Limit'),
      text('Hotel | 200 EUR per night'),
    ])
  })

  test('pdf: one block per paragraph over both pages, wrapped lines joined, the heading-like lines apart', async () => {
    expect(await blocks('pdf', await fixture('sample.pdf'))).toEqual([
      text('Onboarding Guide'),
      text(
        'Welcome to the platform. This guide explains how a knowledge base turns your documents into searchable chunks, and what each setting changes along the way.',
      ),
      text('Each document is parsed into blocks, then cut into chunks of at most a few hundred tokens. Chunks keep the heading path of the section they come from.'),
      text('Limits'),
      text('Files larger than the configured limit are refused before parsing. A PDF without any text, such as a scanned image, is reported as an empty document.'),
    ])
  })

  test('pdf: the caller\'s buffer is neither detached nor changed (a Buffer parsed twice gives the same blocks)', async () => {
    const buffer = Buffer.from(await fixture('sample.pdf'))
    const before = Buffer.from(buffer)
    const first = await blocks('pdf', buffer)
    expect(buffer.equals(before)).toBe(true)
    expect(await blocks('pdf', buffer)).toEqual(first)
  })

  test('csv: one rows block, the header apart, quoted comma kept quoted, embedded newline flattened', async () => {
    const [rows, ...rest] = await blocks('csv', await fixture('sample.csv'))
    expect(rest).toEqual([])
    expect(rows!.kind).toBe('rows')
    expect(rows!.header).toBe('id,name,city,plan,notes')
    const lines = rows!.text.split('\n')
    expect(lines).toHaveLength(32)
    expect(lines[0]).toBe('1,Customer 01,Berlin,team,customer since 2011')
    expect(lines[6]).toBe('7,Customer 07,Dublin,team,"renewal due, call first"')
    expect(lines[11]).toBe('12,Customer 12,Madrid,free,line one line two')
    expect(lines[31]).toBe('32,Customer 32,Paris,enterprise,customer since 2014')
  })

  test('json: one block per array item, nested keys as paths, scalar arrays on one line, nulls and empties left out', async () => {
    expect(await blocks('json', await fixture('sample.json'))).toEqual([
      text('id: 1\ntitle: Reset your password\nauthor.name: Ada\nauthor.team: Support\ntags: account, security\npublished: true'),
      text(
        'id: 2\ntitle: Invite a teammate\nauthor.name: Grace\nauthor.team: Growth\n' +
          'steps[0].n: 1\nsteps[0].text: Open Settings\nsteps[1].n: 2\nsteps[1].text: Click Invite',
      ),
      text('id: 3\ntitle: Export your data\nauthor.name: Linus\nauthor.team: Platform\ntags: export'),
    ])
  })
})

describe('parseDocument refuses with a code', () => {
  test.each([
    ['txt', 'empty.txt', 'empty_document', /txt file has no text/],
    ['pdf', 'no-text.pdf', 'empty_document', /pdf file has no text/],
    ['pdf', 'corrupt.pdf', 'parse_error', /PDF could not be read: Invalid PDF structure/],
    ['pdf', 'encrypted.pdf', 'parse_error', /PDF is protected by a password/],
  ])('%s %s → %s', async (type, name, code, message) => {
    const err = await parseFailure(type as DocType, await fixture(name))
    expect(err.code).toBe(code as ParseErrorCode)
    expect(err.message).toMatch(message as RegExp)
  })

  test.each([
    ['txt', ' \n\t\r\n  \n'],
    ['md', '\n\n   \n'],
    ['md', '---\n\n***\n'],
    ['html', '<html><head><title> </title><script>var x = 1</script></head><body>  <nav>Home</nav> </body></html>'],
    ['csv', ''],
    ['csv', 'id,name\n'],
    ['csv', 'id,name\n,\n\n'],
    ['json', '{}'],
    ['json', '[]'],
    ['json', 'null'],
    ['json', '""'],
    ['json', '  [ {}, [], null, {"a": null} ]  '],
  ])('empty_document: %s %j', async (type, body) => {
    expect((await parseFailure(type as DocType, body)).code).toBe('empty_document')
  })

  test.each([
    ['a trailing comma', 'json', '{"a": 1,}', /not valid JSON/],
    ['an unterminated string', 'json', '{"a": "unterminated', /not valid JSON/],
    ['an unterminated quoted field', 'csv', 'id,note\n1,"never closed\n2,x\n', /CSV file could not be parsed/],
    ['invalid UTF-8 past the head', 'txt', new Uint8Array([...utf8('a'.repeat(5000)), 0xff, 0x63]), /not valid UTF-8/],
    ['a ZIP header and garbage', 'docx', new Uint8Array([0x50, 0x4b, 0x03, 0x04, ...utf8('not really a zip archive at all')]), /Word document could not be read/],
    ['text', 'docx', utf8('plain text'), /Word document could not be read/],
    ['a PDF without xref or pages', 'pdf', utf8('%PDF-1.7\n1 0 obj\n<< /Type /Catalog >>\nendobj\n'), /PDF could not be read/],
  ])('parse_error: %s (%s)', async (_, type, body, message) => {
    const err = await parseFailure(type as DocType, body)
    expect(err.code).toBe('parse_error')
    expect(err.message).toMatch(message as RegExp)
  })

  test('an unknown type is unsupported_type', async () => {
    expect((await parseFailure('xlsx' as DocType, 'a')).code).toBe('unsupported_type')
  })

  test('random bytes never escape as anything but a ParseError', async () => {
    let seed = 7
    const random = () => ((seed = (Math.imul(seed, 1_103_515_245) + 12_345) >>> 0) / 2 ** 32)
    const magic: Partial<Record<DocType, number[]>> = { pdf: [...utf8('%PDF-1.4\n')], docx: [0x50, 0x4b, 0x03, 0x04] }
    for (const type of ['txt', 'md', 'html', 'pdf', 'docx', 'csv', 'json'] as DocType[]) {
      for (let n = 0; n < 12; n++) {
        const body = Array.from({ length: Math.floor(random() * 600) }, () => (n % 2 ? Math.floor(random() * 256) : 32 + Math.floor(random() * 95)))
        try {
          await parseDocument(type, new Uint8Array([...(magic[type] ?? []), ...body]))
        } catch (err) {
          expect(err).toBeInstanceOf(ParseError)
        }
      }
    }
  })
})

describe('format details', () => {
  test('txt: a paragraph separated by a line of spaces, trailing spaces trimmed, old Mac line endings', async () => {
    expect(await blocks('txt', 'one  \ntwo\n   \nthree\r\rfour')).toEqual([text('one\ntwo'), text('three'), text('four')])
  })

  test('html: the title is the level-1 heading when the page has none; a head left open ends at the first block', async () => {
    expect(await blocks('html', '<html><head><title>Price &amp; plans</title><p>Cheap.</p><h2>Team</h2><p>More.</p>')).toEqual([
      h('Price & plans', 1),
      text('Cheap.'),
      h('Team', 2),
      text('More.'),
    ])
  })

  test('html: a table without a header row, a cell with paragraphs, a nested table, a div with inline text', async () => {
    const html =
      '<table><tr><td><p>a</p><p>b</p></td><td>c</td></tr><tr><td>outer <table><tr><th>k</th></tr><tr><td>v</td></tr></table> rest</td></tr></table>' +
      '<div>Plain <b>bold</b> <i>and</i> text<div>inner</div>tail</div>'
    expect(await blocks('html', html)).toEqual([text('a b | c'), text('k: v'), text('outer rest'), text('Plain bold and text'), text('inner'), text('tail')])
  })

  test('md: entities and escapes decoded, inline HTML dropped, block HTML read as HTML, task boxes dropped', async () => {
    const md = 'Tom &amp; Jerry \\*not em\\* <b>bold</b>\n\n<div>\n<h2>Raw</h2>\n<p>block html</p>\n</div>\n\n- [x] done item\n\nSetext two\n---\n\nend'
    expect(await blocks('md', md)).toEqual([text('Tom & Jerry *not em* bold'), h('Raw', 2), text('block html'), text('done item'), h('Setext two', 2), text('end')])
  })

  test('json: an object gives one block per top-level key, and one per item of a key holding objects', async () => {
    const json = JSON.stringify({ name: 'kb', settings: { size: 256, 'odd key': true }, docs: [{ id: 'a' }, { id: 'b', meta: { pages: 2 } }], tags: ['x', 'y'] })
    expect(await blocks('json', json)).toEqual([
      text('name: kb'),
      text('settings.size: 256\nsettings["odd key"]: true'),
      text('docs[0].id: a'),
      text('docs[1].id: b\ndocs[1].meta.pages: 2'),
      text('tags: x, y'),
    ])
  })

  test.each([
    ['"just a string"', 'just a string'],
    ['42', '42'],
    ['[1, "two", [3, 4]]', '1\ntwo\n3, 4'],
  ])('json: the scalar %s is its text', async (json, expected) => {
    expect((await blocks('json', json)).map((b) => b.text).join('\n')).toBe(expected)
  })

  test('json: nesting too deep to walk is a parse_error, not a crash', async () => {
    const err = await parseFailure('json', '['.repeat(200_000) + ']'.repeat(200_000))
    expect(err.code).toBe('parse_error')
  })

  test('csv: ragged rows, a BOM, CRLF, an escaped quote, blank lines', async () => {
    const [rows] = await blocks('csv', '\uFEFFa,b\r\n1,"say ""hi"""\r\n\r\n2\r\n3,x,extra\r\n')
    expect(rows).toEqual({ kind: 'rows', header: 'a,b', text: '1,"say ""hi"""\n2\n3,x,extra' })
  })
})
