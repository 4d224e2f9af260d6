/**
 * Generated corpora of the knowledge benchmarks, deterministic so every run loads the same data.
 *
 * - Text: pseudo-English over a Zipfian 20 000-word vocabulary of made-up words (the corpus of the first knowledge benchmark),
 *   and the topical variant (250 subjects, half of a sentence's content words from its subject's 40).
 *   This is what local-embed (hashed words) turns into vectors with little neighbourhood structure.
 * - Clustered: text whose vector has the structure of a real embedding model's. CLUSTERS clusters
 *   of varied sizes (log-normal weights) and spreads around random centres, plus what real
 *   embedding spaces share: a common mean direction (unrelated texts still have cosine ~0.1-0.2)
 *   and an anisotropic spread (variance falling as 1/(1+d) over the dimensions: ~25 effective
 *   dimensions of noise rather than 384). Each cluster owns 12 words of the vocabulary; a text's
 *   cluster is the one whose words it holds most, and its vector a draw from that cluster seeded by
 *   the text. So a chunk of a cluster's topical text and a query of four of its words both land in
 *   it, and a query is a fresh draw from the mixture, not a corpus point. bench/fake-embeddings.ts
 *   answers with these vectors, so text through the service and vectors loaded directly agree.
 */
import { DEFAULT_CHUNKING, chunkDocument } from '../src/domain/knowledge/chunk'
import { parseDocument } from '../src/domain/knowledge/parse'

export const DIMS = 384

export function rng(seed: number) {
  let s = seed >>> 0
  return () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32)
}

/** A standard normal draw (Box-Muller). */
function gaussian(r: () => number): number {
  return Math.sqrt(-2 * Math.log(r() || 1e-12)) * Math.cos(2 * Math.PI * r())
}

/** FNV-1a of a string: the seed of a text's own draw. */
export function hashText(s: string): number {
  let h = 0x811c9dc5
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193)
  return h >>> 0
}

// ---- text ----

/** 20 000 made-up words (syllables), drawn with Zipf's law (s = 1) as words of real text are. */
export const VOCABULARY = (() => {
  const r = rng(7)
  const syllables = ['ka', 'lo', 'mi', 'ret', 'sun', 'dar', 'vel', 'po', 'tris', 'na', 'bel', 'gor', 'fen', 'qui', 'zo', 'har', 'lin', 'mok', 'ser', 'tav']
  const words = new Set<string>()
  while (words.size < 20_000) words.add(Array.from({ length: 2 + Math.floor(r() * 3) }, () => syllables[Math.floor(r() * syllables.length)]!).join(''))
  return [...words]
})()
const ZIPF_CDF = (() => {
  const weights = VOCABULARY.map((_, i) => 1 / (i + 1))
  const total = weights.reduce((a, b) => a + b, 0)
  let acc = 0
  return Float64Array.from(weights, (w) => (acc += w / total))
})()
const GLUE = ['the', 'a', 'of', 'to', 'for', 'with', 'after', 'before', 'when', 'is', 'are', 'can', 'must', 'will', 'each', 'every']

/** A word by Zipf's law. */
function word(r: () => number): string {
  const u = r()
  let lo = 0
  let hi = ZIPF_CDF.length - 1
  while (lo < hi) {
    const mid = (lo + hi) >> 1
    if (ZIPF_CDF[mid]! < u) lo = mid + 1
    else hi = mid
  }
  return VOCABULARY[lo]!
}

/** A sentence of 8-17 words, every third a glue word, half of the content words from `vocab`. */
function sentenceOf(r: () => number, vocab: readonly string[]): string {
  const n = 8 + Math.floor(r() * 10)
  const words = Array.from({ length: n }, (_, i) =>
    i % 3 === 1 ? GLUE[Math.floor(r() * GLUE.length)]! : r() < 0.5 ? vocab[Math.floor(r() * vocab.length)]! : word(r))
  return `${words[0]!.charAt(0).toUpperCase()}${words.join(' ').slice(1)}.`
}

