import { newId } from '../lib/ids'
import type { ListQuery } from '../lib/lists'
import type { Persisted } from '../machines/runner'
import type { DocumentContext, DocumentStatus } from '../machines/document.machine'
import type { Pool, Sql, Tx } from './db'
import { outboxCte } from './events'
import { inWorkspaces, listClauses, type WorkspaceScope } from './lists'

export type RetrievalMode = 'vector' | 'hybrid' | 'fulltext'

export interface Chunking {
  chunk_size: number
  chunk_overlap: number
  separators?: string[]
}

export interface KnowledgeBaseRow {
  id: string
  workspace_id: string
  name: string
  description: string
  embedding_model: string
  dimensions: number
  chunking: Chunking
  retrieval_mode: RetrievalMode
  rerank_model: string
  created_by: string
  created_at: Date
  updated_at: Date
}

export interface DocumentRow {
  id: string
  knowledge_base_id: string
  workspace_id: string
  name: string
  doc_type: string
  group: string | null
  size_bytes: number
  sha256: string
  metadata: Record<string, unknown>
  status: DocumentStatus
  error: { code: string; message: string } | null
  snapshot: Persisted<DocumentContext>
  machine_version: number
  lease_owner: string | null
  lease_until: Date | null
  attempts: number
  /** Parsing and chunking started (at each claim) and not finished since (migration 00009). */
  processing_attempts: number
  generation: number
  live_generation: number | null
  chunks_count: number
  indexed_at: Date | null
  created_by: string
  created_at: Date
  updated_at: Date
}

export interface ChunkInsert {
  position: number
  content: string
  heading_path: string[]
  tokens: number
  embedding: number[]
}

// ---- knowledge bases ----

export async function insertKnowledgeBase(sql: Sql, kb: Omit<KnowledgeBaseRow, 'created_at' | 'updated_at'>): Promise<KnowledgeBaseRow> {
  const [row] = await sql<KnowledgeBaseRow[]>`
    insert into knowledge_bases (id, workspace_id, name, description, embedding_model, dimensions, chunking, retrieval_mode, rerank_model, created_by)
    values (${kb.id}, ${kb.workspace_id}, ${kb.name}, ${kb.description}, ${kb.embedding_model}, ${kb.dimensions}, ${sql.json(kb.chunking as never)},
            ${kb.retrieval_mode}, ${kb.rerank_model}, ${kb.created_by})
    returning *`
  return row!
}

export async function findKnowledgeBase(sql: Sql, id: string): Promise<KnowledgeBaseRow | null> {
  const [row] = await sql<KnowledgeBaseRow[]>`select * from knowledge_bases where id = ${id}`
  return row ?? null
}

export async function listKnowledgeBases(sql: Sql, scope: WorkspaceScope, q: ListQuery): Promise<KnowledgeBaseRow[]> {
  const c = listClauses(sql, q)
  return sql<KnowledgeBaseRow[]>`select * from knowledge_bases where ${inWorkspaces(sql, scope)} ${c.and} order by ${c.orderBy} limit ${c.limit}`
}

export type KnowledgeBasePatch = Partial<Pick<KnowledgeBaseRow, 'name' | 'description' | 'embedding_model' | 'dimensions' | 'chunking' | 'retrieval_mode' | 'rerank_model'>>

export async function updateKnowledgeBase(tx: Sql, id: string, p: KnowledgeBasePatch): Promise<KnowledgeBaseRow> {
  const [row] = await tx<KnowledgeBaseRow[]>`
    update knowledge_bases set
      name = ${p.name ?? tx`name`},
      description = ${p.description ?? tx`description`},
      embedding_model = ${p.embedding_model ?? tx`embedding_model`},
      dimensions = ${p.dimensions ?? tx`dimensions`},
      chunking = ${p.chunking ? tx.json(p.chunking as never) : tx`chunking`},
      retrieval_mode = ${p.retrieval_mode ?? tx`retrieval_mode`},
      rerank_model = ${p.rerank_model ?? tx`rerank_model`},
      updated_at = now()
    where id = ${id}
    returning *`
  return row!
}

export async function lockKnowledgeBase(tx: Tx, id: string): Promise<KnowledgeBaseRow | null> {
  const [row] = await tx<KnowledgeBaseRow[]>`select * from knowledge_bases where id = ${id} for update`
  return row ?? null
}

export async function deleteKnowledgeBase(sql: Sql, id: string): Promise<void> {
  await sql`delete from knowledge_bases where id = ${id}`
}

/** Whether a base holds any document (in any status: each would be embedded with the base's model). */
export async function hasDocuments(sql: Sql, kbId: string): Promise<boolean> {
  const [row] = await sql<{ any: boolean }[]>`select exists (select 1 from documents where knowledge_base_id = ${kbId}) as any`
  return row!.any
}

/**
 * The partial HNSW index of one embedding size (`chunks_hnsw_<dims>_idx`), so every base's vector
 * search, whatever its model, scans an index. Idempotent; serialised by an advisory lock since
 * two processes may create bases of a new size at once. Up to 2 000 dimensions (pgvector's limit
 * for `vector` in HNSW); bigger models are refused when a base is configured.
 */
