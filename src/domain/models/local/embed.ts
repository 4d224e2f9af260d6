/**
 * `local-embed`: a feature-hashing embedder, no model weights, no network. Good for lexical overlap
 * (shared words, shared word pairs, shared stems through character n-grams: "embedding" is close to
 * "embeddings"), blind to synonyms ("car" vs "automobile").
 *
 * Text → NFKC + lower case → words (runs of Unicode letters, digits and marks; each Han/kana character
 * is a word of its own, since those scripts put no spaces between words) → features:
 *   - word unigrams (weight 1), word bigrams (0.5),
 *   - character 3- and 4-grams of each word padded with boundary markers (0.25 each: a 6-letter
 *     word yields 11 of them, whose squared weights sum to 0.69 against the word's 1),
 * each hashed (FNV-1a over UTF-16 code units, murmur3's finaliser for well-mixed bits) into one of
 * 384 buckets with a sign from the top bit, so collisions cancel on average instead of piling up.
 * Function words ("the", "of"...) weigh 0.2 of the rest: without corpus statistics (no IDF) they would
 * otherwise dominate every English vector. A feature seen tf times counts mean(weight) · √tf
 * (sublinear: a word repeated 100 times is not 100 times as important).
 *
 * √tf rather than 1 + ln tf: IEEE 754 requires sqrt to be correctly rounded while Math.log is only
 * "implementation-approximated", so with sqrt the same text gives the same vector bit for bit on any
 * engine and platform. The vector is L2-normalised; a text with no word at all (empty, punctuation,
 * emoji only) is the zero vector: it has no features, and pretending otherwise would be a lie.
 *
 * Speed (bench/local-embed.ts, one core): ~85 µs per 512-token English text (~11 700 texts/s); no
 * string is built per feature, hashes run over char codes, counts live in a reused open-addressing
 * table. Through the provider, with the token count for usage (~60 µs), ~6 000 texts/s.
 */
export const DIMENSIONS = 384

const W_UNIGRAM = 1
const W_BIGRAM = 0.5
const W_CHARGRAM = 0.25
const W_FUNCTION_WORD = 0.2

// Seeds keep the feature kinds apart: the trigram "cat" of "cats" and the word "cat" hash the same
// characters, and must not land on the same feature.
const SEED_UNIGRAM = 0x2f1b3c4d
const SEED_BIGRAM = 0x6a09e667
const SEED_TRIGRAM = 0x3c6ef372
const SEED_FOURGRAM = 0x510e527f
// Boundary markers of the padded word: control characters, which never occur inside a word.
const BOW = 1
const EOW = 2

const FNV_OFFSET = 0x811c9dc5
const FNV_PRIME = 0x01000193

/** FNV-1a over the UTF-16 code units s[a, b). */
export function hashRange(s: string, a: number, b: number): number {
  let h = FNV_OFFSET
  for (let i = a; i < b; i++) h = Math.imul(h ^ s.charCodeAt(i), FNV_PRIME)
  return h >>> 0
}

/** murmur3's 32-bit finaliser: FNV's low bits are weak on short inputs, the bucket needs good ones. */
function fmix(h: number): number {
  h ^= h >>> 16
  h = Math.imul(h, 0x85ebca6b)
  h ^= h >>> 13
  h = Math.imul(h, 0xc2b2ae35)
  h ^= h >>> 16
  return h >>> 0
}

const FUNCTION_WORDS = (
  'a an and are as at be been but by can could did do does for from had has have he her his i if in into ' +
  'is it its me my no not of on or our she so than that the their them then there these they this those ' +
  'to too us was we were what when where which while who why will with would you your'
).split(' ')
const functionWords = new Set(FUNCTION_WORDS.map((w) => hashRange(w, 0, w.length)))

/** Whether a word's `hashRange` is one of the English function words above. */
export const isFunctionWord = (hash: number) => functionWords.has(hash)

/** Lower case and NFKC (full-width letters, ligatures and compatibility forms fold to plain ones). */
export function normalise(text: string): string {
  const lower = text.toLowerCase()
  // ASCII is already NFKC; skipping the call saves ~9 µs on a 2 300-character text (a third of the rest).
  for (let i = 0; i < lower.length; i++) if (lower.charCodeAt(i) > 127) return lower.normalize('NFKC').toLowerCase()
  return lower
}

