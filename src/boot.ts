import { join } from 'node:path'
import pino, { type Logger } from 'pino'
import { catalogEnv, type Config } from './config'
import type { AccessEntry, Deps } from './deps'
import { ApiKeys } from './domain/api-keys'
import { loadCatalog } from './domain/models/catalog'
import { createGateway } from './domain/models'
import { ChargeOutbox } from './domain/charge-outbox'
import { AccessCache } from './domain/access-cache'
import { createMetrics } from './lib/metrics'
import { startTracing, stopTracing } from './lib/tracing'
import { redactUrls } from './lib/redact-url'
import { WakeUps } from './lib/wake-ups'
import { loadSecretKey, SecretBox } from './lib/secret-box'
import { requireSecretKey, verifySecretKey } from './domain/secret-key'
import { openEmbedded, openPostgres, type Database } from './store/db'
import { openFileStore } from './store/files'
import { migrate } from './store/migrate'
import { endLeftLeases } from './store/leases'
import { runLeases } from './store/runs'
import { documentLeases } from './store/knowledge'
import { templateDir } from './store/pglite-template'
import { openRedis, type RedisPort } from './store/redis'
import { IDEMPOTENCY_PREFIX, InFlightOwner } from './store/idempotency'
import { Timers } from './store/redis/timers'

let destination: ReturnType<typeof pino.destination> | null = null

/**
 * JSON logs on stdout, buffered (flushed every 250 ms, at 4 KiB, after start-up and before exit) so
 * that a busy process does not make one write system call per line.
 */
export function createLogger(level: string, to?: pino.DestinationStream): Logger {
  if (!to && !destination && level !== 'silent') {
    destination = pino.destination({ dest: 1, sync: false, minLength: 4096 })
    setInterval(() => destination?.flush(), 250).unref()
  }
  return pino(
    {
      level,
      base: { service: 'agent-platform-api' },
      timestamp: pino.stdTimeFunctions.isoTime,
      // `"level":"warn"`, readable and greppable, rather than pino's 40 (docs/observability.md, "Logs").
      formatters: { level: (label) => ({ level: label }) },
      serializers: { err: serializeError },
      // Secrets never reach the log, whatever object a call site passes.
      redact: { paths: ['*.authorization', '*.secret', '*.key', 'headers.authorization', 'req.headers.authorization'], censor: '[redacted]' },
    },
    to ?? destination ?? undefined,
  )
}

/**
 * pino's error serializer, with every URL cut to its origin: Bun's fetch errors carry the whole URL
 * they failed on (`path`), and an outgoing call's path and query never reach the log.
 */
function serializeError(err: unknown): unknown {
  const out = pino.stdSerializers.err(err as Error) as unknown
  if (!out || typeof out !== 'object') return out
  const o = out as Record<string, unknown>
  for (const [k, v] of Object.entries(o)) if (typeof v === 'string') o[k] = redactUrls(v)
  return o
}

/**
 * The access log: one JSON line per request in pino's own format, written straight to the same
 * buffered destination. Through pino each line cost ~7.5 µs (its serialiser and redaction) against
 * ~2 µs here, which at LOG_LEVEL=info was a third of a cheap route's CPU (bench/README.md). The fields
 * are fixed and hold no secret, so there is nothing to redact.
 */
