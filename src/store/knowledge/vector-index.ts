import type { Pool, Sql } from '../db'

/**
 * The vector index (docs/knowledge.md, "Indexing"): one partial HNSW index per embedding size over
 * `chunks`, and the unindexed part (`chunks_unindexed`) new chunks land in first.
 *
 * HNSW_M / HNSW_EF_CONSTRUCTION: the graph's degree and build-time candidate list. Measured on the
 * clustered 100 000-chunk corpus (bench/README.md, "Knowledge at scale"), 5 builds each, against
 * pgvector's defaults (m 16, ef_construction 64): a graph built with the longer candidate list and
 * fewer neighbours per node is found as well with a much shorter search list (EF_SEARCH in
 * config.ts: recall@10 ≥ 0.963 at ef_search 40, where the defaults needed 100 for ≥ 0.955), and
 * each step of the walk reads fewer neighbours: a hybrid search's backend CPU ~20 % lower (1.73
 * instead of 2.16 ms). The build costs ~45 % more (23 s instead of 16 s at 100 000 chunks), an
 * insert into the graph ~30 % more (2.1 instead of 1.6 ms a chunk); the index is 100 MB instead of 112.
 */
export const HNSW_M = 12
export const HNSW_EF_CONSTRUCTION = 128

/**
 * A base, or what its filters leave of it, with at most this many searched chunks is searched
 * exactly (a sort of their distances) rather than through the graph: at this size the exact sort
 * costs about what a graph walk does (~2.5 ms for a 1 % filter's 1 000 chunks at 100 000, server
 * mode), and finds every match of a selective filter.
 */
export const EXACT_MAX = 2000

const indexName = (dims: number) => `chunks_hnsw_${dims}_idx`
const checkDims = (dims: number) => {
  if (!Number.isInteger(dims) || dims < 1 || dims > 2000) throw new Error(`no HNSW index for ${dims} dimensions`)
}
/**
 * The graph holds each vector normalised to length 1 (the same cosine distances) as halfvec (16-bit
 * floats, at most ±65 504, which normalised components never pass): half the index of vector's,
 * so it stays in PostgreSQL's buffers (its distances are not cheaper here). The walk only picks candidates, whose distances are then
 * computed from the stored vectors (search.ts). Recall measured in bench/README.md, "Knowledge at
 * scale". The expression must be the search's own (`halfOf`) for the planner to use the index.
 */
export const halfOf = (expression: string, dims: number) => `l2_normalize(${expression}::vector(${dims}))::halfvec(${dims})`
const createStatement = (dims: number) =>
  `create index if not exists ${indexName(dims)} on chunks using hnsw ((${halfOf('embedding', dims)}) halfvec_cosine_ops) with (m = ${HNSW_M}, ef_construction = ${HNSW_EF_CONSTRUCTION}) where dims = ${dims}`

/**
 * The partial HNSW index of one embedding size (`chunks_hnsw_<dims>_idx`), so every base's vector
 * search, whatever its model, can walk an index. Idempotent; serialised by an advisory lock since
 * two processes may create bases of a new size at once. Up to 2 000 dimensions (pgvector's limit
 * for `vector` in HNSW); bigger models are refused when a base is configured.
 */
export async function ensureVectorIndex(sql: Pool, dims: number): Promise<void> {
  checkDims(dims)
  const [exists] = await sql`select 1 from pg_indexes where indexname = ${indexName(dims)}`
  if (exists) return
  await sql.begin(async (tx) => {
    await tx`select pg_advisory_xact_lock(7465006)`
    await tx.unsafe(createStatement(dims))
  })
}

/**
 * Builds the index of one size again from every indexed chunk, in one transaction (searches go on
 * meanwhile with the old index; writes to `chunks` wait). For operators and the recall benchmark:
 * the service itself never needs it.
 */
export async function rebuildVectorIndex(sql: Pool, dims: number, maintenanceWorkMem = '256MB'): Promise<void> {
  checkDims(dims)
  await sql.begin(async (tx) => {
    await tx`select pg_advisory_xact_lock(7465006)`
    await tx`select set_config('maintenance_work_mem', ${maintenanceWorkMem}, true)`
    await tx.unsafe(`drop index if exists ${indexName(dims)}`)
    await tx.unsafe(createStatement(dims))
  })
}

/** Chunks of a base's searched generations that are not in the vector index yet. */
export async function pendingChunks(sql: Sql, kbId: string): Promise<number> {
  const [row] = await sql<{ n: number }[]>`
    select count(*)::int as n from chunks_unindexed u join documents d on d.id = u.document_id and d.live_generation = u.generation
    where u.knowledge_base_id = ${kbId}`
  return row!.n
}

/**
 * Moves up to `limit` chunks of searched generations from the unindexed part into `chunks` (and so
 * into its HNSW index), oldest first, in one statement: a chunk is in exactly one part before and
 * after, and a crash moves nothing. Only chunks whose generation is the document's current one and
 * its live one move; a generation still being written stays unindexed until it is the live one.
 * Their documents' rows are held (for share) until the move commits, so a later generation's ready
 * swap, which updates that row first, sees the moved chunks and deletes them. Several indexers may
 * run at once: each takes rows the others have not locked. Answers how many moved.
 */
export async function moveChunks(sql: Sql, limit: number): Promise<number> {
  const [row] = await sql<{ moved: number }[]>`
    with picked as (
      select u.id from chunks_unindexed u join documents d on d.id = u.document_id
      where d.live_generation = u.generation and d.generation = u.generation
      order by u.id
      limit ${limit}
      for update of u skip locked
      for share of d skip locked
    ), moved as (
      delete from chunks_unindexed u using picked p where u.id = p.id
      returning u.id, u.knowledge_base_id, u.document_id, u.generation, u.position, u.content, u.heading_path, u.tokens, u.metadata, u.dims, u.embedding
    ), inserted as (
      insert into chunks (id, knowledge_base_id, document_id, generation, position, content, heading_path, tokens, metadata, dims, embedding)
      select * from moved
      on conflict (document_id, generation, position) do nothing
      returning 1
    )
    select (select count(*) from moved)::int as moved`
  return row!.moved
}
