import { readFileSync } from 'node:fs'
import { buildApp } from './app'
import { closeDeps, createLogger, flushLogs, openDeps } from './boot'
import { ConfigError, loadConfig } from './config'
import { DataDirLockedError } from './store/db'

/** Boot: config, store, Redis, app.listen, graceful shutdown. */
async function main() {
  let config
  try {
    config = loadConfig()
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(err.message)
      exit(2)
    }
    throw err
  }
  const log = createLogger(config.logLevel)
  let deps
  try {
    deps = await openDeps(config, { log, defaultMetrics: true })
  } catch (err) {
    if (err instanceof DataDirLockedError) {
      log.fatal(err.message)
      exit(3)
    }
    log.fatal({ err }, 'start-up failed')
    exit(1)
  }
  let boot
  try {
    boot = await deps.apiKeys.bootstrap(config.bootstrapApiKey)
  } catch (err) {
    log.fatal({ err }, 'could not create the root API key')
    exit(1)
  }
  if (boot.created && boot.key) {
    // Printed once, on first start only: the key is stored as a hash and cannot be shown again.
    process.stdout.write(`\nRoot API key (shown once, store it now):\n\n    ${boot.key}\n\n`)
  } else if (boot.created) {
    log.info('root API key created from BOOTSTRAP_API_KEY')
  }
  if (deps.redis.kind === 'memory') {
    log.warn('REDIS_URL is unset: using the in-process Redis stand-in (single process only)')
  }

  const app = buildApp(deps)
  app.listen({
    port: config.port,
    hostname: config.host,
    maxRequestBodySize: config.maxUploadBytes + 1_048_576,
    ...(config.tls ? { tls: { cert: readFileSync(config.tls.certFile), key: readFileSync(config.tls.keyFile) } } : {}),
  })
  const server = app.server!
  const scheme = config.tls ? 'https' : 'http'
  log.info(
    { url: `${scheme}://${config.host}:${server.port}${config.basePath}/v1`, database: deps.db.describe, redis: deps.redis.kind === 'redis' ? 'redis' : 'in-process' },
    `listening on ${scheme}://${config.host}:${server.port}`,
  )
  // Start-up lines are written at once; request lines are buffered (see createLogger).
  flushLogs()

  let stopping = false
  const shutdown = async (signal: string) => {
    if (stopping) return
    stopping = true
    log.info({ signal }, 'shutting down: no new connections, finishing requests in flight')
    const force = setTimeout(() => {
      log.error('shutdown timed out; exiting')
      exit(1)
    }, config.shutdownTimeoutMs)
    force.unref()
    try {
      await server.stop(false)
      await closeDeps(deps)
      log.info('stopped')
      exit(0)
    } catch (err) {
      log.error({ err }, 'shutdown failed')
      exit(1)
    }
  }
  process.on('SIGTERM', () => void shutdown('SIGTERM'))
  process.on('SIGINT', () => void shutdown('SIGINT'))
}

/** Exits after the buffered log lines are written. */
function exit(code: number): never {
  flushLogs()
  process.exit(code)
}

await main()