// Character classes: 1 inside a word, 2 a separator, 3 a word by itself (Han, kana). Filled lazily
// outside ASCII, so the Unicode regexes run once per distinct character, not once per character.
const SEPARATOR = 2
const SINGLE = 3
const classes = new Uint8Array(65_536)
for (let c = 0; c < 128; c++) classes[c] = (c >= 48 && c <= 57) || (c >= 97 && c <= 122) || (c >= 65 && c <= 90) ? 1 : SEPARATOR
const WORD_RE = /^[\p{L}\p{N}\p{M}]+$/u
const SINGLE_RE = /^[\p{Script=Han}\p{Script=Hiragana}\p{Script=Katakana}]+$/u
const astral = new Map<number, number>()

function classify(ch: string): number {
  return SINGLE_RE.test(ch) ? SINGLE : WORD_RE.test(ch) ? 1 : SEPARATOR
}

function classAt(s: string, i: number, c: number): number {
  if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
    const cp = s.codePointAt(i)!
    let k = astral.get(cp)
    if (k === undefined) astral.set(cp, (k = classify(String.fromCodePoint(cp))))
    return k
  }
  let k = classes[c]!
  if (k === 0) classes[c] = k = classify(String.fromCharCode(c))
  return k
}

let spanBuffer = new Int32Array(2048)

/**
 * Word boundaries of an already normalised text: `spans[2k]`, `spans[2k + 1]` are the start and end of
 * word k. The array is reused by the next call: read it before calling again.
 */
export function scanWords(s: string): { spans: Int32Array; count: number } {
  let n = 0
  let start = -1
  const len = s.length
  for (let i = 0; i < len; i++) {
    const c = s.charCodeAt(i)
    const k = c < 128 ? classes[c]! : classAt(s, i, c)
    const width = c >= 0xd800 && c <= 0xdbff && i + 1 < len ? 2 : 1
    if (k === 1) {
      if (start < 0) start = i
    } else {
      if (start >= 0) n = pushSpan(n, start, i)
      start = -1
      if (k === SINGLE) n = pushSpan(n, i, i + width)
    }
    i += width - 1
  }
  if (start >= 0) n = pushSpan(n, start, len)
  return { spans: spanBuffer, count: n >> 1 }
}

function pushSpan(n: number, a: number, b: number): number {
  if (n + 2 > spanBuffer.length) {
    const bigger = new Int32Array(spanBuffer.length * 2)
    bigger.set(spanBuffer)
    spanBuffer = bigger
  }
  spanBuffer[n] = a
  spanBuffer[n + 1] = b
  return n + 2
}

// Feature counts: open addressing keyed by the 32-bit feature hash, emptied between texts by bumping
// `generation` instead of clearing (a 512-token text has ~4 500 features; clearing 16k slots per text
// would cost more than filling them).
let capacity = 16_384
let keys = new Uint32Array(capacity)
let stamps = new Uint32Array(capacity)
let counts = new Uint32Array(capacity)
let weights = new Float64Array(capacity)
let used = new Uint32Array(capacity >> 1)
let nUsed = 0
let generation = 0

function addFeature(key: number, weight: number): void {
  const mask = capacity - 1
  let slot = key & mask
  while (stamps[slot] === generation) {
    if (keys[slot] === key) {
      counts[slot]!++
      weights[slot]! += weight
      return
    }
    slot = (slot + 1) & mask
  }
  stamps[slot] = generation
  keys[slot] = key
  counts[slot] = 1
  weights[slot] = weight
  used[nUsed++] = slot
  if (nUsed * 2 >= capacity) grow()
}

