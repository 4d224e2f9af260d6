/**
 * Parsed blocks → chunks of at most `chunk_size` tokens (o200k, through countTokens), for embedding.
 *
 * - Sections: a heading starts a new chunk and sets the heading path ([h1, h2, ...]; a heading of
 *   level n replaces levels n and deeper). Headings are not chunks of their own: the headings that open
 *   a section (its own and any parent heading with no text of its own before it) become the first lines
 *   of the section's first chunk, so their words are searchable; every chunk carries the path.
 * - Text blocks of a section are packed greedily, blocks joined by a blank line. A block too long for
 *   a chunk is cut recursively on the separators (paragraphs, lines, sentences, clauses, words, then
 *   anywhere by tokens), like LangChain's RecursiveCharacterTextSplitter, and the pieces merged back.
 * - Overlap: a chunk after the first of its section starts with the last ≤ chunk_overlap tokens of the
 *   previous one, cut at a word boundary where there is one. Never across a heading.
 * - 'rows' blocks (CSV): rows packed whole, each chunk starting with the header line; a row too long
 *   for a chunk is cut like text, the header still first. No overlap: a row repeated in two chunks is
 *   the same hit twice in a search.
 *
 * The bound: every chunk's `tokens` (the exact count of its content) is ≤ chunk_size, with one
 * exception: when a section's heading lines or a table's header take over 3/4 of chunk_size, the chunk
 * is that prefix plus up to chunk_size/4 tokens of content, over the bound (a prefix that size leaves
 * no useful room, and cutting the content into slivers to fit would make chunks that say nothing).
 * A document whose blocks are all headings becomes chunks of its headings, so any parsed document has
 * at least one chunk.
 *
 * Speed: blocks and pieces are counted once and their counts summed (cuts fall where o200k's
 * pre-tokeniser splits too: before a space or a line break, after punctuation, so the sum is nearly
 * exact); each chunk is counted once more for its `tokens`, and again only where the sum and the exact
 * count disagree at the bound (largestFit). A 2 KB text or Markdown document with the default settings
 * (2-3 chunks): ~0.1 ms on one core, about twice the cost of counting its tokens once.
 *
 * Linear in the input, in time and memory, whatever the text: a block is cut into pieces lazily, as
 * packing reaches them (Pieces), and each chunk assembles and counts only its own pieces. One line of
 * 200 000 words (1 MB, no break): ~0.5 s, 180 MB RSS with the tokenizer; 1 000 000 words: ~1.3 s, the
 * same memory. (Before, every chunk of such a line counted the whole rest of it: > 30 s for 1 MB.)
 */
import { countTokens } from '../../lib/tokens'
import type { Block, ParsedDocument } from './parse'
import { countUpTo, cut, overlapTail, split, type Piece, type Prefix } from './text-cuts'

export interface ChunkSettings {
  chunk_size: number
  chunk_overlap: number
  separators?: string[]
}

export const DEFAULT_CHUNKING: ChunkSettings = { chunk_size: 256, chunk_overlap: 32 }

/** '' means anywhere (by tokens); it is the last resort even when a custom list leaves it out. */
export const DEFAULT_SEPARATORS: readonly string[] = ['\n\n', '\n', '. ', '? ', '! ', '; ', ', ', ' ', '']

export interface Chunk {
  position: number
  content: string
  heading_path: string[]
  tokens: number
}

interface Settings {
  size: number
  overlap: number
  separators: readonly string[]
  /** Content room a chunk keeps after its prefix, whatever the prefix costs: the bound's exception. */
  minRoom: number
}

const BLOCK_JOIN = '\n\n'
const ROW_JOIN = '\n'
const joinCounts = new Map<string, number>()
function joinTokens(join: string): number {
  let n = joinCounts.get(join)
  if (n === undefined) joinCounts.set(join, (n = countTokens(join)))
  return n
}

/** More chunks than a document may have (MAX_DOCUMENT_CHUNKS in ingest.ts): chunking stops there. */
export class TooManyChunks extends Error {
  override name = 'TooManyChunks'
  constructor(readonly limit: number) {
    super(`the document makes more than ${limit} chunks`)
  }
}

/**
 * Cuts a parsed document into chunks of at most chunk_size tokens (counted with countTokens from
 * src/lib/tokens.ts, the real o200k tokenizer), positions 0,1,2,... Throws TooManyChunks as soon as
 * there would be more than `maxChunks`, so a huge document costs no more than that many chunks.
 */
