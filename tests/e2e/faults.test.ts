import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { waitFor } from '../helpers/harness'
import { apiCall, EMBEDDED, freePort, killAll, listening, spawnProcess, spawnService, type ServiceProcess, type Spawned } from '../helpers/process'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Redis unreachable (docs/deployment.md): the service on a Redis of this file's own (a real redis-server on a
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

const redisAnswers = () => listening(redisPort)

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
    await waitFor(async () => (await call('GET', `/v1/runs/${parkedRun}`)).body?.status !== 'running', { timeoutMs: 20_000, what: 'the parked run to finish' })
    const run = (await call('GET', `/v1/runs/${parkedRun}`)).body
    expect([run.status, run.outputs]).toEqual(['completed', { ok: 'yes' }])
  }, 30_000)
})

/**
 * Redis dies while requests wait on runs: sync triggers, a streamed trigger (SSE) and a chatflow chat
 * wait on the run's pub/sub channel. That channel only wakes them early (PostgreSQL has the run), so
 * they answer their finished runs: never a 500 (ioredis' MaxRetriesPerRequestError leaking from the
 * wait's UNSUBSCRIBE was one), never a 503 for a run that ran, which a client would retry into a
 * second run. What needs Redis to start (a new trigger) answers 503 with Retry-After.
 */
describe('Redis dies while runs are awaited', () => {
  test('in-flight sync triggers, an SSE stream and a chatflow chat answer their completed runs; a new trigger 503; every run completes once', async () => {
    await waitFor(async () => (await call('GET', '/readyz')).status === 200, { timeoutMs: 15_000, what: 'the service to use Redis' })
    const ws = (await call('POST', '/v1/workspaces', { name: 'Waits on runs' })).body.data.id
    const wf = await call('POST', '/v1/workflows', {
      workspace_id: ws,
      name: 'Answers after a pause',
      graph: {
        nodes: [
          { id: 'start', type: 'start', config: { inputs: [{ name: 'message', type: 'string', required: true }] } },
          { id: 'pause', type: 'wait', config: { seconds: 6 } },
          { id: 'end', type: 'end', config: { outputs: { answer: 'waited' } } },
        ],
        edges: [{ source: 'start', target: 'pause' }, { source: 'pause', target: 'end' }],
      },
    })
    expect(wf.status).toBe(201)
    const workflow = wf.body.data.id
    const agent = await call('POST', '/v1/agents', { workspace_id: ws, name: 'Flow', type: 'chatflow', model: 'local-chat', workflow_id: workflow })
    expect(agent.status).toBe(201)

    const trigger = () => call('POST', `/v1/workflows/${workflow}/runs`, { inputs: { message: 'go' } })
    const syncs = [trigger(), trigger(), trigger()]
    const chatting = call('POST', `/v1/agents/${agent.body.data.id}/chat`, { message: 'go', user_id: 'end-user' })
    const streamed = fetch(`${service.url}/v1/workflows/${workflow}/runs`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', accept: 'text/event-stream' },
      body: JSON.stringify({ inputs: { message: 'go' } }),
    }).then(async (res) => ({ status: res.status, text: await res.text() }))

    // All five runs parked in their wait node, their requests waiting, before Redis goes.
    const parked = async () => {
      const runs = (await call('GET', `/v1/workflows/${workflow}/runs?limit=100`)).body.data as { run_id: string }[]
      if (runs.length < 5) return false
      for (const r of runs) {
        const events = (await call('GET', `/v1/runs/${r.run_id}/events`)).body.data as { event: string; data: unknown }[]
        if (!events.some((e) => e.event === 'node_start' && JSON.stringify(e.data).includes('"pause"'))) return false
      }
      return true
    }
    // Polled gently: the key's rate limit (50/s) must not refuse the polls.
    await waitFor(parked, { timeoutMs: 5_000, intervalMs: 250, what: 'five runs parked in their wait node' })
    await redis!.stop('SIGKILL')
    await waitFor(async () => !(await redisAnswers()), { what: 'redis-server to be gone' })

    const refused = await trigger()
    expect([refused.status, refused.body.error?.code, refused.headers.get('retry-after')]).toEqual([503, 'unavailable', '5'])

    for (const res of await Promise.all(syncs)) {
      expect([res.status, res.body.status, res.body.outputs]).toEqual([200, 'completed', { answer: 'waited' }])
    }
    const chatted = await chatting
    expect([chatted.status, chatted.body.message?.content]).toEqual([200, 'waited'])
    // The stream ends with its run's `done` event and closes cleanly (text() would throw on a broken one).
    const stream = await streamed
    expect(stream.status).toBe(200)
    expect(stream.text).toContain('event: done')
    expect(stream.text).not.toContain('event: error')
    expect(service.proc.exitCode).toBeNull()
    expect(service.output()).not.toContain('MaxRetriesPerRequestError')

    redis = startRedis()
    await waitFor(async () => (await call('GET', '/readyz')).status === 200, { timeoutMs: 15_000, what: 'the service to use Redis again' })
    const runs = (await call('GET', `/v1/workflows/${workflow}/runs?limit=100`)).body.data as { status: string; outputs: unknown }[]
    // Five runs, each completed once; the refused trigger made none.
    expect(runs.map((r) => [r.status, r.outputs])).toEqual(Array(5).fill(['completed', { answer: 'waited' }]))
  }, 60_000)
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
  // A connection of its own per call: the outage makes the service answer slowly and close idle
  // connections, and a pooled one it closed meanwhile failed a later call with ECONNRESET before
  // the request was even sent (seen on a busy CI machine).
  const dbCall = (method: string, path: string, body?: unknown) => apiCall(db, KEY, method, path, body, { keepalive: false })

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
