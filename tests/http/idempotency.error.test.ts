import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { sha256Hex } from '../../src/lib/crypto'
import { keyFor, startHarness, waitFor, workspaceOf, type Answer, type CallOptions, type Harness } from '../helpers/harness'
import { holdWorkspaceInserts } from '../helpers/locks'

setDefaultTimeout(TEST_TIMEOUT_MS)

let h: Harness
let alice: string
let ws: string

beforeAll(async () => {
  h = await startHarness()
  alice = await keyFor(h, 'alice')
  ws = await workspaceOf(h, alice, 'Idempotency errors')
}, 30_000)
afterAll(() => h.close())

const withKey = (key: string, extra: Record<string, string> = {}) => ({ 'idempotency-key': key, ...extra })

async function recordOf(apiKey: string, idemKey: string): Promise<string> {
  const caller = await h.deps.apiKeys.authenticate(apiKey)
  return `idem:${caller.keyId}:${sha256Hex(idemKey)}`
}

async function countNamed(name: string): Promise<number> {
  const [row] = await h.deps.db.sql<{ n: number }[]>`select count(*)::int as n from workspaces where name = ${name}`
  return row!.n
}

function expectCode(res: Answer, status: number, code: string) {
  expect({ status: res.status, code: res.body?.error?.code }).toEqual({ status, code })
  expect(res.headers.get('idempotent-replayed')).toBeNull()
  expect(res.headers.get('x-request-id')).toBe(res.body.request_id)
}

describe('422 idempotency_key_reused', () => {
  interface Call { method: string; path: string; opts: CallOptions }
  const json = (raw: string): CallOptions => ({ raw, headers: { 'content-type': 'application/json' } })
  const cases: [string, (ws: string) => Call, (ws: string) => Call][] = [
    ['another body',
      () => ({ method: 'POST', path: '/v1/workspaces', opts: { body: { name: 'Fingerprint' } } }),
      () => ({ method: 'POST', path: '/v1/workspaces', opts: { body: { name: 'Fingerprint 2' } } })],
    ['an extra field in the body',
      () => ({ method: 'POST', path: '/v1/workspaces', opts: { body: { name: 'Fingerprint' } } }),
      () => ({ method: 'POST', path: '/v1/workspaces', opts: { body: { name: 'Fingerprint', description: '' } } })],
    ['the same object with other whitespace',
      () => ({ method: 'POST', path: '/v1/workspaces', opts: json('{"name":"Fingerprint"}') }),
      () => ({ method: 'POST', path: '/v1/workspaces', opts: json('{"name": "Fingerprint"}') })],
    ['a query string',
      () => ({ method: 'POST', path: '/v1/workspaces', opts: { body: { name: 'Fingerprint' } } }),
      () => ({ method: 'POST', path: '/v1/workspaces?x=1', opts: { body: { name: 'Fingerprint' } } })],
    ['another path',
      (w) => ({ method: 'POST', path: `/v1/workspaces/${w}/archive`, opts: {} }),
      (w) => ({ method: 'POST', path: `/v1/workspaces/${w}/restore`, opts: {} })],
    ['another method',
      (w) => ({ method: 'PATCH', path: `/v1/workspaces/${w}`, opts: json('{"name":"Same body"}') }),
      (w) => ({ method: 'DELETE', path: `/v1/workspaces/${w}`, opts: json('{"name":"Same body"}') })],
  ]
  test.each(cases)('same key with %s', async (what, firstCall, secondCall) => {
    const target = await workspaceOf(h, alice, `Target of ${what}`)
    const idemKey = `reused-${what}`
    const send = (c: Call) => h.call(c.method, c.path, { ...c.opts, key: alice, headers: { ...c.opts.headers, ...withKey(idemKey) } })
    const first = await send(firstCall(target))
    expect(first.status).toBeLessThan(300)
    const res = await send(secondCall(target))
    expectCode(res, 422, 'idempotency_key_reused')
    expect(res.body.error.param).toBe('Idempotency-Key')
    // The refusal executed nothing (the workspace is still there) and the first request still replays.
    expect((await h.call('GET', `/v1/workspaces/${target}`, { key: alice })).status).toBe(200)
    const replay = await send(firstCall(target))
    expect(replay.text).toBe(first.text)
    expect(replay.headers.get('idempotent-replayed')).toBe('true')
  })
})