export function createAccessLog(log: Logger): (entry: AccessEntry) => void {
  const dest = destination
  if (!dest || !log.isLevelEnabled('info')) return () => {}
  return (entry) => {
    dest.write(`${JSON.stringify({ level: 'info', time: new Date().toISOString(), service: 'agent-platform-api', ...entry, msg: 'request' })}\n`)
  }
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
  // Before anything opens: a server-mode process without SECRET_KEY is refused at once.
  requireSecretKey(config)
  // First: the spans of everything after (the server's requests, the workers' runs) are exported.
  if (config.tracing) {
    await startTracing(config.tracing, '0.1.0')
    const u = new URL(config.tracing.url)
    // Credentials in the URL (user, password, a query) are not logged.
    log.info({ traces: `${u.origin}${u.pathname}`, sampler: config.tracing.sampler, content: config.tracing.captureContent }, 'tracing: spans exported over OTLP/HTTP')
  }
  // Before the store opens: a bad MODELS_FILE stops start-up at once, naming the bad field.
  const catalog = loadCatalog(config.modelsFile, catalogEnv())
  const lockWait = (message: string) => (log.warn(message), flushLogs())
  const db = opts.db ?? (config.databaseUrl ? openPostgres(config.databaseUrl, config.databasePoolMax, config.databaseSearchPoolMax, config.knowledgeEfSearch) : await openEmbedded({ dataDir: config.dataDir, lockWaitMs: config.dataDirLockWaitMs, onLockWait: lockWait, template: templateDir(), efSearch: config.knowledgeEfSearch }))
  if (db.startedFrom === 'template') log.info('a fresh data directory: started from the migrated template (node_modules/.cache/agent-platform)')
  if (db.startedFrom === 'initdb') {
    if (db.templateFailure) log.warn({ template: templateDir(), reason: db.templateFailure }, 'the migrated template could not be used')
    log.info('a fresh data directory: initialising the database (a few seconds; `bun install` makes a template that skips this)')
  }
  let accessCache: AccessCache | null = null
  try {
    await migrate(db.sql)
    // An embedded data directory reopened: its lock was free, so whatever process held leases in it
    // is gone (a crash; a clean stop gives them back). Its runs and documents are taken up at once
    // rather than when their leases would have run out (docs/architecture.md, "Workers and leases").
    if (!opts.db && db.kind === 'pglite' && db.startedFrom === 'existing') {
      const [runs, documents] = [await endLeftLeases(db.sql, runLeases), await endLeftLeases(db.sql, documentLeases)]
      if (runs + documents > 0) log.info({ runs, documents }, 'the previous holder of DATA_DIR stopped without giving its work back: its runs and documents are taken up now')
    }
    // Without REDIS_URL, idempotency records are journaled in DATA_DIR: a replay must survive a restart.
    const redis = opts.redis ?? openRedis(config.redisUrl, 'ap:', { dir: join(config.dataDir, 'idempotency'), prefixes: [IDEMPOTENCY_PREFIX] })
    await redis.ping()
    const secret = loadSecretKey(config.secretKey, config.dataDir)
    if (secret.generated) log.info({ file: secret.file }, 'SECRET_KEY is unset: generated one (keep this file; every process of a deployment must share it)')
    const secretBox = new SecretBox(secret.key)
    await verifySecretKey({ db, secretBox }, secret.file ? `from ${secret.file}` : 'from the environment')
    const apiKeys = new ApiKeys(db.sql, redis)
    await apiKeys.start()
    // The check before a model call keeps its answers (access-cache.ts): on the embedded database until
    // a write of their workspace; in server mode, with Redis telling every process of every change, for
    // ACCESS_CACHE_TTL_MS at most; nothing kept with a PostgreSQL shared without Redis.
    const cache = new AccessCache(db.kind === 'pglite' ? Infinity : redis.kind === 'redis' ? config.accessCacheTtlMs : 0)
    accessCache = cache
    // Before the journal's replay below: its charges are announced to the other processes too.
    if (db.kind !== 'pglite') await accessCache.start(redis, log)
    const wake = new WakeUps()
    // Charges a process journaled and did not write (it was killed) are written before anything is served.
    const charges = await ChargeOutbox.open({ sql: db.sql, dir: join(config.dataDir, 'credits'), log, flushMs: config.creditsFlushMs, genericPlan: db.kind === 'postgres', nudgeEvents: () => wake.nudge('events'), spent: (totals) => cache.spent(totals) })
    const files = openFileStore(config.storage, db.sql)
    log.info(`uploaded originals are kept in ${files.describe}`)
    return {
      config,
      db,
      redis,
      inFlight: new InFlightOwner(redis),
      log,
      access: createAccessLog(log),
      apiKeys,
      metrics: createMetrics({ defaults: opts.defaultMetrics }),
      secretBox,
      timers: new Timers(redis, wake),
      wake,
      files,
      models: createGateway({ sql: db.sql, log, catalog, nudgeEvents: () => wake.nudge('events'), charges, access: accessCache }),
    }
  } catch (err) {
    await accessCache?.stop().catch(() => {})
    if (!opts.db) await db.close().catch(() => {})
    throw err
  }
}

export async function closeDeps(deps: Deps): Promise<void> {
  // The charges held are written while the database is still open.
  await deps.models.charges.close()
  await deps.models.access.stop()
  await deps.apiKeys.stop()
  deps.inFlight.stop()
  await deps.redis.close()
  await deps.db.close()
  // Last: the spans of the shutdown itself (the last deliveries and runs) leave too.
  await stopTracing().catch((err) => deps.log.warn({ err }, 'tracing: the last spans could not be exported'))
}
