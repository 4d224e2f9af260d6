import { countTokens } from '../../../lib/tokens'
import type { RerankResult } from '../types'
import { hashRange, isFunctionWord, normalise, scanWords } from './embed'

/**
 * `local-rerank`: BM25 (k1 1.2, b 0.75) of the query against each document, the statistics (IDF,
 * average length) taken over the documents of the call, since there is no corpus behind them. Lexical
 * only: a document that answers the query in other words scores 0.
 */
const K1 = 1.2
const B = 0.75

/**
 * The terms of a text: its words as embed.ts finds them (NFKC, lower case, Unicode letters and
 * digits), as 32-bit hashes: no string per word. A hash collision only matters between a query word
 * and a document word (10 query words, 10 000 distinct document words: 1 chance in ~43 000 per call,
 * and the cost is one false match). Light stemming: a final "s" is dropped from
 * words of 4+ letters unless it follows s, u or i ("cats" → "cat"; "glass", "status", "analysis" stay).
 */
export function terms(text: string): number[] {
  return termsOf(text, false)
}

/** `terms` without the function words ("the", "of"...: embed.ts's list). */
export function contentTerms(text: string): number[] {
  return termsOf(text, true)
}

function termsOf(text: string, skipFunctionWords: boolean): number[] {
  const s = normalise(text)
  const { spans, count } = scanWords(s)
  const out: number[] = []
  for (let w = 0; w < count; w++) {
    const a = spans[2 * w]!
    let b = spans[2 * w + 1]!
    if (skipFunctionWords && isFunctionWord(hashRange(s, a, b))) continue
    if (b - a > 3 && s.charCodeAt(b - 1) === 115) {
      const before = s.charCodeAt(b - 2)
      if (before !== 115 && before !== 117 && before !== 105) b--
    }
    out.push(hashRange(s, a, b))
  }
  return out
}

/**
 * BM25 score of each document for the query. Each distinct query term counts once (a word repeated in
 * the query does not double its weight). IDF is Lucene's ln(1 + (N − df + 0.5) / (df + 0.5)): always
 * positive, so a score is ≥ 0 and only grows with matches.
 */
export function bm25(query: readonly number[], documents: readonly (readonly number[])[]): number[] {
  const n = documents.length
  const scores = new Array<number>(n).fill(0)
  if (n === 0) return scores
  const index = new Map<number, number>()
  for (const t of query) if (!index.has(t)) index.set(t, index.size)
  const q = index.size
  if (q === 0) return scores
  const df = new Array<number>(q).fill(0)
  const tf = documents.map((doc) => {
    const counts = new Array<number>(q).fill(0)
    for (const t of doc) {
      const i = index.get(t)
      if (i !== undefined) counts[i]!++
    }
    for (let i = 0; i < q; i++) if (counts[i]! > 0) df[i]!++
    return counts
  })
  const avgdl = documents.reduce((sum, d) => sum + d.length, 0) / n || 1
  const idf = df.map((d) => Math.log(1 + (n - d + 0.5) / (d + 0.5)))
  for (let d = 0; d < n; d++) {
    const norm = K1 * (1 - B + (B * documents[d]!.length) / avgdl)
    let score = 0
    for (let i = 0; i < q; i++) {
      const f = tf[d]![i]!
      if (f > 0) score += (idf[i]! * f * (K1 + 1)) / (f + norm)
    }
    scores[d] = score
  }
  return scores
}

/**
 * BM25 score → relevance_score in [0, 1): score / (score + q), q the number of distinct query terms.
 * Monotonic in the score, and not divided by the best score: dividing by the maximum would give the
 * best document 1.0 even when it barely matches. A document matching every query term about once, at
 * average length, with an IDF near 1, lands near 0.5; no match is 0.
 */
export function relevance(score: number, queryTerms: number): number {
  return score <= 0 ? 0 : score / (score + Math.max(1, queryTerms))
}

/**
 * Documents ranked by relevance (descending, ties by index ascending), the first `topN` (all when
 * undefined). Tokens for usage: the query once per document plus every document, which is what a
 * cross-encoder reranker reads (query and document together, document by document).
 */
export function rerank(query: string, documents: readonly string[], topN?: number): RerankResult {
  const q = terms(query)
  const scores = bm25(q, documents.map(terms))
  const distinct = new Set(q).size
  const results = scores
    .map((score, index) => ({ index, relevance_score: relevance(score, distinct) }))
    .sort((x, y) => y.relevance_score - x.relevance_score || x.index - y.index)
  const limit = topN === undefined ? results.length : Math.max(0, Math.floor(topN))
  let tokens = documents.length === 0 ? 0 : countTokens(query) * documents.length
  for (const d of documents) tokens += countTokens(d)
  return { results: results.slice(0, limit), tokens }
}
