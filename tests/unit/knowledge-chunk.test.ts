import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { type Chunk, type ChunkSettings, chunkDocument, DEFAULT_CHUNKING, TooManyChunks } from '../../src/domain/knowledge/chunk'
import type { Block, ParsedDocument } from '../../src/domain/knowledge/parse'
import { countTokens, tokenized } from '../../src/lib/tokens'

setDefaultTimeout(TEST_TIMEOUT_MS)

const h = (text: string, level: number): Block => ({ kind: 'heading', text, level })
const p = (text: string): Block => ({ kind: 'text', text })
const rows = (header: string, lines: string[]): Block => ({ kind: 'rows', header, text: lines.join('\n') })
const doc = (...blocks: Block[]): ParsedDocument => ({ blocks })
const settings = (chunk_size: number, chunk_overlap = 0, separators?: string[]): ChunkSettings => ({ chunk_size, chunk_overlap, separators })

/** Numbered words, none equal to another: text two chunks share can only be overlap. */
const words = (tag: string, from: number, n: number) => Array.from({ length: n }, (_, i) => `${tag}${from + i}`)
const squash = (s: string) => s.replace(/\s+/g, '')

/** What holds for every chunk list: positions 0..n-1, exact token counts, trimmed non-empty content. */
function expectWellFormed(chunks: Chunk[]): void {
  chunks.forEach((c, i) => {
    expect(c.position).toBe(i)
    expect(c.tokens).toBe(countTokens(c.content))
    expect(c.content.trim()).toBe(c.content)
    expect(c.content).not.toBe('')
  })
}

function expectBound(chunks: Chunk[], size: number): void {
  expectWellFormed(chunks)
  for (const c of chunks) expect(c.tokens).toBeLessThanOrEqual(size)
}

/** Words chunk k+1 repeats from the end of chunk k (the overlap), checked to be a true suffix/prefix. */
function sharedWords(prev: string, next: string): string[] {
  const a = prev.split(/\s+/)
  const b = next.split(/\s+/)
  const at = a.indexOf(b[0]!)
  if (at < 0) return []
  const shared = a.slice(at)
  expect(b.slice(0, shared.length)).toEqual(shared)
  return shared
}

test('the default settings', () => {
  expect(DEFAULT_CHUNKING).toEqual({ chunk_size: 256, chunk_overlap: 32 })
})

describe('sections', () => {
  const outline = doc(
    p('Preface text.'),
    h('A', 1),
    p('a text'),
    h('B', 2),
    p('b text'),
    h('C', 3),
    p('c text'),
    h('D', 2),
    p('d text'),
    h('E', 1),
    p('e text'),
    h('F', 3),
    p('f text'),
  )

  test.each([
    [0, [], 'Preface text.'],
    [1, ['A'], 'A\n\na text'],
    [2, ['A', 'B'], 'B\n\nb text'],
    [3, ['A', 'B', 'C'], 'C\n\nc text'],
    [4, ['A', 'D'], 'D\n\nd text'],
    [5, ['E'], 'E\n\ne text'],
    [6, ['E', 'F'], 'F\n\nf text'],
  ])('chunk %d: path %j, starts with its heading', (i, path, content) => {
    const chunks = chunkDocument(outline, DEFAULT_CHUNKING)
    expect(chunks).toHaveLength(7)
    expect(chunks[i]).toEqual({ position: i, content, heading_path: path, tokens: countTokens(content) })
  })

  test('every heading starts a new chunk, however small the sections', () => {
    const chunks = chunkDocument(doc(h('One', 1), p('x'), h('Two', 1), p('y'), h('Three', 2), p('z')), settings(4096))
    expect(chunks.map((c) => c.content)).toEqual(['One\n\nx', 'Two\n\ny', 'Three\n\nz'])
  })

  test('headings with no text of their own open the next section; a replaced one is dropped', () => {
    const chunks = chunkDocument(doc(h('Guide', 1), h('Draft', 2), h('Install', 2), h('Linux', 3), p('apt install it')), DEFAULT_CHUNKING)
    expect(chunks).toHaveLength(1)
    expect(chunks[0]!.content).toBe('Guide\nInstall\nLinux\n\napt install it')
    expect(chunks[0]!.heading_path).toEqual(['Guide', 'Install', 'Linux'])
  })

  test('only the first chunk of a section carries the heading lines; every chunk carries the path', () => {
    const chunks = chunkDocument(doc(h('Long', 1), p(words('w', 0, 300).join(' '))), settings(64))
    expect(chunks.length).toBeGreaterThan(3)
    expect(chunks[0]!.content.startsWith('Long\n\nw0 ')).toBe(true)
    for (const c of chunks.slice(1)) expect(c.content.startsWith('w')).toBe(true)
    for (const c of chunks) expect(c.heading_path).toEqual(['Long'])
    expectBound(chunks, 64)
  })

  test('a document of headings alone is one chunk of its headings; no blocks, no chunks', () => {
    expect(chunkDocument(doc(h('Title', 1), h('Subtitle', 2)), DEFAULT_CHUNKING).map((c) => c.content)).toEqual(['Title\nSubtitle'])
    expect(chunkDocument(doc(), DEFAULT_CHUNKING)).toEqual([])
    expect(chunkDocument(doc(p('  '), p('\n')), DEFAULT_CHUNKING)).toEqual([])
  })
})

