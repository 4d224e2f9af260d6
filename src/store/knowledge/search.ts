import { Limiter } from '../../lib/limiter'
import type { Pool, Sql } from '../db'
import { jsonb } from '../db'
import { efSearchFor, searchSession } from './search-session'
import { EXACT_MAX, halfOf } from './vector-index'

/** Search over the chunks of a base: vector (HNSW or exact) and full text, over both parts of the base. */
export interface ChunkHit {
  chunk_id: string
  document_id: string
  document_name: string
  content: string
  metadata: Record<string, unknown>
  /** Cosine distance to the query vector (0 = same direction). */
  distance: number
}

export type SearchMode = 'vector' | 'fulltext' | 'hybrid'

export interface SearchQuery {
  kbId: string
  dims: number
  /** The query's embedding, as pgvector text; null when it has no direction (no vector hits then). */
  vector: string | null
  /** The query's text; null: no full-text list. */
  text: string | null
  /** Metadata filters: every key must match; an array value means any of its values (docs/knowledge.md, "Search"). */
  filters: Record<string, unknown>
  /** Rows of each list. */
  limit: number
  mode: SearchMode
  /**
   * Hybrid only: answer the reciprocal rank fusion of the two lists (`fused`, its best `fuse` rows)
   * instead of the lists themselves: only the rows answered are read whole and sent.
   */
  fuse?: number
}

/** A row of the fused list: its score is the domain's `fuse` over both lists (search.ts in domain/knowledge). */
export type FusedHit = ChunkHit & { score: number }

/** Reciprocal rank fusion's constant (Cormack et al.): damps the weight of the first few ranks. */
export const RRF_K = 60

/** `metadata @> {k: v}` per key, ORed over an array's values: the GIN index (jsonb_path_ops) serves each. */
function filterClause(sql: Sql, alias: string, filters: Record<string, unknown>) {
  const column = sql.unsafe(`${alias}.metadata`)
  return Object.entries(filters).reduce((acc, [key, value]) => {
    const alternatives = (Array.isArray(value) ? value : [value]).map((v) => sql`${column} @> ${jsonb(sql, { [key]: v })}`)
    return sql`${acc} and (${alternatives.reduce((a, b) => sql`${a} or ${b}`)})`
  }, sql``)
}

/**
 * `vector(<dims>)` and the literal `<dims>`: both must be literals, not parameters. A type modifier
 * cannot be one, and a partial index (`where dims = 384`) only serves a query whose own condition
 * proves its predicate, which `dims = $1` does not once Postgres switches a prepared statement to
 * its generic plan.
 */
function sizeOf(sql: Sql, dims: number) {
  if (!Number.isInteger(dims) || dims < 1 || dims > 2000) throw new Error(`bad dimensions ${dims}`)
  return { type: sql.unsafe(`vector(${dims})`), graph: sql.unsafe(halfOf('c.embedding', dims)), queryHalf: sql.unsafe(halfOf('v', dims)), dims: sql.unsafe(String(dims)) }
}

/**
 * Full-text candidates read from the GIN index per list before ranking: enough for any top_k, few
 * enough that ranking them costs well under a millisecond (each rank reads the chunk's tsvector:
 * ~4 µs). The chunks holding every word of the query (the best matches) are taken first, then those
 * holding any of them. 100 of each instead of 200: ~15 % more searches a second at 100 000 chunks.
 */
const FULLTEXT_POOL = 100

/**
 * Where a search runs: the pool, in server mode the search's own pool (`Database.search`), and the
 * candidate list searches start from (`Database.efSearch`, which the search pool's sessions start with).
 */
export interface SearchPools {
  sql: Pool
  search: Pool | null
  efSearch: number
}

/**
 * The searches sent to a search pool, at most one per connection: the others wait in one queue for
 * the first connection that frees up. Sent straight to a pool whose connections are all busy,
 * postgres.js pipelines a search behind one already running on a connection, where it waits for
 * that one to end even as other connections free up: the slowest answers waited for whichever search
 * happened to be ahead of them (bench/README.md, "The search pool's queue").
 */
const queues = new WeakMap<Pool, Limiter>()
const NEVER = new AbortController().signal

export function queueOf(pool: Pool): Limiter {
  let queue = queues.get(pool)
  if (!queue) queues.set(pool, (queue = new Limiter(Math.max(1, pool.options.max))))
  return queue
}

