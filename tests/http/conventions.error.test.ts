import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { sha256Hex } from '../../src/lib/crypto'
import { keyFor, startHarness, waitFor, workspaceOf, type Answer, type Harness } from '../helpers/harness'
import { holdWorkspaceInserts } from '../helpers/locks'

setDefaultTimeout(TEST_TIMEOUT_MS)

let h: Harness
let small: Harness
let limited: Harness
let alice: string
let bob: string
let ws: string

beforeAll(async () => {
  ;[h, small, limited] = await Promise.all([
    startHarness(),
    startHarness({ MAX_JSON_BYTES: '1024' }),
    startHarness({ RATE_LIMIT_PER_SECOND: '1', RATE_LIMIT_BURST: '3' }),
  ])
  alice = await keyFor(h, 'alice')
  bob = await keyFor(h, 'bob')
  ws = await workspaceOf(h, alice, 'Alice workspace')
  const added = await h.call('POST', `/v1/workspaces/${ws}/members`, { key: alice, body: { user_id: 'bob', role: 'user' } })
  expect(added.status).toBe(201)
}, 30_000)
afterAll(async () => {
  await Promise.all([h?.close(), small?.close(), limited?.close()])
})

const SECURITY_HEADERS = {
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cache-control': 'no-store',
}

/** docs/api.md, "Errors": `{ request_id, error: { code, message, param?, details? } }`, nothing else, nothing internal. */
function expectError(res: Answer, status: number, code: string) {
  expect({ status: res.status, code: res.body?.error?.code }).toEqual({ status, code })
  expect(res.headers.get('content-type')).toStartWith('application/json')
  expect(Object.keys(res.body).sort()).toEqual(['error', 'request_id'])
  const allowed = ['code', 'details', 'message', 'param']
  for (const k of Object.keys(res.body.error)) expect(allowed).toContain(k)
  expect(typeof res.body.error.message).toBe('string')
  expect(res.body.error.message.length).toBeGreaterThan(0)
  if (res.body.error.param !== undefined) expect(typeof res.body.error.param).toBe('string')
  if (res.body.error.details !== undefined) {
    expect(Array.isArray(res.body.error.details)).toBe(true)
    for (const d of res.body.error.details) expect(Object.keys(d).sort()).toEqual(['message', 'path'])
  }
  expect(typeof res.body.request_id).toBe('string')
  expect(res.headers.get('x-request-id')).toBe(res.body.request_id)
  // Never a stack trace, SQL or an internal path.
  expect(res.text).not.toMatch(/\bat .+:\d+:\d+|node_modules|\/src\/|\.ts\b|select |insert into|postgres/i)
  for (const [k, v] of Object.entries(SECURITY_HEADERS)) expect(res.headers.get(k)).toBe(v)
}

describe('400 invalid_json', () => {
  test.each([
    ['a truncated object', '{"name":'],
    ['a trailing comma', '{"name":"x",}'],
    ['single quotes', "{'name':'x'}"],
    ['a bare word', 'name'],
    ['two objects', '{"name":"a"}{"name":"b"}'],
    ['a NUL byte', '\u0000'],
  ])('broken JSON: %s', async (_what, raw) => {
    const res = await h.call('POST', '/v1/workspaces', { raw, headers: { 'content-type': 'application/json' } })
    expectError(res, 400, 'invalid_json')
  })

  test.each(['text/plain', 'text/html', 'application/xml', 'application/octet-stream'])('a body sent as %s', async (type) => {
    const res = await h.call('POST', '/v1/workspaces', { raw: '{"name":"Typed"}', headers: { 'content-type': type } })
    expectError(res, 400, 'invalid_json')
    expect(res.body.error.message).toContain(type)
  })

  test('form bodies on a JSON route: refused, nothing created', async () => {
    const form = await h.call('POST', '/v1/workspaces', { raw: 'name=Form+encoded', headers: { 'content-type': 'application/x-www-form-urlencoded' } })
    expectError(form, 400, 'invalid_json')
    const data = new FormData()
    data.set('name', 'Multipart')
    const res = await h.app.handle(new Request(`${h.base}/v1/workspaces`, { method: 'POST', headers: { authorization: `Bearer ${h.rootKey}` }, body: data }))
    const text = await res.text()
    expectError({ status: res.status, headers: res.headers, body: JSON.parse(text), text }, 400, 'invalid_json')
    const [row] = await h.deps.db.sql<{ n: number }[]>`select count(*)::int as n from workspaces where name in ('Form encoded', 'Multipart')`
    expect(row!.n).toBe(0)
  })
})

