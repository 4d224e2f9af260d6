/**
 * What bench/knowledge-scale.ts asks of the knowledge store directly, in one place, so that a change
 * of the store's layout is one edit here and none in the bench's phases. The store: new chunks in
 * the unindexed part (`chunks_unindexed`, searched exactly), moved into `chunks` (HNSW) by the
 * chunk indexer (src/store/knowledge/vector-index.ts).
 */
import { newId } from '../src/lib/ids'
import { DOCUMENT_MACHINE_VERSION, documentMachine, type DocumentContext } from '../src/machines/document.machine'
import { start, type Persisted } from '../src/machines/runner'
import type { Pool, Sql } from '../src/store/db'
import * as store from '../src/store/knowledge'
import { searchChunks, type SearchPools } from '../src/store/knowledge/search'
import * as vectorIndex from '../src/store/knowledge/vector-index'
import { DIMS } from './corpus'

/** Whether new chunks wait for a background indexer (pendingChunks tells how many). */
export const STORE_HAS_BACKLOG = true

export const STORE = 'unindexed part + chunk indexer'

export const HNSW_M = vectorIndex.HNSW_M
export const HNSW_EF_CONSTRUCTION = vectorIndex.HNSW_EF_CONSTRUCTION

/** Chunks of the base not yet in the vector index; null when the store has no such backlog. */
export function pendingChunks(sql: Sql, kbId: string): Promise<number | null> {
  return vectorIndex.pendingChunks(sql, kbId)
}

/** Every chunk's id and vector of a base ($1), in either part (a statement PGlite's own API runs too). */
export const CHUNK_VECTORS_SQL = `select id, embedding from chunks where knowledge_base_id = $1 union all select id, embedding from chunks_unindexed where knowledge_base_id = $1`

/** Every chunk's id and vector (pgvector text) of a base. */
export function chunkVectors(sql: Sql, kbId: string): Promise<{ id: string; embedding: string }[]> {
  return sql.unsafe<{ id: string; embedding: string }[]>(`select id, embedding::text as embedding from (${CHUNK_VECTORS_SQL}) v`, [kbId])
}

export async function dropVectorIndex(sql: Sql): Promise<void> {
  await sql.unsafe(`drop index if exists chunks_hnsw_${DIMS}_idx`)
}

/** Drops and builds the 384-dimension vector index with the service's parameters (room to build it in memory). */
export function rebuildVectorIndex(sql: Pool): Promise<void> {
  return vectorIndex.rebuildVectorIndex(sql, DIMS, '1GB')
}

/** A base's documents and chunks gone (the vector index keeps dead entries until it is rebuilt). */
export async function deleteBase(sql: Sql, kbId: string): Promise<void> {
  await sql`delete from documents where knowledge_base_id = ${kbId}`
}

/** A ready document with its chunks written directly into the indexed part (untimed loads). */
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
  await sql`update documents set generation = 1, live_generation = 1, chunks_count = ${rows.length}, indexed_at = now() where id = ${doc.id}`
}

/** A hybrid search as the service runs it for top_k: both lists 2 × top_k deep (at least 20), fused (in the statement, as the service asks). */
export async function hybridSearch(db: SearchPools, q: { kbId: string; vector: string; text: string; filters: Record<string, unknown>; topK: number }) {
  const lists = await searchChunks(db, { kbId: q.kbId, dims: DIMS, vector: q.vector, text: q.text, filters: q.filters, limit: Math.max(q.topK * 2, 20), mode: 'hybrid', fuse: q.topK })
  return lists.fused.map(({ score, ...hit }) => ({ hit, score }))
}

/** The ids of the store's vector search (the service's statement: the graph walk, or exact below its threshold). */
export async function vectorTop(db: SearchPools, kbId: string, vector: string, filters: Record<string, unknown>, k: number): Promise<string[]> {
  const lists = await searchChunks(db, { kbId, dims: DIMS, vector, text: null, filters, limit: k, mode: 'vector' })
  return lists.vector.map((h) => h.chunk_id)
}

/**
 * The exact top k over both parts: every chunk of the base by distance, index scans off, as a
 * statement of its own never prepared (a prepared statement's cached generic plan once kept the
 * HNSW index for the "exact" answers: bench/README.md).
 */
export async function exactTop(sql: Pool, kbId: string, vector: string, filters: Record<string, unknown>, k: number): Promise<string[]> {
  const rows = await sql.begin(async (tx) => {
    await tx.unsafe(`set local enable_indexscan = off`)
    await tx.unsafe(`set local enable_bitmapscan = ${Object.keys(filters).length > 0 ? 'on' : 'off'}`)
    return tx.unsafe<{ id: string }[]>(
      `select id from (
         select c.id, c.embedding from chunks c where c.knowledge_base_id = $1 and c.dims = ${DIMS} and c.metadata @> $3::text::jsonb
         union all
         select u.id, u.embedding from chunks_unindexed u join documents d on d.id = u.document_id and d.live_generation = u.generation
         where u.knowledge_base_id = $1 and u.dims = ${DIMS} and u.metadata @> $3::text::jsonb
       ) x
       order by x.embedding::vector(${DIMS}) <=> $2::vector(${DIMS}) limit ${k}`,
      [kbId, vector, JSON.stringify(filters)],
      { prepare: false } as never,
    )
  })
  return rows.map((r) => r.id)
}
