import type { Deps } from '../../deps'
import type { CallContext } from '../models/gateway'
import { AppError, invalid, notFound } from '../../lib/errors'
import * as store from '../../store/knowledge'
import { authorize, type Caller } from '../access'
import { accessKey, checkBudgetRow } from '../credits'
import { accessAndBudget, periodStart, type AccessAndBudget } from '../../store/credits'
import type { WorkspaceAccessRow } from '../../store/workspaces'
import { round6 } from '../../lib/usage'

/** top_k 1..100, default 5 (docs/knowledge.md, "Search"). */
export const DEFAULT_TOP_K = 5
export const MAX_TOP_K = 100
/** Reciprocal rank fusion's constant (Cormack et al.), shared with the store's fusion in SQL. */
const RRF_K = store.RRF_K
const MAX_FILTER_KEYS = 20
const MAX_FILTER_VALUES = 100

export interface SearchInput {
  query: string
  top_k?: number
  filters?: Record<string, unknown>
  rerank?: boolean
}

/** A search result item (docs/knowledge.md, "Search"). */
export interface SearchResult {
  chunk_id: string
  document_id: string
  document_name: string
  content: string
  /** The number the results are ordered by, descending, in [0, 1] (docs/knowledge.md, "Search"). */
  score: number
  /** The cosine similarity to the query in [0, 1], whatever the mode. */
  similarity: number
  metadata: Record<string, unknown>
}

/** Filters: an object of metadata keys to JSON scalars, or to non-empty arrays of them ("any of"). */
export function checkFilters(filters: unknown): Record<string, unknown> {
  if (filters === undefined || filters === null) return {}
  if (typeof filters !== 'object' || Array.isArray(filters)) throw invalid('filters', 'must be an object of metadata key/value pairs')
  const entries = Object.entries(filters)
  if (entries.length > MAX_FILTER_KEYS) throw invalid('filters', `at most ${MAX_FILTER_KEYS} keys`)
  for (const [key, value] of entries) {
    const values = Array.isArray(value) ? value : [value]
    if (values.length === 0 || values.length > MAX_FILTER_VALUES) throw invalid(`filters.${key}`, `an array must hold 1 to ${MAX_FILTER_VALUES} values (any of them matches)`)
    if (values.some((v) => v === null || typeof v === 'object')) throw invalid(`filters.${key}`, 'values are strings, numbers or booleans (or an array of them)')
  }
  return filters as Record<string, unknown>
}

/** Cosine similarity in [0, 1] (docs/knowledge.md, "Search"): 1 − distance, negative similarity counted as none. */
/** Cosine similarity from pgvector's distance; a query with no direction (a zero vector) has none: 0. */
const similarity = (distance: number) => (Number.isFinite(distance) ? Math.min(1, Math.max(0, 1 - distance)) : 0)

/**
 * Searches one base (docs/knowledge.md, "Search"): the query is embedded with the base's model, then
 * vector, full-text or hybrid (reciprocal rank fusion of both lists) per the base's retrieval mode, the
 * filters inside each query. `rerank: true` reranks a candidate pool with the base's rerank model.
 * `score` is always the number the order comes from (cosine similarity, the normalised fused rank, or
 * the rerank score), so a client sorting by it keeps the order; `similarity` is the cosine beside it.
 */
export async function searchKnowledgeBase(deps: Deps, caller: Caller, kbId: string, input: SearchInput, requestId: string, signal: AbortSignal): Promise<SearchResult[]> {
  const now = new Date()
  const period = periodStart(now)
  // Kept between searches (domain/access-cache.ts): the base's row under its own id, which its update
  // or delete announces (bases.ts; a charge batch of its workspace leaves it), and the caller's access
  // and the budget as the gateway's check keeps them, under the workspace (and its spend, for a hard limit). A warm search sends
  // nothing to PostgreSQL before the embedding call. A deleted workspace takes its bases with it: its
  // access answer, read again after the workspace's announce, is null (404).
  const cache = deps.models.access
  const baseKey = `knowledge_base ${kbId}`
  let kb = cache.peek<store.KnowledgeBaseRow>(baseKey)
  let answer: AccessAndBudget | null
  if (kb) {
    const workspaceId = kb.workspace_id
    answer = await cache.get(workspaceId, accessKey(workspaceId, caller.userId, period), () => accessAndBudget(deps.db.sql, workspaceId, caller.userId, now), period)
  } else {
    // The base, the caller's access and the workspace's budget in one read (as loadKnowledgeBase and
    // the gateway's budget check would answer them), each kept.
    const sent = cache.begin()
    const found = await store.findKnowledgeBaseForSearch(deps.db.sql, kbId, caller.userId, period)
    if (!found) throw notFound('knowledge base', kbId)
    kb = found.kb
    answer = { access: found.access, budget: found.budget }
    cache.keep(kb.id, baseKey, sent, kb)
    cache.keepAccess(kb.workspace_id, period, accessKey(kb.workspace_id, caller.userId, period), sent, answer)
  }
  // Another workspace's base, or one the caller may not read: not found, as loadKnowledgeBase answers.
  try {
    authorize(caller, answer?.access as WorkspaceAccessRow | null ?? null, 'read', { id: kb.workspace_id })
  } catch (err) {
    if (err instanceof AppError && err.code === 'not_found') throw notFound('knowledge base', kbId)
    throw err
  }
  checkBudgetRow(kb.workspace_id, answer!.budget, deps.models.charges, now)
  return searchBase(deps, kb, input, { workspaceId: kb.workspace_id, requestId, budgetChecked: true }, signal)
}