export function chunkDocument(doc: ParsedDocument, settings: ChunkSettings, maxChunks = Infinity): Chunk[] {
  const size = Math.max(1, Math.floor(settings.chunk_size))
  const s: Settings = {
    size,
    // The API keeps overlap below half the size; clamping here keeps any caller's settings finite.
    overlap: Math.max(0, Math.min(Math.floor(settings.chunk_overlap) || 0, Math.floor(size / 2))),
    separators: settings.separators ?? DEFAULT_SEPARATORS,
    minRoom: Math.ceil(size / 4),
  }
  const chunks: Chunk[] = []
  const emit = (path: string[]) => (content: string, tokens: number) => {
    if (chunks.length >= maxChunks) throw new TooManyChunks(maxChunks)
    chunks.push({ position: chunks.length, content, heading_path: [...path], tokens })
  }

  const levels: (string | undefined)[] = []
  let opening: { level: number; text: string }[] = []
  let section: Block[] = []
  let path: string[] = []
  let headingLines = ''
  const headings: string[] = []

  const flush = () => {
    if (section.length > 0) chunkSection(section, headingLines, s, emit(path))
    section = []
  }
  for (const block of doc.blocks) {
    const text = block.text.trim()
    if (text === '') continue
    if (block.kind === 'heading') {
      flush()
      const level = Math.min(6, Math.max(1, Math.floor(block.level ?? 1)))
      levels.length = level
      levels[level - 1] = text
      // A heading replaces the opening headings of its level and deeper that had no text under them.
      opening = opening.filter((h) => h.level < level)
      opening.push({ level, text })
      headings.push(text)
    } else {
      if (section.length === 0) {
        path = levels.filter((h): h is string => h !== undefined)
        headingLines = opening.map((h) => h.text).join('\n')
        opening = []
      }
      section.push(block)
    }
  }
  flush()
  if (chunks.length === 0 && headings.length > 0) chunkSection([{ kind: 'text', text: headings.join('\n') }], '', s, emit([]))
  return chunks
}

function chunkSection(blocks: readonly Block[], headingLines: string, s: Settings, emit: (content: string, tokens: number) => void): void {
  let first: string | null = headingLines === '' ? null : headingLines + BLOCK_JOIN
  let run: string[] = []
  const flushRun = () => {
    if (run.length > 0) pack(new Pieces(textPieces(run, s)), prefix(first), null, s.overlap, s, emit)
    run = []
    first = null
  }
  for (const block of blocks) {
    const text = block.text.trim()
    if (block.kind !== 'rows') {
      run.push(text)
      continue
    }
    flushRun()
    const header = block.header?.trim() ? block.header.trim() + ROW_JOIN : null
    const each = prefix(header)
    const room = Math.max(s.size - (each?.tokens ?? 0), s.minRoom)
    pack(new Pieces(rowPieces(text, room, s)), prefix(first === null ? header : first + (header ?? '')), each, 0, s, emit)
    first = null
  }
  flushRun()
}

/** The pieces of a run of text blocks (non-empty, trimmed), blocks joined by a blank line. */
function* textPieces(blocks: readonly string[], s: Settings): Generator<Piece> {
  for (let b = 0; b < blocks.length; b++) yield* addPieces(blocks[b]!, s.size - s.overlap, b > 0 ? BLOCK_JOIN : '', s)
}

/** The pieces of a table's rows (blank lines skipped), rows joined by a line break. */
function* rowPieces(text: string, room: number, s: Settings): Generator<Piece> {
  let any = false
  for (const row of cut(text, ROW_JOIN, true)) {
    if (row.trim() === '') continue
    yield* addPieces(row, room, any ? ROW_JOIN : '', s)
    any = true
  }
}

/**
 * The pieces of a run, cut from its blocks only as packing reaches them, and forgotten once packed:
 * a block of 45 MB on one line becomes chunks without ever holding its nine million word pieces at
 * once (~100 bytes each: ~1 GB). What is held is the chunk being packed and the one piece after it.
 */
class Pieces {
  private buffer: Piece[] = []
  /** The index in the run of buffer[0]. */
  private base = 0

  constructor(private readonly source: Iterator<Piece>) {}

  /** Whether the run has a piece k (cutting the blocks as far as it). */
  has(k: number): boolean {
    while (k - this.base >= this.buffer.length) {
      const next = this.source.next()
      if (next.done) return false
      this.buffer.push(next.value)
    }
    return true
  }

  at(k: number): Piece {
    if (!this.has(k)) throw new RangeError(`no piece ${k}`)
    return this.buffer[k - this.base]!
  }

  /** Forgets the pieces before k: they are in chunks already. */
  drop(k: number): void {
    const n = k - this.base
    // What is left after k is at most a chunk's worth, so the copy costs no more than what it drops.
    if (n < 256) return
    this.buffer = this.buffer.slice(n)
    this.base = k
  }

  /** Piece i becomes `cuts`. */
  replace(i: number, cuts: Piece[]): void {
    this.buffer.splice(i - this.base, 1, ...cuts)
  }
}

function prefix(text: string | null): Prefix | null {
  return text === null ? null : { text, tokens: countTokens(text) }
}

/** The block as one piece, or cut into pieces of at most `limit` tokens; the first piece gets `join`. */
function* addPieces(text: string, limit: number, join: string, s: Settings): Generator<Piece> {
  const tokens = countUpTo(text, limit)
  if (tokens <= limit) {
    yield { text, tokens, join }
    return
  }
  let first = true
  for (const piece of split(text, Math.max(1, limit), s.separators)) {
    if (first) piece.join = join
    first = false
    yield piece
  }
}