describe('400 validation_error', () => {
  test('every failing field is in details, the first one in param', async () => {
    const res = await h.call('POST', '/v1/workspaces', { body: { name: 5, description: 7 } })
    expectError(res, 400, 'validation_error')
    const paths = res.body.error.details.map((d: { path: string }) => d.path)
    expect(paths).toContain('name')
    expect(paths).toContain('description')
    expect(res.body.error.param).toBe(paths[0])
  })

  test.each([
    ['a missing required field', '/v1/workspaces', {}, 'name'],
    ['an unknown enum value', '/v1/workspaces', { name: 'x', type: 'galaxy' }, 'type'],
    ['a name over 200 characters', '/v1/workspaces', { name: 'x'.repeat(201) }, 'name'],
    ['an unknown field', '/v1/workspaces', { name: 'x', colour: 'red' }, 'colour'],
    ['a bad role', 'members', { user_id: 'carol', role: 'boss' }, 'role'],
  ])('%s names its path', async (_what, path, body, param) => {
    const res = await h.call('POST', path === 'members' ? `/v1/workspaces/${ws}/members` : path, { key: alice, body })
    expectError(res, 400, 'validation_error')
    expect(res.body.error.param).toBe(param)
    expect(res.body.error.details[0].path).toBe(param)
  })

  test('a bad path parameter', async () => {
    const res = await h.call('GET', `/v1/workspaces/${'x'.repeat(65)}`)
    expectError(res, 400, 'validation_error')
    expect(res.body.error.param).toStartWith('params.')
  })

  test.each(['0', '101', 'abc'])('limit=%s', async (limit) => {
    const res = await h.call('GET', `/v1/workspaces?limit=${limit}`)
    expectError(res, 400, 'validation_error')
    expect(res.body.error.param).toMatch(/limit/)
  })

  test('an Idempotency-Key of 256 characters', async () => {
    const res = await h.call('POST', '/v1/workspaces', { body: { name: 'x' }, headers: { 'idempotency-key': 'k'.repeat(256) } })
    expectError(res, 400, 'validation_error')
    expect(res.body.error.param).toBe('Idempotency-Key')
  })
})

describe('400 list parameters', () => {
  test.each([
    ['invalid_cursor', 'cursor=not-a-cursor', 'cursor'],
    ['invalid_cursor', `cursor=${Buffer.from('{"s":"-created_at","v":[1]}').toString('base64url')}`, 'cursor'],
    ['invalid_sort', 'sort=colour', 'sort'],
    ['invalid_sort', 'sort=-name,name', 'sort'],
    ['invalid_filter', 'colour=red', 'colour'],
    ['invalid_filter', 'status=deleted', 'status'],
    ['invalid_filter', 'created_at_after=yesterday', 'created_at_after'],
  ])('%s for ?%s', async (code, query, param) => {
    const res = await h.call('GET', `/v1/workspaces?${query}`)
    expectError(res, 400, code)
    expect(res.body.error.param).toBe(param)
  })
})

describe('401 unauthenticated', () => {
  test.each([
    ['no Authorization header', null, {}],
    ['a Basic header', null, { authorization: 'Basic YWxpY2U6c2VjcmV0' }],
    ['Bearer without a key', null, { authorization: 'Bearer ' }],
    ['a key with spaces', null, { authorization: 'Bearer ap_abc def' }],
    ['an unknown key', `ap_${'x'.repeat(40)}`, {}],
    ['a key that is not ours at all', 'sk-proj-0123456789', {}],
  ])('%s', async (_what, key, headers) => {
    const res = await h.call('GET', '/v1/workspaces', { key, headers })
    expectError(res, 401, 'unauthenticated')
    expect(res.headers.get('www-authenticate')).toStartWith('Bearer')
  })

  test('a revoked key, at once', async () => {
    const key = await keyFor(h, 'dora')
    expect((await h.call('GET', '/v1/workspaces', { key })).status).toBe(200)
    const listed = await h.call('GET', '/v1/api-keys?user_id=dora')
    const id = listed.body.data[0].id
    expect((await h.call('DELETE', `/v1/api-keys/${id}`)).status).toBe(200)
    const res = await h.call('GET', '/v1/workspaces', { key })
    expectError(res, 401, 'unauthenticated')
    expect(res.headers.get('www-authenticate')).toStartWith('Bearer')
  })

  test('an expired key', async () => {
    const key = await keyFor(h, 'erin', { expires_at: new Date(Date.now() + 3_600_000).toISOString() })
    // Expire it in the database before its first use, so no cache holds it yet.
    await h.deps.db.sql`update api_keys set expires_at = now() - interval '1 second' where user_id = 'erin'`
    const res = await h.call('GET', '/v1/workspaces', { key })
    expectError(res, 401, 'unauthenticated')
    expect(res.body.error.message).toMatch(/expired/)
  })

  test('an unauthenticated caller learns nothing about routes or bodies', async () => {
    expectError(await h.call('GET', '/v1/no-such-route', { key: null }), 401, 'unauthenticated')
    expectError(await h.call('POST', '/v1/workspaces', { key: null, raw: '{broken', headers: { 'content-type': 'application/json' } }), 401, 'unauthenticated')
  })
})

