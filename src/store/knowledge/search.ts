import type { Pool, Sql, Tx } from '../db'

/** Search over the chunks of a base: vector (HNSW or exact) and full text. */
export interface ChunkHit {
  chunk_id: string
  document_id: string
  document_name: string
  content: string
  metadata: Record<string, unknown>
  /** Cosine distance to the query vector (0 = same direction). */
  distance: number
}

export interface SearchScope {
  kbId: string
  dims: number
  /** The query's embedding, as pgvector text. */
  vector: string
  /** Metadata filters: every key must match; an array value means any of its values (docs/knowledge.md, "Search"). */
  filters: Record<string, unknown>
  limit: number
}

/** `metadata @> {k: v}` per key, ORed over an array's values: the GIN index (jsonb_path_ops) serves each. */
function filterClause(sql: Sql, filters: Record<string, unknown>) {
  return Object.entries(filters).reduce((acc, [key, value]) => {
    const alternatives = (Array.isArray(value) ? value : [value]).map((v) => sql`c.metadata @> ${sql.json({ [key]: v } as never)}`)
    return sql`${acc} and (${alternatives.reduce((a, b) => sql`${a} or ${b}`)})`
  }, sql``)
}

/**
 * HNSW's candidate list (ef_search). At 100 000 chunks of generated text with subjects (bench/README.md,
 * 100 queries against the exact search): 200 found 90 % of the exact top 10 on one PGlite build of the
 * graph and 98 % on a server build; 400 found 99 % on PGlite, for ~25 % more time per search (p50 27 →
 * 35 ms there). pgvector's default of 40 found 73 % on only 3 000 chunks.
 */
const EF_SEARCH = 400

/**
 * Searches run in a transaction whose HNSW scans continue until `limit` rows pass the filters
 * (pgvector's iterative index scans, in strict distance order), with a candidate list of EF_SEARCH
 * (at least twice the limit): a selective filter still answers top_k results, from the index.
 */
export async function searchTransaction<T>(sql: Pool, limit: number, fn: (tx: Tx) => Promise<T>): Promise<T> {
  return (await sql.begin(async (tx) => {
    await tx`select set_config('hnsw.ef_search', ${String(Math.min(1000, Math.max(EF_SEARCH, limit * 2)))}, true), set_config('hnsw.iterative_scan', 'strict_order', true)`
    return fn(tx)
  })) as T
}

/**
 * Prices out sequential scans (and, for an unfiltered search, sorts) for the rest of the search
 * transaction, before its vector statement (after its full-text one, which needs a sort). The
 * planner cannot know how many candidates the live-generation check keeps (it assumes 0.5 %), and
 * neither PGlite nor a fresh server database has statistics to correct it: on its own it read every
 * chunk of the base and sorted them (measured from 3 000 chunks on, and at top_k 100 on 24 000).
 * With metadata filters, sorting what the metadata index finds stays allowed: for a selective filter
 * that beats walking the HNSW graph until enough matches turn up (bench/README.md).
 */
export async function preferIndexOrder(tx: Sql, filtered = false): Promise<void> {
  await tx`select set_config('enable_seqscan', 'off', true), set_config('enable_sort', ${filtered ? 'on' : 'off'}, true)`
}

/**
 * `vector(<dims>)` and the literal `<dims>`: both must be literals, not parameters. A type modifier
 * cannot be one, and a partial index (`where dims = 384`) only serves a query whose own condition
 * proves its predicate, which `dims = $1` does not once Postgres switches a prepared statement to
 * its generic plan.
 */
function sizeOf(sql: Sql, dims: number) {
  if (!Number.isInteger(dims) || dims < 1 || dims > 2000) throw new Error(`bad dimensions ${dims}`)
  return { type: sql.unsafe(`vector(${dims})`), dims: sql.unsafe(String(dims)) }
}

/**
 * Nearest chunks by cosine distance, through the base's size's partial HNSW index. The searched
 * generation is checked per candidate (a subquery on the document's primary key) rather than by a
 * join, which the planner would rather answer with a scan of every chunk of the base and a sort.
 */
