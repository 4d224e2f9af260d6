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
})
