import type { Deps } from '../../deps'
import { AppError } from '../../lib/errors'
import type { DocumentEvent } from '../../machines/document.machine'
import { FileNotFound, StorageUnavailable } from '../../store/files'
import * as store from '../../store/knowledge'
import type { ChunkSettings } from './chunk'
import { DIMENSIONS as LOCAL_DIMENSIONS } from '../models/local/embed'
import { commitDocument, DocumentGone, type DocumentExtra } from './document-transitions'
import { originalKey } from './documents'
import type { DocType } from './parse'
import type { DocumentSandbox } from './sandbox'
import { SandboxAborted, SandboxCrashed, SandboxFailure, type SandboxChunk, type VectorForm } from './sandbox-protocol'
import { activeSpan, markError, tracingOn, withSpan } from '../../lib/tracing'

/** How many chunks one embedding call carries (local-embed: ~20 ms of the event loop for 64). */
const EMBED_BATCH = 64
/**
 * How many chunks one insert carries. Chunks are written to the unindexed part (no vector index to
 * maintain: docs/knowledge.md, "Indexing"), ~0.1 ms a row on PGlite, so one statement per embedded
 * batch keeps the embedded database's one connection free for requests between statements.
 */
const INSERT_BATCH = EMBED_BATCH
/**
 * Ingestions of one document begun (its reading handed to a document process, or its original found
 * unreadable for now) before it fails: an upstream outage is retried, a document that kills its
 * worker is not forever. A claim lost before either (the service killed while the document waited
 * behind others) does not count.
 */
export const MAX_ATTEMPTS = 5
/**
 * Readings begun (the document handed to its document process) and never finished (the process
 * died, was killed, or its document process crashed) before the document fails as poison_document
 * and is never claimed again. A document process that hits its time or memory limit fails the
 * document at once (processing_timeout, processing_memory): this counts what no limit caught. 3: one
 * death is bad luck (a deploy, the OOM killer acting for another process), three in a row on the
 * same document are the document. A document that was claimed and waited for its turn when its
 * service died was never read: it is not counted.
 */
export const MAX_PROCESSING_ATTEMPTS = 3

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
 * never makes duplicate chunks. `reading` holds the ids of the documents whose reading has begun and
 * not ended (the worker uncounts those its clean stop cuts short).
 */
export async function ingestDocument(
  deps: Deps,
  owner: string,
  claimed: store.DocumentRow,
  kb: store.KnowledgeBaseRow,
  sandbox: DocumentSandbox,
  signal: AbortSignal,
  reading: Set<string> = new Set(),
): Promise<store.DocumentRow> {
  let doc = claimed
  const advance = async (events: DocumentEvent[], extra: DocumentExtra = {}) => {
    if (signal.aborted) throw new DocumentGone('stopped')
    const saved = await commitDocument(deps.db.sql, doc, events, { ...extra, owner })
    if (!saved) throw new DocumentGone(`document ${doc.id} was deleted, restarted or taken over`)
    doc = saved
  }

  try {
    if (doc.processing_attempts >= MAX_PROCESSING_ATTEMPTS) {
      throw new IngestFailure(
        'poison_document',
        `reading the document was started ${doc.processing_attempts} times and never finished (its process died or stopped answering each time): it is not tried again`,
      )
    }
    if (doc.attempts >= MAX_ATTEMPTS) throw new IngestFailure('ingestion_failed', `ingestion was interrupted ${doc.attempts} times (a worker died or the embedding model was unavailable)`)
    const settings = doc.snapshot.context.chunking ?? kb.chunking
    // Parsing and chunking (and, for local-embed, embedding) are one step of the document process (sandbox.ts): one span.
    const embed = embedsInDocumentProcess(deps, kb) ? (deps.db.kind === 'postgres' ? 'float4' : 'text') : false
    const chunks = await withSpan('document.parse', () => ({ document_id: doc.id, 'document.type': doc.doc_type }), async (span) => {
      const out = await parseAndChunk(deps, owner, doc, settings, sandbox, signal, embed, reading)
      span.setAttribute('document.chunks', out.length)
      return out
    })
    if (doc.status === 'parsing') await advance([{ type: 'parsed' }])
    if (chunks.length === 0) throw new IngestFailure('empty_document', 'the document has no text to index')
    if (doc.status === 'chunking') await advance([{ type: 'chunked', chunks: chunks.length }])
    // Claimed in `embedding`: a worker died there, some positions may be written already.
    await embedAndWrite(deps, owner, doc, kb, chunks, claimed.status === 'embedding', signal)
    await advance([{ type: 'indexed' }], { ready: { chunks: chunks.length } })
    deps.wake.nudge('indexer')
  } catch (err) {
    if (!(err instanceof IngestFailure)) throw err
    await advance([{ type: 'failed', code: err.code, message: err.message }])
    if (tracingOn) markError(activeSpan(), `${err.code}: ${err.message}`)
  }
  return doc
}