export async function ensureVectorIndex(sql: Pool, dims: number): Promise<void> {
  if (!Number.isInteger(dims) || dims < 1 || dims > 2000) throw new Error(`no HNSW index for ${dims} dimensions`)
  const name = `chunks_hnsw_${dims}_idx`
  const [exists] = await sql`select 1 from pg_indexes where indexname = ${name}`
  if (exists) return
  await sql.begin(async (tx) => {
    await tx`select pg_advisory_xact_lock(7465006)`
    await tx.unsafe(`create index if not exists ${name} on chunks using hnsw ((embedding::vector(${dims})) vector_cosine_ops) where dims = ${dims}`)
  })
}

// ---- documents ----

export async function insertDocument(
  sql: Sql,
  d: Pick<DocumentRow, 'id' | 'knowledge_base_id' | 'workspace_id' | 'name' | 'doc_type' | 'group' | 'size_bytes' | 'sha256' | 'metadata' | 'status' | 'snapshot' | 'machine_version' | 'created_by'>,
): Promise<DocumentRow> {
  const [row] = await sql<DocumentRow[]>`
    insert into documents (id, knowledge_base_id, workspace_id, name, doc_type, "group", size_bytes, sha256, metadata, status, snapshot, machine_version, created_by)
    values (${d.id}, ${d.knowledge_base_id}, ${d.workspace_id}, ${d.name}, ${d.doc_type}, ${d.group}, ${d.size_bytes}, ${d.sha256},
            ${sql.json(d.metadata as never)}, ${d.status}, ${sql.json(d.snapshot as never)}, ${d.machine_version}, ${d.created_by})
    returning *`
  return row!
}

export async function findDocument(sql: Sql, id: string): Promise<DocumentRow | null> {
  const [row] = await sql<DocumentRow[]>`select * from documents where id = ${id}`
  return row ?? null
}

export async function lockDocument(tx: Tx, id: string): Promise<DocumentRow | null> {
  const [row] = await tx<DocumentRow[]>`select * from documents where id = ${id} for update`
  return row ?? null
}

export async function listDocuments(sql: Sql, kbId: string, q: ListQuery): Promise<DocumentRow[]> {
  const c = listClauses(sql, q)
  return sql<DocumentRow[]>`select * from documents where knowledge_base_id = ${kbId} ${c.and} order by ${c.orderBy} limit ${c.limit}`
}

export async function deleteDocument(sql: Sql, id: string): Promise<DocumentRow | null> {
  const [row] = await sql<DocumentRow[]>`delete from documents where id = ${id} returning *`
  return row ?? null
}

/** Every document of a base being ingested, for a re-embed (a new generation of each, in one statement). */
export async function documentsOf(sql: Sql, kbId: string): Promise<DocumentRow[]> {
  return sql<DocumentRow[]>`select * from documents where knowledge_base_id = ${kbId} order by created_at, id`
}

/**
 * Claims up to `limit` documents being ingested whose lease is free or expired, in one statement;
 * `attempts` counts the claims, `processing_attempts` the parsing runs started since the last that
 * finished (every claim parses again): both are counted here, before any work, so a process that
 * dies on a document has counted it (a document that kills its workers fails after a few).
 */
export async function claimDocuments(sql: Sql, owner: string, leaseMs: number, limit: number): Promise<DocumentRow[]> {
  return sql<DocumentRow[]>`
    update documents set lease_owner = ${owner}, lease_until = now() + ${leaseMs}::int * interval '1 millisecond', attempts = attempts + 1,
      processing_attempts = processing_attempts + 1
    where id in (
      select id from documents
      where status in ('parsing', 'chunking', 'embedding') and (lease_until is null or lease_until < now())
      order by created_at limit ${limit} for update skip locked)
    returning *`
}

export async function heartbeatDocuments(sql: Sql, owner: string, ids: string[], leaseMs: number): Promise<string[]> {
  if (ids.length === 0) return []
  const rows = await sql<{ id: string }[]>`
    update documents set lease_until = now() + ${leaseMs}::int * interval '1 millisecond'
    where id in ${sql(ids)} and lease_owner = ${owner} and status in ('parsing', 'chunking', 'embedding')
    returning id`
  return rows.map((r) => r.id)
}

/** The document process answered for this claim: its parsing no longer counts towards poison_document. */
export async function finishDocumentProcessing(sql: Sql, id: string, owner: string): Promise<void> {
  await sql`update documents set processing_attempts = 0 where id = ${id} and lease_owner = ${owner}`
}

/** A worker stopping cleanly gives its documents back; a parsing run it cut short is not the document's fault. */
export async function releaseDocumentsOf(sql: Sql, owner: string): Promise<void> {
  await sql`
    update documents set lease_owner = null, lease_until = null, processing_attempts = greatest(processing_attempts - 1, 0)
    where lease_owner = ${owner} and status in ('parsing', 'chunking', 'embedding')`
}

