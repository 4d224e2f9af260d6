import type { Deps } from '../deps'
import { DocumentGone, ingestDocument, RetryLater } from '../domain/knowledge/ingest'
import { DocumentSandbox, type SandboxLimits } from '../domain/knowledge/sandbox'
import { newId } from '../lib/ids'
import * as store from '../store/knowledge'
import { PollingLoop } from './loop'

/** A worker holds a document this long without a heartbeat; heartbeats come every third of it. */
export const DOCUMENT_LEASE_MS = 15_000
/**
 * Documents ingested at once by one worker: embedding shares its one JS thread, in batches that
 * yield; parsing and chunking take turns in its one document process (sandbox.ts).
 */
const MAX_DOCUMENTS = 16
const IDLE_POLL_MS = 100

/**
 * Ingests documents: claims them from Postgres with leases (`for update skip locked`), heartbeats
 * them, and takes each through the document machine (src/domain/knowledge/ingest.ts). A worker
 * that dies leaves its documents to whoever claims them once the lease has expired; that worker
 * resumes from the snapshot.
 */
export class DocumentWorker extends PollingLoop {
  readonly owner = `${process.pid}:${newId('req').slice(4, 14)}`
  private readonly active = new Map<string, AbortController>()
  private heartbeat: ReturnType<typeof setInterval> | null = null
  readonly sandbox: DocumentSandbox

  private readonly leaseMs: number

  /** `options` for tests: a shorter lease, other limits for the document process. */
  constructor(
    private readonly deps: Deps,
    options: { leaseMs?: number; limits?: SandboxLimits } = {},
  ) {
    super('document worker: claiming documents', IDLE_POLL_MS, deps.log)
    this.leaseMs = options.leaseMs ?? DOCUMENT_LEASE_MS
    this.sandbox = new DocumentSandbox(options.limits)
  }

  override start() {
    super.start()
    this.heartbeat = setInterval(() => void this.beat(), this.leaseMs / 3)
  }

  override async stop() {
    await super.stop()
    if (this.heartbeat) clearInterval(this.heartbeat)
    for (const ac of this.active.values()) ac.abort()
    await this.sandbox.close()
    await store.releaseDocumentsOf(this.deps.db.sql, this.owner).catch((err) => this.deps.log.error({ err }, 'document worker: releasing leases failed'))
  }

  protected async step(): Promise<boolean> {
    const room = MAX_DOCUMENTS - this.active.size
    if (room <= 0) return false
    const claimed = await store.claimDocuments(this.deps.db.sql, this.owner, this.leaseMs, room)
    const bases = new Map<string, Promise<store.KnowledgeBaseRow | null>>()
    for (const doc of claimed) {
      const ac = new AbortController()
      this.active.set(doc.id, ac)
      if (!bases.has(doc.knowledge_base_id)) bases.set(doc.knowledge_base_id, store.findKnowledgeBase(this.deps.db.sql, doc.knowledge_base_id))
      void bases
        .get(doc.knowledge_base_id)!
        .then((kb) => (kb ? ingestDocument(this.deps, this.owner, doc, kb, this.sandbox, ac.signal) : null))
        .catch((err) => {
          if (err instanceof DocumentGone) return
          if (err instanceof RetryLater) this.deps.log.warn({ document_id: doc.id, reason: err.message }, 'document worker: will retry the document after its lease')
          else this.deps.log.error({ err, document_id: doc.id }, 'document worker: ingesting a document failed; it is retried after its lease')
        })
        .finally(() => this.active.delete(doc.id))
    }
    return claimed.length === room
  }

  private async beat() {
    const ids = [...this.active.keys()]
    const held = new Set(await store.heartbeatDocuments(this.deps.db.sql, this.owner, ids, this.leaseMs).catch(() => ids))
    for (const id of ids) if (!held.has(id)) this.active.get(id)?.abort()
  }
}
