import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { keyFor, startHarness, workspaceOf, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

let h: Harness

beforeAll(async () => {
  h = await startHarness()
}, 30_000)
afterAll(() => h.close())

/** The value of one sample of the Prometheus text, 0 when absent. */
function sample(text: string, name: string, labels: Record<string, string>): number {
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`)) continue
    const m = /^[^{]+\{([^}]*)\} (\S+)$/.exec(line)
    if (!m) continue
    const got = Object.fromEntries([...m[1]!.matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]))
    if (Object.entries(labels).every(([k, v]) => got[k] === v) && Object.keys(got).length === Object.keys(labels).length) return Number(m[2])
  }
  return 0
}

const metrics = async () => {
  const res = await h.call('GET', '/metrics', { key: null })
  expect(res.status).toBe(200)
  return res.text
}

describe('without authentication', () => {
  test.each([
    ['no Authorization header', null, {}],
    ['a bogus key', `ap_${'z'.repeat(40)}`, {}],
    ['a malformed header', null, { authorization: 'Basic abc' }],
  ])('with %s every operations route answers', async (_what, key, headers) => {
    for (const path of ['/healthz', '/readyz', '/metrics']) {
      const res = await h.call('GET', path, { key, headers })
      expect({ path, status: res.status }).toEqual({ path, status: 200 })
      expect(res.headers.get('ratelimit-limit')).toBeNull()
    }
  })
})

test('GET /healthz: the process answers', async () => {
  const res = await h.call('GET', '/healthz', { key: null })
  expect(res.status).toBe(200)
  expect(res.body).toEqual({ request_id: res.headers.get('x-request-id'), status: 'ok' })
})

test('GET /readyz: the database and Redis both answer, each named by kind', async () => {
  const res = await h.call('GET', '/readyz', { key: null })
  expect(res.status).toBe(200)
  expect(res.body).toEqual({
    request_id: res.headers.get('x-request-id'),
    status: 'ok',
    checks: {
      database: { status: 'ok', kind: process.env.DATABASE_URL ? 'postgres' : 'pglite' },
      redis: { status: 'ok', kind: process.env.REDIS_URL ? 'redis' : 'memory' },
    },
  })
})

test('GET /readyz: 503 with Retry-After once the database is gone', async () => {
  const other = await startHarness()
  try {
    await other.deps.db.close()
    const res = await other.call('GET', '/readyz', { key: null })
    expect(res.status).toBe(503)
    expect(res.headers.get('retry-after')).toBe('5')
    expect(res.body).toMatchObject({ status: 'unavailable', checks: { database: { status: 'down' }, redis: { status: 'ok' } } })
    expect(typeof res.body.checks.database.error).toBe('string')
    // /healthz is liveness only: the process still answers.
    expect((await other.call('GET', '/healthz', { key: null })).status).toBe(200)
  } finally {
    await other.deps.apiKeys.stop().catch(() => {})
    await other.deps.redis.close().catch(() => {})
  }
})

describe('GET /metrics', () => {
  test('Prometheus text with both families', async () => {
    const res = await h.call('GET', '/metrics', { key: null })
    expect(res.headers.get('content-type')).toStartWith('text/plain')
    expect(res.text).toContain('# TYPE http_requests_total counter')
    expect(res.text).toContain('# TYPE http_request_duration_seconds histogram')
  })

  test('counts requests by method, route pattern and status, with a latency histogram of each', async () => {
    const alice = await keyFor(h, 'alice')
    const ws = await workspaceOf(h, alice, 'Measured')
    const before = await metrics()
    const calls: [string, string, string, number][] = [
      ['GET', `/v1/workspaces/${ws}`, '/v1/workspaces/:id', 200],
      ['GET', `/v1/workspaces/${ws}`, '/v1/workspaces/:id', 200],
      ['GET', '/v1/workspaces/ws_00000000000000000000000000', '/v1/workspaces/:id', 404],
      ['POST', '/v1/workspaces', '/v1/workspaces', 201],
      ['POST', '/v1/workspaces', '/v1/workspaces', 400],
    ]
    for (const [method, path, , status] of calls) {
      const body = method === 'POST' ? (status === 201 ? { name: 'Counted' } : {}) : undefined
      expect((await h.call(method, path, { key: alice, body })).status).toBe(status)
    }
    expect((await h.call('GET', '/v1/workspaces', { key: null })).status).toBe(401)
    const after = await metrics()
    const expected = new Map<string, number>()
    for (const [method, , route, status] of calls) {
      const k = JSON.stringify({ method, route, status: String(status) })
      expected.set(k, (expected.get(k) ?? 0) + 1)
    }
    for (const [k, n] of expected) {
      const labels = JSON.parse(k) as Record<string, string>
      const delta = sample(after, 'http_requests_total', labels) - sample(before, 'http_requests_total', labels)
      expect({ labels, delta }).toEqual({ labels, delta: n })
      const histogramDelta = sample(after, 'http_request_duration_seconds_count', labels) - sample(before, 'http_request_duration_seconds_count', labels)
      expect({ labels, histogramDelta }).toEqual({ labels, histogramDelta: n })
      expect(sample(after, 'http_request_duration_seconds_bucket', { ...labels, le: '+Inf' })).toBe(sample(after, 'http_request_duration_seconds_count', labels))
    }
    // A 401 (refused before routing) is counted too.
    expect(after).toMatch(/http_requests_total\{[^}]*status="401"[^}]*\} \d+/)
  })

  test('labels carry route patterns, never raw ids (bounded cardinality)', async () => {
    for (let i = 0; i < 3; i++) await h.call('GET', `/v1/workspaces/ws_unknown_${i}`)
    await h.call('GET', '/v1/no-such-route-abc')
    const text = await metrics()
    expect(text).not.toContain('ws_unknown_')
    expect(text).not.toContain('no-such-route-abc')
    for (const line of text.split('\n').filter((l) => l.startsWith('http_requests_total{'))) {
      expect(line).toMatch(/method="[A-Z]+"/)
      expect(line).toMatch(/route="[^"]+"/)
      expect(line).toMatch(/status="\d{3}"/)
    }
  })

  test('the operations routes are measured as well', async () => {
    const before = sample(await metrics(), 'http_requests_total', { method: 'GET', route: '/healthz', status: '200' })
    await h.call('GET', '/healthz', { key: null })
    await h.call('GET', '/healthz', { key: null })
    expect(sample(await metrics(), 'http_requests_total', { method: 'GET', route: '/healthz', status: '200' })).toBe(before + 2)
  })
})
