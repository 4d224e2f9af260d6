import type { Logger } from 'pino'
import type { Config } from './config'
import type { ApiKeys } from './domain/api-keys'
import type { Gateway } from './domain/models/gateway'
import type { Metrics } from './lib/metrics'
import type { Database } from './store/db'
import type { SecretBox } from './lib/secret-box'
import type { WakeUps } from './lib/wake-ups'
import type { FileStore } from './store/files'
import type { InFlightOwner } from './store/idempotency'
import type { RedisPort } from './store/redis'
import type { Timers } from './store/redis/timers'

/** One line of the access log. */
export interface AccessEntry {
  request_id: string
  method: string
  path: string
  route: string
  status: number
  ms: number
}

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
  /** Durable timers in Redis: webhook retries (`delivery:<id>`) and run waits (`run:<id>`). */
  timers: Timers
  /**
   * `wake.nudge(kind)` after a commit wakes this process' worker of that kind, if it runs one:
   * `events` (outbox events), `runs` (a run created), `documents` (a document stored or to reparse),
   * `indexer` (a document ready), `timers` (a timer due now).
   */
  wake: WakeUps
  /**
   * Uploaded originals, where STORAGE_URL says: DATA_DIR/files (embedded), PostgreSQL (server mode)
   * or an S3 bucket; never a disk another process writes (docs/deployment.md, "Where uploaded files live").
   */
  files: FileStore
  /** The model gateway: catalogue, providers, failover, credits. */
  models: Gateway
}