/** The topical corpus (the first knowledge benchmark's): 250 subjects of 40 words each. */
export const TOPICS = 250
const TOPIC_WORDS = Array.from({ length: TOPICS }, (_, t) => {
  const r = rng(500_000 + t)
  return Array.from({ length: 40 }, () => VOCABULARY[100 + Math.floor(r() * (VOCABULARY.length - 100))]!)
})

/** A chunk-sized passage (5 sentences) on subject `topic`. */
export const topicalPassage = (r: () => number, topic: number) => Array.from({ length: 5 }, () => sentenceOf(r, TOPIC_WORDS[topic % TOPICS]!)).join(' ')

/** A search of the topical corpus: four words of one subject. */
export function topicalQuery(seed: number): string {
  const r = rng(seed)
  const vocab = TOPIC_WORDS[seed % TOPICS]!
  return Array.from({ length: 4 }, () => vocab[Math.floor(r() * vocab.length)]!).join(' ')
}

const chunkCount = async (text: string) => chunkDocument(await parseDocument('md', new TextEncoder().encode(text)), DEFAULT_CHUNKING).length

/**
 * A Markdown document of document `i`'s subject (`clustered`: of cluster i mod CLUSTERS) that the
 * service's chunker (default settings: 256 tokens, 32 overlap) cuts into `chunks` chunks: a heading
 * and paragraphs of 4 sentences, as many as the count asks (counted with the chunker itself, so the
 * figure's chunk count is known).
 */
export async function sizedDocument(i: number, chunks: number, corpus: 'topical' | 'clustered' = 'topical'): Promise<{ text: string; chunks: number }> {
  const r = rng(i + 1)
  const vocab = corpus === 'topical' ? TOPIC_WORDS[i % TOPICS]! : CLUSTER_WORDS[i % CLUSTERS]!
  const paragraph = () => Array.from({ length: 4 }, () => sentenceOf(r, vocab)).join(' ')
  const pool = Array.from({ length: chunks * 2 + 4 }, paragraph)
  const text = (p: number) => `# Document ${i}\n\n${pool.slice(0, p).join('\n\n')}\n`
  // The fewest paragraphs that make `chunks` chunks (the count grows with the paragraphs).
  let lo = 1
  let hi = pool.length
  while (lo < hi) {
    const mid = (lo + hi) >> 1
    if ((await chunkCount(text(mid))) < chunks) lo = mid + 1
    else hi = mid
  }
  return { text: text(lo), chunks: await chunkCount(text(lo)) }
}

// ---- the clustered corpus ----

export const CLUSTERS = Number(process.env.CLUSTERS ?? 1000)
const WORDS_PER_CLUSTER = 12
/** The common direction's weight against a cluster centre's (norm 1). */
const SHARED = 0.5

const clusterRandom = rng(31_337)
/** Each cluster's own words: distinct, from below the 100 most frequent words. */
const CLUSTER_WORDS: string[][] = (() => {
  const pool = VOCABULARY.slice(100)
  for (let i = pool.length - 1; i > 0; i--) {
    const j = Math.floor(clusterRandom() * (i + 1))
    ;[pool[i], pool[j]] = [pool[j]!, pool[i]!]
  }
  if (CLUSTERS * WORDS_PER_CLUSTER > pool.length) throw new Error(`CLUSTERS at most ${Math.floor(pool.length / WORDS_PER_CLUSTER)}`)
  return Array.from({ length: CLUSTERS }, (_, k) => pool.slice(k * WORDS_PER_CLUSTER, (k + 1) * WORDS_PER_CLUSTER))
})()
const WORD_CLUSTER = new Map(CLUSTER_WORDS.flatMap((words, k) => words.map((w) => [w, k] as const)))

/** Per-dimension scale of the spread: variance 1/(1+d), normalised so a noise draw has norm ~1. */
const SCALE = (() => {
  const s = Float64Array.from({ length: DIMS }, (_, d) => 1 / Math.sqrt(1 + d))
  const norm = Math.sqrt(s.reduce((a, x) => a + x * x, 0))
  return s.map((x) => x / norm)
})()

