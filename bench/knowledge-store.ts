/**
 * What bench/knowledge-scale.ts asks of the knowledge store directly, in one place: the store's
 * layout (one HNSW-indexed chunks table today) is what changes between versions, and the bench's
 * phases should not.
 */
import { fuse } from '../src/domain/knowledge/search'
import { newId } from '../src/lib/ids'
import { DOCUMENT_MACHINE_VERSION, documentMachine, type DocumentContext } from '../src/machines/document.machine'
import { start, type Persisted } from '../src/machines/runner'
import type { Pool, Sql } from '../src/store/db'
import * as store from '../src/store/knowledge'
import { DIMS } from './corpus'

/** Whether new chunks wait for a background indexer (pendingChunks tells how many). */
export const STORE_HAS_BACKLOG = false

export const STORE = 'chunks written into the HNSW-indexed table inline'

/** pgvector's defaults, which the migration's index uses (it names neither). */
export const HNSW_M = 16
export const HNSW_EF_CONSTRUCTION = 64

/** Chunks of the base not yet in the vector index; null when the store has no such backlog. */
export async function pendingChunks(_sql: Sql, _kbId: string): Promise<number | null> {
  return null
}

/** Every chunk's id and vector of a base ($1), wherever the store keeps it (a statement PGlite's own API runs too). */
export const CHUNK_VECTORS_SQL = `select id, embedding from chunks where knowledge_base_id = $1`

/** Every chunk's id and vector (pgvector text) of a base. */
export function chunkVectors(sql: Sql, kbId: string): Promise<{ id: string; embedding: string }[]> {
  return sql.unsafe<{ id: string; embedding: string }[]>(`select id, embedding::text as embedding from (${CHUNK_VECTORS_SQL}) v`, [kbId])
}

const INDEX = 'chunks_hnsw_384_idx'

export async function dropVectorIndex(sql: Sql): Promise<void> {
  await sql.unsafe(`drop index if exists ${INDEX}`)
}

/** Drops and builds the 384-dimension vector index (the migration's definition), with room to build in memory. */
export async function rebuildVectorIndex(sql: Pool): Promise<void> {
  await dropVectorIndex(sql)
  await sql.begin(async (tx) => {
    await tx.unsafe(`set local maintenance_work_mem = '1GB'`)
    await tx.unsafe(`create index ${INDEX} on chunks using hnsw ((embedding::vector(${DIMS})) vector_cosine_ops) where dims = ${DIMS}`)
  })
}

/** A base's documents and chunks gone (the vector index keeps dead entries until it is rebuilt). */
export async function deleteBase(sql: Sql, kbId: string): Promise<void> {
  await sql`delete from documents where knowledge_base_id = ${kbId}`
}

/** A ready document with its chunks, written directly (untimed loads). */
export async function loadDocument(sql: Sql, kb: { id: string; workspace_id: string }, name: string, metadata: Record<string, unknown>, contents: string[], vectors: string[]) {
  const doc = await store.insertDocument(sql, {
    id: newId('doc'), knowledge_base_id: kb.id, workspace_id: kb.workspace_id, name, doc_type: 'md', group: null, size_bytes: 0,
    sha256: 'x', metadata, status: 'ready', snapshot: start(documentMachine, undefined as never).persisted as Persisted<DocumentContext>,
    machine_version: DOCUMENT_MACHINE_VERSION, created_by: 'bench',
  })
  const rows = contents.map((content, k) => ({
    id: newId('chk'), knowledge_base_id: kb.id, document_id: doc.id, generation: 1, position: k, content, tokens: 60,
    metadata: sql.json(metadata as never), dims: DIMS, embedding: vectors[k]!,
  }))
  await sql`insert into chunks ${sql(rows, 'id', 'knowledge_base_id', 'document_id', 'generation', 'position', 'content', 'tokens', 'metadata', 'dims', 'embedding')}`
  await sql`update documents set live_generation = 1, chunks_count = ${rows.length}, indexed_at = now() where id = ${doc.id}`
}

/** The vector side as src/domain/knowledge/search.ts's `nearest` runs it (exact when a filter leaves too few). */
async function nearest(tx: Sql, scope: store.SearchScope): Promise<store.ChunkHit[]> {
  const filtered = Object.keys(scope.filters).length > 0
  await store.preferIndexOrder(tx, filtered)
  const hits = await store.vectorSearch(tx, scope)
  if (hits.length >= scope.limit || !filtered) return hits
  return store.exactVectorSearch(tx, scope)
}

/** A hybrid search as the service runs it for top_k: both lists 2 × top_k deep, fused. */
export async function hybridSearch(sql: Pool, q: { kbId: string; vector: string; text: string; filters: Record<string, unknown>; topK: number }) {
  const deeper = { kbId: q.kbId, dims: DIMS, vector: q.vector, filters: q.filters, limit: Math.max(q.topK * 2, 20) }
  const lists = await store.searchTransaction(sql, q.topK, async (tx) => {
    const byText = await store.fulltextSearch(tx, { ...deeper, text: q.text })
    return [await nearest(tx, deeper), byText]
  })
  return fuse(lists).slice(0, q.topK)
}

/** The ids of the store's vector search (the service's statement, through the index). */
export async function vectorTop(sql: Pool, kbId: string, vector: string, filters: Record<string, unknown>, k: number): Promise<string[]> {
  const scope = { kbId, dims: DIMS, vector, filters, limit: k }
  const hits = await store.searchTransaction(sql, k, (tx) => nearest(tx, scope))
  return hits.map((h) => h.chunk_id)
}

/**
 * The exact top k: a scan of every chunk of the base by distance, index scans off, as a statement
 * of its own never prepared (a prepared statement's cached generic plan once kept the HNSW index
 * for the "exact" answers: bench/README.md).
 */
export async function exactTop(sql: Pool, kbId: string, vector: string, filters: Record<string, unknown>, k: number): Promise<string[]> {
  const rows = await sql.begin(async (tx) => {
    await tx.unsafe(`set local enable_indexscan = off`)
    await tx.unsafe(`set local enable_bitmapscan = ${Object.keys(filters).length > 0 ? 'on' : 'off'}`)
    return tx.unsafe<{ id: string }[]>(
      `select c.id from chunks c join documents d on d.id = c.document_id
       where c.knowledge_base_id = $1 and c.dims = ${DIMS} and c.generation = d.live_generation and c.metadata @> $3::text::jsonb
       order by c.embedding::vector(${DIMS}) <=> $2::vector(${DIMS}) limit ${k}`,
      [kbId, vector, JSON.stringify(filters)],
      { prepare: false } as never,
    )
  })
  return rows.map((r) => r.id)
}