describe('packing and the bound', () => {
  const paragraphs = Array.from({ length: 40 }, (_, i) => `Paragraph ${i} says ${words('p', i * 10, 3 + (i % 7)).join(' ')}.`)

  test('paragraphs are packed greedily, whole, joined by a blank line', () => {
    const chunks = chunkDocument(doc(...paragraphs.map(p)), settings(64))
    expectBound(chunks, 64)
    expect(chunks.flatMap((c) => c.content.split('\n\n'))).toEqual(paragraphs)
    // Greedy: the paragraph that starts chunk k+1 did not fit at the end of chunk k.
    for (let k = 0; k + 1 < chunks.length; k++) {
      const next = chunks[k + 1]!.content.split('\n\n')[0]!
      expect(countTokens(`${chunks[k]!.content}\n\n${next}`)).toBeGreaterThan(64)
    }
  })

  test.each([32, 33, 50, 64, 100, 256, 1000])('chunk_size %d: every chunk within the bound, nothing lost', (size) => {
    const text = paragraphs.join('\n\n')
    const chunks = chunkDocument(doc(p(text)), settings(size))
    expectBound(chunks, size)
    expect(squash(chunks.map((c) => c.content).join(''))).toBe(squash(text))
  })

  test('a long paragraph is cut at sentence ends before anywhere else', () => {
    const sentences = Array.from({ length: 60 }, (_, i) => `Sentence number ${i} is about ${words('s', i * 5, 4).join(' ')}.`)
    const chunks = chunkDocument(doc(p(sentences.join(' '))), settings(48))
    expectBound(chunks, 48)
    expect(chunks.length).toBeGreaterThan(5)
    for (const c of chunks) expect(c.content).toMatch(/^Sentence number \d+ .*\.$/s)
    expect(chunks.map((c) => c.content).join(' ')).toBe(sentences.join(' '))
  })

  test('lines before sentences: a block of long lines is cut at line ends', () => {
    const lines = Array.from({ length: 30 }, (_, i) => `line ${i}. ${words('l', i * 8, 8).join(', ')}`)
    const chunks = chunkDocument(doc(p(lines.join('\n'))), settings(40))
    expectBound(chunks, 40)
    expect(chunks.flatMap((c) => c.content.split('\n'))).toEqual(lines)
  })

  test('custom separators replace the defaults', () => {
    const fields = Array.from({ length: 30 }, (_, i) => `${words('f', i * 4, 4).join(' ')}|`)
    const text = fields.join('')
    const custom = chunkDocument(doc(p(text)), settings(32, 0, ['|']))
    expectBound(custom, 32)
    for (const c of custom) expect(c.content.endsWith('|')).toBe(true)
    expect(custom.map((c) => c.content).join('')).toBe(text)
    // The defaults know nothing of '|' and cut between words instead.
    expect(chunkDocument(doc(p(text)), settings(32)).some((c) => !c.content.endsWith('|'))).toBe(true)
  })

  test.each([
    ['emoji among letters', 'abc😀défghij🚀', 32],
    ['mathematical letters (astral, one token each or more)', '𝔘𝔫𝔦𝔠𝔬𝔡𝔢 text ', 33],
    ['mathematical letters (astral, one token each or more)', '𝔘𝔫𝔦𝔠𝔬𝔡𝔢 text ', 100],
  ])('no separators, %s: cut anywhere by tokens, nothing lost, no surrogate pair broken', (_, unit, size) => {
    const text = unit.repeat(400)
    for (const separators of [[], ['\n\n']]) {
      const chunks = chunkDocument(doc(p(text)), settings(size, 0, separators))
      expectBound(chunks, size)
      expect(chunks.length).toBeGreaterThan(20)
      expect(squash(chunks.map((c) => c.content).join(''))).toBe(squash(text))
      for (const c of chunks) expect(c.content).not.toMatch(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/)
    }
  })
})

