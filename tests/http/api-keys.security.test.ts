import { createHash } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { ApiKeys, generateKey } from '../../src/domain/api-keys'
import { keyFor, startHarness, waitFor, workspaceOf, type Answer, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

let h: Harness
beforeAll(async () => {
  h = await startHarness({ RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000' })
})
afterAll(() => h.close())

let seq = 0
const uid = (p: string) => `ks-${p}-${++seq}`

function expectUnauthenticated(res: Answer) {
  expect({ status: res.status, code: res.body?.error?.code }).toEqual({ status: 401, code: 'unauthenticated' })
  expect(res.headers.get('www-authenticate')).toStartWith('Bearer')
  expect(res.body.request_id).toBe(res.headers.get('x-request-id')!)
}

function expectError(res: Answer, status: number, code: string) {
  expect({ status: res.status, code: res.body?.error?.code }).toEqual({ status, code })
}

async function issue(key: string, body: Record<string, unknown>) {
  return h.call('POST', '/v1/api-keys', { key, body: { name: 'issued', ...body } })
}

/** A workspace owned by a fresh admin, with members of the given roles; returns keys per user. */
async function team(roles: Record<string, string> = {}) {
  const owner = uid('owner')
  const ownerKey = await keyFor(h, owner)
  const ws = await workspaceOf(h, ownerKey, 'Keys')
  const users: Record<string, string> = {}
  for (const [name, role] of Object.entries(roles)) {
    users[name] = uid(name)
    expect((await h.call('POST', `/v1/workspaces/${ws}/members`, { key: ownerKey, body: { user_id: users[name], role } })).status).toBe(201)
  }
  return { ws, owner, ownerKey, users }
}

describe('malformed or unknown Authorization: 401 unauthenticated with WWW-Authenticate', () => {
  const unknown = generateKey()
  test.each([
    ['no header', null],
    ['Basic credentials', 'Basic dXNlcjpwYXNz'],
    ['Bearer without a key', 'Bearer'],
    ['the key without Bearer', '{root}'],
    ['another scheme', 'Token {root}'],
    ['a well-formed unknown key', `Bearer ${unknown}`],
    ['the root key with a character added', 'Bearer {root}x'],
    ['the root key truncated', 'Bearer {root-1}'],
    ['two tokens', 'Bearer {root} {root}'],
    ['characters a key never has', 'Bearer ap_<script>'],
    ['an oversized token', `Bearer ap_${'a'.repeat(4000)}`],
    ['a SQL-looking token', "Bearer ' or 1=1 --"],
  ] as const)('%s', async (_, header) => {
    const authorization = header?.replace('{root-1}', h.rootKey.slice(0, -1)).replaceAll('{root}', h.rootKey)
    const before = (await h.deps.db.sql`select count(*)::int as n from workspaces`)[0]!.n
    for (const [method, path, body] of [
      ['GET', '/v1/workspaces', undefined],
      ['POST', '/v1/workspaces', { name: 'sneaky' }],
      ['GET', '/v1/no-such-route', undefined],
    ] as const) {
      const res = await h.call(method, path, authorization ? { key: null, headers: { authorization }, body } : { key: null, body })
      expectUnauthenticated(res)
      expect(res.text).not.toContain(h.rootKey)
    }
    expect((await h.deps.db.sql`select count(*)::int as n from workspaces`)[0]!.n).toBe(before)
  })
})

describe('revocation', () => {
  test('takes effect on the very next request, even for a key that was just used', async () => {
    const user = uid('rev')
    const res = await issue(h.rootKey, { user_id: user })
    const { key, id } = res.body.data
    // Used several times: cached in process.
    for (let i = 0; i < 3; i++) expect((await h.call('GET', '/v1/workspaces', { key })).status).toBe(200)
    expect((await h.call('DELETE', `/v1/api-keys/${id}`)).status).toBe(200)
    expectUnauthenticated(await h.call('GET', '/v1/workspaces', { key }))
    expectUnauthenticated(await h.call('POST', '/v1/workspaces', { key, body: { name: 'after revoke' } }))
    expect((await h.deps.db.sql`select count(*)::int as n from workspaces where owner_id = ${user}`)[0]!.n).toBe(0)
  })

  test('reaches another process through Redis pub/sub', async () => {
    // A second authenticator on the same database and Redis stands in for another process.
    const other = new ApiKeys(h.deps.db.sql, h.deps.redis)
    await other.start()
    try {
      const res = await issue(h.rootKey, { user_id: uid('pubsub') })
      const { key, id } = res.body.data
      expect((await other.authenticate(key)).keyId).toBe(id)
      expect((await h.call('DELETE', `/v1/api-keys/${id}`)).status).toBe(200)
      await waitFor(() => other.authenticate(key).then(() => false, (err) => err.code === 'unauthenticated'), {
        timeoutMs: 5000,
        what: 'the other process to drop the revoked key',
      })
    } finally {
      await other.stop()
    }
  })
})

describe('expiry', () => {
  test('a key expiring a moment from now works, then gets 401', async () => {
    const expiresAt = Date.now() + 2000
    const res = await issue(h.rootKey, { user_id: uid('exp'), expires_at: new Date(expiresAt).toISOString() })
    expect(res.status).toBe(201)
    const { key } = res.body.data
    const before = await h.call('GET', '/v1/workspaces', { key })
    // Judged only when the answer came back before the expiry, so a slow machine cannot fail it.
    if (Date.now() < expiresAt) expect(before.status).toBe(200)
    const expired = (await waitFor(
      async () => {
        const r = await h.call('GET', '/v1/workspaces', { key })
        return r.status === 401 ? r : null
      },
      { timeoutMs: 6000, what: 'the key to expire' },
    ))!
    expectUnauthenticated(expired)
    expect(expired.body.error.message).toContain('expired')
  })

  test('a key whose expires_at is in the past (written in the database) gets 401', async () => {
    const key = generateKey()
    await h.deps.db.sql`
      insert into api_keys (id, key_hash, prefix, name, user_id, expires_at)
      values (${`key_expired${seq++}`}, ${createHash('sha256').update(key).digest('hex')}, ${key.slice(0, 7)}, 'old', ${uid('past')},
              now() - interval '1 minute')`
    expectUnauthenticated(await h.call('GET', '/v1/workspaces', { key }))
  })

  test.each([
    ['in the past', new Date(Date.now() - 60_000).toISOString()],
    ['now-ish (already past when checked)', new Date(Date.now() - 1).toISOString()],
    ['not a time', 'next tuesday'],
    ['a time without a date', '12:00'],
  ])('expires_at %s is 400 validation_error on expires_at', async (_, expires_at) => {
    const user = uid('bad-exp')
    const res = await issue(h.rootKey, { user_id: user, expires_at })
    expectError(res, 400, 'validation_error')
    expect(res.body.error.param).toBe('expires_at')
    expect(res.body.error.details[0].path).toBe('expires_at')
    expect((await h.call('GET', `/v1/api-keys?user_id=${user}`)).body.data).toEqual([])
  })
})

describe('a key cannot escalate', () => {
  test('a key restricted to A cannot issue a key for B: 403; without workspace_id it issues one restricted to A', async () => {
    const user = uid('esc')
    const own = await keyFor(h, user)
    const a = await workspaceOf(h, own, 'A')
    const b = await workspaceOf(h, own, 'B')
    const restricted = await keyFor(h, user, { workspace_id: a })

    const res = await issue(restricted, { user_id: user, workspace_id: b })
    expectError(res, 403, 'forbidden')
    expect((await h.call('GET', `/v1/api-keys?workspace_id=${b}`)).body.data).toEqual([])

    const child = await issue(restricted, { user_id: user })
    expect(child.status).toBe(201)
    expect(child.body.data.workspace_id).toBe(a)
    expectError(await h.call('GET', `/v1/workspaces/${b}`, { key: child.body.data.key }), 404, 'not_found')
  })

  test.each([
    ['no role_limit', undefined, 'developer'],
    ['a higher role_limit', 'admin', 'developer'],
    ['the same role_limit', 'developer', 'developer'],
    ['a lower role_limit', 'user', 'user'],
  ] as const)('a key limited to developer asking for %s gets %s', async (_, asked, got) => {
    const t = await team()
    const limited = await keyFor(h, t.owner, { role_limit: 'developer' })
    const res = await issue(limited, { user_id: t.owner, ...(asked ? { role_limit: asked } : {}) })
    expect(res.status).toBe(201)
    expect(res.body.data.role_limit).toBe(got)
    // The cap is real: the owner's child key cannot do admin work.
    expectError(await h.call('PATCH', `/v1/workspaces/${t.ws}`, { key: res.body.data.key, body: { name: 'escalated' } }), 403, 'forbidden')
    expect((await h.call('GET', `/v1/workspaces/${t.ws}`)).body.data.name).toBe('Keys')
  })

  test.each([
    ['a user issuing a key for another user outside a workspace', 403, 'forbidden', async () => {
      const t = await team({ member: 'developer' })
      return { key: t.ownerKey, body: { user_id: t.users.member! } }
    }],
    ['a developer issuing a workspace key for another member', 403, 'forbidden', async () => {
      const t = await team({ dev: 'developer', other: 'user' })
      return { key: await keyFor(h, t.users.dev!), body: { user_id: t.users.other!, workspace_id: t.ws } }
    }],
    ['an admin whose key is limited to user issuing a workspace key for a member', 403, 'forbidden', async () => {
      const t = await team({ admin: 'admin', other: 'user' })
      return { key: await keyFor(h, t.users.admin!, { role_limit: 'user' }), body: { user_id: t.users.other!, workspace_id: t.ws } }
    }],
    ['a non-member issuing a key for someone else\'s workspace', 404, 'not_found', async () => {
      const t = await team()
      const outsider = uid('outsider')
      return { key: await keyFor(h, outsider), body: { user_id: outsider, workspace_id: t.ws } }
    }],
    ['an admin issuing a workspace key for a non-member', 400, 'validation_error', async () => {
      const t = await team()
      return { key: t.ownerKey, body: { user_id: uid('nonmember'), workspace_id: t.ws } }
    }],
    ['anyone asking for a root key', 400, 'validation_error', async () => {
      const t = await team()
      return { key: t.ownerKey, body: { user_id: t.owner, root: true } }
    }],
  ] as const)('%s: %d %s', async (_, status, code, arrange) => {
    const { key, body } = await arrange()
    const before = (await h.deps.db.sql`select count(*)::int as n from api_keys`)[0]!.n
    expectError(await issue(key, body), status, code)
    expect((await h.deps.db.sql`select count(*)::int as n from api_keys`)[0]!.n).toBe(before)
  })
})

describe('revoking someone else\'s key', () => {
  test.each([
    ['a user revoking another user\'s key', async () => {
      const victim = await issue(h.rootKey, { user_id: uid('victim') })
      return { key: await keyFor(h, uid('attacker')), victim: victim.body.data }
    }],
    ['a developer revoking a workspace key of its admin', async () => {
      const t = await team({ dev: 'developer' })
      const victim = await issue(t.ownerKey, { user_id: t.owner, workspace_id: t.ws })
      return { key: await keyFor(h, t.users.dev!), victim: victim.body.data }
    }],
    ['an admin revoking a member\'s personal (unrestricted) key', async () => {
      const t = await team({ member: 'user' })
      const victim = await issue(h.rootKey, { user_id: t.users.member! })
      return { key: t.ownerKey, victim: victim.body.data }
    }],
    ['a key restricted to A revoking its own user\'s key for B', async () => {
      const user = uid('split')
      const own = await keyFor(h, user)
      const a = await workspaceOf(h, own, 'A')
      const b = await workspaceOf(h, own, 'B')
      const victim = await issue(own, { user_id: user, workspace_id: b })
      return { key: await keyFor(h, user, { workspace_id: a }), victim: victim.body.data }
    }],
    ['a non-root key revoking the bootstrap root key', async () => {
      const root = (await h.call('GET', '/v1/api-keys?limit=100')).body.data.find((k: any) => k.root)
      const t = await team()
      return { key: t.ownerKey, victim: { ...root, key: h.rootKey } }
    }],
  ] as const)('%s is 404 and the key keeps working', async (_, arrange) => {
    const { key, victim } = await arrange()
    expectError(await h.call('DELETE', `/v1/api-keys/${victim.id}`, { key }), 404, 'not_found')
    expect((await h.call('GET', '/v1/workspaces', { key: victim.key })).status).toBe(200)
    const [row] = await h.deps.db.sql<{ revoked_at: Date | null }[]>`select revoked_at from api_keys where id = ${victim.id}`
    expect(row!.revoked_at).toBeNull()
  })

  test('an unknown key id is 404', async () => {
    expectError(await h.call('DELETE', '/v1/api-keys/key_01jbz3k9x8q7r6s5t4v3w2y1z0'), 404, 'not_found')
  })
})
