import { readFileSync } from 'node:fs'
import { closeDeps, createLogger, flushLogs, openDeps } from './boot'
import { closeMcpClients } from './domain/agents/mcp-client'
import { ConfigError, loadConfig } from './config'
import type { Deps } from './deps'
import { CatalogError } from './domain/models/catalog'
import { DataDirLockedError } from './store/db'
import { SecretKeyError } from './domain/secret-key'
import { startWorkers } from './workers'
import { publishWakeUps } from './workers/wake'
import type { Logger } from 'pino'
import type { Config } from './config'

/** The parent as the process started: read before anything else, so a launcher gone during start-up is noticed too. */
const launcherPid = process.ppid

/**
 * Boot: config, store, Redis, app.listen, workers, graceful shutdown. `bun run src/main.ts worker`
 * (`bun run worker`) runs the workers only, and `bun run src/main.ts api` (`bun run api`) the API
 * only, for deployments that scale them apart (server mode: a shared database and Redis).
 */
async function main() {
  const mode = process.argv[2] ?? 'all'
  if (!['all', 'api', 'worker'].includes(mode)) {
    console.error(`unknown mode "${mode}": run with no argument (API and workers), "api" (API only) or "worker" (workers only)`)
    exit(2)
  }
  const serveHttp = mode !== 'worker'
  const runWorkers = mode !== 'api'
  const config = configOrExit()
  if (!runWorkers && (!config.databaseUrl || !config.redisUrl)) {
    console.error('"api" mode needs DATABASE_URL and REDIS_URL: runs, deliveries and timers are executed by "worker" processes sharing them')
    exit(2)
  }
  const log = createLogger(config.logLevel)
  // Before the store opens: a port another process holds is refused, not found taken after start-up.
  if (serveHttp && config.port !== 0) {
    const taken = await waitForPort(config.host, config.port, () => {
      log.warn(`port ${config.port} is in use: waiting up to ${PORT_WAIT_MS} ms for it to be released (a process just killed still holds it)`)
      flushLogs()
    })
    if (taken) {
      log.fatal(taken)
      exit(1)
    }
  }
  const deps = await depsOrExit(config, log)
  if (serveHttp) await bootstrapRootKey(deps)
  // No worker here to nudge: the worker processes are told over Redis.
  if (!runWorkers) publishWakeUps(deps)
  if (deps.redis.kind === 'memory') {
    log.warn('REDIS_URL is unset: using the in-process Redis stand-in (single process only)')
  }
  const running: Running = { server: null, workers: { stop: async () => {} }, workersStarted: Promise.resolve() }
  const shutdown = shutdownOf(deps, running)
  // Before the port opens: a SIGTERM sent as soon as /healthz answers (a supervisor, a test) stops
  // the process gracefully instead of by the signal's default action (exit 143, the lock left behind).
  process.on('SIGTERM', () => void shutdown('SIGTERM'))
  process.on('SIGINT', () => void shutdown('SIGINT'))
  if (serveHttp) running.server = await listenOrExit(deps)
  if (runWorkers) await startWorkersOrExit(deps, running)
  if (!runWorkers) log.info('API only (no workers): "worker" processes execute runs and deliveries')
  if (!serveHttp) log.info({ database: deps.db.describe, redis: deps.redis.kind === 'redis' ? 'redis' : 'in-process' }, 'workers running (no HTTP)')
  // Start-up lines are written at once; request lines are buffered (see createLogger).
  flushLogs()
  if (config.exitWithLauncher) followLauncher(deps, () => void shutdown('launcher exited'))
}

function configOrExit(): Config {
  try {
    return loadConfig()
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err
    console.error(err.message)
    return exit(2)
  }
}

/** The store, Redis and the rest opened; each refusal with its own exit status (docs/deployment.md). */
async function depsOrExit(config: Config, log: Logger): Promise<Deps> {
  try {
    return await openDeps(config, { log, defaultMetrics: true })
  } catch (err) {
    if (err instanceof DataDirLockedError) {
      log.fatal(err.message)
      return exit(3)
    }
    if (err instanceof SecretKeyError) {
      log.fatal(err.message)
      return exit(1)
    }
    if (err instanceof CatalogError) {
      console.error(err.message)
      return exit(2)
    }
    log.fatal({ err }, 'start-up failed')
    return exit(1)
  }
}

/** What a shutdown has to stop, filled in as start-up goes on. */
interface Running {
  server: Awaited<ReturnType<typeof listen>> | null
  workers: { stop(): Promise<void> }
  /** Workers still starting are stopped once they have started. */
  workersStarted: Promise<unknown>
}

/** Graceful shutdown, once: no new connections, the requests, runs and deliveries in flight finished. */
function shutdownOf(deps: Deps, running: Running): (signal: string) => Promise<void> {
  const { log, config } = deps
  let stopping = false
  return async (signal) => {
    if (stopping) return
    stopping = true
    log.info({ signal }, 'shutting down: no new connections, finishing requests and deliveries in flight')
    const force = setTimeout(() => {
      log.error('shutdown timed out; exiting')
      exit(1)
    }, config.shutdownTimeoutMs)
    force.unref()
    try {
      await running.server?.stop(false)
      await running.workersStarted.catch(() => {})
      await running.workers.stop()
      // After the requests and runs that could use them: the MCP servers see their sessions end.
      await closeMcpClients()
      await closeDeps(deps)
      log.info('stopped')
      exit(0)
    } catch (err) {
      log.error({ err }, 'shutdown failed')
      exit(1)
    }
  }
}