const unit = (v: Float64Array) => {
  const n = Math.sqrt(v.reduce((a, x) => a + x * x, 0)) || 1
  return v.map((x) => x / n)
}
const MEAN = unit(Float64Array.from({ length: DIMS }, () => gaussian(clusterRandom)))
/** Cluster centres: isotropic unit directions (the clusters spread over the whole sphere). */
const CENTRES = Array.from({ length: CLUSTERS }, () => unit(Float64Array.from({ length: DIMS }, () => gaussian(clusterRandom))))
/** Spreads from tight (0.4: nearest neighbours at cosine ~0.85) to loose (1.2: ~0.45). */
const SPREADS = Float64Array.from({ length: CLUSTERS }, () => 0.4 + 0.8 * clusterRandom())
/** Log-normal cluster weights (σ 1): a few big clusters, many small ones, as real topics are. */
export const CLUSTER_WEIGHTS = (() => {
  const w = Float64Array.from({ length: CLUSTERS }, () => Math.exp(gaussian(clusterRandom)))
  const total = w.reduce((a, x) => a + x, 0)
  return w.map((x) => x / total)
})()

/** The cluster a text is about: the one whose words it holds most (ties: the first met); else by hash. */
export function clusterOf(text: string): number {
  const votes = new Map<number, number>()
  let best = -1
  let bestVotes = 0
  for (const w of text.toLowerCase().split(/[^a-z]+/)) {
    const k = WORD_CLUSTER.get(w)
    if (k === undefined) continue
    const v = (votes.get(k) ?? 0) + 1
    votes.set(k, v)
    if (v > bestVotes) (best = k), (bestVotes = v)
  }
  return best >= 0 ? best : hashText(text) % CLUSTERS
}

/** A unit vector drawn from cluster `k`, seeded by `seed`. */
export function clusterDraw(k: number, seed: number): Float64Array {
  const r = rng(seed)
  const c = CENTRES[k]!
  const spread = SPREADS[k]!
  const v = new Float64Array(DIMS)
  for (let d = 0; d < DIMS; d++) v[d] = SHARED * MEAN[d]! + c[d]! + spread * SCALE[d]! * gaussian(r)
  return unit(v)
}

/** What bench/fake-embeddings.ts answers for a text: a draw from its cluster, seeded by the text. */
export const clusteredVector = (text: string): Float64Array => clusterDraw(clusterOf(text), hashText(text))

export const vectorText = (v: ArrayLike<number>) => `[${Array.from(v, (x) => x.toFixed(6)).join(',')}]`

/** A chunk-sized passage (5 sentences) of cluster `k`'s topic. */
export const clusteredPassage = (r: () => number, k: number) => Array.from({ length: 5 }, () => sentenceOf(r, CLUSTER_WORDS[k]!)).join(' ')

/** A cluster drawn by the mixture's weights. */
export function drawCluster(r: () => number): number {
  let u = r()
  for (let k = 0; k < CLUSTERS; k++) if ((u -= CLUSTER_WEIGHTS[k]!) <= 0) return k
  return CLUSTERS - 1
}

/** A search of the clustered corpus: four words of a cluster drawn by the mixture's weights. */
export function clusteredQuery(seed: number): { text: string; cluster: number } {
  const r = rng(seed)
  const k = drawCluster(r)
  const words = CLUSTER_WORDS[k]!
  return { text: Array.from({ length: 4 }, () => words[Math.floor(r() * words.length)]!).join(' '), cluster: k }
}

/**
 * The clusters of a base of `n` chunks, in order: each cluster's share of `n` by its weight (largest
 * remainders), so documents cut from consecutive chunks are each about one or two topics.
 */
export function clusterLayout(n: number): Int32Array {
  const exact = Array.from(CLUSTER_WEIGHTS, (w) => w * n)
  const counts = exact.map(Math.floor)
  let left = n - counts.reduce((a, x) => a + x, 0)
  const byRemainder = exact.map((x, k) => [x - Math.floor(x), k] as const).sort((a, b) => b[0] - a[0])
  for (let i = 0; left > 0; i++, left--) counts[byRemainder[i % CLUSTERS]![1]]!++
  const out = new Int32Array(n)
  let at = 0
  counts.forEach((c, k) => out.fill(k, at, (at += c)))
  return out
}