describe('409 idempotency_key_in_use', () => {
  test('while the first request executes; afterwards it replays', async () => {
    const idemKey = 'in-flight'
    const send = (name = 'In flight') => h.call('POST', '/v1/workspaces', { key: alice, body: { name }, headers: withKey(idemKey) })
    // Warm the key cache: the held request then needs the database only for its insert.
    expect((await h.call('GET', '/v1/workspaces?limit=1', { key: alice })).status).toBe(200)
    const record = await recordOf(alice, idemKey)
    const hold = await holdWorkspaceInserts(h)
    let first: Promise<Answer> | undefined
    try {
      first = send()
      await waitFor(async () => (await h.deps.redis.get(record))?.includes('"s":"pending"'), { what: 'the first request to take its key' })
      const again = await send()
      expectCode(again, 409, 'idempotency_key_in_use')
      expect(again.body.error.param).toBe('Idempotency-Key')
      // A different body with the same key is still 422, in flight or not.
      expectCode(await send('Other body'), 422, 'idempotency_key_reused')
    } finally {
      await hold.release()
    }
    const done = await first!
    expect(done.status).toBe(201)
    const replay = await send()
    expect(replay.text).toBe(done.text)
    expect(replay.headers.get('idempotent-replayed')).toBe('true')
    expect(await countNamed('In flight')).toBe(1)
  })

  test('concurrent requests with one key: exactly one executes, the others are 409', async () => {
    const idemKey = 'stampede'
    const hold = await holdWorkspaceInserts(h)
    let settled = 0
    let pending: Promise<Answer>[] = []
    try {
      pending = Array.from({ length: 8 }, () =>
        h.call('POST', '/v1/workspaces', { key: alice, body: { name: 'Stampede' }, headers: withKey(idemKey) }).finally(() => settled++),
      )
      // Seven are refused while the one that took the key waits on the held insert.
      await waitFor(() => settled === 7, { what: 'seven answers' })
    } finally {
      await hold.release()
    }
    const statuses = (await Promise.all(pending)).map((a) => a.status).sort()
    expect(statuses).toEqual([201, 409, 409, 409, 409, 409, 409, 409])
    expect(await countNamed('Stampede')).toBe(1)
  })
})

describe('outcomes that are not stored', () => {
  test.each([
    ['a validation failure', { body: { name: '' } }],
    ['an unknown field', { body: { name: 'x', bogus: true } }],
    ['broken JSON', { raw: '{"name":', headers: { 'content-type': 'application/json' } }],
    ['a wrong Content-Type', { raw: '{"name":"x"}', headers: { 'content-type': 'text/plain' } }],
    ['a form body', { raw: 'name=x', headers: { 'content-type': 'application/x-www-form-urlencoded' } }],
  ])('400 for %s: the same key then runs with a good body', async (what, bad) => {
    const idemKey = `bad-then-good-${what}`
    const refused = await h.call('POST', '/v1/workspaces', { ...(bad as CallOptions), key: alice, headers: { ...(bad as CallOptions).headers, ...withKey(idemKey) } })
    expect(refused.status).toBe(400)
    expect(await h.deps.redis.get(await recordOf(alice, idemKey))).toBeNull()
    const good = await h.call('POST', '/v1/workspaces', { key: alice, body: { name: `Good after ${what}` }, headers: withKey(idemKey) })
    expect(good.status).toBe(201)
    expect(good.headers.get('idempotent-replayed')).toBeNull()
  })

  test('409 conflict: not stored, so the same request runs again once the conflict is gone', async () => {
    const idemKey = 'conflict-then-ok'
    const add = () => h.call('POST', `/v1/workspaces/${ws}/members`, { key: alice, body: { user_id: 'zed', role: 'user' }, headers: withKey(idemKey) })
    expect((await h.call('POST', `/v1/workspaces/${ws}/members`, { key: alice, body: { user_id: 'zed', role: 'admin' } })).status).toBe(201)
    const conflict = await add()
    expectCode(conflict, 409, 'conflict')
    expect(await h.deps.redis.get(await recordOf(alice, idemKey))).toBeNull()
    expectCode(await add(), 409, 'conflict')
    expect((await h.call('DELETE', `/v1/workspaces/${ws}/members/zed`, { key: alice })).status).toBe(200)
    const added = await add()
    expect(added.status).toBe(201)
    expect(added.body.data.role).toBe('user')
    expect(added.headers.get('idempotent-replayed')).toBeNull()
  })

  test('401: a bad API key never touches the record of a good one', async () => {
    const idemKey = 'unauth'
    const res = await h.call('POST', '/v1/workspaces', { key: `ap_${'0'.repeat(40)}`, body: { name: 'Unauth' }, headers: withKey(idemKey) })
    expect(res.status).toBe(401)
    const good = await h.call('POST', '/v1/workspaces', { key: alice, body: { name: 'Unauth' }, headers: withKey(idemKey) })
    expect(good.status).toBe(201)
    expect(good.headers.get('idempotent-replayed')).toBeNull()
  })
})

describe('Idempotency-Key format', () => {
  test.each([
    ['256 characters', 'k'.repeat(256)],
    ['1000 characters', 'k'.repeat(1000)],
    ['empty', ''],
    ['a tab', 'a\tb'],
    ['a non-ASCII letter', 'clé'],
    ['a DEL character', 'a\u007fb'],
  ])('%s: 400 validation_error naming the header, nothing executed', async (what, idemKey) => {
    const name = `Bad key ${what}`
    const res = await h.call('POST', '/v1/workspaces', { key: alice, body: { name }, headers: withKey(idemKey) })
    expectCode(res, 400, 'validation_error')
    expect(res.body.error.param).toBe('Idempotency-Key')
    expect(res.body.error.details[0].path).toBe('headers.idempotency-key')
    expect(await countNamed(name)).toBe(0)
  })
})