describe('403 forbidden', () => {
  test('a user-role member cannot update the workspace', async () => {
    expectError(await h.call('PATCH', `/v1/workspaces/${ws}`, { key: bob, body: { name: 'Mine now' } }), 403, 'forbidden')
  })

  test('an admin who is not the owner cannot transfer', async () => {
    const carol = await keyFor(h, 'carol')
    expect((await h.call('POST', `/v1/workspaces/${ws}/members`, { key: alice, body: { user_id: 'carol', role: 'admin' } })).status).toBe(201)
    expectError(await h.call('POST', `/v1/workspaces/${ws}/transfer`, { key: carol, body: { new_owner_id: 'carol' } }), 403, 'forbidden')
  })
})

describe('404 not_found', () => {
  test('an unknown workspace id', async () => {
    expectError(await h.call('GET', '/v1/workspaces/ws_00000000000000000000000000'), 404, 'not_found')
  })

  test('a workspace the caller may not see answers as if it did not exist', async () => {
    const stranger = await keyFor(h, 'stranger')
    const hidden = await h.call('GET', `/v1/workspaces/${ws}`, { key: stranger })
    const missing = await h.call('GET', '/v1/workspaces/ws_00000000000000000000000000', { key: stranger })
    expectError(hidden, 404, 'not_found')
    expectError(missing, 404, 'not_found')
  })

  test.each([
    ['GET', '/v1/no-such-route'],
    ['POST', '/v1/workspaces/ws_1/nothing'],
    ['PUT', '/v1/workspaces'],
    ['GET', '/no-such-page'],
  ])('an unknown route %s %s with a valid key', async (method, path) => {
    expectError(await h.call(method, path), 404, 'not_found')
  })
})

test('409 conflict: adding an existing member', async () => {
  const res = await h.call('POST', `/v1/workspaces/${ws}/members`, { key: alice, body: { user_id: 'bob', role: 'developer' } })
  expectError(res, 409, 'conflict')
})

describe('413 payload_too_large', () => {
  const big = JSON.stringify({ name: 'big', description: 'd'.repeat(1500) })

  test('a body over MAX_JSON_BYTES announced by Content-Length', async () => {
    const res = await small.call('POST', '/v1/workspaces', {
      raw: big,
      headers: { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(big)) },
    })
    expectError(res, 413, 'payload_too_large')
  })

  test('a body over MAX_JSON_BYTES streamed without Content-Length', async () => {
    const bytes = new TextEncoder().encode(big)
    const body = new ReadableStream<Uint8Array>({
      start(c) {
        for (let i = 0; i < bytes.length; i += 256) c.enqueue(bytes.slice(i, i + 256))
        c.close()
      },
    })
    const request = new Request(`${small.base}/v1/workspaces`, {
      method: 'POST',
      headers: { authorization: `Bearer ${small.rootKey}`, 'content-type': 'application/json' },
      body,
      duplex: 'half',
    } as RequestInit)
    expect(request.headers.get('content-length')).toBeNull()
    const res = await small.app.handle(request)
    const text = await res.text()
    expectError({ status: res.status, headers: res.headers, body: JSON.parse(text), text }, 413, 'payload_too_large')
  })

  test('a lying Content-Length does not let a big body through', async () => {
    const res = await small.call('POST', '/v1/workspaces', { raw: big, headers: { 'content-type': 'application/json', 'content-length': '10' } })
    expect(res.status).not.toBe(201)
    expect(res.status).toBeLessThan(500)
  })

  test('nothing was created by the refused bodies; a body under the limit still works', async () => {
    const list = await small.call('GET', '/v1/workspaces')
    expect(list.body.data.map((w: { name: string }) => w.name)).not.toContain('big')
    expect((await small.call('POST', '/v1/workspaces', { body: { name: 'fits' } })).status).toBe(201)
  })
})

