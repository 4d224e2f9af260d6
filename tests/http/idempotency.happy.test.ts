import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { sha256Hex } from '../../src/lib/crypto'
import { keyFor, startHarness, workspaceOf, type Answer, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

let h: Harness
let alice: string
let bob: string

beforeAll(async () => {
  h = await startHarness()
  alice = await keyFor(h, 'alice')
  bob = await keyFor(h, 'bob')
}, 30_000)
afterAll(() => h.close())

const withKey = (key: string, extra: Record<string, string> = {}) => ({ 'idempotency-key': key, ...extra })

async function countNamed(name: string): Promise<number> {
  const [row] = await h.deps.db.sql<{ n: number }[]>`select count(*)::int as n from workspaces where name = ${name}`
  return row!.n
}

/** The Redis record of an Idempotency-Key, where the service keeps it (scope: API key + key string). */
async function recordOf(apiKey: string, idemKey: string): Promise<string> {
  const caller = await h.deps.apiKeys.authenticate(apiKey)
  return `idem:${caller.keyId}:${sha256Hex(idemKey)}`
}

function expectReplayOf(replay: Answer, first: Answer) {
  expect(replay.status).toBe(first.status)
  expect(replay.text).toBe(first.text)
  expect(replay.headers.get('idempotent-replayed')).toBe('true')
  expect(replay.headers.get('content-type')).toBe(first.headers.get('content-type'))
  // The header names this request; the body is the first answer, byte for byte.
  expect(replay.headers.get('x-request-id')).toMatch(/^req_/)
  expect(replay.headers.get('x-request-id')).not.toBe(first.headers.get('x-request-id'))
}

describe('replay', () => {
  test('same key and body: the stored answer byte for byte, and no second workspace', async () => {
    const send = () => h.call('POST', '/v1/workspaces', { key: alice, body: { name: 'Replayed once', description: 'd' }, headers: withKey('create-1') })
    const first = await send()
    expect(first.status).toBe(201)
    expect(first.headers.get('idempotent-replayed')).toBeNull()
    const second = await send()
    const third = await send()
    expectReplayOf(second, first)
    expectReplayOf(third, first)
    expect(second.body.request_id).toBe(first.body.request_id)
    expect(await countNamed('Replayed once')).toBe(1)
    const listed = await h.call('GET', '/v1/workspaces?limit=100', { key: alice })
    expect(listed.body.data.filter((w: { name: string }) => w.name === 'Replayed once')).toHaveLength(1)
  })

  test('the JSON text is compared as sent: the same bytes replay, whitespace included', async () => {
    const raw = '{ "name" : "Spaced" }'
    const send = () => h.call('POST', '/v1/workspaces', { key: alice, raw, headers: withKey('spaced', { 'content-type': 'application/json' }) })
    const first = await send()
    expect(first.status).toBe(201)
    expectReplayOf(await send(), first)
    expect(await countNamed('Spaced')).toBe(1)
  })

  test('a client X-Request-Id on the replay is echoed in the header only', async () => {
    const send = (rid: string) => h.call('POST', '/v1/workspaces', { key: alice, body: { name: 'Rid' }, headers: withKey('rid', { 'x-request-id': rid }) })
    const first = await send('first-call')
    const replay = await send('second-call')
    expect(first.body.request_id).toBe('first-call')
    expect(replay.headers.get('x-request-id')).toBe('second-call')
    expect(replay.text).toBe(first.text)
  })

  test.each([
    ['PATCH', 'a rename', (ws: string) => ({ method: 'PATCH', path: `/v1/workspaces/${ws}`, body: { name: 'Renamed by key' } })],
    ['POST', 'an archive', (ws: string) => ({ method: 'POST', path: `/v1/workspaces/${ws}/archive`, body: undefined })],
    ['POST', 'a member added', (ws: string) => ({ method: 'POST', path: `/v1/workspaces/${ws}/members`, body: { user_id: 'bob', role: 'developer' } })],
    ['DELETE', 'a deletion', (ws: string) => ({ method: 'DELETE', path: `/v1/workspaces/${ws}`, body: undefined })],
  ])('%s: %s replays its first answer instead of running again', async (_m, what, request) => {
    const ws = await workspaceOf(h, alice, `For ${what}`)
    const r = request(ws)
    const send = () => h.call(r.method, r.path, { key: alice, body: r.body, headers: withKey(`${what}-${ws}`) })
    const first = await send()
    expect(first.status).toBeLessThan(300)
    // Run again without the key it would answer 409/404 or change something; with the key it replays.
    expectReplayOf(await send(), first)
  })

  test('a replay is no second side effect even after the resource changed meanwhile', async () => {
    const ws = await workspaceOf(h, alice, 'Before')
    const rename = () => h.call('PATCH', `/v1/workspaces/${ws}`, { key: alice, body: { name: 'After key' }, headers: withKey(`rename-${ws}`) })
    const first = await rename()
    expect(first.body.data.name).toBe('After key')
    expect((await h.call('PATCH', `/v1/workspaces/${ws}`, { key: alice, body: { name: 'Changed later' } })).status).toBe(200)
    const replay = await rename()
    expectReplayOf(replay, first)
    expect(replay.body.data.name).toBe('After key')
    expect((await h.call('GET', `/v1/workspaces/${ws}`, { key: alice })).body.data.name).toBe('Changed later')
  })

  test('404 is stored and replayed', async () => {
    const send = () => h.call('POST', '/v1/workspaces/ws_00000000000000000000000000/archive', { key: alice, headers: withKey('missing-archive') })
    const first = await send()
    expect(first.status).toBe(404)
    expect(first.body.error.code).toBe('not_found')
    expectReplayOf(await send(), first)
    expect(await h.deps.redis.get(await recordOf(alice, 'missing-archive'))).toContain('"s":"done"')
  })

  test('different keys are different requests', async () => {
    const a = await h.call('POST', '/v1/workspaces', { key: alice, body: { name: 'Twice by keys' }, headers: withKey('k-a') })
    const b = await h.call('POST', '/v1/workspaces', { key: alice, body: { name: 'Twice by keys' }, headers: withKey('k-b') })
    expect([a.status, b.status]).toEqual([201, 201])
    expect(a.body.data.id).not.toBe(b.body.data.id)
    expect(b.headers.get('idempotent-replayed')).toBeNull()
    expect(await countNamed('Twice by keys')).toBe(2)
  })

  test('without a key the same request runs twice', async () => {
    for (let i = 0; i < 2; i++) expect((await h.call('POST', '/v1/workspaces', { key: alice, body: { name: 'No key' } })).status).toBe(201)
    expect(await countNamed('No key')).toBe(2)
  })
})

describe('scope', () => {
  test('the same key string from another API key executes anew', async () => {
    const body = { name: 'Scoped' }
    const a = await h.call('POST', '/v1/workspaces', { key: alice, body, headers: withKey('shared-key') })
    const b = await h.call('POST', '/v1/workspaces', { key: bob, body, headers: withKey('shared-key') })
    expect([a.status, b.status]).toEqual([201, 201])
    expect(b.headers.get('idempotent-replayed')).toBeNull()
    expect(a.body.data.owner_id).toBe('alice')
    expect(b.body.data.owner_id).toBe('bob')
    expect(await countNamed('Scoped')).toBe(2)
    // Each replays its own answer.
    expectReplayOf(await h.call('POST', '/v1/workspaces', { key: bob, body, headers: withKey('shared-key') }), b)
    expectReplayOf(await h.call('POST', '/v1/workspaces', { key: alice, body, headers: withKey('shared-key') }), a)
  })

  test('two API keys of the same user are two scopes', async () => {
    const alice2 = await keyFor(h, 'alice')
    const body = { name: 'Per API key' }
    const a = await h.call('POST', '/v1/workspaces', { key: alice, body, headers: withKey('per-api-key') })
    const b = await h.call('POST', '/v1/workspaces', { key: alice2, body, headers: withKey('per-api-key') })
    expect(b.headers.get('idempotent-replayed')).toBeNull()
    expect(a.body.data.id).not.toBe(b.body.data.id)
  })
})

describe('storage', () => {
  test('the record lives 24 h after completion', async () => {
    const res = await h.call('POST', '/v1/workspaces', { key: alice, body: { name: 'Ttl' }, headers: withKey('ttl') })
    expect(res.status).toBe(201)
    const ttl = await h.deps.redis.pttl(await recordOf(alice, 'ttl'))
    expect(ttl).toBeGreaterThan(86_400_000 - 60_000)
    expect(ttl).toBeLessThanOrEqual(86_400_000)
  })

  test('the record holds the answer, not the body sent', async () => {
    await h.call('POST', '/v1/workspaces', { key: alice, body: { name: 'Stored', description: 'secret-ish text' }, headers: withKey('stored') })
    const raw = await h.deps.redis.get(await recordOf(alice, 'stored'))
    const record = JSON.parse(raw!)
    expect(record.s).toBe('done')
    expect(record.status).toBe(201)
    expect(JSON.parse(record.body).data.name).toBe('Stored')
  })

  test.each([
    ['1 character', 'x'],
    ['255 characters', 'k'.repeat(255)],
    ['inner spaces and punctuation', 'order 42 / retry #1 ~!@$%^&*()'],
    ['a UUID', '0b5c2d1e-8f3a-4c6b-9d7e-1a2b3c4d5e6f'],
  ])('a key of %s is accepted and replays', async (_what, idemKey) => {
    const send = () => h.call('POST', '/v1/workspaces', { key: alice, body: { name: `Key ${idemKey.length}` }, headers: withKey(idemKey) })
    const first = await send()
    expect(first.status).toBe(201)
    expectReplayOf(await send(), first)
  })
})

describe('reads', () => {
  test('GET ignores the header: no replay, no validation of the key', async () => {
    for (const idemKey of ['reads', 'k'.repeat(300)]) {
      const a = await h.call('GET', '/v1/workspaces', { key: alice, headers: withKey(idemKey) })
      const b = await h.call('GET', '/v1/workspaces', { key: alice, headers: withKey(idemKey) })
      expect([a.status, b.status]).toEqual([200, 200])
      expect(b.headers.get('idempotent-replayed')).toBeNull()
      expect(b.body.request_id).not.toBe(a.body.request_id)
    }
    expect(await h.deps.redis.get(await recordOf(alice, 'reads'))).toBeNull()
  })

  test('a GET sees the effect of a new write after a replayed one', async () => {
    const ws = await workspaceOf(h, alice, 'Read after')
    const before = (await h.call('GET', `/v1/workspaces/${ws}`, { key: alice })).text
    await h.call('PATCH', `/v1/workspaces/${ws}`, { key: alice, body: { description: 'x' }, headers: withKey(`read-after-${ws}`) })
    const after = await h.call('GET', `/v1/workspaces/${ws}`, { key: alice })
    expect(after.text).not.toBe(before)
    expect(after.body.data.description).toBe('x')
  })
})
