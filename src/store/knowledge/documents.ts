import type { ListQuery } from '../../lib/lists'
import { DOCUMENT_MACHINE_VERSION, type DocumentContext, type DocumentStatus } from '../../machines/document.machine'
import type { Persisted } from '../../machines/runner'
import type { Sql } from '../db'
import { jsonb } from '../db'
import type { LeaseTable } from '../leases'
import { listClauses } from '../lists'
import { writeRowTransition } from '../transitions'
import { insertKeyed, type WriteKey } from '../idempotent-writes'
import { traceJson, type TraceCarrier } from '../trace-context'

/** Documents: their rows, their leases and the document machine's transitions. */
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
  /** Ingestions begun: readings handed to a document process (countDocumentReading), originals that could not be read for now (countDocumentAttempt). */
  attempts: number
  /** Readings handed to a document process and not finished since (migration 00009; countDocumentReading). */
  processing_attempts: number
  generation: number
  live_generation: number | null
  chunks_count: number
  indexed_at: Date | null
  created_by: string
  created_at: Date
  updated_at: Date
  /** The upload request's trace (docs/observability.md): the ingestion's spans are its children. */
  trace_context: TraceCarrier | null
}

export async function insertDocument(
  sql: Sql,
  d: Pick<DocumentRow, 'id' | 'knowledge_base_id' | 'workspace_id' | 'name' | 'doc_type' | 'group' | 'size_bytes' | 'sha256' | 'metadata' | 'status' | 'snapshot' | 'machine_version' | 'created_by'>,
  key?: WriteKey,
): Promise<DocumentRow> {
  const [row] = await insertKeyed(sql, key, 'document', sql<DocumentRow[]>`
    insert into documents (id, knowledge_base_id, workspace_id, name, doc_type, "group", size_bytes, sha256, metadata, status, snapshot, machine_version, created_by, trace_context)
    values (${d.id}, ${d.knowledge_base_id}, ${d.workspace_id}, ${d.name}, ${d.doc_type}, ${d.group}, ${d.size_bytes}, ${d.sha256},
            ${jsonb(sql, d.metadata)}, ${d.status}, ${jsonb(sql, d.snapshot)}, ${d.machine_version}, ${d.created_by}, ${traceJson(sql)})
    returning *`)
  return row!
}

export async function findDocument(sql: Sql, id: string): Promise<DocumentRow | null> {
  const [row] = await sql<DocumentRow[]>`select * from documents where id = ${id}`
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
 * Documents a worker holds (src/store/leases.ts): those being ingested. A claim counts nothing by
 * itself: a worker claims more documents than its document processes read at once, and one killed
 * while a document waited its turn never began on it. What counts is what began, each written
 * before that work starts, so a process that dies in it has counted it (a document that kills its
 * workers fails after a few): both `attempts` and `processing_attempts` when its reading is handed
 * to the document process (countDocumentReading; `processing_attempts` back to 0 when the process
 * answers), `attempts` alone when storage cannot give its original now (countDocumentAttempt).
 */
export const documentLeases: LeaseTable = {
  table: 'documents',
  states: ['parsing', 'chunking', 'embedding'],
  version: DOCUMENT_MACHINE_VERSION,
}

/** An ingestion that began and stopped before its reading (storage could not give the original now): one attempt more. Its attempts now; null when this worker no longer holds it. */
export async function countDocumentAttempt(sql: Sql, id: string, owner: string): Promise<number | null> {
  const [row] = await sql<{ attempts: number }[]>`update documents set attempts = attempts + 1 where id = ${id} and lease_owner = ${owner} returning attempts`
  return row?.attempts ?? null
}

/** The document is about to be handed to its document process: one attempt and one reading begun more. Null when this worker no longer holds it. */
export async function countDocumentReading(sql: Sql, id: string, owner: string): Promise<number | null> {
  const [row] = await sql<{ processing_attempts: number }[]>`
    update documents set attempts = attempts + 1, processing_attempts = processing_attempts + 1
    where id = ${id} and lease_owner = ${owner} returning processing_attempts`
  return row?.processing_attempts ?? null
}

/** The document process answered for this claim: its reading no longer counts towards poison_document. */
export async function finishDocumentProcessing(sql: Sql, id: string, owner: string): Promise<void> {
  await sql`update documents set processing_attempts = 0 where id = ${id} and lease_owner = ${owner}`
}

/** Readings a worker stopping cleanly cut short, while it still holds them: not the documents' doing. */
export async function uncountDocumentReadings(sql: Sql, ids: string[], owner: string): Promise<void> {
  if (ids.length === 0) return
  await sql`update documents set processing_attempts = greatest(processing_attempts - 1, 0) where id in ${sql(ids)} and lease_owner = ${owner}`
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
  const set = sql`
      status = ${w.status},
      snapshot = ${jsonb(sql, w.snapshot)},
      generation = ${w.generation},
      error = ${w.error === undefined ? sql`error` : jsonb(sql, w.error)},
      live_generation = ${w.ready ? w.generation : sql`live_generation`},
      chunks_count = ${w.ready ? w.ready.chunks : sql`chunks_count`},
      indexed_at = ${w.ready ? sql`now()` : sql`indexed_at`},
      lease_owner = ${settled || w.requeue ? null : sql`lease_owner`},
      lease_until = ${settled || w.requeue ? null : sql`lease_until`},
      attempts = ${w.requeue ? 0 : sql`attempts`},
      processing_attempts = ${w.requeue ? 0 : sql`processing_attempts`}`
  const guarded = sql`id = ${guard.id} and status = ${guard.status} and generation = ${guard.generation}
      ${guard.owner === undefined ? sql`` : sql`and lease_owner = ${guard.owner}`}`
  // Both parts: the old generation may be indexed or not yet (docs/knowledge.md, "Indexing").
  const swap = w.ready
    ? sql`, s as (delete from chunks where document_id = (select id from u) and generation <> ${w.generation}),
          s2 as (delete from chunks_unindexed where document_id = (select id from u) and generation <> ${w.generation})`
    : sql``
  const readiness = sql`jsonb_build_object('chunks_count', u.chunks_count, 'indexed_at', to_char(u.indexed_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))`
  return writeRowTransition<DocumentRow>(sql, {
    table: 'documents',
    set,
    guard: guarded,
    version: DOCUMENT_MACHINE_VERSION,
    with: swap,
    outbox: outbox && [{ ...outbox, extra: w.ready ? readiness : undefined }],
  })
}