/**
 * Whether the base's model is the built-in local-embed: then the document process embeds the chunks
 * beside the chunker (sandbox-child.ts) and only the charge is left to do here. A model missing
 * from the catalogue is not: embedding fails where it always has, through the gateway.
 */
function embedsInDocumentProcess(deps: Deps, kb: store.KnowledgeBaseRow): boolean {
  try {
    return deps.models.isLocalEmbedding(deps.models.model(kb.embedding_model, 'embedding'))
  } catch {
    return false
  }
}

/**
 * The document's chunks, parsed and chunked in the document process (sandbox.ts), off this event
 * loop, within its time, memory and chunk limits. A limit hit or a bad file fails the document; the
 * process crashing leaves it to be claimed again. What counts, and when: a reading begun, and an
 * attempt, as the document is handed to the process (processing_attempts goes back to 0 once the
 * process has answered); an attempt when storage cannot give its original now. A claim that ends
 * before either (the service killed while the document waited behind others, or for its process to
 * start) counts nothing.
 */
async function parseAndChunk(
  deps: Deps,
  owner: string,
  doc: store.DocumentRow,
  settings: ChunkSettings,
  sandbox: DocumentSandbox,
  signal: AbortSignal,
  embed: VectorForm | false,
  reading: Set<string>,
): Promise<SandboxChunk[]> {
  const lost = () => new DocumentGone(`document ${doc.id} was deleted, restarted or taken over`)
  // A missing original fails the document; storage that cannot answer now (refused, timed out) is
  // tried again after the lease, and its last attempt fails it saying where; one that refuses (access
  // denied, no such bucket) fails it at once (docs/knowledge.md, "Statuses").
  const load = async () => {
    try {
      return await deps.files.read(originalKey(doc))
    } catch (err) {
      if (err instanceof FileNotFound) throw new IngestFailure('original_missing', `the uploaded original is no longer in storage (${deps.files.describe})`)
      const message = `the uploaded original could not be read: ${err instanceof StorageUnavailable ? err.message : `${(err as Error).message} (${deps.files.describe})`}`
      if (err instanceof StorageUnavailable && err.transient) {
        const attempts = await store.countDocumentAttempt(deps.db.sql, doc.id, owner)
        if (attempts === null) throw lost()
        if (attempts < MAX_ATTEMPTS) throw new RetryLater(message)
      }
      throw new IngestFailure('storage_unavailable', message)
    }
  }
  const begin = async () => {
    if ((await store.countDocumentReading(deps.db.sql, doc.id, owner)) === null) throw lost()
    reading.add(doc.id)
  }
  let chunks: SandboxChunk[]
  try {
    chunks = await sandbox.process(doc.doc_type as DocType, load, settings, signal, embed, doc.workspace_id, begin)
  } catch (err) {
    if (err instanceof SandboxFailure) throw new IngestFailure(err.code, err.message)
    if (err instanceof SandboxAborted) throw new DocumentGone(err.message)
    if (err instanceof SandboxCrashed) throw new RetryLater(err.message)
    throw err
  } finally {
    reading.delete(doc.id)
  }
  await store.finishDocumentProcessing(deps.db.sql, doc.id, owner)
  return chunks
}

/**
 * Embedding calls of one document started and not yet written: 5, so that 4 (a provider's default
 * max_concurrency) are being embedded while one is written and one document alone keeps a remote
 * provider's limit busy. The limit, not this, bounds the requests: the calls of every document
 * queue at the provider.
 */
const EMBED_AHEAD = 5

/**
 * Embeds the chunks not written yet (a resumed ingestion skips the rest) and writes them in position
 * order, a batch at a time, while the next batches are being embedded: up to EMBED_AHEAD calls run
 * ahead of the write in progress, so a provider answering a batch in 150 ms is not idle while
 * Postgres writes the previous one, and a lone document keeps the provider's limit busy
 * (docs/knowledge.md, "Embedding"). Only written batches count: a failure or a crash leaves the
 * positions before it written and the others missing, never duplicated.
 */