describe('idempotency errors', () => {
  test('409 idempotency_key_in_use while the first request executes', async () => {
    const key = 'conv-in-flight'
    // Warm the key cache so the held request needs the database only for its insert.
    expect((await h.call('GET', '/v1/workspaces?limit=1')).status).toBe(200)
    const caller = await h.deps.apiKeys.authenticate(h.rootKey)
    const record = `idem:${caller.keyId}:${sha256Hex(key)}`
    const hold = await holdWorkspaceInserts(h)
    const first = h.call('POST', '/v1/workspaces', { body: { name: 'In flight' }, headers: { 'idempotency-key': key } })
    try {
      await waitFor(async () => (await h.deps.redis.get(record))?.includes('pending'), { what: 'the first request to hold its key' })
      const second = await h.call('POST', '/v1/workspaces', { body: { name: 'In flight' }, headers: { 'idempotency-key': key } })
      expectError(second, 409, 'idempotency_key_in_use')
    } finally {
      await hold.release()
    }
    expect((await first).status).toBe(201)
  })

  test('422 idempotency_key_reused for another body', async () => {
    const key = 'conv-reused'
    expect((await h.call('POST', '/v1/workspaces', { body: { name: 'One' }, headers: { 'idempotency-key': key } })).status).toBe(201)
    const res = await h.call('POST', '/v1/workspaces', { body: { name: 'Two' }, headers: { 'idempotency-key': key } })
    expectError(res, 422, 'idempotency_key_reused')
  })
})

describe('429 rate_limited', () => {
  test('past the burst: 429 with Retry-After and RateLimit-* headers; other keys are unaffected', async () => {
    const answers: Answer[] = []
    for (let i = 0; i < 20; i++) {
      const res = await limited.call('GET', '/v1/workspaces')
      answers.push(res)
      if (res.status === 429) break
    }
    // The burst of 3 always passes; the refill of 1/s cannot keep up with back-to-back calls for long.
    expect(answers.slice(0, 3).map((a) => a.status)).toEqual([200, 200, 200])
    expect(answers.slice(0, 3).map((a) => a.headers.get('ratelimit-remaining'))).toEqual(['2', '1', '0'])
    for (const a of answers) expect(a.headers.get('ratelimit-limit')).toBe('3')
    const refused = answers.at(-1)!
    expectError(refused, 429, 'rate_limited')
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(1)
    expect(refused.headers.get('ratelimit-limit')).toBe('3')
    expect(refused.headers.get('ratelimit-remaining')).toBe('0')
    expect(Number(refused.headers.get('ratelimit-reset'))).toBeGreaterThanOrEqual(1)
    expect(refused.headers.get('ratelimit-policy')).toMatch(/^3;w=\d+$/)

    const other = await keyFor(limited, 'other-user').catch(() => null)
    // Issuing the key used the root key's bucket, which may itself be empty: poll until it refills.
    const otherKey = other ?? (await waitFor(() => keyFor(limited, 'other-user'), { what: 'a token to issue a key' }))
    expect((await limited.call('GET', '/v1/workspaces', { key: otherKey })).status).toBe(200)
  })

  test('the refusal wins over everything else (its answer is awaited after parsing): no write, no 400, no 404', async () => {
    const key = (await keyFor(limited, 'limit-writer').catch(() => null)) ?? (await waitFor(() => keyFor(limited, 'limit-writer'), { what: 'a token to issue a key' }))
    for (let i = 0; i < 20; i++) if ((await limited.call('GET', '/v1/workspaces', { key })).status === 429) break
    const refused = [
      await limited.call('POST', '/v1/workspaces', { key, body: { name: 'refused by the rate limit' } }),
      await limited.call('POST', '/v1/workspaces', { key, body: { name: 42 } }),
      await limited.call('POST', '/v1/workspaces', { key, raw: '{not json', headers: { 'content-type': 'application/json' } }),
      await limited.call('GET', '/v1/no-such-route', { key }),
      await limited.call('POST', '/v1/webhooks', { key, body: { url: 'https://example.com/hook', events: ['webhook.test'] } }),
    ]
    for (const res of refused) expectError(res, 429, 'rate_limited')
    expect(await limited.deps.db.sql`select 1 from workspaces where name = 'refused by the rate limit'`).toHaveLength(0)
  })
})

