/**
 * Where a text may be cut for chunking (chunk.ts packs the pieces): on separators, LangChain-style,
 * down to cuts by tokens, and the tail of a chunk that begins the next at a word boundary. Each
 * counts only what it must: never a whole long text (countUpTo).
 */
import { countTokens } from '../../lib/tokens'

/** A cut of a block: `join` goes between it and the piece before it in the same chunk. */
export interface Piece {
  text: string
  tokens: number
  join: string
}

/** Text every chunk (or the first chunk) of a run begins with: heading lines, a table header. */
export interface Prefix {
  text: string
  tokens: number
}

/** The most characters one o200k token spans (128 spaces). */
const MAX_TOKEN_CHARS = 128

/**
 * The token count of `text`, or Infinity when it is surely over `limit`: a text over 128 characters a
 * token, or whose first 6 × limit characters are already over. A long text that is going to be cut
 * anyway is not counted whole: o200k's BPE costs more than linear time on a long run without a break
 * (50 000 × 'q': ~1.2 s to count).
 */
export function countUpTo(text: string, limit: number): number {
  if (text.length > limit * MAX_TOKEN_CHARS) return Infinity
  if (text.length > limit * 6 && countTokens(text.slice(0, limit * 6)) > limit) return Infinity
  return countTokens(text)
}

/**
 * Cuts text recursively, LangChain-style: on the first separator that occurs in it, then each part
 * still over `limit` on the next separators, down to cuts by tokens. Pieces concatenate back to the
 * text (whitespace-only pieces dropped). Where a separator holds whitespace the cut falls before it
 * (". " cuts as "end." | " Next"), so a piece starts with the space that o200k glues to the next word
 * and the pieces' counts add up to the text's.
 */
export function* split(text: string, limit: number, separators: readonly string[]): Generator<Piece> {
  let k = 0
  while (k < separators.length && separators[k] !== '' && !text.includes(separators[k]!)) k++
  const sep = separators[k]
  if (sep === undefined || sep === '') return yield* splitByTokens(text, limit)
  const rest = separators.slice(k + 1)
  for (const part of cut(text, sep)) {
    if (part.trim() === '') continue
    const tokens = countUpTo(part, limit)
    if (tokens <= limit) yield { text: part, tokens, join: '' }
    else yield* split(part, limit, rest)
  }
}

/** The parts of `text` cut before `sep`'s whitespace (or after sep); `drop` leaves the separator out. */
export function* cut(text: string, sep: string, drop = false): Generator<string> {
  const ws = sep.search(/\s/)
  const offset = ws < 0 ? sep.length : ws
  let start = 0
  for (let i = text.indexOf(sep); i >= 0; i = text.indexOf(sep, i + sep.length)) {
    const at = drop ? i : i + offset
    if (at > start || drop) {
      yield text.slice(start, at)
      start = drop ? i + sep.length : at
    }
  }
  yield text.slice(start)
}

const isHighSurrogate = (c: number) => c >= 0xd800 && c <= 0xdbff

/**
 * Cuts anywhere, into pieces of at most `limit` tokens: for each piece, a prefix within ~3 % of the
 * limit, found by interpolation on a window just over `limit` tokens (never the whole rest: see
 * countUpTo). A piece is at least one code point, even one alone over the limit.
 */
function* splitByTokens(text: string, limit: number): Generator<Piece> {
  const enough = Math.max(1, limit - Math.max(1, limit >> 5))
  let start = 0
  while (start < text.length) {
    // ~4 characters a token in prose; the window doubles while it still fits.
    let lo = start
    let loTokens = 0
    let hi = Math.min(text.length, start + limit * 4)
    let hiTokens = countTokens(text.slice(start, hi))
    while (hiTokens <= limit && hi < text.length) {
      lo = hi
      loTokens = hiTokens
      hi = Math.min(text.length, start + (hi - start) * 2)
      hiTokens = countTokens(text.slice(start, hi))
    }
    if (hiTokens <= limit) {
      lo = hi
      loTokens = hiTokens
    }
    for (let step = 0; hi - lo > 1 && loTokens < enough && hiTokens > limit; step++) {
      // Interpolation, with a plain bisection every other step so a skewed text still converges.
      const guess = step % 2 === 0 ? lo + Math.floor(((hi - lo) * (limit - loTokens)) / (hiTokens - loTokens)) : (lo + hi) >> 1
      let mid = Math.min(hi - 1, Math.max(lo + 1, guess))
      if (isHighSurrogate(text.charCodeAt(mid - 1)) && mid + 1 < hi) mid++
      const tokens = countTokens(text.slice(start, mid))
      if (tokens <= limit) {
        lo = mid
        loTokens = tokens
      } else {
        hi = mid
        hiTokens = tokens
      }
    }
    const counted = lo
    // Never split a surrogate pair; never stand still.
    if (lo < text.length && isHighSurrogate(text.charCodeAt(lo - 1))) lo = lo - 1 > start ? lo - 1 : lo + 1
    if (lo === start) lo = start + (isHighSurrogate(text.charCodeAt(start)) ? 2 : 1)
    const piece = text.slice(start, lo)
    if (piece.trim() !== '') yield { text: piece, tokens: lo === counted ? loTokens : countTokens(piece), join: '' }
    start = lo
  }
}

const isSpace = (c: number) => c === 32 || (c >= 9 && c <= 13) || c === 0xa0 || c === 0x3000 || (c >= 0x2000 && c <= 0x200a)

/** Index of the next word start at or after `from` (the whitespace before it), or -1. */
function wordBoundary(text: string, from: number): number {
  if (from <= 0 && text.length > 0 && !isSpace(text.charCodeAt(0))) return 0
  for (let i = Math.max(0, from); i + 1 < text.length; i++) {
    if (isSpace(text.charCodeAt(i)) && !isSpace(text.charCodeAt(i + 1))) return i
  }
  return -1
}

/**
 * The end of the previous chunk that begins the next: at most `budget` tokens, starting at a word
 * boundary where there is one, else anywhere. Counts only the tail region, never the whole chunk.
 */
export function overlapTail(text: string, budget: number): Prefix | null {
  if (budget <= 0 || text.length === 0) return null
  // ~4 characters a token in prose: 6 × budget characters hold at least `budget` tokens nearly always.
  let at = wordBoundary(text, text.length - budget * 6)
  for (let step = 0; at >= 0 && step < 32; step++) {
    const tail = text.slice(at)
    const tokens = countTokens(tail)
    if (tokens <= budget) return tail.trim() === '' ? null : { text: tail, tokens }
    at = wordBoundary(text, at + Math.max(1, Math.floor(((text.length - at) * (tokens - budget)) / tokens)))
  }
  // No word boundary close enough to the end (one long word, or a script written without spaces).
  let len = Math.min(text.length, budget)
  while (len > 0) {
    let from = text.length - len
    if (from > 0 && isHighSurrogate(text.charCodeAt(from - 1))) from--
    const tail = text.slice(from)
    const tokens = countTokens(tail)
    if (tokens <= budget) return tail.trim() === '' ? null : { text: tail, tokens }
    len = Math.floor(len * 0.7)
  }
  return null
}