describe('overlap', () => {
  const all = words('w', 0, 600)

  test.each([
    [64, 16],
    [100, 32],
    [256, 32],
    [40, 19],
  ])('chunk_size %d, overlap %d: each chunk starts with the end of the one before, at most overlap tokens', (size, overlap) => {
    const chunks = chunkDocument(doc(p(all.join(' '))), settings(size, overlap))
    expectBound(chunks, size)
    const rebuilt = chunks[0]!.content.split(' ')
    for (let k = 0; k + 1 < chunks.length; k++) {
      const shared = sharedWords(chunks[k]!.content, chunks[k + 1]!.content)
      expect(shared.length).toBeGreaterThan(0)
      expect(countTokens(' ' + shared.join(' '))).toBeLessThanOrEqual(overlap)
      rebuilt.push(...chunks[k + 1]!.content.split(' ').slice(shared.length))
    }
    expect(rebuilt).toEqual(all)
  })

  test('no overlap: chunks share nothing and partition the text', () => {
    const chunks = chunkDocument(doc(p(all.join(' '))), settings(64, 0))
    for (let k = 0; k + 1 < chunks.length; k++) expect(sharedWords(chunks[k]!.content, chunks[k + 1]!.content)).toEqual([])
    expect(chunks.flatMap((c) => c.content.split(' '))).toEqual(all)
  })

  test('overlap between paragraphs too, but never across a heading', () => {
    const chunks = chunkDocument(
      doc(h('A', 1), ...Array.from({ length: 6 }, (_, i) => p(words(`a${i}x`, 0, 30).join(' '))), h('B', 1), p(words('b', 0, 200).join(' '))),
      settings(64, 16),
    )
    expectBound(chunks, 64)
    const firstB = chunks.findIndex((c) => c.heading_path[0] === 'B')
    expect(firstB).toBeGreaterThan(1)
    expect(chunks[firstB]!.content.startsWith('B\n\nb0 b1')).toBe(true)
    expect(chunks[firstB]!.content).not.toMatch(/a\dx/)
    for (let k = 0; k + 1 < firstB; k++) expect(sharedWords(chunks[k]!.content, chunks[k + 1]!.content).length).toBeGreaterThan(0)
    for (let k = firstB; k + 1 < chunks.length; k++) expect(sharedWords(chunks[k]!.content, chunks[k + 1]!.content).length).toBeGreaterThan(0)
  })

  test('text without spaces still overlaps, cut anywhere', () => {
    // Han characters in an order that does not repeat, so a shared run can only be overlap.
    const text = Array.from({ length: 1200 }, (_, i) => String.fromCharCode(0x4e00 + ((i * 7919) % 20_000))).join('')
    const chunks = chunkDocument(doc(p(text)), settings(48, 12))
    expectBound(chunks, 48)
    expect(chunks.length).toBeGreaterThan(20)
    for (let k = 0; k + 1 < chunks.length; k++) {
      const prev = chunks[k]!.content
      const next = chunks[k + 1]!.content
      let shared = 0
      for (let n = 1; n <= Math.min(prev.length, next.length); n++) if (prev.endsWith(next.slice(0, n))) shared = n
      expect(shared).toBeGreaterThan(0)
      expect(countTokens(next.slice(0, shared))).toBeLessThanOrEqual(12)
    }
  })
})