/**
 * One search of one base, both lists in one statement:
 *
 * - vector: the indexed part through the base's size's HNSW index (an iterative scan, so that
 *   filters are applied inside the walk), or exactly when the base, or what its filters leave of
 *   it, holds at most EXACT_MAX chunks (counted from its documents' chunk counts): an exact sort of
 *   a few thousand rows is faster than a graph walk looking for them, and exact. The
 *   unindexed part (chunks not yet moved into the index, docs/knowledge.md "Indexing") is always
 *   searched exactly. The two are merged by distance: a chunk ranks the same in either part.
 * - full text: the GIN index's candidates in both parts, ranked by ts_rank over "any of the query's
 *   words" (an AND of every word would find nothing for most questions), FULLTEXT_POOL of each kind.
 */
export async function searchChunks(db: SearchPools, q: SearchQuery): Promise<{ vector: ChunkHit[]; fulltext: ChunkHit[]; fused: FusedHit[] }> {
  const wantVector = q.mode !== 'fulltext' && q.vector !== null
  const wantText = q.mode !== 'vector' && q.text !== null && q.text.trim() !== ''
  if (!wantVector && !wantText) return { vector: [], fulltext: [], fused: [] }
  const ef = efSearchFor(db.efSearch, q.limit)
  const pool = db.search
  let rows: Row[]
  if (pool) {
    // A list longer than the pool's sessions start with sets its `ef_search` in a transaction around it.
    const longer = wantVector && ef !== db.efSearch
    rows = await queueOf(pool).run(NEVER, async () =>
      longer ? (await pool.begin((tx) => [tx`select set_config('hnsw.ef_search', ${String(ef)}, true)`, searchStatement(tx, q, wantVector, wantText)]))[1] as never : searchStatement(pool, q, wantVector, wantText))
  } else {
    const settings = Object.entries(searchSession(ef))
    rows = (await db.sql.begin((tx) => [
      tx`select ${settings.map(([name, value]) => tx`set_config(${name}, ${value}, true)`).reduce((a, b) => tx`${a}, ${b}`)}`,
      searchStatement(tx, q, wantVector, wantText),
    ]))[1] as never
  }
  const vector: ChunkHit[] = []
  const fulltext: ChunkHit[] = []
  const fused: FusedHit[] = []
  for (const { list, rank, ...hit } of rows) {
    if (list === 'f') fused.push({ ...hit, score: rank })
    else (list === 'v' ? vector : fulltext).push(hit)
  }
  return { vector, fulltext, fused }
}

type Row = ChunkHit & { list: 'v' | 't' | 'f'; rank: number }

/**
 * What every part of the statement is written with: the base's vector size as literals (sizeOf),
 * the filters over each table's alias, and the query vector (null without one).
 */
function termsOf(tx: Sql, q: SearchQuery, wantVector: boolean) {
  const { type: vt, graph, queryHalf, dims } = sizeOf(tx, q.dims)
  return {
    vt,
    graph,
    queryHalf,
    dims,
    fc: filterClause(tx, 'c', q.filters),
    fu: filterClause(tx, 'u', q.filters),
    fd: filterClause(tx, 'd', q.filters),
    vec: wantVector ? tx`(select v from qv)` : tx`null::${vt}`,
  }
}

type Terms = ReturnType<typeof termsOf>
type Fragment = ReturnType<typeof filterClause>

// The document's name, one primary-key read per row (a join let the planner hash every document).
const nameOf = (tx: Sql, alias: string) => tx.unsafe(`(select name from documents where id = ${alias}.document_id)`)

