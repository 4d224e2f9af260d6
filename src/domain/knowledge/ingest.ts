import type { Deps } from '../../deps'
import { AppError } from '../../lib/errors'
import type { DocumentEvent, DocumentStatus } from '../../machines/document.machine'
import * as store from '../../store/knowledge'
import { chunkDocument, type Chunk } from './chunk'
import { applyDocumentEvents, originalKey } from './documents'
import { ParseError, parseDocument, type DocType, type ParsedDocument } from './parse'

/** How many chunks one embedding call and one insert carry. */
const EMBED_BATCH = 64
/** Claims of one document before it fails: an upstream outage is retried, a document that kills its worker is not forever. */
export const MAX_ATTEMPTS = 5

/** The run of a document's ingestion ended under the worker (deleted, restarted, taken over). */
export class DocumentGone extends Error {
  override name = 'DocumentGone'
}

/** A passing failure (the model provider is down): the document waits for its lease to run out and is claimed again. */
export class RetryLater extends Error {
  override name = 'RetryLater'
}

/** A step failed for a reason the document records (`failed` with this code), not a bug. */
class IngestFailure extends Error {
  constructor(readonly code: string, message: string) {
    super(message)
  }
}

/**
 * Takes a claimed document from where its snapshot stands to `ready` or `failed`, persisting every
 * transition with a guarded statement (the row as last written, this worker's lease). A resumed
 * document repeats the work of its current state: parsing and chunking are deterministic (the chunk
 * settings are in the snapshot), and embedding writes only the positions not written yet, so a crash
 * never makes duplicate chunks.
 */
export async function ingestDocument(deps: Deps, owner: string, claimed: store.DocumentRow, kb: store.KnowledgeBaseRow, signal: AbortSignal): Promise<store.DocumentRow> {
  let doc = claimed
  const advance = async (events: DocumentEvent[], write: Partial<store.DocumentWrite> = {}) => {
    if (signal.aborted) throw new DocumentGone('stopped')
    const next = applyDocumentEvents(doc.snapshot, events)
    if (!next) throw new DocumentGone(`document ${doc.id} does not accept ${events.map((e) => e.type).join(', ')} in ${doc.status}`)
    const status = next.value as DocumentStatus
    const outbox =
      status === 'ready'
        ? { type: 'knowledge.document.ready', data: { knowledge_base_id: doc.knowledge_base_id, document_id: doc.id, name: doc.name } }
        : status === 'failed'
          ? { type: 'knowledge.document.failed', data: { knowledge_base_id: doc.knowledge_base_id, document_id: doc.id, name: doc.name, error: next.context.error } }
          : undefined
    const saved = await store.writeDocumentTransition(
      deps.db.sql,
      { id: doc.id, status: doc.status, generation: doc.generation, owner },
      { status, snapshot: next, generation: doc.generation, ...(status === 'failed' ? { error: next.context.error } : {}), ...write },
      outbox,
    )
    if (!saved) throw new DocumentGone(`document ${doc.id} was deleted, restarted or taken over`)
    doc = saved
  }

  try {
    if (doc.attempts > MAX_ATTEMPTS) throw new IngestFailure('ingestion_failed', `ingestion was interrupted ${doc.attempts - 1} times (a worker died or the embedding model was unavailable)`)
    const settings = doc.snapshot.context.chunking ?? kb.chunking
    const parsed = await parse(deps, doc)
    if (doc.status === 'parsing') await advance([{ type: 'parsed' }])
    const chunks = chunkDocument(parsed, settings)
    if (chunks.length === 0) throw new IngestFailure('empty_document', 'the document has no text to index')
    if (doc.status === 'chunking') await advance([{ type: 'chunked', chunks: chunks.length }])
    // Claimed in `embedding`: a worker died there, some positions may be written already.
    await embedAndWrite(deps, owner, doc, kb, chunks, claimed.status === 'embedding', signal)
    await advance([{ type: 'indexed' }], { ready: { chunks: chunks.length } })
  } catch (err) {
    if (!(err instanceof IngestFailure)) throw err
    await advance([{ type: 'failed', code: err.code, message: err.message }])
  }
  return doc
}

async function parse(deps: Deps, doc: store.DocumentRow): Promise<ParsedDocument> {
  let bytes: Uint8Array
  try {
    bytes = await deps.files.read(originalKey(doc))
  } catch {
    throw new IngestFailure('original_missing', 'the uploaded original is no longer in storage')
  }
  try {
    return await parseDocument(doc.doc_type as DocType, bytes)
  } catch (err) {
    if (err instanceof ParseError) throw new IngestFailure(err.code, err.message)
    throw new IngestFailure('parse_error', `the ${doc.doc_type} file could not be read`)
  }
}

/** Embeds the chunks not written yet (a resumed ingestion skips the rest) and writes them, a batch at a time. */
async function embedAndWrite(deps: Deps, owner: string, doc: store.DocumentRow, kb: store.KnowledgeBaseRow, chunks: Chunk[], resumed: boolean, signal: AbortSignal) {
  // Chunks of a generation are only written in `embedding`, by its lease holder: entered just now,
  // there are none yet.
  const written = resumed ? await store.writtenPositions(deps.db.sql, doc.id, doc.generation) : new Set<number>()
  const missing = chunks.filter((c) => !written.has(c.position))
  const model = deps.models.model(kb.embedding_model, 'embedding')
  for (let i = 0; i < missing.length; i += EMBED_BATCH) {
    const batch = missing.slice(i, i + EMBED_BATCH)
    let vectors: number[][]
    try {
      ;({ vectors } = await deps.models.embed({ workspaceId: doc.workspace_id, requestId: doc.id }, model, batch.map((c) => c.content), signal))
    } catch (err) {
      if (signal.aborted) throw new DocumentGone('stopped')
      const code = err instanceof AppError ? err.code : 'internal_error'
      if (code === 'upstream_error' || code === 'upstream_timeout' || code === 'unavailable') throw new RetryLater(`embedding with ${model.id}: ${(err as Error).message}`)
      throw new IngestFailure(code === 'budget_exceeded' ? code : 'embedding_failed', `embedding with ${model.id} failed: ${(err as Error).message}`)
    }
    const wrong = vectors.find((v) => v.length !== kb.dimensions)
    if (wrong) throw new IngestFailure('embedding_failed', `${model.id} answered ${wrong.length} dimensions; the knowledge base holds ${kb.dimensions}`)
    const inserted = await store.insertChunks(
      deps.db.sql,
      { id: doc.id, knowledge_base_id: doc.knowledge_base_id, generation: doc.generation, metadata: doc.metadata, owner },
      kb.dimensions,
      batch.map((c, k) => ({ ...c, embedding: vectors[k]! })),
    )
    if (inserted === null) throw new DocumentGone(`document ${doc.id} was deleted, restarted or taken over`)
  }
}