export async function vectorSearch(tx: Sql, s: SearchScope, exact = false): Promise<ChunkHit[]> {
  const { type: vt, dims } = sizeOf(tx, s.dims)
  // `+ 0`: an order the index cannot give, so the exact search is a statement of its own. Planner
  // settings alone would not do: a prepared statement's cached generic plan keeps the index whatever
  // they say (measured: the "exact" answers were HNSW's after a few executions on PGlite).
  const order = exact ? tx`(c.embedding::${vt} <=> ${s.vector}::${vt}) + 0` : tx`c.embedding::${vt} <=> ${s.vector}::${vt}`
  return tx<ChunkHit[]>`
    select h.chunk_id, h.document_id, d.name as document_name, h.content, h.metadata, h.distance
    from (
      select c.id as chunk_id, c.document_id, c.content, c.metadata, (c.embedding::${vt} <=> ${s.vector}::${vt}) as distance
      from chunks c
      where c.dims = ${dims} and c.knowledge_base_id = ${s.kbId}
        and c.generation = (select live_generation from documents where id = c.document_id) ${filterClause(tx, s.filters)}
      order by ${order}
      limit ${s.limit}
    ) h join documents d on d.id = h.document_id
    order by h.distance, h.chunk_id`
}

/**
 * The same search without the HNSW index: every chunk passing the filters, by exact distance (the
 * metadata GIN index finds them). For a filter so selective that the graph walk ends before `limit`
 * matches (HNSW does not promise to reach every node), which is when this costs little.
 */
export async function exactVectorSearch(tx: Sql, s: SearchScope): Promise<ChunkHit[]> {
  await tx`select set_config('enable_seqscan', 'on', true), set_config('enable_sort', 'on', true)`
  return vectorSearch(tx, s, true)
}

/** Full-text candidates ranked per query: enough for any top_k, few enough to rank in a few ms. */
const FULLTEXT_POOL = 1000

/**
 * Best full-text matches (GIN index on the 'english' tsvector), ranked by ts_rank over "any of the
 * query's words" (an AND of every word would find nothing for most questions). Ranking every chunk
 * that shares one common word with the query would cost milliseconds per thousand chunks, so the
 * ranked pool is bounded: the chunks holding every word (the best matches) first, then chunks
 * holding any of them, at most FULLTEXT_POOL of each. Only the ranked few are read whole, with
 * their distance to the query vector (for the score), not the whole pool.
 */
export async function fulltextSearch(tx: Sql, s: SearchScope & { text: string }): Promise<ChunkHit[]> {
  const { type: vt } = sizeOf(tx, s.dims)
  const filters = filterClause(tx, s.filters)
  return tx<ChunkHit[]>`
    with q as (
      select plainto_tsquery('english', ${s.text}) as every,
             nullif(replace(plainto_tsquery('english', ${s.text})::text, ' & ', ' | '), '')::tsquery as any
    ), pool as (
      (select c.id from chunks c, q where c.tsv @@ q.every and c.knowledge_base_id = ${s.kbId} ${filters} limit ${FULLTEXT_POOL})
      union
      (select c.id from chunks c, q where c.tsv @@ q.any and c.knowledge_base_id = ${s.kbId} ${filters} limit ${FULLTEXT_POOL})
    ), ranked as (
      select c.id, ts_rank(c.tsv, q.any) as rank
      from q, pool p join chunks c on c.id = p.id join documents d on d.id = c.document_id
      where c.generation = d.live_generation
      order by rank desc, c.id
      limit ${s.limit}
    )
    select c.id as chunk_id, c.document_id, d.name as document_name, c.content, c.metadata,
           (c.embedding::${vt} <=> ${s.vector}::${vt}) as distance
    from ranked r join chunks c on c.id = r.id join documents d on d.id = c.document_id
    order by r.rank desc, c.id`
}
