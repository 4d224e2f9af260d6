/**
 * Texts for tests of search over many chunks (tests/e2e/knowledge-indexer-crash.test.ts,
 * tests/integration/knowledge-index-moves.test.ts): "manuals" of one-chunk paragraphs, each naming
 * its position and holding four words of no language, so that full-text queries match few chunks.
 */

/**
 * Words of no language, 144 of them: with four per paragraph each appears in ~3 % of a base's
 * chunks, and a query of two of them matches well under FULLTEXT_POOL (100, src/store/knowledge/search.ts)
 * chunks of a base of 1 500, so the full-text list is exact (a word every chunk holds, "paragraph" or
 * "manual", would not be: such queries belong to vector-mode bases only).
 */
const SYLLABLES = ['ka', 'lo', 'mi', 'ne', 'ru', 'sa', 'ti', 'vo', 'ze', 'bu', 'fa', 'gi']
export const WORDS = SYLLABLES.flatMap((a) => SYLLABLES.map((b) => `${a}${b}x`))

/** A small deterministic generator (mulberry32). */
function random(seed: number) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}
const seedOf = (s: string) => [...s].reduce((h, c) => (Math.imul(h, 31) + c.charCodeAt(0)) | 0, 7)

/** The four words of paragraph `i` of the manual tagged `tag`. */
export const wordsOf = (tag: string, i: number) => {
  const r = random(seedOf(`${tag}:${i}`))
  return Array.from({ length: 4 }, () => WORDS[Math.floor(r() * WORDS.length)]!)
}

/** `n` paragraphs of about 20 tokens: with chunk_size 32 each is one chunk; no two alike. */
export const manual = (tag: string, n: number) => Array.from({ length: n }, (_, i) => `Paragraph ${i} of the ${tag} manual: ${wordsOf(tag, i).join(' ')}.`).join('\n\n')

/** Queries of words of the vocabulary only (fit for full text and vector). */
export const WORD_QUERIES = [`${WORDS[3]} ${WORDS[77]}`, `${WORDS[20]} ${WORDS[101]}`, `${WORDS[140]} ${WORDS[9]}`, `${WORDS[55]}`, wordsOf('vec0', 7).join(' ')]
