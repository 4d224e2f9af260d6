import { o200k } from './bpe'

/**
 * Token counts where a provider reports none (local models, streams without usage), with a real BPE
 * tokenizer (o200k_base, GPT-4o's): ~50 µs for 500 tokens. Counts for other vendors' models are an
 * estimate, and usage says so nowhere: it is what gets priced.
 */
// User text is data: "<|endoftext|>" in a message is counted as the characters it is, never refused
// as a special token (the library's default throws).
const ASIS = { disallowedSpecial: new Set<string>() }

/**
 * The longest run of non-space characters tokenized in one piece. The library's BPE is quadratic in
 * the length of one pre-token piece (a "word"): 100 000 letters without a space took 23 s of the
 * event loop, 200 000 took 74 s; a hostile chat message or upload could hold the process that long.
 * Longer runs are cut into pieces of this size, each tokenized alone (1 MB of one "word": ~20 ms).
 * Ordinary text has no such runs and is tokenized exactly as before; a run that is cut counts within
 * a token or so per cut of what the whole run would.
 */
export const MAX_RUN = 256
const LONG_RUN = new RegExp(`\\S{${MAX_RUN + 1},}`, 'g')

/**
 * `text` in consecutive parts, in order, none holding a run of more than MAX_RUN non-space
 * characters (a cut never falls inside a surrogate pair). Usually one part: the text itself.
 */
export function* boundedParts(text: string): Generator<string> {
  let at = 0
  // matchAll works on a copy of the expression: generators interleaved never share its lastIndex.
  for (const m of text.matchAll(LONG_RUN)) {
    if (m.index > at) yield text.slice(at, m.index)
    const end = m.index + m[0].length
    for (let i = m.index; i < end; ) {
      let cut = Math.min(i + MAX_RUN, end)
      const c = text.charCodeAt(cut - 1)
      if (cut < end && c >= 0xd800 && c <= 0xdbff) cut--
      yield text.slice(i, cut)
      i = cut
    }
    at = end
  }
  if (at < text.length) yield text.slice(at)
}

/**
 * Characters tokenized so far by this process: a measure of work that does not depend on the machine
 * (tests check with it that chunking stays linear in its input).
 */
export const tokenized = { chars: 0 }

export function countTokens(text: string): number {
  tokenized.chars += text.length
  const pieces = pieceCounter()
  let n = 0
  for (const part of boundedParts(text)) n += pieces ? pieces(part) : o200k().countTokens(part, ASIS)
  return n
}

/**
 * The library's count, piece by piece, with the counts of short pieces remembered. Its count splits
 * the text with o200k's pre-tokenizer (a word with its leading space, up to 3 digits, a run of
 * punctuation...) and adds up each piece's tokens: one when the piece is a token, else its BPE merge.
 * Most of that time is the two lookups in 200 000-entry tables; the same words come back all the
 * time, and a small table of the pieces seen answers them ~3× faster (chunking a document counts
 * its text about twice: bench/README.md, "Knowledge at scale"). Pieces of up to MEMO_CHARS
 * characters, at most MEMO_MAX of them (a few MB), kept for the life of the process: once it is
 * full, new pieces are counted as before and not remembered.
 */
const MEMO_MAX = 100_000
const MEMO_CHARS = 32
const memo = new Map<string, number>()

/** The library's own per-piece steps (not in its typings); null if a version of it lacks them, and its count is used whole. */
interface PieceSteps {
  tokenSplitRegex: RegExp
  getBpeRankFromString(piece: string): number | undefined
  bytePairEncode(piece: string): number[]
}

let counter: ((part: string) => number) | null | undefined

function pieceCounter(): ((part: string) => number) | null {
  if (counter !== undefined) return counter
  const core = (o200k() as unknown as { bytePairEncodingCoreProcessor?: Partial<PieceSteps> }).bytePairEncodingCoreProcessor
  if (!(core?.tokenSplitRegex instanceof RegExp) || typeof core.getBpeRankFromString !== 'function' || typeof core.bytePairEncode !== 'function') return (counter = null)
  const steps = core as PieceSteps
  const split = new RegExp(steps.tokenSplitRegex.source, steps.tokenSplitRegex.flags.includes('g') ? steps.tokenSplitRegex.flags : `${steps.tokenSplitRegex.flags}g`)
  const piece = (p: string) => (steps.getBpeRankFromString(p) !== undefined ? 1 : steps.bytePairEncode(p).length)
  counter = (part) => {
    let n = 0
    for (const [p] of part.matchAll(split)) {
      if (p.length > MEMO_CHARS) {
        n += piece(p)
        continue
      }
      let k = memo.get(p)
      if (k === undefined) {
        k = piece(p)
        if (memo.size < MEMO_MAX) memo.set(p, k)
      }
      n += k
    }
    return n
  }
  return counter
}

/** The token ids (for tools that cut text to a token budget). */
export function tokenize(text: string): number[] {
  const out: number[] = []
  for (const part of boundedParts(text)) for (const t of o200k().encode(part, ASIS)) out.push(t)
  return out
}

/** Tokens of a chat prompt: content plus OpenAI's per-message overhead (3) and reply priming (3). */
export function countChatTokens(messages: readonly { role: string; content: string | null; name?: string }[]): number {
  let n = 3
  for (const m of messages) n += 3 + countTokens(m.content ?? '') + (m.name ? countTokens(m.name) + 1 : 0)
  return n
}
