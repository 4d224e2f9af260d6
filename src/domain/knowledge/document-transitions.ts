import { advanceMany, type Persisted } from '../../machines/runner'
import { documentDefinition, documentMachine, type DocumentContext, type DocumentEvent, type DocumentStatus } from '../../machines/document.machine'
import { commitTransition, type MachineIO } from '../machines'
import type { Sql } from '../../store/db'
import * as store from '../../store/knowledge'

/**
 * The document machine's transitions as the service and the ingestion worker write them: one guarded
 * statement each (src/domain/machines.ts), a requeue as a new generation. Documents (the service)
 * and bases (a re-embed requeues every document) both come here.
 */

type Snapshot = Persisted<DocumentContext>

/** The document machine applied to `events` in memory; null when its state refuses one of them. */
export function applyDocumentEvents(snapshot: Snapshot, events: DocumentEvent[]): Snapshot | null {
  return (advanceMany(documentMachine, snapshot, events)?.persisted as Snapshot | undefined) ?? null
}

/** The run of a document's ingestion ended under the worker (deleted, restarted, taken over). */
export class DocumentGone extends Error {
  override name = 'DocumentGone'
}

/** What a document's transition writes besides its snapshot: the worker's lease, readiness, a requeue. */
export interface DocumentExtra extends Partial<Pick<store.DocumentWrite, 'ready' | 'requeue' | 'error'>> {
  owner?: string
}

/**
 * The document machine's I/O (src/domain/machines.ts): one statement writes the row (its generation
 * from the snapshot, its error when it failed), swaps the searched generation when it becomes ready,
 * and writes the outbox event its new state announces (knowledge.document.ready | failed).
 */
export const documentIO: MachineIO<store.DocumentRow, DocumentContext, DocumentEvent, DocumentExtra> = {
  definition: documentDefinition,
  refused: (doc, events) => new DocumentGone(`document ${doc.id} does not accept ${events.map((e) => e.type).join(', ')} in ${doc.status}`),
  write(sql, doc, next, announce, { owner, ...write }) {
    const status = next.value as DocumentStatus
    const base = { knowledge_base_id: doc.knowledge_base_id, document_id: doc.id, name: doc.name }
    const outbox = announce ? { type: announce, data: status === 'failed' ? { ...base, error: next.context.error } : base } : undefined
    return store.writeDocumentTransition(
      sql,
      { id: doc.id, status: doc.status, generation: doc.generation, owner },
      { status, snapshot: next, generation: next.context.generation, ...(status === 'failed' ? { error: next.context.error } : {}), ...write },
      outbox,
    )
  },
}

/** One transition of a document as last read, written in one statement; null when it changed since. */
export function commitDocument(sql: Sql, doc: store.DocumentRow, events: DocumentEvent[], extra: DocumentExtra = {}): Promise<store.DocumentRow | null> {
  return commitTransition(sql, documentIO, doc, events, extra)
}

/**
 * A document back to `parsing` as its next generation: a settled one by reparse, one being ingested
 * by restart (its worker's next guarded write fails on the generation; the lease is let go so
 * another claim takes the new generation at once). Null when the machine refuses or the row changed.
 */
export async function requeueIn(tx: Sql, doc: store.DocumentRow, kb: store.KnowledgeBaseRow): Promise<store.DocumentRow | null> {
  const settled = doc.status === 'ready' || doc.status === 'failed'
  try {
    return await commitDocument(tx, doc, [{ type: settled ? 'reparse.requested' : 'restart.requested', chunking: kb.chunking }], { error: null, requeue: true })
  } catch (err) {
    if (err instanceof DocumentGone) return null
    throw err
  }
}

/** A re-embed (a new embedding model): every document of the base becomes a new generation. */
export async function requeueAllIn(tx: Sql, kb: store.KnowledgeBaseRow): Promise<void> {
  for (const doc of await store.documentsOf(tx, kb.id)) await requeueIn(tx, doc, kb)
}
