import type { Logger } from 'pino'
import type { AccessEntry } from './boot'
import type { Config } from './config'
import type { ApiKeys } from './domain/api-keys'
import type { Gateway } from './domain/models/gateway'
import type { Metrics } from './lib/metrics'
import type { Database } from './store/db'
import type { SecretBox } from './lib/secret-box'
import type { FileStore } from './store/files'
import type { InFlightOwner } from './store/idempotency'
import type { RedisPort } from './store/redis'
import type { Timers } from './workers/timers'

/** Everything a request may need, built once at start-up (main.ts) or per test file. */
export interface Deps {
  config: Config
  db: Database
  redis: RedisPort
  /** This process as the owner of the Idempotency-Key records it executes (src/store/idempotency.ts). */
  inFlight: InFlightOwner
  log: Logger
  /** One line per request (a no-op below LOG_LEVEL=info). */
  access: (entry: AccessEntry) => void
  apiKeys: ApiKeys
  metrics: Metrics
  /** Seals and opens secrets kept at rest (webhook secrets). */
  secretBox: SecretBox
  /** Durable timers in Redis (webhook retries, later run waits). */
  timers: Timers
  /** `nudge()` after committing outbox events wakes this process' fan-out worker, if it runs one. */
  events: { nudge: () => void }
  /** `nudge()` after creating a run wakes this process' run worker, if it runs one. */
  runs: { nudge: () => void }
  /** `nudge()` after storing a document (or asking for a reparse) wakes this process' document worker, if it runs one. */
  documents: { nudge: () => void }
  /** `nudge()` after a document became ready wakes this process' chunk indexer, if it runs one. */
  indexer: { nudge: () => void }
  /**
   * Uploaded originals, where STORAGE_URL says: DATA_DIR/files (embedded), PostgreSQL (server mode)
   * or an S3 bucket; never a disk another process writes (docs/deployment.md, "Where uploaded files live").
   */
  files: FileStore
  /** The model gateway: catalogue, providers, failover, credits. */
  models: Gateway
}
