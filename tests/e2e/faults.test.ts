import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { waitFor } from '../helpers/harness'
import { apiCall, EMBEDDED, freePort, killAll, spawnProcess, spawnService, type ServiceProcess, type Spawned } from '../helpers/process'

/**
 * Redis unreachable (issue 9): the service on a Redis of this file's own (a real redis-server on a
 * port of its own, killed with SIGKILL and started again), the embedded database. Requests that need
 * Redis answer 503 `unavailable` with Retry-After, fast; liveness stays up and readiness says which
 * dependency is down; when Redis is back everything works again, and nothing stored was lost.
 */
const KEY = 'ap_faults0123456789ABCDEFGHIJKLMNOPQRSTUVWX'
let tmp: string
let redisPort: number
let redis: Spawned | undefined
let service: ServiceProcess

function startRedis(): Spawned {
  return spawnProcess(['redis-server', '--port', String(redisPort), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'])
}

async function redisAnswers(): Promise<boolean> {
  try {
    const socket = await Bun.connect({ hostname: '127.0.0.1', port: redisPort, socket: { data() {} } })
    socket.end()
    return true
  } catch {
    return false
  }
}

beforeAll(async () => {
  tmp = mkdtempSync(join(tmpdir(), 'ap-faults-'))
  redisPort = freePort()
  redis = startRedis()
  await waitFor(redisAnswers, { what: 'redis-server to listen' })
  service = spawnService({ env: { ...EMBEDDED, DATA_DIR: join(tmp, 'data'), BOOTSTRAP_API_KEY: KEY, REDIS_URL: `redis://127.0.0.1:${redisPort}`, LOG_LEVEL: 'warn' } })
  await service.ready(30_000)
}, 60_000)

afterAll(async () => {
  await killAll()
  rmSync(tmp, { recursive: true, force: true })
})

const call = (method: string, path: string, body?: unknown) => apiCall(service, KEY, method, path, body)

describe('Redis unreachable', () => {
  let workspace: string

  test('with Redis up: requests work', async () => {
    const res = await call('POST', '/v1/workspaces', { name: 'Survives Redis' })
    expect(res.status).toBe(201)
    workspace = res.body.data.id
    expect((await call('GET', '/readyz')).status).toBe(200)
  })

  let parkedRun: string

  test('a run parks in a wait node just before Redis goes', async () => {
    const wf = await call('POST', '/v1/workflows', {
      workspace_id: workspace,
      name: 'Waits through the outage',
      graph: {
        nodes: [{ id: 'start', type: 'start', config: {} }, { id: 'pause', type: 'wait', config: { seconds: 2 } }, { id: 'end', type: 'end', config: { outputs: { ok: 'yes' } } }],
        edges: [{ source: 'start', target: 'pause' }, { source: 'pause', target: 'end' }],
      },
    })
    expect(wf.status).toBe(201)
    const run = await call('POST', `/v1/workflows/${wf.body.data.id}/runs?async=true`, { inputs: {} })
    expect(run.status).toBe(202)
    parkedRun = run.body.run_id
  })

  test('Redis killed: 503 unavailable with Retry-After, within a few seconds; liveness up, readiness down', async () => {
    await redis!.stop('SIGKILL')
    await waitFor(async () => !(await redisAnswers()), { what: 'redis-server to be gone' })
    for (const [method, path, body] of [
      ['GET', `/v1/workspaces/${workspace}`, undefined],
      ['POST', '/v1/workspaces', { name: 'Not now' }],
      ['GET', '/v1/machines', undefined],
    ] as const) {
      const t0 = Date.now()
      const res = await call(method, path, body)
      expect([method, path, res.status, res.body.error?.code]).toEqual([method, path, 503, 'unavailable'])
      expect(res.headers.get('retry-after')).toBe('5')
      expect(res.body.error.message).toBe('Redis is unreachable; retry in a few seconds')
      expect(res.body.request_id).toBe(res.headers.get('x-request-id')!)
      expect(Date.now() - t0).toBeLessThan(5000)
    }
    expect((await call('GET', '/healthz')).status).toBe(200)
    const ready = await call('GET', '/readyz')
    expect(ready.status).toBe(503)
    expect(ready.body.checks.redis.status).toBe('down')
    expect(ready.body.checks.database.status).toBe('ok')
    expect(service.proc.exitCode).toBeNull()
  }, 30_000)

  test('Redis back: requests work again without a restart, and nothing stored was lost', async () => {
    redis = startRedis()
    await waitFor(redisAnswers, { what: 'redis-server to listen again' })
    await waitFor(async () => (await call('GET', `/v1/workspaces/${workspace}`)).status === 200, { timeoutMs: 15_000, what: 'the service to use Redis again' })
    expect((await call('GET', `/v1/workspaces/${workspace}`)).body.data.name).toBe('Survives Redis')
    expect((await call('POST', '/v1/workspaces', { name: 'After the outage' })).status).toBe(201)
    expect((await call('GET', '/readyz')).status).toBe(200)
    // The refused POST stored nothing.
    const names = (await call('GET', '/v1/workspaces?limit=100')).body.data.map((w: { name: string }) => w.name)
    expect(names).not.toContain('Not now')
    expect(names).toContain('After the outage')
  }, 30_000)

  test('the run parked through the outage finishes: its wake-up time is in PostgreSQL, not only in the Redis that forgot it', async () => {
    await waitFor(async () => (await call('GET', `/v1/runs/${parkedRun}`)).body.data?.status !== 'running', { timeoutMs: 20_000, what: 'the parked run to finish' })
    const run = (await call('GET', `/v1/runs/${parkedRun}`)).body.data
    expect([run.status, run.outputs]).toEqual(['completed', { ok: 'yes' }])
  }, 30_000)
})

/**
 * The database unreachable (server mode: DATABASE_URL set, as in CI): the service reaches PostgreSQL
 * through a TCP relay of this file's own on loopback, which the test cuts (every connection closed,
 * new ones refused) and restores. The in-process Redis stand-in keeps Redis out of the picture.
 */
const adminUrl = process.env.DATABASE_URL
describe.skipIf(!adminUrl)('the database unreachable (server mode)', () => {
  const target = adminUrl ? new URL(adminUrl) : null
  const dbName = `ap_faults_${process.pid}`
  const relayPort = freePort()
  const sockets = new Set<{ end(): void }>()
  let relay: { stop(closeActive?: boolean): void } | undefined
  let db: ServiceProcess
  let workspace: string

  const openRelay = () => {
    relay = Bun.listen<{ upstream?: Awaited<ReturnType<typeof Bun.connect>>; pending: Uint8Array[] }>({
      hostname: '127.0.0.1',
      port: relayPort,
      socket: {
        async open(client) {
          client.data = { pending: [] }
          sockets.add(client)
          try {
            const upstream = await Bun.connect({
              hostname: target!.hostname,
              port: Number(target!.port || 5432),
              socket: {
                data: (_, chunk) => void client.write(chunk),
                close: () => void client.end(),
                error: () => void client.end(),
              },
            })
            sockets.add(upstream)
            client.data.upstream = upstream
            for (const chunk of client.data.pending) upstream.write(chunk)
          } catch {
            client.end()
          }
        },
        data(client, chunk) {
          if (client.data.upstream) client.data.upstream.write(chunk)
          else client.data.pending.push(new Uint8Array(chunk))
        },
        close(client) {
          client.data.upstream?.end()
        },
      },
    })
  }
  const cutRelay = () => {
    relay?.stop(true)
    relay = undefined
    for (const s of sockets) s.end()
    sockets.clear()
  }
  const dbCall = (method: string, path: string, body?: unknown) => apiCall(db, KEY, method, path, body)

  beforeAll(async () => {
    const admin = Bun.spawnSync(['psql', adminUrl!, '-qc', `drop database if exists ${dbName}`, '-c', `create database ${dbName}`])
    if (admin.exitCode !== 0) throw new Error(admin.stderr.toString())
    openRelay()
    const url = new URL(adminUrl!)
    url.host = `127.0.0.1:${relayPort}`
    url.pathname = `/${dbName}`
    db = spawnService({ env: { DATABASE_URL: url.toString(), REDIS_URL: undefined, DATA_DIR: join(tmp, 'server-data'), BOOTSTRAP_API_KEY: KEY, LOG_LEVEL: 'warn' } })
    await db.ready(30_000)
  }, 60_000)

  afterAll(async () => {
    await db?.stop('SIGKILL')
    cutRelay()
    Bun.spawnSync(['psql', adminUrl!, '-qc', `drop database if exists ${dbName} with (force)`])
  })

  test('cut: 503 unavailable with Retry-After and /readyz false; restored: it recovers by itself', async () => {
    const created = await dbCall('POST', '/v1/workspaces', { name: 'Survives the database' })
    expect(created.status).toBe(201)
    workspace = created.body.data.id

    cutRelay()
    for (const [method, path, body] of [
      ['GET', `/v1/workspaces/${workspace}`, undefined],
      ['POST', '/v1/workspaces', { name: 'Not now' }],
    ] as const) {
      const res = await dbCall(method, path, body)
      expect([method, path, res.status, res.body.error?.code]).toEqual([method, path, 503, 'unavailable'])
      expect(res.headers.get('retry-after')).toBe('5')
      expect(res.body.error.message).toBe('the database is unreachable; retry in a few seconds')
    }
    const ready = await dbCall('GET', '/readyz')
    expect(ready.status).toBe(503)
    expect(ready.body.checks.database.status).toBe('down')
    expect((await dbCall('GET', '/healthz')).status).toBe(200)
    expect(db.proc.exitCode).toBeNull()

    openRelay()
    await waitFor(async () => (await dbCall('GET', `/v1/workspaces/${workspace}`)).status === 200, { timeoutMs: 20_000, what: 'the service to reach the database again' })
    expect((await dbCall('GET', '/readyz')).status).toBe(200)
    expect((await dbCall('POST', '/v1/workspaces', { name: 'After the outage' })).status).toBe(201)
    const names = (await dbCall('GET', '/v1/workspaces?limit=100')).body.data.map((w: { name: string }) => w.name)
    expect(names).toContain('Survives the database')
    expect(names).not.toContain('Not now')
  }, 60_000)
})
