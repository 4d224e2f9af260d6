import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import Redis from 'ioredis'
import postgres from 'postgres'
import { generateKey } from '../../src/domain/api-keys'
import { spawnService, type ServiceProcess } from './process'

/**
 * Several service processes on one server Postgres and one Redis, as a deployment runs them: one API
 * process (which runs workers too, unless `apiOnly`: `src/main.ts api`) and `workers` worker-only
 * processes (`src/main.ts worker`), all
 * with one SECRET_KEY. Each cluster gets a fresh database, and a Redis logical database of its own
 * (the service's key prefix `ap:` is fixed): claimed with a lock key in database 0, flushed first.
 * Needs DATABASE_URL and REDIS_URL.
 */
export interface Cluster {
  api: ServiceProcess
  workers: ServiceProcess[]
  /** A client on the cluster's database, for assertions and for inserting test data. */
  db: postgres.Sql
  rootKey: string
  /** Starts one more process of the cluster, with the same environment (`env` over it): an API (`api`) or a worker, ready. */
  spawn(kind: 'api' | 'worker', env?: Record<string, string>): Promise<ServiceProcess>
  /** Kills the processes, drops the database, flushes and releases the Redis database. */
  close(): Promise<void>
}

export async function startCluster(opts: { name: string; workers?: number; apiOnly?: boolean; env?: Record<string, string> }): Promise<Cluster> {
  const databaseUrl = process.env.DATABASE_URL!
  const redisUrl = process.env.REDIS_URL!
  const dbName = `ap_e2e_${opts.name}_${process.pid}_${Math.random().toString(36).slice(2, 10)}`
  const rootKey = generateKey()
  const tmp = mkdtempSync(join(tmpdir(), `ap-e2e-${opts.name}-`))
  const redis0 = new Redis(redisUrl, { maxRetriesPerRequest: 2 })
  const admin = postgres(databaseUrl, { max: 1, onnotice: () => {} })
  const processes: ServiceProcess[] = []
  let redisDb = -1
  let db: postgres.Sql | null = null

  const redisDbUrl = () => {
    const u = new URL(redisUrl)
    u.pathname = `/${redisDb}`
    return u.toString()
  }
  const flushRedisDb = async () => {
    const scoped = new Redis(redisDbUrl(), { maxRetriesPerRequest: 2 })
    try {
      await scoped.flushdb()
    } finally {
      await scoped.quit()
    }
  }
  const close = async () => {
    for (const p of processes) p.proc.kill('SIGKILL')
    await Promise.all(processes.map((p) => p.exited))
    await db?.end()
    await admin.unsafe(`drop database if exists "${dbName}" with (force)`).catch(() => {})
    await admin.end()
    if (redisDb > 0) {
      await flushRedisDb().catch(() => {})
      await redis0.del(`ap-e2e-redis-db:${redisDb}`)
    }
    await redis0.quit()
    rmSync(tmp, { recursive: true, force: true })
  }

  try {
    for (const n of Array.from({ length: 15 }, (_, i) => i + 1).sort(() => Math.random() - 0.5)) {
      if ((await redis0.set(`ap-e2e-redis-db:${n}`, String(process.pid), 'PX', 300_000, 'NX')) === 'OK') {
        redisDb = n
        break
      }
    }
    if (redisDb < 0) throw new Error('no free Redis logical database (1..15)')
    await flushRedisDb()
    await admin.unsafe(`create database "${dbName}"`)
    const dbUrl = new URL(databaseUrl)
    dbUrl.pathname = `/${dbName}`
    const env = {
      DATABASE_URL: dbUrl.toString(),
      REDIS_URL: redisDbUrl(),
      BOOTSTRAP_API_KEY: rootKey,
      SECRET_KEY: generateKey(),
      DATA_DIR: join(tmp, 'data'),
      RATE_LIMIT_BURST: '100000',
      RATE_LIMIT_PER_SECOND: '100000',
      ...opts.env,
    }
    // The API process first: it migrates the empty database and creates the root key.
    const api = spawnService({ env, args: opts.apiOnly ? ['api'] : [] })
    processes.push(api)
    await api.ready(30_000)
    const workers = Array.from({ length: opts.workers ?? 2 }, () => spawnService({ env, args: ['worker'] }))
    processes.push(...workers)
    await Promise.all(workers.map((w) => w.waitForOutput(/workers running \(no HTTP\)/, 30_000)))
    db = postgres(dbUrl.toString(), { max: 2, onnotice: () => {} })
    const spawn = async (kind: 'api' | 'worker', extra: Record<string, string> = {}) => {
      const p = spawnService({ env: { ...env, ...extra }, args: [kind] })
      processes.push(p)
      if (kind === 'api') await p.ready(30_000)
      else await p.waitForOutput(/workers running \(no HTTP\)/, 30_000)
      return p
    }
    return { api, workers, db, rootKey, spawn, close }
  } catch (err) {
    await close().catch(() => {})
    throw err
  }
}