/** Which document a transition applies to: as last read (status and generation), and for a worker its lease. */
export interface DocumentGuard {
  id: string
  status: DocumentStatus
  generation: number
  owner?: string
}

export interface DocumentWrite {
  status: DocumentStatus
  snapshot: Persisted<DocumentContext>
  generation: number
  error?: DocumentRow['error']
  /** Ready: this generation becomes the searched one, the others' chunks are deleted, in the same statement. */
  ready?: { chunks: number }
  /** Back to the queue (a reparse or a restart): attempts start again and a lease held on the old generation is let go. */
  requeue?: boolean
}

/**
 * A transition of a document in one statement: the row, and when given the outbox event (its
 * `data` gains `indexed_at` and `chunks_count` when the document became ready). A ready transition
 * swaps the generations atomically: the new chunks become the searched ones and the old are
 * deleted. Null when the guard no longer holds (deleted, taken over, moved on).
 */
export async function writeDocumentTransition(sql: Sql, guard: DocumentGuard, w: DocumentWrite, outbox?: { type: string; data: Record<string, unknown> }): Promise<DocumentRow | null> {
  const settled = w.status === 'ready' || w.status === 'failed'
  const update = sql`
    update documents set
      status = ${w.status},
      snapshot = ${sql.json(w.snapshot as never)},
      generation = ${w.generation},
      error = ${w.error === undefined ? sql`error` : sql.json(w.error as never)},
      live_generation = ${w.ready ? w.generation : sql`live_generation`},
      chunks_count = ${w.ready ? w.ready.chunks : sql`chunks_count`},
      indexed_at = ${w.ready ? sql`now()` : sql`indexed_at`},
      lease_owner = ${settled || w.requeue ? null : sql`lease_owner`},
      lease_until = ${settled || w.requeue ? null : sql`lease_until`},
      attempts = ${w.requeue ? 0 : sql`attempts`},
      processing_attempts = ${w.requeue ? 0 : sql`processing_attempts`},
      updated_at = now()
    where id = ${guard.id} and status = ${guard.status} and generation = ${guard.generation}
      ${guard.owner === undefined ? sql`` : sql`and lease_owner = ${guard.owner}`}
    returning *`
  const swap = w.ready ? sql`, s as (delete from chunks where document_id = (select id from u) and generation <> ${w.generation})` : sql``
  const readiness = sql`jsonb_build_object('chunks_count', u.chunks_count, 'indexed_at', to_char(u.indexed_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))`
  const event = outbox ? outboxCte(sql, outbox.type, outbox.data, w.ready ? readiness : undefined) : sql``
  const [row] = await sql<DocumentRow[]>`with u as (${update}) ${swap} ${event} select * from u`
  return row ?? null
}

// ---- chunks ----

/** Positions of a generation already written (a resumed ingestion embeds only the others). */
export async function writtenPositions(sql: Sql, documentId: string, generation: number): Promise<Set<number>> {
  const rows = await sql<{ position: number }[]>`select position from chunks where document_id = ${documentId} and generation = ${generation}`
  return new Set(rows.map((r) => r.position))
}

/**
 * Writes chunks of a document's generation, only while that document is still being built at that
 * generation by this worker (a delete or a take-over writes nothing); a position already written
 * is left as it is. Answers how many rows were inserted, or null when the guard failed.
 */
export async function insertChunks(
  sql: Sql,
  doc: { id: string; knowledge_base_id: string; generation: number; metadata: Record<string, unknown>; owner: string },
  dims: number,
  chunks: ChunkInsert[],
): Promise<number | null> {
  if (chunks.length === 0) return 0
  const rows = chunks.map((c) => ({
    id: newId('chk'),
    position: c.position,
    content: c.content,
    heading_path: `{${c.heading_path.map((h) => `"${h.replaceAll('\\', '\\\\').replaceAll('"', '\\"')}"`).join(',')}}`,
    tokens: c.tokens,
    embedding: `[${c.embedding.join(',')}]`,
  }))
  const [result] = await sql<{ guard: boolean; inserted: number }[]>`
    with g as (
      select id from documents
      where id = ${doc.id} and generation = ${doc.generation} and lease_owner = ${doc.owner} and status = 'embedding'
      for share
    ), i as (
      insert into chunks (id, knowledge_base_id, document_id, generation, position, content, heading_path, tokens, metadata, dims, embedding)
      select r.id, ${doc.knowledge_base_id}, g.id, ${doc.generation}, r.position, r.content, r.heading_path::text[], r.tokens,
             ${sql.json(doc.metadata as never)}, ${dims}, r.embedding::vector
      from g, jsonb_to_recordset(${sql.json(rows as never)}) as r(id text, position int, content text, heading_path text, tokens int, embedding text)
      on conflict (document_id, generation, position) do nothing
      returning 1
    )
    select exists (select 1 from g) as guard, (select count(*)::int from i) as inserted`
  return result!.guard ? result!.inserted : null
}

// ---- search ----

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
