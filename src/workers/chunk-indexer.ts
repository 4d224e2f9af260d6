import { Counter } from 'prom-client'
import type { Deps } from '../deps'
import { moveChunks } from '../store/knowledge'
import { PollingLoop } from './loop'

/** How often an idle indexer looks for chunks to move (a ready document nudges it sooner). */
const IDLE_POLL_MS = 1000
/**
 * Chunks moved per statement. Each costs an HNSW insert (~1-2 ms on PostgreSQL at 100 000 chunks,
 * ~2-10 ms on PGlite, measured in bench/README.md). The embedded database runs every statement on
 * the service's one connection, so a move there is a few rows at a time: requests and lease
 * heartbeats are served between statements. PostgreSQL runs elsewhere: larger moves, fewer round
 * trips, each still a short transaction.
 */
const batchFor = (deps: Deps) => (deps.db.kind === 'pglite' ? 8 : 128)

/**
 * Moves the chunks of ready documents from the unindexed part into the vector index
 * (docs/knowledge.md, "Indexing"), a batch per statement, while there are any. Any number of
 * processes may run it (each move takes rows the others have not locked); search is exact over
 * what is still unindexed, so nothing waits for it but search speed.
 */
export class ChunkIndexer extends PollingLoop {
  /** Chunks this process moved into the vector index (an operator's view of the indexer's pace). */
  private readonly moved: Counter
  /**
   * `ingesting`: whether this process is ingesting documents now. Meanwhile the indexer moves one
   * batch per IDLE_POLL_MS instead of back to back: ingestion is what makes documents ready, and
   * the embedded database's one connection (and, on a small machine, PostgreSQL's cores) would
   * otherwise be shared with HNSW inserts that can wait. The backlog is searched exactly meanwhile.
   */
  constructor(
    private readonly deps: Deps,
    private readonly ingesting: () => boolean = () => false,
  ) {
    super('chunk indexer', IDLE_POLL_MS, deps.log)
    this.moved = new Counter({ name: 'knowledge_chunks_indexed_total', help: 'Chunks moved from the unindexed part into the vector index', registers: [deps.metrics.registry] })
  }

  /** A document became ready: its chunks are moved at once, unless ingestion goes on (then within IDLE_POLL_MS). */
  override nudge() {
    if (!this.ingesting()) super.nudge()
  }

  protected async step(): Promise<boolean> {
    const limit = batchFor(this.deps)
    const moved = await moveChunks(this.deps.db.sql, limit)
    if (moved > 0) this.moved.inc(moved)
    if (moved < limit || this.ingesting()) return false
    // A turn of the event loop before the next batch: requests waiting on the database go first.
    await new Promise((resolve) => setImmediate(resolve))
    return true
  }
}