export async function searchBase(deps: Deps, kb: store.KnowledgeBaseRow, input: SearchInput, call: CallContext, signal: AbortSignal): Promise<SearchResult[]> {
  const topK = input.top_k ?? DEFAULT_TOP_K
  if (!Number.isInteger(topK) || topK < 1 || topK > MAX_TOP_K) throw invalid('top_k', `must be an integer from 1 to ${MAX_TOP_K}`)
  const filters = checkFilters(input.filters)
  const query = input.query.trim()
  if (!query) throw invalid('query', 'must not be empty')
  const model = deps.models.model(kb.embedding_model, 'embedding')
  const { vectors } = await deps.models.embed(call, model, [query], signal)
  const vector = vectors[0]!
  if (vector.length !== kb.dimensions) throw new AppError('upstream_error', `${model.id} answered ${vector.length} dimensions; the knowledge base holds ${kb.dimensions}`)
  // A rerank looks at a wider pool than it returns: what the first stage ranked low may be the answer.
  const pool = input.rerank ? Math.min(MAX_TOP_K, Math.max(topK * 4, 20)) : topK
  // A query the model maps to the zero vector (only punctuation, say, for local-embed) has no
  // direction: every cosine distance is NaN and the index walk's order is noise. No vector hits then.
  const directionless = vector.every((x) => x === 0)
  // Hybrid: each list a little deeper than asked, fused by rank.
  const limit = kb.retrieval_mode === 'hybrid' ? Math.min(MAX_TOP_K, Math.max(pool * 2, 20)) : pool
  const lists = await store.searchChunks(deps.db, {
    kbId: kb.id,
    dims: kb.dimensions,
    // pgvector's text form is the JSON array's: JSON.stringify writes it in ~20 µs for 384 numbers,
    // about half of `[${join}]` and a third of vectorText (whose shorter text saves PostgreSQL less).
    vector: directionless ? null : JSON.stringify(vector),
    text: query,
    filters,
    limit,
    mode: kb.retrieval_mode,
    // Hybrid: the store fuses the two lists as `fuse` does, and sends only the pool's rows.
    fuse: pool,
  })
  const hits: Ranked[] =
    kb.retrieval_mode === 'vector'
      ? lists.vector.map((hit) => ({ hit, score: similarity(hit.distance) }))
      : kb.retrieval_mode === 'fulltext'
        ? fuse([lists.fulltext])
        : lists.fused.map(({ score, ...hit }) => ({ hit, score }))
  if (!input.rerank || hits.length === 0) return hits.slice(0, topK).map((h) => toResult(h.hit, h.score))
  const reranker = deps.models.model(kb.rerank_model, 'rerank')
  const ranked = await deps.models.rerank(call, reranker, query, hits.map((h) => h.hit.content), topK, signal)
  const results = ranked.results.map((r) => toResult(hits[r.index]!.hit, r.relevance_score))
  return results.sort((a, b) => b.score - a.score).slice(0, topK)
}

export interface Ranked {
  hit: store.ChunkHit
  score: number
}

/**
 * Reciprocal rank fusion: Σ 1 / (k + rank) over the lists a chunk appears in, divided by what a chunk
 * first in every list would get, so the fused score lies in (0, 1] (1: first everywhere); ties by first
 * appearance. One list (full-text mode) gives (k + 1) / (k + rank): its rank as a score.
 */
export function fuse(lists: store.ChunkHit[][]): Ranked[] {
  const scores = new Map<string, { hit: store.ChunkHit; score: number; first: number }>()
  let order = 0
  for (const list of lists) {
    list.forEach((hit, rank) => {
      const entry = scores.get(hit.chunk_id) ?? { hit, score: 0, first: order++ }
      entry.score += 1 / (RRF_K + rank + 1)
      scores.set(hit.chunk_id, entry)
    })
  }
  const best = lists.length / (RRF_K + 1)
  return [...scores.values()].sort((a, b) => b.score - a.score || a.first - b.first).map((e) => ({ hit: e.hit, score: e.score / best }))
}

function toResult(h: store.ChunkHit, score: number): SearchResult {
  return { chunk_id: h.chunk_id, document_id: h.document_id, document_name: h.document_name, content: h.content, score: round6(score), similarity: round6(similarity(h.distance)), metadata: h.metadata }
}

/**
 * Searches several bases of one workspace (a workflow's knowledge_retrieval node): each with its own
 * model and mode, the results merged by score. A base of another workspace is not found, as over HTTP.
 */
export async function searchBases(
  deps: Deps,
  workspaceId: string,
  ids: string[],
  input: SearchInput,
  call: CallContext,
  signal: AbortSignal,
): Promise<(SearchResult & { knowledge_base_id: string })[]> {
  const all: (SearchResult & { knowledge_base_id: string })[] = []
  for (const id of new Set(ids)) {
    const kb = await store.findKnowledgeBase(deps.db.sql, id)
    if (!kb || kb.workspace_id !== workspaceId) throw new AppError('not_found', `knowledge base ${id} not found`)
    for (const r of await searchBase(deps, kb, input, call, signal)) all.push({ ...r, knowledge_base_id: kb.id })
  }
  return all.sort((a, b) => b.score - a.score).slice(0, input.top_k ?? DEFAULT_TOP_K)
}
