import type { Logger } from 'pino'
import type { AccessEntry } from './boot'
import type { Config } from './config'
import type { ApiKeys } from './domain/api-keys'
import type { Metrics } from './lib/metrics'
import type { Database } from './store/db'
import type { RedisPort } from './store/redis'

/** Everything a request may need, built once at start-up (main.ts) or per test file. */
export interface Deps {
  config: Config
  db: Database
  redis: RedisPort
  log: Logger
  /** One line per request (a no-op below LOG_LEVEL=info). */
  access: (entry: AccessEntry) => void
  apiKeys: ApiKeys
  metrics: Metrics
}