/** Doubles the table, keeping the half-full bound that keeps probe sequences short. */
function grow(): void {
  const old = { keys, counts, weights, used, nUsed }
  capacity *= 2
  keys = new Uint32Array(capacity)
  stamps = new Uint32Array(capacity)
  counts = new Uint32Array(capacity)
  weights = new Float64Array(capacity)
  used = new Uint32Array(capacity >> 1)
  generation = 1
  nUsed = 0
  const mask = capacity - 1
  for (let i = 0; i < old.nUsed; i++) {
    const from = old.used[i]!
    const key = old.keys[from]!
    let slot = key & mask
    while (stamps[slot] === generation) slot = (slot + 1) & mask
    stamps[slot] = generation
    keys[slot] = key
    counts[slot] = old.counts[from]!
    weights[slot] = old.weights[from]!
    used[nUsed++] = slot
  }
}

function nextGeneration(): void {
  nUsed = 0
  if (++generation === 0xffff_ffff) {
    stamps.fill(0)
    generation = 1
  }
}

const dense = new Float64Array(DIMENSIONS)

/** The 384-dimension, L2-normalised vector of `text` (all zeros when the text has no word). */
export function embedText(text: string): number[] {
  const s = normalise(text)
  const { spans, count } = scanWords(s)
  nextGeneration()
  let previous = 0
  let previousIsFunction = false
  for (let w = 0; w < count; w++) {
    const a = spans[2 * w]!
    const b = spans[2 * w + 1]!
    const h = hashRange(s, a, b)
    const isFunction = functionWords.has(h)
    const scale = isFunction ? W_FUNCTION_WORD : 1
    addFeature(fmix(h ^ SEED_UNIGRAM), W_UNIGRAM * scale)
    if (w > 0) addFeature(fmix(Math.imul(previous ^ SEED_BIGRAM, 0x9e3779b1) ^ h), W_BIGRAM * (isFunction && previousIsFunction ? W_FUNCTION_WORD : 1))
    addCharGrams(s, a, b, W_CHARGRAM * scale)
    previous = h
    previousIsFunction = isFunction
  }
  dense.fill(0)
  for (let i = 0; i < nUsed; i++) {
    const slot = used[i]!
    const key = keys[slot]!
    const n = counts[slot]!
    // mean weight · √tf = (sum of weights) / √tf
    const v = n === 1 ? weights[slot]! : weights[slot]! / Math.sqrt(n)
    dense[(key & 0x7fff_ffff) % DIMENSIONS]! += key >>> 31 ? -v : v
  }
  let norm = 0
  for (let i = 0; i < DIMENSIONS; i++) norm += dense[i]! * dense[i]!
  const out = new Array<number>(DIMENSIONS)
  const inv = norm > 0 ? 1 / Math.sqrt(norm) : 0
  for (let i = 0; i < DIMENSIONS; i++) out[i] = dense[i]! * inv
  return out
}

/**
 * 3- and 4-grams of the word s[a, b) padded as BOW word EOW. Both start with the same three codes,
 * so each 4-gram's hash continues its 3-gram's (FNV is incremental): one pass for both.
 */
function addCharGrams(s: string, a: number, b: number, weight: number): void {
  const len = b - a + 2
  for (let p = 0; p + 3 <= len; p++) {
    let h = FNV_OFFSET
    h = Math.imul(h ^ padded(s, a, b, p), FNV_PRIME)
    h = Math.imul(h ^ padded(s, a, b, p + 1), FNV_PRIME)
    h = Math.imul(h ^ padded(s, a, b, p + 2), FNV_PRIME)
    addFeature(fmix(h ^ SEED_TRIGRAM), weight)
    if (p + 4 <= len) {
      h = Math.imul(h ^ padded(s, a, b, p + 3), FNV_PRIME)
      addFeature(fmix(h ^ SEED_FOURGRAM), weight)
    }
  }
}

function padded(s: string, a: number, b: number, q: number): number {
  return q === 0 ? BOW : q === b - a + 1 ? EOW : s.charCodeAt(a + q - 1)
}

/** Cosine similarity (0 when either vector is zero). */
export function cosine(x: readonly number[], y: readonly number[]): number {
  let dot = 0
  let nx = 0
  let ny = 0
  for (let i = 0; i < x.length; i++) {
    dot += x[i]! * y[i]!
    nx += x[i]! * x[i]!
    ny += y[i]! * y[i]!
  }
  return nx === 0 || ny === 0 ? 0 : dot / Math.sqrt(nx * ny)
}
