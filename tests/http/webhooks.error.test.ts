import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { keyFor, startHarness, workspaceOf, type Answer, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

// Two harnesses: the default policy (https only) and one with WEBHOOK_ALLOW_HTTP=true. Receiver URLs
// that need no DNS are public address literals; nothing is ever delivered (no workers run).
let h: Harness
let relaxed: Harness
let owner: string
let ws: string

const LIMITS = { RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000' }

beforeAll(async () => {
  ;[h, relaxed] = await Promise.all([startHarness(LIMITS), startHarness({ ...LIMITS, WEBHOOK_ALLOW_HTTP: 'true' })])
  owner = await keyFor(h, 'we-owner')
  ws = await workspaceOf(h, owner, 'Errors')
})
afterAll(async () => {
  await Promise.all([h?.close(), relaxed?.close()])
})

const PUBLIC_URL = 'https://1.1.1.1/hook'
const GOOD = { url: PUBLIC_URL, events: ['workflow.run.completed'], secret: 'a-good-secret' }
const UNKNOWN_WEBHOOK = 'whk_01jbz3k9x8q7r6s5t4v3w2y1z0'
const UNKNOWN_DELIVERY = 'dlv_01jbz3k9x8q7r6s5t4v3w2y1z0'

/** docs/api.md, "Errors": `{ request_id, error: { code, message, param?, details? } }`, nothing else. */
function expectError(res: Answer, status: number, code: string, param?: string) {
  expect(res.status).toBe(status)
  expect(res.headers.get('content-type')).toContain('application/json')
  expect(Object.keys(res.body).sort()).toEqual(['error', 'request_id'])
  expect(res.body.request_id).toBe(res.headers.get('x-request-id')!)
  expect(res.body.error.code).toBe(code)
  expect(typeof res.body.error.message).toBe('string')
  expect(res.body.error.message.length).toBeGreaterThan(0)
  for (const k of Object.keys(res.body.error)) expect(['code', 'message', 'param', 'details']).toContain(k)
  if (param !== undefined) {
    expect(res.body.error.param).toBe(param)
    expect(Array.isArray(res.body.error.details)).toBe(true)
    expect(res.body.error.details[0].path).toBe(param)
    expect(typeof res.body.error.details[0].message).toBe('string')
  }
  // Never a stack trace, SQL text or internal path.
  expect(res.text).not.toMatch(/\bat .*\.ts:\d+|\/src\/|select |insert into|stack/i)
}

async function countWebhooks(harness: Harness): Promise<number> {
  const [row] = await harness.deps.db.sql<{ n: number }[]>`select count(*)::int as n from webhooks`
  return row!.n
}

async function register(body: Record<string, unknown> = {}) {
  const res = await h.call('POST', '/v1/webhooks', { key: owner, body: { ...GOOD, workspace_id: ws, ...body } })
  expect(res.status).toBe(201)
  return res.body.data.id as string
}

describe('registration: bad bodies answer 400 validation_error naming the field', () => {
  const cases: [string, Record<string, unknown>, string][] = [
    ['http:// URL', { url: 'http://1.1.1.1/hook' }, 'url'],
    ['ftp:// URL', { url: 'ftp://1.1.1.1/hook' }, 'url'],
    ['not a URL', { url: 'not a url' }, 'url'],
    ['a relative path', { url: '/hooks/x' }, 'url'],
    ['empty URL', { url: '' }, 'url'],
    ['URL with user:pass@', { url: 'https://user:pass@1.1.1.1/hook' }, 'url'],
    ['URL with a user only', { url: 'https://user@1.1.1.1/hook' }, 'url'],
    ['URL of a host that does not resolve', { url: 'https://nonexistent.invalid/x' }, 'url'],
    ['URL not a string', { url: 42 }, 'url'],
    ['empty events', { events: [] }, 'events'],
    ['unknown event name', { events: ['workflow.run.completed', 'workflow.run.exploded'] }, 'events'],
    ['events not an array', { events: 'workflow.run.completed' }, 'events'],
    ['an empty event name', { events: [''] }, 'events.0'],
    ['secret of 7 chars', { secret: 'x'.repeat(7) }, 'secret'],
    ['secret of 257 chars', { secret: 'x'.repeat(257) }, 'secret'],
    ['secret not a string', { secret: 12345678 }, 'secret'],
    ['unknown field', { colour: 'blue' }, 'colour'],
    ['a workspace id with a space', { workspace_id: 'ws 1' }, 'workspace_id'],
  ]
  test.each(cases)('%s', async (_, patch, param) => {
    const before = await countWebhooks(h)
    const res = await h.call('POST', '/v1/webhooks', { key: owner, body: { ...GOOD, workspace_id: ws, ...patch } })
    expectError(res, 400, 'validation_error', param)
    expect(await countWebhooks(h)).toBe(before)
  })

  test.each(['url', 'events', 'secret'])('missing %s', async (field) => {
    const body: Record<string, unknown> = { ...GOOD, workspace_id: ws }
    delete body[field]
    expectError(await h.call('POST', '/v1/webhooks', { key: owner, body }), 400, 'validation_error', field)
  })

  test('the boundaries are accepted: secrets of 8 and 256 chars', async () => {
    for (const secret of ['x'.repeat(8), 'y'.repeat(256)]) {
      const res = await h.call('POST', '/v1/webhooks', { key: owner, body: { ...GOOD, workspace_id: ws, secret } })
      expect(res.status).toBe(201)
    }
  })

  test('a body that is not JSON: 400 invalid_json', async () => {
    const res = await h.call('POST', '/v1/webhooks', { key: owner, raw: '{"url": ', headers: { 'content-type': 'application/json' } })
    expectError(res, 400, 'invalid_json')
  })

  test('WEBHOOK_ALLOW_HTTP=true accepts http:// (still not ftp://)', async () => {
    const key = await keyFor(relaxed, 'we-relaxed')
    const relaxedWs = await workspaceOf(relaxed, key, 'Relaxed')
    const ok = await relaxed.call('POST', '/v1/webhooks', { key, body: { ...GOOD, url: 'http://1.1.1.1/hook', workspace_id: relaxedWs } })
    expect(ok.status).toBe(201)
    expect(ok.body.data.url).toBe('http://1.1.1.1/hook')
    const ftp = await relaxed.call('POST', '/v1/webhooks', { key, body: { ...GOOD, url: 'ftp://1.1.1.1/hook', workspace_id: relaxedWs } })
    expectError(ftp, 400, 'validation_error', 'url')
    // The flag relaxes the scheme only: private addresses are still refused.
    const loop = await relaxed.call('POST', '/v1/webhooks', { key, body: { ...GOOD, url: 'http://127.0.0.1/hook', workspace_id: relaxedWs } })
    expectError(loop, 400, 'validation_error', 'url')
  })
})

describe('patch: bad bodies', () => {
  let id: string
  beforeAll(async () => {
    id = await register()
  })

  const cases: [string, Record<string, unknown>, string | undefined][] = [
    ['an empty object', {}, undefined],
    ['http:// URL', { url: 'http://1.1.1.1/x' }, 'url'],
    ['URL with credentials', { url: 'https://a:b@1.1.1.1/x' }, 'url'],
    ['URL of a host that does not resolve', { url: 'https://nonexistent.invalid/x' }, 'url'],
    ['empty events', { events: [] }, 'events'],
    ['unknown event name', { events: ['nope.nope'] }, 'events'],
    ['secret of 7 chars', { secret: 'short77' }, 'secret'],
    ['secret of 257 chars', { secret: 's'.repeat(257) }, 'secret'],
    ['enabled not a boolean', { enabled: 'yes' }, 'enabled'],
    ['unknown field', { workspace_id: 'ws_01jbz3k9x8q7r6s5t4v3w2y1z0' }, 'workspace_id'],
  ]
  test.each(cases)('%s', async (_, body, param) => {
    const before = (await h.call('GET', `/v1/webhooks/${id}`, { key: owner })).body.data
    const res = await h.call('PATCH', `/v1/webhooks/${id}`, { key: owner, body })
    expectError(res, 400, 'validation_error', param)
    expect((await h.call('GET', `/v1/webhooks/${id}`, { key: owner })).body.data).toEqual(before)
  })
})

describe('unknown ids and state conflicts', () => {
  test.each([
    ['GET', `/v1/webhooks/${UNKNOWN_WEBHOOK}`, undefined],
    ['PATCH', `/v1/webhooks/${UNKNOWN_WEBHOOK}`, { enabled: false }],
    ['DELETE', `/v1/webhooks/${UNKNOWN_WEBHOOK}`, undefined],
    ['POST', `/v1/webhooks/${UNKNOWN_WEBHOOK}/ping`, undefined],
    ['GET', `/v1/webhooks/${UNKNOWN_WEBHOOK}/deliveries`, undefined],
    ['GET', `/v1/webhooks/${UNKNOWN_WEBHOOK}/deliveries/${UNKNOWN_DELIVERY}`, undefined],
    ['POST', `/v1/webhooks/${UNKNOWN_WEBHOOK}/deliveries/${UNKNOWN_DELIVERY}/redeliver`, undefined],
  ])('%s %s → 404 not_found', async (method, path, body) => {
    expectError(await h.call(method, path, { key: owner, body }), 404, 'not_found')
  })

  test('an unknown delivery of a known webhook → 404 (get and redeliver)', async () => {
    const id = await register()
    expectError(await h.call('GET', `/v1/webhooks/${id}/deliveries/${UNKNOWN_DELIVERY}`, { key: owner }), 404, 'not_found')
    expectError(await h.call('POST', `/v1/webhooks/${id}/deliveries/${UNKNOWN_DELIVERY}/redeliver`, { key: owner }), 404, 'not_found')
  })

  test('a delivery of another webhook is not found under this one', async () => {
    const a = await register()
    const b = await register()
    const ping = await h.call('POST', `/v1/webhooks/${a}/ping`, { key: owner })
    expect(ping.status).toBe(202)
    expectError(await h.call('GET', `/v1/webhooks/${b}/deliveries/${ping.body.data.id}`, { key: owner }), 404, 'not_found')
    expectError(await h.call('POST', `/v1/webhooks/${b}/deliveries/${ping.body.data.id}/redeliver`, { key: owner }), 404, 'not_found')
  })

  test('redeliver of a pending delivery → 409 conflict, and the delivery is unchanged', async () => {
    const id = await register()
    const ping = await h.call('POST', `/v1/webhooks/${id}/ping`, { key: owner })
    expect(ping.status).toBe(202)
    const res = await h.call('POST', `/v1/webhooks/${id}/deliveries/${ping.body.data.id}/redeliver`, { key: owner })
    expectError(res, 409, 'conflict')
    const got = await h.call('GET', `/v1/webhooks/${id}/deliveries/${ping.body.data.id}`, { key: owner })
    expect(got.body.data).toEqual(ping.body.data)
  })

  test('list parameters: bad limit, cursor, sort and filter → 400', async () => {
    const id = await register()
    expectError(await h.call('GET', `/v1/webhooks?workspace_id=${ws}&limit=0`, { key: owner }), 400, 'validation_error')
    expectError(await h.call('GET', `/v1/webhooks?workspace_id=${ws}&limit=101`, { key: owner }), 400, 'validation_error')
    expectError(await h.call('GET', `/v1/webhooks?workspace_id=${ws}&cursor=garbage`, { key: owner }), 400, 'invalid_cursor')
    expectError(await h.call('GET', `/v1/webhooks?workspace_id=${ws}&sort=url`, { key: owner }), 400, 'invalid_sort')
    expectError(await h.call('GET', `/v1/webhooks/${id}/deliveries?status=exploded`, { key: owner }), 400, 'invalid_filter')
    expectError(await h.call('GET', `/v1/webhooks/${id}/deliveries?colour=blue`, { key: owner }), 400, 'invalid_filter')
  })
})

describe('workspace resolution', () => {
  test('registering: no workspace resolvable (none, or several) → 400 validation_error param workspace_id; listing needs none', async () => {
    const nobody = await keyFor(h, 'we-nobody')
    expectError(await h.call('POST', '/v1/webhooks', { key: nobody, body: GOOD }), 400, 'validation_error', 'workspace_id')
    // A list that names no workspace covers every workspace the caller can read: here none.
    expect(await h.call('GET', '/v1/webhooks', { key: nobody })).toMatchObject({ status: 200, body: { data: [], has_more: false, next_cursor: null } })

    const many = await keyFor(h, 'we-many')
    await workspaceOf(h, many, 'One')
    await workspaceOf(h, many, 'Two')
    expectError(await h.call('POST', '/v1/webhooks', { key: many, body: GOOD }), 400, 'validation_error', 'workspace_id')
    expect(await h.call('GET', '/v1/webhooks', { key: many })).toMatchObject({ status: 200, body: { data: [], has_more: false } })
  })

  test('a named workspace that does not exist → 404', async () => {
    const res = await h.call('POST', '/v1/webhooks', { key: owner, body: { ...GOOD, workspace_id: 'ws_01jbz3k9x8q7r6s5t4v3w2y1z0' } })
    expectError(res, 404, 'not_found')
  })

  test('no key → 401 unauthenticated', async () => {
    const res = await h.call('POST', '/v1/webhooks', { key: null, body: { ...GOOD, workspace_id: ws } })
    expectError(res, 401, 'unauthenticated')
    expect(res.headers.get('www-authenticate')).toContain('Bearer')
  })
})
