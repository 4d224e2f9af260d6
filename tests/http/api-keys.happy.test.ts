import { createHash } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { keyFor, startHarness, workspaceOf, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

let h: Harness
beforeAll(async () => {
  h = await startHarness({ RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000' })
})
afterAll(() => h.close())

const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/
const KEY = /^ap_[0-9A-Za-z]{40}$/
const META = { version: 'v1', deprecated_warnings: [] }
/** The fields of a listed key: never `key`, never `key_hash`. */
const LISTED_FIELDS = ['created_at', 'expires_at', 'id', 'issued_by', 'last_used_at', 'name', 'prefix', 'revoked_at', 'role_limit', 'root', 'user_id', 'workspace_id']

async function listKeys(key: string, query = '') {
  const res = await h.call('GET', `/v1/api-keys?limit=100${query}`, { key })
  expect(res.status).toBe(200)
  return res
}

describe('issuing', () => {
  test('root issues a key for any user: 201, the key once, in the general envelope', async () => {
    const res = await h.call('POST', '/v1/api-keys', { body: { user_id: 'kh-root-issued', name: 'CI pipeline' } })
    expect(res.status).toBe(201)
    const key: string = res.body.data.key
    expect(key).toMatch(KEY)
    expect(res.body).toEqual({
      request_id: res.headers.get('x-request-id')!,
      data: {
        id: expect.stringMatching(/^key_[0-9a-z]{26}$/),
        name: 'CI pipeline',
        prefix: key.slice(0, 7),
        user_id: 'kh-root-issued',
        issued_by: 'root',
        workspace_id: null,
        role_limit: null,
        root: false,
        expires_at: null,
        revoked_at: null,
        last_used_at: null,
        created_at: expect.stringMatching(ISO_MS),
        key,
      },
      meta: META,
    })
    // The key works, as its user.
    const ws = await h.call('POST', '/v1/workspaces', { key, body: { name: 'Mine' } })
    expect(ws.status).toBe(201)
    expect(ws.body.data.owner_id).toBe('kh-root-issued')
  })

  test('root issues a restricted, limited, expiring key: every field is kept', async () => {
    const owner = await keyFor(h, 'kh-fields')
    const ws = await workspaceOf(h, owner, 'Fields')
    const expires = new Date(Date.now() + 86_400_000)
    const res = await h.call('POST', '/v1/api-keys', {
      body: { user_id: 'kh-fields', name: 'limited', workspace_id: ws, role_limit: 'developer', expires_at: expires.toISOString() },
    })
    expect(res.status).toBe(201)
    expect(res.body.data).toMatchObject({ workspace_id: ws, role_limit: 'developer', expires_at: expires.toISOString() })
  })

  test('expires_at with a UTC offset is converted to Z', async () => {
    const res = await h.call('POST', '/v1/api-keys', { body: { user_id: 'kh-offset', name: 'offset', expires_at: '2099-06-01T12:00:00+02:00' } })
    expect(res.status).toBe(201)
    expect(res.body.data.expires_at).toBe('2099-06-01T10:00:00.000Z')
  })

  test('an admin issues a workspace key for a member; the member acts with its own role there', async () => {
    const admin = await keyFor(h, 'kh-admin')
    const ws = await workspaceOf(h, admin, 'Team')
    expect((await h.call('POST', `/v1/workspaces/${ws}/members`, { key: admin, body: { user_id: 'kh-member', role: 'developer' } })).status).toBe(201)

    const res = await h.call('POST', '/v1/api-keys', { key: admin, body: { user_id: 'kh-member', name: 'member ci', workspace_id: ws } })
    expect(res.status).toBe(201)
    // Capped at the member's role as it is issued, whatever its role becomes later.
    expect(res.body.data).toMatchObject({ user_id: 'kh-member', workspace_id: ws, role_limit: 'developer', root: false })
    const memberKey: string = res.body.data.key
    expect((await h.call('GET', `/v1/workspaces/${ws}`, { key: memberKey })).status).toBe(200)
    // A developer, not an admin: the key grants the member's role, not the issuer's.
    expect((await h.call('PATCH', `/v1/workspaces/${ws}`, { key: memberKey, body: { name: 'nope' } })).status).toBe(403)
    expect((await h.call('GET', '/v1/workspaces', { key: memberKey })).body.data.map((w: any) => w.id)).toEqual([ws])
  })

  test('a user issues a key for itself', async () => {
    const own = await keyFor(h, 'kh-self')
    const ws = await workspaceOf(h, own, 'Self')
    const res = await h.call('POST', '/v1/api-keys', { key: own, body: { user_id: 'kh-self', name: 'laptop' } })
    expect(res.status).toBe(201)
    expect(res.body.data).toMatchObject({ user_id: 'kh-self', workspace_id: null, role_limit: null })
    const fresh: string = res.body.data.key
    expect(fresh).not.toBe(own)
    const got = await h.call('GET', `/v1/workspaces/${ws}`, { key: fresh })
    expect(got.status).toBe(200)
    // The owner's own key keeps the owner's powers (no role limit crept in).
    expect((await h.call('PATCH', `/v1/workspaces/${ws}`, { key: fresh, body: { name: 'renamed' } })).status).toBe(200)
  })

  test('a read-only member issues a key for itself, restricted to its workspace', async () => {
    const owner = await keyFor(h, 'kh-ro-owner')
    const ws = await workspaceOf(h, owner, 'Readers')
    expect((await h.call('POST', `/v1/workspaces/${ws}/members`, { key: owner, body: { user_id: 'kh-reader', role: 'readonly' } })).status).toBe(201)
    const reader = await keyFor(h, 'kh-reader')
    const res = await h.call('POST', '/v1/api-keys', { key: reader, body: { user_id: 'kh-reader', name: 'mine', workspace_id: ws } })
    expect(res.status).toBe(201)
    expect(res.body.data.workspace_id).toBe(ws)
  })
})

describe('the key is shown once', () => {
  test('only the creation answer carries `key`; lists never carry `key` or `key_hash`; only the hash is stored', async () => {
    const res = await h.call('POST', '/v1/api-keys', { body: { user_id: 'kh-once', name: 'once' } })
    const { key, id } = res.body.data
    const mine = await keyFor(h, 'kh-once')

    for (const caller of [h.rootKey, mine]) {
      const listed = await listKeys(caller)
      expect(listed.body.data.length).toBeGreaterThan(0)
      for (const item of listed.body.data) expect(Object.keys(item).sort()).toEqual(LISTED_FIELDS)
      expect(listed.text).not.toContain(key)
      expect(listed.text).not.toContain('key_hash')
      expect(listed.body.data.find((k: any) => k.id === id)).toMatchObject({ id, prefix: key.slice(0, 7), user_id: 'kh-once' })
    }
    const revoked = await h.call('DELETE', `/v1/api-keys/${id}`)
    expect(revoked.body.data).not.toHaveProperty('key')
    expect(revoked.text).not.toContain(key)

    const [row] = await h.deps.db.sql<{ key_hash: string }[]>`select * from api_keys where id = ${id}`
    expect(row!.key_hash).toBe(createHash('sha256').update(key).digest('hex'))
    expect(JSON.stringify(row)).not.toContain(key)
  })
})

describe('list visibility', () => {
  test('root sees every key; a user its own; an admin its own and those of its workspace', async () => {
    const admin = await keyFor(h, 'kv-admin')
    const ws = await workspaceOf(h, admin, 'Visible keys')
    const elsewhere = await workspaceOf(h, await keyFor(h, 'kv-other-owner'), 'Elsewhere')
    expect((await h.call('POST', `/v1/workspaces/${ws}/members`, { key: admin, body: { user_id: 'kv-member', role: 'user' } })).status).toBe(201)
    expect((await h.call('POST', `/v1/workspaces/${elsewhere}/members`, { key: h.rootKey, body: { user_id: 'kv-member', role: 'user' } })).status).toBe(201)
    const memberPersonal = await h.call('POST', '/v1/api-keys', { body: { user_id: 'kv-member', name: 'personal' } })
    const memberWs = await h.call('POST', '/v1/api-keys', { key: admin, body: { user_id: 'kv-member', name: 'ws', workspace_id: ws } })
    const memberElsewhere = await h.call('POST', '/v1/api-keys', { body: { user_id: 'kv-member', name: 'elsewhere', workspace_id: elsewhere } })
    const stranger = await h.call('POST', '/v1/api-keys', { body: { user_id: 'kv-stranger', name: 'stranger' } })
    const ids = (res: any) => res.body.data.map((k: any) => k.id)

    const byRoot = ids(await listKeys(h.rootKey))
    for (const r of [memberPersonal, memberWs, memberElsewhere, stranger]) expect(byRoot).toContain(r.body.data.id)
    expect((await listKeys(h.rootKey)).body.data.some((k: any) => k.root)).toBe(true)

    const byAdmin = ids(await listKeys(admin))
    expect(byAdmin).toContain(memberWs.body.data.id)
    expect(byAdmin).not.toContain(memberPersonal.body.data.id)
    expect(byAdmin).not.toContain(memberElsewhere.body.data.id)
    expect(byAdmin).not.toContain(stranger.body.data.id)
    expect((await listKeys(admin)).body.data.every((k: any) => k.user_id === 'kv-admin' || k.workspace_id === ws)).toBe(true)

    const member = memberPersonal.body.data.key
    const byMember = (await listKeys(member)).body.data
    expect(byMember.map((k: any) => k.id).sort()).toEqual([memberPersonal, memberWs, memberElsewhere].map((r) => r.body.data.id).sort())
    expect(byMember.every((k: any) => k.user_id === 'kv-member')).toBe(true)

    const filtered = await listKeys(h.rootKey, `&workspace_id=${ws}`)
    expect(ids(filtered)).toEqual([memberWs.body.data.id])
  })
})

describe('revocation', () => {
  test('a user revokes its own key: 200 with revoked_at; the key then gets 401 at once', async () => {
    const own = await keyFor(h, 'kr-self')
    const res = await h.call('POST', '/v1/api-keys', { key: own, body: { user_id: 'kr-self', name: 'temporary' } })
    const { key, id } = res.body.data
    expect((await h.call('GET', '/v1/workspaces', { key })).status).toBe(200)

    const revoked = await h.call('DELETE', `/v1/api-keys/${id}`, { key: own })
    expect(revoked.status).toBe(200)
    expect(revoked.body.meta).toEqual(META)
    expect(revoked.body.data).toMatchObject({ id, user_id: 'kr-self' })
    expect(revoked.body.data.revoked_at).toMatch(ISO_MS)

    const after = await h.call('GET', '/v1/workspaces', { key })
    expect(after.status).toBe(401)
    expect(after.body.error.code).toBe('unauthenticated')
    expect(after.headers.get('www-authenticate')).toStartWith('Bearer')
    // The revoking key itself still works, and the list shows the revocation.
    const listed = await listKeys(own)
    expect(listed.body.data.find((k: any) => k.id === id).revoked_at).toBe(revoked.body.data.revoked_at)
  })

  test('revoking twice keeps the first revocation time', async () => {
    const res = await h.call('POST', '/v1/api-keys', { body: { user_id: 'kr-twice', name: 'twice' } })
    const first = await h.call('DELETE', `/v1/api-keys/${res.body.data.id}`)
    const second = await h.call('DELETE', `/v1/api-keys/${res.body.data.id}`)
    expect(first.status).toBe(200)
    expect(second.status).toBe(200)
    expect(second.body.data.revoked_at).toBe(first.body.data.revoked_at)
  })

  test('an admin revokes a member\'s workspace key', async () => {
    const admin = await keyFor(h, 'kr-admin')
    const ws = await workspaceOf(h, admin, 'Revokers')
    expect((await h.call('POST', `/v1/workspaces/${ws}/members`, { key: admin, body: { user_id: 'kr-member', role: 'developer' } })).status).toBe(201)
    const memberKey = await h.call('POST', '/v1/api-keys', { key: admin, body: { user_id: 'kr-member', name: 'm', workspace_id: ws } })
    expect((await h.call('GET', `/v1/workspaces/${ws}`, { key: memberKey.body.data.key })).status).toBe(200)
    expect((await h.call('DELETE', `/v1/api-keys/${memberKey.body.data.id}`, { key: admin })).status).toBe(200)
    expect((await h.call('GET', `/v1/workspaces/${ws}`, { key: memberKey.body.data.key })).status).toBe(401)
  })
})

describe('bootstrap', () => {
  test('the bootstrap root key exists, is listed as root, and works', async () => {
    const listed = await listKeys(h.rootKey)
    const roots = listed.body.data.filter((k: any) => k.root)
    expect(roots).toHaveLength(1)
    expect(roots[0]).toMatchObject({ user_id: 'root', issued_by: null, workspace_id: null, role_limit: null, revoked_at: null, prefix: h.rootKey.slice(0, 7) })
  })

  test('bootstrap() is a no-op once keys exist', async () => {
    const sql = h.deps.db.sql
    const count = async () => (await sql<{ n: number }[]>`select count(*)::int as n from api_keys`)[0]!.n
    const before = await count()
    expect(await h.deps.apiKeys.bootstrap(null)).toEqual({ created: false, key: null })
    const configured = `ap_${'B'.repeat(40)}`
    expect(await h.deps.apiKeys.bootstrap(configured)).toEqual({ created: false, key: null })
    expect(await count()).toBe(before)
    expect((await sql`select count(*)::int as n from api_keys where is_root`)[0]!.n).toBe(1)
    // The configured key was not installed.
    expect((await h.call('GET', '/v1/workspaces', { key: configured })).status).toBe(401)
  })
})