async function listenOrExit(deps: Deps): Promise<Awaited<ReturnType<typeof listen>>> {
  try {
    return await listen(deps)
  } catch (err) {
    // Taken between the check before the store opened and now (another process starting at the same moment).
    if (!(err instanceof PortTakenError)) throw err
    deps.log.fatal(err.message)
    await closeDeps(deps).catch(() => {})
    return exit(1)
  }
}

async function startWorkersOrExit(deps: Deps, running: Running): Promise<void> {
  try {
    const starting = startWorkers(deps)
    running.workersStarted = starting
    running.workers = await starting
  } catch (err) {
    deps.log.fatal({ err }, 'could not start the workers')
    exit(1)
  }
}

/**
 * `bun start` is a launcher: a Bun process that runs src/main.ts as its child. SIGKILLed, it cannot
 * pass anything on, and the child, adopted by init, would go on serving and holding DATA_DIR's lock
 * with no one left to stop it. The kernel gives an orphan a new parent, so a parent pid that changes
 * means the launcher is gone: shut down as for SIGTERM. A launcher that is init itself (pid 1, a
 * container's entrypoint) or none (pid 0) never changes, and the check costs one getppid() a second.
 */
function followLauncher(deps: Deps, shutdown: () => void) {
  if (launcherPid <= 1) return
  const check = () => {
    if (process.ppid === launcherPid) return
    deps.log.warn({ launcher: launcherPid, parent: process.ppid }, 'the launcher (bun start) has exited; shutting down')
    clearInterval(timer)
    shutdown()
  }
  const timer = setInterval(check, LAUNCHER_CHECK_MS)
  timer.unref()
  check()
}

const LAUNCHER_CHECK_MS = 1_000

async function bootstrapRootKey(deps: Deps) {
  const { config, log } = deps
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
}

/**
 * The HTTP app is imported here, not at the top: a `worker` process serves no HTTP and so never loads
 * Elysia, the routes, the OpenAPI generator or the MCP server's SDK (bench/README.memory.md).
 */
async function listen(deps: Deps) {
  const { config, log } = deps
  const { buildApp } = await import('./app')
  const app = buildApp(deps)
  try {
    app.listen({
      port: config.port,
      hostname: config.host,
      // Elysia's Bun adapter asks for SO_REUSEPORT, with which a second process started on this port
      // (another DATA_DIR, another database) binds it too and the kernel hands it a share of the
      // connections. One process per port: a port that is taken is refused.
      reusePort: false,
      maxRequestBodySize: config.maxUploadBytes + 1_048_576,
      ...(config.tls ? { tls: { cert: readFileSync(config.tls.certFile), key: readFileSync(config.tls.keyFile) } } : {}),
    })
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EADDRINUSE') throw new PortTakenError(takenMessage(config.host, config.port))
    throw err
  }
  const server = app.server!
  const scheme = config.tls ? 'https' : 'http'
  log.info(
    { url: `${scheme}://${config.host}:${server.port}${config.basePath}/v1`, database: deps.db.describe, redis: deps.redis.kind === 'redis' ? 'redis' : 'in-process' },
    `listening on ${scheme}://${config.host}:${server.port}`,
  )
  // Written at once: whoever waits for the port to answer may look for this line next.
  flushLogs()
  // The console's script is bundled (or read from CONSOLE_BUNDLE) when its page is first visited, not
  // here: a process whose console nobody opens never holds the bundler's memory (routes/console.ts).
  return server
}

class PortTakenError extends Error {}

function takenMessage(host: string, port: number): string {
  return `port ${port} (HOST ${host}) is already in use by another process: stop it, or start this one with another PORT`
}

// `kill -9 <pid>; bun start`: a killed process holds its sockets until the kernel has unmapped its
// memory (a second or more with gigabytes mapped), the same window the DATA_DIR lock waits out.
const PORT_WAIT_MS = 5_000

/** Null once `host`:`port` can be bound (within PORT_WAIT_MS), else the refusal's message. */
async function waitForPort(host: string, port: number, onWait: () => void): Promise<string | null> {
  const deadline = Date.now() + PORT_WAIT_MS
  let taken = portTaken(host, port)
  if (taken) onWait()
  while (taken && Date.now() < deadline) {
    await Bun.sleep(100)
    taken = portTaken(host, port)
  }
  return taken
}

/** The refusal's message when `host`:`port` cannot be bound now (a listener there, without SO_REUSEPORT), else null. */
function portTaken(host: string, port: number): string | null {
  try {
    Bun.listen({ hostname: host, port, socket: { data() {} } }).stop(true)
    return null
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EADDRINUSE') return takenMessage(host, port)
    throw err
  }
}

/** Exits after the buffered log lines are written. */
function exit(code: number): never {
  flushLogs()
  process.exit(code)
}

await main()
