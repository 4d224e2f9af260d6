import type { Deps } from '../deps'
import { DocumentGone } from '../domain/knowledge/document-transitions'
import { ingestDocument, RetryLater } from '../domain/knowledge/ingest'
import { DocumentSandbox } from '../domain/knowledge/sandbox'
import type { SandboxLimits } from '../domain/knowledge/sandbox-protocol'
import { documentDefinition } from '../machines/document.machine'
import * as store from '../store/knowledge'
import { LeaseWorker } from './lease-worker'
import { contextFrom, tracingOn, withSpan } from '../lib/tracing'

/** A worker holds a document this long without a heartbeat; heartbeats come every third of it. */
export const DOCUMENT_LEASE_MS = 15_000
/**
 * Documents ingested at once by one worker: writes share its one JS thread; parsing, chunking and
 * (local-embed) embedding take turns in its document processes (sandbox.ts, DOCUMENT_PROCESSES).
 */
const MAX_DOCUMENTS = 16

/**
 * Ingests documents: claims them from Postgres with leases (`for update skip locked`), heartbeats
 * them, and takes each through the document machine (src/domain/knowledge/ingest.ts). A worker
 * that dies leaves its documents to whoever claims them once the lease has expired; that worker
 * resumes from the snapshot.
 */
export class DocumentWorker extends LeaseWorker<store.DocumentRow> {
  readonly sandbox: DocumentSandbox
  /** Documents whose reading has begun here and not ended (ingestDocument keeps it). */
  private readonly reading = new Set<string>()

  /** `options` for tests: a shorter lease, other limits for the document processes, another number of them. */
  constructor(
    private readonly deps: Deps,
    options: { leaseMs?: number; limits?: SandboxLimits; processes?: number } = {},
  ) {
    super(
      deps.db.sql,
      { what: 'document worker', table: store.documentLeases, definition: documentDefinition, leaseMs: options.leaseMs ?? DOCUMENT_LEASE_MS, max: MAX_DOCUMENTS, perWorkspace: deps.config.perWorkspace.documents, idleMs: deps.config.workerPollMs },
      deps.log,
    )
    const processes = options.processes ?? deps.config.documentProcesses
    this.sandbox = new DocumentSandbox(options.limits, processes, Math.min(processes, deps.config.perWorkspace.documentProcesses))
  }

  /**
   * The readings this stop cuts short are not the documents' doing: they are uncounted before the
   * documents are given back. Taken before any await: the work was aborted just now, synchronously,
   * and no reading has had a turn of the loop to end since.
   */
  protected override async stopping() {
    const cut = [...this.reading]
    await this.sandbox.close()
    await store.uncountDocumentReadings(this.deps.db.sql, cut, this.owner).catch((err) => this.log.error({ err }, 'document worker: uncounting the readings cut short failed'))
  }

  /** With tracing on, a claim's ingestion is a span of the upload request's trace (`trace_context`), its stages its children. */
  protected async work(doc: store.DocumentRow, ac: AbortController) {
    if (!tracingOn) return this.ingest(doc, ac)
    return withSpan('document.ingest', () => ({
      document_id: doc.id,
      knowledge_base_id: doc.knowledge_base_id,
      workspace_id: doc.workspace_id,
      'document.type': doc.doc_type,
      'document.size_bytes': doc.size_bytes,
      'document.attempt': doc.attempts + 1,
    }), async (span) => {
      const done = await this.ingest(doc, ac)
      if (done) span.setAttribute('document.status', done.status)
      return done
    }, { parent: contextFrom(doc.trace_context) })
  }

  private async ingest(doc: store.DocumentRow, ac: AbortController) {
    const kb = await store.findKnowledgeBase(this.deps.db.sql, doc.knowledge_base_id)
    return kb ? ingestDocument(this.deps, this.owner, doc, kb, this.sandbox, ac.signal, this.reading) : null
  }

  protected failed(doc: store.DocumentRow, err: unknown) {
    if (err instanceof DocumentGone) return
    if (err instanceof RetryLater) this.log.warn({ document_id: doc.id, reason: err.message }, 'document worker: will retry the document after its lease')
    else this.log.error({ err, document_id: doc.id }, 'document worker: ingesting a document failed; it is retried after its lease')
  }
}
