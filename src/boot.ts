import pino, { type Logger } from 'pino'
import type { Config } from './config'
import type { Deps } from './deps'
import { ApiKeys } from './domain/api-keys'
import { createMetrics } from './lib/metrics'
import { openEmbedded, openPostgres, type Database } from './store/db'
import { migrate } from './store/migrate'
import { openRedis, type RedisPort } from './store/redis'

let destination: ReturnType<typeof pino.destination> | null = null

/**
 * JSON logs on stdout. Writes are buffered (flushed every 250 ms and at 4 KiB): a synchronous write per
 * access-log line cost a quarter of the throughput of a cheap route (bench/README.md).
 */
export function createLogger(level: string): Logger {
  if (!destination && level !== 'silent') {
    destination = pino.destination({ dest: 1, sync: false, minLength: 4096 })
    setInterval(() => destination?.flush(), 250).unref()
  }
  return pino(
    {
      level,
      base: { service: 'agent-platform-api' },
      timestamp: pino.stdTimeFunctions.isoTime,
      // Secrets never reach the log, whatever object a call site passes.
      redact: { paths: ['*.authorization', '*.secret', '*.key', 'headers.authorization', 'req.headers.authorization'], censor: '[redacted]' },
    },
    destination ?? undefined,
  )
}

/** Writes out buffered log lines; call before process.exit. */
export function flushLogs() {
  try {
    destination?.flushSync()
  } catch {}
}

/**
 * Opens the store and Redis, applies migrations and starts the key cache: everything the app needs,
 * in the order that makes a failure name its cause. Tests pass their own database and Redis.
 */
export async function openDeps(config: Config, opts: { db?: Database; redis?: RedisPort; log?: Logger; defaultMetrics?: boolean } = {}): Promise<Deps> {
  const log = opts.log ?? createLogger(config.logLevel)
  const db = opts.db ?? (config.databaseUrl ? openPostgres(config.databaseUrl, config.databasePoolMax) : await openEmbedded({ dataDir: config.dataDir }))
  try {
    await migrate(db.sql)
    const redis = opts.redis ?? openRedis(config.redisUrl)
    await redis.ping()
    const apiKeys = new ApiKeys(db.sql, redis)
    await apiKeys.start()
    return { config, db, redis, log, apiKeys, metrics: createMetrics({ defaults: opts.defaultMetrics }) }
  } catch (err) {
    if (!opts.db) await db.close().catch(() => {})
    throw err
  }
}

export async function closeDeps(deps: Deps): Promise<void> {
  await deps.apiKeys.stop()
  await deps.redis.close()
  await deps.db.close()
}