function searchStatement(tx: Sql, q: SearchQuery, wantVector: boolean, wantText: boolean) {
  const t = termsOf(tx, q, wantVector)
  const { vt, dims, vec } = t
  // The query vector is sent and parsed once (a CTE), not once per use; `h` is it as the graph holds
  // its vectors (normalised, halfvec: vector-index.ts).
  const parts: Fragment[] = wantVector ? [tx`qv as (select v, ${t.queryHalf} as h from (select ${q.vector}::${vt} as v) x)`, vectorList(tx, q, t)] : []
  if (wantText) parts.push(textList(tx, q, t))
  if (q.mode === 'hybrid' && q.fuse !== undefined) return fusedStatement(tx, q.fuse, t, parts, wantVector, wantText)
  const name = (alias: string) => nameOf(tx, alias)
  const vectorRows = tx`
    select 'v' as list, v.id as chunk_id, v.document_id, ${name('v')} as document_name, v.content, v.metadata, v.distance, 0::real as rank
    from v`
  // A full-text hit's distance is computed for its similarity; one of another size (a base being
  // re-embedded) has none to this query.
  const textRows = tx`
    select 't' as list, t.id as chunk_id, t.document_id, ${name('t')} as document_name, t.content, t.metadata,
           case when t.dims = ${dims} and ${vec} is not null then t.embedding::${vt} <=> ${vec} else 'NaN'::float8 end as distance, t.rank
    from t`
  const select = wantVector && wantText ? tx`${vectorRows} union all ${textRows}` : wantVector ? vectorRows : textRows
  return tx<Row[]>`
    with ${parts.reduce((a, b) => tx`${a}, ${b}`)}
    select * from (${select}) r
    order by list desc, case when list = 'v' then distance end, rank desc, chunk_id`
}

/** The vector list `v`: the gate, the graph walk or the exact sort of the indexed part, the unindexed part, merged. */
function vectorList(tx: Sql, q: SearchQuery, { vt, graph, dims, fc, fu, fd, vec }: Terms) {
  // The graph walk's filter, in a form the planner cannot estimate: it has no statistics for
  // `metadata @> …` and assumes 0.1 % of rows pass, which makes a walk look hopeless and a sort of
  // the metadata index's rows cheap. The walk only runs when the gate counted more than EXACT_MAX
  // matching chunks, which is when walking is right.
  const fw = Object.keys(q.filters).length > 0 ? tx`and (true ${fc}) is not false` : tx``
  // The gate counts from the documents (a chunk's metadata is its document's), in document order,
  // and stops as soon as the running count of searched chunks passes EXACT_MAX: a few rows of a
  // base of large documents, at most EXACT_MAX + 1 of one of one-chunk documents.
  // The walk goes through the graph's normalised halfvec copies (vector-index.ts), in their order; each row's
  // distance is the stored vector's, and `v` orders by it, as it orders the exact parts.
  // `walked` is exact-checked: a walk answering fewer rows than asked (a filter, or a base, that is
  // a sliver of the index: the iterative scan gives up after hnsw.max_scan_tuples) is answered by
  // the exact sort instead, so a search never answers fewer chunks than there are.
  return tx`
    gate as (
      select exists (
        select 1 from (
          select sum(d.chunks_count) over (order by d.created_at, d.id) as seen
          from documents d
          where d.knowledge_base_id = ${q.kbId} and d.live_generation is not null ${fd}
          order by d.created_at, d.id
        ) x where seen > ${EXACT_MAX}
      ) as walk
    ), walked as materialized (
      select c.id, c.document_id, c.content, c.metadata, c.embedding::${vt} <=> ${vec} as distance
      from chunks c
      where (select walk from gate) and c.dims = ${dims} and c.knowledge_base_id = ${q.kbId} ${fw}
      order by ${graph} <=> (select h from qv)
      limit ${q.limit}
    ), scanned as (
      select c.id, c.document_id, c.content, c.metadata, c.embedding::${vt} <=> ${vec} as distance
      from chunks c
      where (not (select walk from gate) or (select count(*) from walked) < ${q.limit}) and c.dims = ${dims} and c.knowledge_base_id = ${q.kbId} ${fc}
      order by (c.embedding::${vt} <=> ${vec}) + 0
      limit ${q.limit}
    ), pending as (
      select u.id, u.document_id, u.content, u.metadata, u.embedding::${vt} <=> ${vec} as distance
      from chunks_unindexed u join documents d on d.id = u.document_id and d.live_generation = u.generation
      where u.knowledge_base_id = ${q.kbId} and u.dims = ${dims} ${fu}
      order by 5
      limit ${q.limit}
    ), v as (
      select * from walked where (select count(*) from walked) >= ${q.limit}
      union all select * from scanned
      union all select * from pending
      order by distance, id
      limit ${q.limit}
    )`
}