async function embedAndWrite(deps: Deps, owner: string, doc: store.DocumentRow, kb: store.KnowledgeBaseRow, chunks: SandboxChunk[], resumed: boolean, signal: AbortSignal) {
  // Chunks of a generation are only written in `embedding`, by its lease holder: entered just now,
  // there are none yet.
  const written = resumed ? await store.writtenPositions(deps.db.sql, doc.id, doc.generation) : new Set<number>()
  const missing = chunks.filter((c) => !written.has(c.position))
  const model = deps.models.model(kb.embedding_model, 'embedding')
  const batches: SandboxChunk[][] = []
  for (let i = 0; i < missing.length; i += EMBED_BATCH) batches.push(missing.slice(i, i + EMBED_BATCH))
  // Aborts the calls still running once the document stops here (a failure, its worker stopping).
  const stop = new AbortController()
  const calls = AbortSignal.any([signal, stop.signal])
  const ctx = { workspaceId: doc.workspace_id, requestId: doc.id, background: true }
  // Vectors the document process computed (local-embed): only their charge is left, for the chunks' own token counts.
  const computed = (batch: SandboxChunk[]) => batch.every((c) => c.vector !== undefined)
  const embed = async (batch: SandboxChunk[]): Promise<(ArrayLike<number> | string)[]> => {
    let vectors: (ArrayLike<number> | string)[]
    try {
      vectors = await withSpan('document.embed', () => ({ document_id: doc.id, 'document.chunks': batch.length, 'gen_ai.request.model': model.id }), async () => {
        if (!computed(batch)) return (await deps.models.embed(ctx, model, batch.map((c) => c.content), calls)).vectors
        calls.throwIfAborted()
        await deps.models.embeddedLocally(ctx, model, batch.length, batch.reduce((n, c) => n + c.tokens, 0))
        if (kb.dimensions !== LOCAL_DIMENSIONS) throw new IngestFailure('embedding_failed', `${model.id} answered ${LOCAL_DIMENSIONS} dimensions; the knowledge base holds ${kb.dimensions}`)
        return batch.map((c) => c.vector!)
      })
    } catch (err) {
      if (err instanceof IngestFailure) throw err
      if (calls.aborted) throw new DocumentGone('stopped')
      const code = err instanceof AppError ? err.code : 'internal_error'
      if (code === 'upstream_error' || code === 'upstream_timeout' || code === 'unavailable') throw new RetryLater(`embedding with ${model.id}: ${(err as Error).message}`)
      throw new IngestFailure(code === 'budget_exceeded' ? code : 'embedding_failed', `embedding with ${model.id} failed: ${(err as Error).message}`)
    }
    const wrong = vectors.find((v): v is ArrayLike<number> => typeof v !== 'string' && v.length !== kb.dimensions)
    if (wrong) throw new IngestFailure('embedding_failed', `${model.id} answered ${wrong.length} dimensions; the knowledge base holds ${kb.dimensions}`)
    return vectors
  }
  // The calls started and not yet written, in position order; a written batch's vectors are let go.
  const ahead: Promise<(ArrayLike<number> | string)[]>[] = []
  let next = 0
  let broken = false
  const fill = () => {
    while (!broken && next < batches.length && ahead.length < EMBED_AHEAD) {
      const call = embed(batches[next++]!)
      // Seen when its turn to be written comes; until then a failure only stops new calls.
      call.catch(() => (broken = true))
      ahead.push(call)
    }
  }
  try {
    fill()
    for (const batch of batches) {
      const vectors = await ahead.shift()!
      await withSpan('document.write', () => ({ document_id: doc.id, 'document.chunks': batch.length }), () => writeChunks(deps, owner, doc, kb, batch, vectors))
      // Only after the write: one refused (the document deleted, its lease lost) sends nothing more.
      fill()
    }
  } finally {
    if (ahead.length > 0) {
      stop.abort()
      await Promise.allSettled(ahead)
    }
  }
}

/**
 * One embedded batch's chunks, written INSERT_BATCH rows a statement: server mode through COPY
 * (store.copyChunks: vectors as float4 values), the embedded database through the insert statement.
 */
async function writeChunks(deps: Deps, owner: string, doc: store.DocumentRow, kb: store.KnowledgeBaseRow, batch: SandboxChunk[], vectors: (ArrayLike<number> | string)[]) {
  const rows = INSERT_BATCH
  for (let k = 0; k < batch.length; k += rows) {
    const inserted = await (deps.db.kind === 'postgres' ? store.copyChunks : store.insertChunks)(
      deps.db.sql,
      { id: doc.id, knowledge_base_id: doc.knowledge_base_id, generation: doc.generation, metadata: doc.metadata, owner },
      kb.dimensions,
      batch.slice(k, k + rows).map((c, n) => ({ position: c.position, content: c.content, heading_path: c.heading_path, tokens: c.tokens, embedding: vectors[k + n]! })),
    )
    if (inserted === null) throw new DocumentGone(`document ${doc.id} was deleted, restarted or taken over`)
    // A turn of the event loop between statements: requests waiting on it go first.
    await new Promise((resolve) => setImmediate(resolve))
  }
}