describe('X-Request-Id', () => {
  test.each([
    ['a simple id', 'client-123'],
    ['every allowed character', 'aZ09._:-'],
    ['128 characters', 'r'.repeat(128)],
  ])('a valid client id is echoed: %s', async (_what, id) => {
    for (const res of [
      await h.call('GET', '/v1/workspaces', { headers: { 'x-request-id': id } }),
      await h.call('GET', '/v1/workspaces/ws_missing', { headers: { 'x-request-id': id } }),
      await h.call('GET', '/healthz', { headers: { 'x-request-id': id } }),
    ]) {
      expect(res.headers.get('x-request-id')).toBe(id)
      expect(res.body.request_id).toBe(id)
    }
  })

  test.each([
    ['129 characters', 'r'.repeat(129)],
    ['200 characters', 'r'.repeat(200)],
    ['spaces', 'my request'],
    ['a slash', 'a/b'],
    ['non-ASCII', 'día'],
    ['an injection attempt', '"><script>'],
  ])('an invalid client id (%s) is replaced by a generated req_ id', async (_what, id) => {
    const res = await h.call('GET', '/v1/workspaces', { headers: { 'x-request-id': id } })
    expect(res.status).toBe(200)
    expect(res.headers.get('x-request-id')).toMatch(/^req_[0-9a-z]{26}$/)
    expect(res.body.request_id).toBe(res.headers.get('x-request-id'))
  })

  test('generated ids are unique and sortable by time (to the millisecond: the rest is random)', async () => {
    const ids: string[] = []
    for (let i = 0; i < 5; i++) ids.push((await h.call('GET', '/healthz')).body.request_id)
    expect(new Set(ids).size).toBe(5)
    // The time part (10 characters after the prefix) never goes back.
    const times = ids.map((id) => id.slice(4, 14))
    expect([...times].sort()).toEqual(times)
  })

  test.each([
    ['a success', () => h.call('GET', '/v1/workspaces')],
    ['a creation', () => h.call('POST', '/v1/workspaces', { body: { name: 'Id check' } })],
    ['invalid_json', () => h.call('POST', '/v1/workspaces', { raw: '{', headers: { 'content-type': 'application/json' } })],
    ['a 401', () => h.call('GET', '/v1/workspaces', { key: null })],
    ['a 404 route', () => h.call('GET', '/v1/nowhere')],
    ['a 413', () => small.call('POST', '/v1/workspaces', { raw: 'x'.repeat(2000), headers: { 'content-length': '2000' } })],
    ['healthz', () => h.call('GET', '/healthz')],
    ['readyz', () => h.call('GET', '/readyz')],
  ])('header equals body.request_id on %s', async (_what, send) => {
    const res = await send()
    expect(typeof res.body.request_id).toBe('string')
    expect(res.headers.get('x-request-id')).toBe(res.body.request_id)
  })
})

describe('security headers', () => {
  test.each([
    ['GET', '/v1/workspaces', null],
    ['GET', '/v1/workspaces', 'no key'],
    ['GET', '/healthz', null],
    ['GET', '/metrics', null],
    ['GET', '/v1/nowhere', null],
  ])('%s %s (%s)', async (method, path, noKey) => {
    const res = await h.call(method, path, noKey ? { key: null } : {})
    for (const [k, v] of Object.entries(SECURITY_HEADERS)) expect(res.headers.get(k)).toBe(v)
    expect(res.headers.get('x-request-id')).toBeTruthy()
    expect(res.headers.get('server')).toBeNull()
    expect(res.headers.get('x-powered-by')).toBeNull()
  })

  test('API answers forbid framing and every fetch', async () => {
    const res = await h.call('GET', '/v1/workspaces')
    expect(res.headers.get('content-security-policy')).toContain("default-src 'none'")
    expect(res.headers.get('content-security-policy')).toContain("frame-ancestors 'none'")
  })
})