/**
 * Greedy packing of pieces into chunks. `first` begins the first chunk, `each` every later one; with
 * `overlap`, a later chunk begins with the previous chunk's tail.
 */
function pack(pieces: Pieces, first: Prefix | null, each: Prefix | null, overlap: number, s: Settings, emit: (content: string, tokens: number) => void): void {
  let previous: string | null = null
  for (let i = 0; pieces.has(i); ) {
    const lead = previous === null ? first : each
    const budget = s.size - (lead?.tokens ?? 0)
    // The exception: a prefix that leaves less than minRoom gets minRoom of content after it.
    const fit = Math.max(budget, s.minRoom)
    const cap = (lead?.tokens ?? 0) + fit
    if (pieces.at(i).tokens > fit) resplit(pieces, i, fit, s)

    let tail: Prefix | null = null
    if (overlap > 0 && previous !== null) tail = overlapTail(previous, Math.min(overlap, budget - cost(pieces.at(i))))
    let estimate = (lead?.tokens ?? 0) + (tail ? tail.tokens + joinTokens(pieces.at(i).join) : 0) + pieces.at(i).tokens
    let j = i + 1
    while (pieces.has(j) && estimate + cost(pieces.at(j)) <= cap) estimate += cost(pieces.at(j++))

    let cut = largestFit(pieces, i, j, lead, tail, cap)
    // Not even one piece after the overlap: the overlap goes.
    if (!cut && tail) cut = largestFit(pieces, i, i + 1, lead, (tail = null), cap)
    if (!cut) {
      // One piece, over by a token or two once joined to its prefix: cut it smaller and try again.
      const one = measure(pieces, i, i + 1, lead, null)
      if (resplit(pieces, i, pieces.at(i).tokens - (one.tokens - cap), s)) continue
      cut = one
    }
    emit(cut.content, cut.tokens)
    previous = cut.raw
    i = cut.j
    pieces.drop(i)
  }
}

const cost = (piece: Piece) => joinTokens(piece.join) + piece.tokens
/**
 * The least a piece can add to a chunk, a token saved where o200k glues it to what precedes; never
 * under 1, or a run of one-token pieces (the words of a line without breaks) would all be taken as
 * free and every chunk would assemble and count the whole rest of the block: quadratic.
 */
const saved = (piece: Piece) => Math.max(1, cost(piece) - 1)

interface Cut {
  j: number
  raw: string
  content: string
  tokens: number
}

function measure(pieces: Pieces, i: number, j: number, lead: Prefix | null, tail: Prefix | null): Cut {
  const raw = assemble(pieces, i, j, lead, tail)
  const content = raw.trim()
  return { j, raw, content, tokens: countTokens(content) }
}

/**
 * The chunk of pieces [i, j') with the largest j' whose exact count fits, starting from the estimate
 * j; null when not even pieces[i] fits. The sum of counts is nearly exact, so this is one count in the
 * common case. It can be over (then a bisection backs off) or under where o200k glues a join to what
 * precedes it ('.\n\n' is one token): while the room left would take more pieces with a token saved
 * at each, the exact count decides (one more count, a bisection if that overshoots).
 */
function largestFit(pieces: Pieces, i: number, j: number, lead: Prefix | null, tail: Prefix | null, size: number): Cut | null {
  const at = (k: number) => measure(pieces, i, k, lead, tail)
  const bisect = (lo: number, hi: number, best: Cut | null): Cut | null => {
    // lo fits (or is i: nothing yet), hi does not.
    while (hi - lo > 1) {
      const mid = (lo + hi) >> 1
      const c = at(mid)
      if (c.tokens <= size) {
        lo = mid
        best = c
      } else hi = mid
    }
    return best
  }
  const estimated = at(j)
  if (estimated.tokens > size) return bisect(i, j, null)
  let best = estimated
  while (pieces.has(best.j)) {
    let room = size - best.tokens
    let k = best.j
    while (pieces.has(k) && saved(pieces.at(k)) <= room) room -= saved(pieces.at(k++))
    if (k === best.j) break
    const longer = at(k)
    if (longer.tokens > size) return bisect(best.j, k, best)
    best = longer
  }
  return best
}

/** Replaces pieces[i] by its cuts of at most `limit` tokens; false when it cannot be cut further. */
function resplit(pieces: Pieces, i: number, limit: number, s: Settings): boolean {
  const piece = pieces.at(i)
  const cuts = [...split(piece.text, Math.max(1, limit), s.separators)]
  if (cuts.length <= 1) return false
  cuts[0]!.join = piece.join
  pieces.replace(i, cuts)
  return true
}

function assemble(pieces: Pieces, i: number, j: number, lead: Prefix | null, tail: Prefix | null): string {
  let s = lead?.text ?? ''
  if (tail) s += tail.text + pieces.at(i).join
  s += pieces.at(i).text
  for (let k = i + 1; k < j; k++) s += pieces.at(k).join + pieces.at(k).text
  return s
}