describe('rows', () => {
  const header = 'id,name,city,notes'
  const lines = Array.from({ length: 100 }, (_, i) => `${i},Customer ${i},${['Paris', 'Oslo', 'Lima'][i % 3]},"note ${i}, with a comma"`)

  test('rows packed whole, the header first in every chunk, every row once and in order', () => {
    const chunks = chunkDocument(doc(rows(header, lines)), settings(64, 16))
    expectBound(chunks, 64)
    expect(chunks.length).toBeGreaterThan(10)
    const seen: string[] = []
    for (const c of chunks) {
      const [first, ...body] = c.content.split('\n')
      expect(first).toBe(header)
      expect(body.length).toBeGreaterThan(0)
      seen.push(...body)
    }
    expect(seen).toEqual(lines)
  })

  test('a row longer than a chunk is cut like text, the header still first', () => {
    const long = `7,${words('v', 0, 200).join(' ')}`
    const chunks = chunkDocument(doc(rows(header, ['1,short', long, '9,after'])), settings(48))
    expectBound(chunks, 48)
    for (const c of chunks) expect(c.content.startsWith(`${header}\n`)).toBe(true)
    const bodies = chunks.map((c) => c.content.slice(header.length + 1))
    expect(squash(bodies.join(''))).toBe(squash(['1,short', long, '9,after'].join('')))
  })

  test.each([
    ['a header over chunk_size', 40],
    ['a header over 3/4 of chunk_size', 18],
  ])('the exception, %s: each chunk is the header and a quarter of chunk_size of rows, not slivers', (_, columns) => {
    const wide = words('column_', 0, columns).join(',')
    const headerTokens = countTokens(`${wide}\n`)
    expect(headerTokens).toBeGreaterThan(48)
    const short = Array.from({ length: 60 }, (_, i) => `${i},${['Paris', 'Oslo', 'Lima'][i % 3]}`)
    const chunks = chunkDocument(doc(rows(wide, short)), settings(64))
    expectWellFormed(chunks)
    expect(chunks.some((c) => c.tokens > 64)).toBe(true)
    const seen: string[] = []
    chunks.forEach((c, k) => {
      expect(c.content.startsWith(`${wide}\n`)).toBe(true)
      expect(c.tokens).toBeLessThanOrEqual(headerTokens + 16)
      if (k < chunks.length - 1) expect(c.tokens).toBeGreaterThanOrEqual(headerTokens + 10)
      seen.push(...c.content.split('\n').slice(1))
    })
    expect(seen).toEqual(short)
  })

  test('the exception holds for heading lines too; the chunks after the first are within the bound', () => {
    const title = words('t', 0, 60).join(' ')
    const titleTokens = countTokens(`${title}\n\n`)
    const chunks = chunkDocument(doc(h(title, 1), p(words('w', 0, 200).join(' '))), settings(64))
    expectWellFormed(chunks)
    expect(chunks[0]!.content.startsWith(`${title}\n\nw0 w1 `)).toBe(true)
    expect(chunks[0]!.tokens).toBeGreaterThan(64)
    expect(chunks[0]!.tokens).toBeLessThanOrEqual(titleTokens + 16)
    expect(chunks[0]!.tokens).toBeGreaterThanOrEqual(titleTokens + 10)
    for (const c of chunks.slice(1)) expect(c.tokens).toBeLessThanOrEqual(64)
  })

  test('text, rows and text in one section: rows take no overlap and give none', () => {
    const blocks = [h('Data', 1), p(words('a', 0, 80).join(' ')), rows('k,v', ['1,one', '2,two']), p(words('z', 0, 80).join(' '))]
    const chunks = chunkDocument(doc(...blocks), settings(48, 12))
    expectBound(chunks, 48)
    const r = chunks.findIndex((c) => c.content.startsWith('k,v\n'))
    expect(chunks[r]!.content).toBe('k,v\n1,one\n2,two')
    expect(chunks[r + 1]!.content.startsWith('z0 ')).toBe(true)
    expect(chunks[0]!.content.startsWith('Data\n\na0 ')).toBe(true)
    for (const c of chunks) expect(c.heading_path).toEqual(['Data'])
  })
})