/** The full-text list `t`: the GIN index's candidates of both parts, ranked, the best read whole. */
function textList(tx: Sql, q: SearchQuery, { fc, fu }: Terms) {
  // Ranked where the GIN index's candidates are read (their row is at hand there); only the
  // `limit` best are read again, whole.
  return tx`
    q as (
      select plainto_tsquery('english', ${q.text}) as every,
             nullif(replace(plainto_tsquery('english', ${q.text})::text, ' & ', ' | '), '')::tsquery as any
    ), pool as (
      (select c.id, ts_rank(c.tsv, q.any) as rank from chunks c, q where c.tsv @@ q.every and c.knowledge_base_id = ${q.kbId} ${fc} limit ${FULLTEXT_POOL})
      union
      (select c.id, ts_rank(c.tsv, q.any) as rank from chunks c, q where c.tsv @@ q.any and c.knowledge_base_id = ${q.kbId} ${fc} limit ${FULLTEXT_POOL})
    ), best as (
      select id, rank, false as pending from pool
      union all
      select u.id, ts_rank(u.tsv, q.any), true
      from q, chunks_unindexed u join documents d on d.id = u.document_id and d.live_generation = u.generation
      where u.knowledge_base_id = ${q.kbId} and u.tsv @@ q.any ${fu}
      order by rank desc, id
      limit ${q.limit}
    ), t as (
      select b.id, c.document_id, c.content, c.metadata, c.dims, c.embedding, b.rank from best b join chunks c on c.id = b.id where not b.pending
      union all
      select b.id, u.document_id, u.content, u.metadata, u.dims, u.embedding, b.rank from best b join chunks_unindexed u on u.id = b.id where b.pending
    )`
}

/** The fused list `f` over `v` and `t` and the statement that answers it (a hybrid search with `fuse`). */
function fusedStatement(tx: Sql, fuse: number, { vt, dims, vec }: Terms, parts: Fragment[], wantVector: boolean, wantText: boolean) {
  const name = (alias: string) => nameOf(tx, alias)
  // The domain's reciprocal rank fusion (fuse in domain/knowledge/search.ts), here so that only the
  // rows answered are read whole and sent (a hybrid search's lists are twice as deep as its
  // answer): Σ 1 / (RRF_K + 1 + rank) over the two lists, in the same float8 operations and order,
  // over what a chunk first in both would get; ties as there, by first appearance (the vector
  // list's rank, then the full-text-only chunks in their list's order).
  if (!Number.isInteger(fuse) || fuse < 1) throw new Error(`bad fuse ${fuse}`)
  const k1 = tx.unsafe(String(RRF_K + 1))
  parts.push(wantVector ? tx`vr as (select v.*, row_number() over (order by v.distance, v.id) - 1 as r from v)` : tx`vr as (select null::text as id, null::text as document_id, null::text as content, null::jsonb as metadata, null::float8 as distance, null::bigint as r where false)`)
  parts.push(wantText ? tx`tr as (select t.*, row_number() over (order by t.rank desc, t.id) - 1 as r from t)` : tx`tr as (select null::text as id, null::text as document_id, null::text as content, null::jsonb as metadata, null::integer as dims, null::vector as embedding, null::bigint as r where false)`)
  parts.push(tx`f as (
      select coalesce(vr.id, tr.id) as id, coalesce(vr.document_id, tr.document_id) as document_id, coalesce(vr.content, tr.content) as content,
             coalesce(vr.metadata, tr.metadata) as metadata,
             case when vr.id is not null then vr.distance when tr.dims = ${dims} and ${vec} is not null then tr.embedding::${vt} <=> ${vec} else 'NaN'::float8 end as distance,
             (coalesce(1::float8 / (${k1} + vr.r), 0) + coalesce(1::float8 / (${k1} + tr.r), 0)) / (2::float8 / ${k1}) as score,
             vr.id is null as text_only, coalesce(vr.r, tr.r) as r
      from vr full join tr on tr.id = vr.id
      order by 6 desc, 7, 8
      limit ${fuse}
    )`)
  return tx<Row[]>`
      with ${parts.reduce((a, b) => tx`${a}, ${b}`)}
      select 'f' as list, f.id as chunk_id, f.document_id, ${name('f')} as document_name, f.content, f.metadata, f.distance, f.score as rank
      from f
      order by f.score desc, f.text_only, f.r`
}