describe('any settings in range terminate within the bound', () => {
  // A small deterministic generator: the same cases on every run, printed on failure.
  let seed = 20_240_601
  const random = () => ((seed = (Math.imul(seed, 1_103_515_245) + 12_345) >>> 0) / 2 ** 32)
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]!
  const vocabulary = ['the', 'chunk', 'of', 'tokens', 'Überblick', 'naïve', '知识库', '😀', 'x'.repeat(40), '3.14', 'e.g.', '—', 'https://example.com/a?b=c']
  const glue = [' ', ' ', ' ', ' ', '. ', ', ', '; ', '? ', '! ', '\n', '\n\n', '', '\t', '  ']

  function randomText(): string {
    let s = ''
    const n = Math.floor(random() * (random() < 0.2 ? 3000 : 300))
    for (let i = 0; i < n; i++) s += pick(vocabulary) + pick(glue)
    return s
  }

  function randomDoc(): { blocks: Block[]; expected: string } {
    const blocks: Block[] = []
    let expected = ''
    for (let n = 1 + Math.floor(random() * 8); n > 0; n--) {
      if (random() < 0.3) {
        const text = `heading ${n} ${pick(vocabulary)}`
        blocks.push(h(text, 1 + Math.floor(random() * 6)))
        expected += text
      }
      // Every heading is followed by text, so every heading's words reach a chunk.
      const text = randomText() || 'filler'
      blocks.push(p(text))
      expected += text
    }
    return { blocks, expected: squash(expected) }
  }

  /** What is wrong with a chunk list, as text naming the case: [] when nothing is. */
  function violations(label: string, chunks: Chunk[], size: number): string[] {
    return chunks.flatMap((c, i) => {
      if (c.position !== i) return [`${label}: chunk ${i} has position ${c.position}`]
      if (c.tokens !== countTokens(c.content)) return [`${label}: chunk ${i} says ${c.tokens} tokens, has ${countTokens(c.content)}`]
      if (c.tokens > size) return [`${label}: chunk ${i} has ${c.tokens} tokens > ${size}`]
      if (c.content.trim() === '') return [`${label}: chunk ${i} is empty`]
      return []
    })
  }

  test('250 random documents × random settings', async () => {
    const problems: string[] = []
    let partitioned = 0
    for (let run = 0; run < 250; run++) {
      // A turn of the loop now and then, for the suite's timed collection (see tests/helpers/setup.ts).
      if (run % 10 === 0) await Bun.sleep(0)
      const size = 32 + Math.floor(random() ** 2 * (4096 - 32))
      const overlap = random() < 0.3 ? 0 : Math.floor(random() * (size / 2))
      const separators = random() < 0.2 ? pick([[], ['\n'], [' ', ''], ['. ', '\n\n'], ['x']]) : undefined
      const { blocks, expected } = randomDoc()
      const chunks = chunkDocument({ blocks }, { chunk_size: size, chunk_overlap: overlap, separators })
      const label = JSON.stringify({ run, size, overlap, separators })
      problems.push(...violations(label, chunks, size))
      // Without overlap the chunks partition the document: every character, in order, once.
      if (overlap === 0) {
        partitioned++
        if (squash(chunks.map((c) => c.content).join('')) !== expected) problems.push(`${label}: text lost, added or reordered`)
      }
    }
    expect(problems).toEqual([])
    expect(partitioned).toBeGreaterThan(50)
  }, 60_000) // ~1-5 s of real chunking: the default 5 s time-out failed it on a busy machine

  test('hostile inputs at the extremes of the range finish quickly', () => {
    const cases: [string, string][] = [
      ['50 KB without a separator', 'q'.repeat(50_000)],
      ['50 KB of base64-like text', Array.from({ length: 50_000 }, (_, i) => 'AZaz09+/'[(i * 7919) % 8]).join('')],
      ['only whitespace between single characters', 'a \n'.repeat(20_000)],
      ['a long run of emoji', '🚀'.repeat(10_000)],
    ]
    const problems: string[] = []
    for (const [label, text] of cases) {
      for (const [size, overlap] of [
        [32, 15],
        [32, 0],
        [4096, 2047],
      ] as const) {
        const started = performance.now()
        const chunks = chunkDocument(doc(p(text)), settings(size, overlap))
        const elapsed = performance.now() - started
        problems.push(...violations(`${label} ${size}/${overlap}`, chunks, size))
        if (elapsed > 5_000) problems.push(`${label} ${size}/${overlap}: ${Math.round(elapsed)} ms`)
        if (overlap === 0 && squash(chunks.map((c) => c.content).join('')) !== squash(text)) problems.push(`${label} ${size}/0: text lost`)
      }
    }
    expect(problems).toEqual([])
  })
})

describe('hostile size: linear work, bounded output', () => {
  /** Characters the tokenizer read to chunk `text`: work that does not depend on the machine. */
  function work(text: string, size = 256, overlap = 32): number {
    const before = tokenized.chars
    chunkDocument(doc(p(text)), settings(size, overlap))
    return tokenized.chars - before
  }

  test.each([
    ['one line of words (no line or sentence break)', (n: number) => 'word '.repeat(n)],
    ['one run of letters (no separator at all)', (n: number) => 'q'.repeat(n * 5)],
    ['sentences without line breaks', (n: number) => 'Short sentence here. '.repeat(n / 3)],
  ])('%s: the tokenizer reads each character a few times, however long the text', (_, make) => {
    // Before the fix every chunk of a line without breaks counted the whole rest of it: 8 000 words
    // read ~60 times their length, 16 000 words ~120 times (1 MB: > 30 s of the event loop).
    const small = work(make(8_000)) / make(8_000).length
    const large = work(make(16_000)) / make(16_000).length
    expect(small).toBeLessThan(6)
    expect(large).toBeLessThan(6)
    expect(large).toBeLessThan(small * 1.25)
  })

  test('maxChunks: chunking stops with TooManyChunks once a document would make more', () => {
    const text = 'word '.repeat(20_000)
    expect(chunkDocument(doc(p(text)), settings(256, 0), 100).length).toBe(79)
    const before = tokenized.chars
    expect(() => chunkDocument(doc(p(text.repeat(50))), settings(256, 0), 10)).toThrow(TooManyChunks)
    // It stopped near the tenth chunk, not after cutting all 1 000 000 words.
    expect(tokenized.chars - before).toBeLessThan(40_000)
  })
})
