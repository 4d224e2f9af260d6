import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { createAgent, createWorkflow } from '../helpers/agents'
import { keyFor, startHarness, workspaceOf, type Answer, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Impersonation: one user acting as another. A key carries its user_id into every write, the audit
 * trail and webhooks, so issuing a key for someone is acting as them. The rule (docs/decisions.md, "API keys"):
 * anyone for itself; an admin or the owner only for members below its own role; root for anyone. The
 * same for the user_id a caller names in runs and chats: below developer, only its own.
 */
let h: Harness
beforeAll(async () => {
  h = await startHarness({ RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000' })
})
afterAll(() => h.close())

type Who = 'owner' | 'admin' | 'developer' | 'user' | 'readonly'
const MEMBERS: Exclude<Who, 'owner'>[] = ['admin', 'developer', 'user', 'readonly']
const rank: Record<Who, number> = { readonly: 0, user: 1, developer: 2, admin: 3, owner: 4 }

let seq = 0
const uid = (p: string) => `imp-${p}-${++seq}`

/** A workspace with its owner and two members of every role (one to act, one to be acted for). */
async function team() {
  const owner = uid('owner')
  const ownerKey = await keyFor(h, owner)
  const ws = await workspaceOf(h, ownerKey, 'Impersonation')
  const actors: Record<Who, string> = { owner } as Record<Who, string>
  const targets: Record<Who, string> = { owner } as Record<Who, string>
  for (const role of MEMBERS) {
    for (const side of [actors, targets]) {
      side[role] = uid(role)
      const res = await h.call('POST', `/v1/workspaces/${ws}/members`, { key: ownerKey, body: { user_id: side[role], role } })
      expect(res.status).toBe(201)
    }
  }
  const keys = {} as Record<Who, string>
  for (const who of Object.keys(actors) as Who[]) keys[who] = who === 'owner' ? ownerKey : await keyFor(h, actors[who])
  return { ws, owner, ownerKey, actors, targets, keys }
}

const keyCount = async () => (await h.deps.db.sql`select count(*)::int as n from api_keys`)[0]!.n as number

function expectError(res: Answer, status: number, code: string) {
  expect({ status: res.status, code: res.body?.error?.code }).toEqual({ status, code })
}

describe('issuing a workspace key for another member: the whole role matrix', () => {
  // caller × target: root and the caller itself always may; an admin/owner for members strictly
  // below it; below admin, nobody else (manage is needed at all).
  const table = (['owner', ...MEMBERS] as Who[]).flatMap((caller) =>
    // (The owner issuing for the owner is its 'self' row.)
    (['owner', ...MEMBERS, 'self'] as const).filter((target) => !(caller === 'owner' && target === 'owner')).map((target) => {
      const allowed = target === 'self' || (rank[caller] >= rank.admin && rank[target as Who] < rank[caller])
      return [caller, target, allowed ? 201 : 403] as const
    }),
  )

  test.each(table)('%s issuing for %s → %d', async (caller, target, status) => {
    const t = await team()
    const userId = target === 'self' ? t.actors[caller] : target === 'owner' ? t.owner : t.targets[target]
    const before = await keyCount()
    const res = await h.call('POST', '/v1/api-keys', { key: t.keys[caller], body: { user_id: userId, name: 'for someone', workspace_id: t.ws } })
    if (status === 403) {
      expectError(res, 403, 'forbidden')
      expect(await keyCount()).toBe(before)
      return
    }
    expect(res.status).toBe(201)
    expect(res.body.data.issued_by).toBe(t.actors[caller])
    // A key for a member is capped at the member's role as it is issued (below its issuer's); a key
    // of one's own follows one's own role.
    expect(res.body.data.role_limit).toBe(target === 'self' ? null : target)
  })

  test('root issues for the owner (201), the key records root as its issuer', async () => {
    const t = await team()
    const res = await h.call('POST', '/v1/api-keys', { body: { user_id: t.owner, name: 'support', workspace_id: t.ws } })
    expect(res.status).toBe(201)
    expect(res.body.data).toMatchObject({ user_id: t.owner, issued_by: 'root', role_limit: null })
  })

  test('an admin asking for a role_limit above its own gets its own role', async () => {
    const t = await team()
    const res = await h.call('POST', '/v1/api-keys', { key: t.keys.admin, body: { user_id: t.actors.admin, name: 'self', workspace_id: t.ws, role_limit: 'admin' } })
    expect(res.body.data.role_limit).toBe('admin')
    const dev = await h.call('POST', '/v1/api-keys', { key: t.keys.developer, body: { user_id: t.actors.developer, name: 'self', workspace_id: t.ws, role_limit: 'admin' } })
    expect(dev.status).toBe(201)
    expect(dev.body.data.role_limit).toBe('developer')
  })
})

describe('the attack as reported: an admin minting a key for the owner', () => {
  test('is refused, so the admin cannot transfer or delete the workspace as the owner; the audit names the real actor', async () => {
    const t = await team()
    const before = await keyCount()
    const res = await h.call('POST', '/v1/api-keys', { key: t.keys.admin, body: { user_id: t.owner, name: 'totally the owner', workspace_id: t.ws } })
    expectError(res, 403, 'forbidden')
    expect(res.body.error.param).toBe('user_id')
    expect(await keyCount()).toBe(before)
    // Another admin is a peer, not below: refused too, with or without a lower role_limit asked.
    for (const role_limit of [undefined, 'readonly']) {
      const peer = await h.call('POST', '/v1/api-keys', { key: t.keys.admin, body: { user_id: t.targets.admin, name: 'peer', workspace_id: t.ws, ...(role_limit ? { role_limit } : {}) } })
      expectError(peer, 403, 'forbidden')
    }
    // What the admin can do, it does as itself.
    expect((await h.call('POST', `/v1/workspaces/${t.ws}/transfer`, { key: t.keys.admin, body: { new_owner_id: t.actors.admin } })).status).toBe(403)
    expect((await h.call('DELETE', `/v1/workspaces/${t.ws}`, { key: t.keys.admin })).status).toBe(403)
    const ws = (await h.call('GET', `/v1/workspaces/${t.ws}`)).body.data
    expect(ws.owner_id).toBe(t.owner)
  })

  test('a key an admin issued for a member: its writes are audited as the member, issued by the admin', async () => {
    const t = await team()
    const issued = await h.call('POST', '/v1/api-keys', { key: t.keys.admin, body: { user_id: t.targets.developer, name: 'delegated', workspace_id: t.ws } })
    expect(issued.status).toBe(201)
    const wf = await h.call('POST', '/v1/workflows', {
      key: issued.body.data.key,
      body: { workspace_id: t.ws, name: 'made with a delegated key', graph: { nodes: [{ id: 'start', type: 'start', config: {} }, { id: 'end', type: 'end', config: { outputs: {} } }], edges: [{ source: 'start', target: 'end' }] } },
    })
    expect(wf.status).toBe(201)
    const audit = await h.call('GET', `/v1/workspaces/${t.ws}/audit-log?action=${encodeURIComponent('POST /v1/workflows')}`, { key: t.ownerKey })
    expect(audit.body.data).toHaveLength(1)
    expect(audit.body.data[0]).toMatchObject({ user_id: t.targets.developer, api_key_id: issued.body.data.id, issued_by: t.actors.admin, resource_id: wf.body.data.id })
    // And the audit log can be filtered by issuer.
    const byIssuer = await h.call('GET', `/v1/workspaces/${t.ws}/audit-log?issued_by=${t.actors.admin}`, { key: t.ownerKey })
    expect(byIssuer.body.data.map((e: any) => e.resource_id)).toContain(wf.body.data.id)
  })
})

describe('revoking another member\'s workspace key', () => {
  test.each([
    ['an admin revoking the owner\'s key: 403', 'admin', 'owner', 403],
    ['an admin revoking another admin\'s key: 403', 'admin', 'admin', 403],
    ['an admin revoking a developer\'s key: 200', 'admin', 'developer', 200],
    ['the owner revoking an admin\'s key: 200', 'owner', 'admin', 200],
    ['a developer revoking a user\'s key: 404 (not its to see)', 'developer', 'user', 404],
  ] as const)('%s', async (_, caller, target, status) => {
    const t = await team()
    const userId = target === 'owner' ? t.owner : t.targets[target]
    const victim = await h.call('POST', '/v1/api-keys', { body: { user_id: userId, name: 'victim', workspace_id: t.ws } })
    const res = await h.call('DELETE', `/v1/api-keys/${victim.body.data.id}`, { key: t.keys[caller] })
    expect(res.status).toBe(status)
    const works = (await h.call('GET', `/v1/workspaces/${t.ws}`, { key: victim.body.data.key })).status
    expect(works).toBe(status === 200 ? 401 : 200)
  })

  test('a former member\'s key is any admin\'s to revoke', async () => {
    const t = await team()
    const victim = await h.call('POST', '/v1/api-keys', { body: { user_id: t.targets.admin, name: 'leaver', workspace_id: t.ws } })
    expect((await h.call('DELETE', `/v1/workspaces/${t.ws}/members/${t.targets.admin}`, { key: t.ownerKey })).status).toBe(200)
    expect((await h.call('DELETE', `/v1/api-keys/${victim.body.data.id}`, { key: t.keys.admin })).status).toBe(200)
  })
})

describe('naming another user_id in runs and chats: below developer, only one\'s own', () => {
  const table = (['owner', ...MEMBERS] as Who[]).map((who) => [who, rank[who] >= rank.developer] as const)

  test.each(table)('%s triggering a run for another user_id (allowed: %p)', async (who, allowed) => {
    const t = await team()
    const wf = await createWorkflow(h, t.ownerKey, t.ws)
    const other = t.targets.user
    const res = await h.call('POST', `/v1/workflows/${wf}/runs?async=true`, { key: t.keys[who], body: { inputs: { message: 'hi' }, user_id: other } })
    const runs = async () => (await h.deps.db.sql`select user_id from runs where workflow_id = ${wf}`).map((r) => r.user_id)
    if (allowed) {
      expect(res.status).toBe(202)
      expect(await runs()).toEqual([other])
    } else {
      expectError(res, 403, 'forbidden')
      expect(await runs()).toEqual([])
    }
    if (who === 'user') {
      // As itself, a user may trigger (naming its own user_id or none).
      for (const body of [{ user_id: t.actors.user }, {}]) {
        expect((await h.call('POST', `/v1/workflows/${wf}/runs?async=true`, { key: t.keys.user, body: { inputs: { message: 'hi' }, ...body } })).status).toBe(202)
      }
      expect(await runs()).toEqual([t.actors.user, t.actors.user])
    }
  })

  test('a user cancels its own runs, not another user\'s (403, the run goes on)', async () => {
    const t = await team()
    const wf = await createWorkflow(h, t.ownerKey, t.ws, {
      nodes: [{ id: 'start', type: 'start', config: {} }, { id: 'nap', type: 'wait', config: { seconds: 300 } }, { id: 'end', type: 'end', config: { outputs: {} } }],
      edges: [{ source: 'start', target: 'nap' }, { source: 'nap', target: 'end' }],
    })
    const theirs = (await h.call('POST', `/v1/workflows/${wf}/runs?async=true`, { key: t.keys.developer, body: { user_id: t.targets.user } })).body.run_id
    const mine = (await h.call('POST', `/v1/workflows/${wf}/runs?async=true`, { key: t.keys.user, body: {} })).body.run_id
    expectError(await h.call('POST', `/v1/runs/${theirs}/cancel`, { key: t.keys.user }), 403, 'forbidden')
    expect((await h.call('GET', `/v1/runs/${theirs}`, { key: t.keys.user })).body.status).toBe('running')
    expect((await h.call('POST', `/v1/runs/${mine}/cancel`, { key: t.keys.user })).status).toBe(200)
    expect((await h.call('POST', `/v1/runs/${theirs}/cancel`, { key: t.keys.developer })).status).toBe(200)
  })

  test.each(table)('%s chatting as another user_id (allowed: %p)', async (who, allowed) => {
    const t = await team()
    const agent = await createAgent(h, t.ownerKey, t.ws)
    const other = t.targets.user
    const res = await h.call('POST', `/v1/agents/${agent.id}/chat`, { key: t.keys[who], body: { message: 'hello', user_id: other } })
    const conversations = async () => (await h.deps.db.sql`select user_id from conversations where agent_id = ${agent.id}`).map((r) => r.user_id)
    if (allowed) {
      expect(res.status).toBe(200)
      expect(await conversations()).toEqual([other])
    } else {
      expectError(res, 403, 'forbidden')
      expect(await conversations()).toEqual([])
    }
  })
})

/**
 * A key, a role or a membership must not outlive the check that allowed it. The attack as reported:
 * an admin demotes another admin, mints a key for it (its role_limit then defaulted to the issuer's
 * admin), promotes it back, and holds a working admin key that the audit trail attributes to the other.
 */
describe('keys outliving the check that allowed them', () => {
  const setRole = (t: Awaited<ReturnType<typeof team>>, key: string, user: string, role: string) =>
    h.call('PATCH', `/v1/workspaces/${t.ws}/members/${user}`, { key, body: { role } })
  const auditOf = async (t: Awaited<ReturnType<typeof team>>) =>
    (await h.call('GET', `/v1/workspaces/${t.ws}/audit-log?limit=100`, { key: t.ownerKey })).body.data as any[]
  const works = async (key: string, t: Awaited<ReturnType<typeof team>>) => (await h.call('GET', `/v1/workspaces/${t.ws}`, { key })).status

  test('demote → mint → promote: the key minted for the demoted admin stays a developer key; the audit names the issuer', async () => {
    const t = await team()
    const [a, b] = [t.actors.admin, t.targets.admin]
    expect((await setRole(t, t.keys.admin, b, 'developer')).status).toBe(200)
    const minted = await h.call('POST', '/v1/api-keys', { key: t.keys.admin, body: { user_id: b, name: 'while demoted', workspace_id: t.ws } })
    expect(minted.status).toBe(201)
    expect(minted.body.data).toMatchObject({ user_id: b, issued_by: a, role_limit: 'developer' })
    expect((await setRole(t, t.keys.admin, b, 'admin')).status).toBe(200)

    // B is an admin again, but the key minted while it was a developer is not admin-capable.
    const before = (await h.call('GET', `/v1/workspaces/${t.ws}`)).body.data
    for (const [method, path, body] of [
      ['PATCH', `/v1/workspaces/${t.ws}`, { name: 'taken over' }],
      ['POST', `/v1/workspaces/${t.ws}/members`, { user_id: uid('planted'), role: 'admin' }],
      ['PATCH', `/v1/workspaces/${t.ws}/members/${t.targets.developer}`, { role: 'admin' }],
      ['POST', '/v1/api-keys', { user_id: t.targets.user, name: 'chain', workspace_id: t.ws }],
    ] as const) {
      expectError(await h.call(method, path, { key: minted.body.data.key, body }), 403, 'forbidden')
    }
    expect((await h.call('GET', `/v1/workspaces/${t.ws}`)).body.data).toEqual(before)
    // What a developer may do, it still does (the key works, within its cap).
    expect(await works(minted.body.data.key, t)).toBe(200)

    // The audit trail: the demotion, the key and the promotion by A, as A; nothing done with the key.
    const entries = await auditOf(t)
    const mine = entries.filter((e) => e.api_key_id === minted.body.data.id)
    expect(mine).toEqual([])
    const byA = entries.filter((e) => e.user_id === a).map((e) => [e.action, e.resource_id ?? null])
    expect(byA).toEqual(expect.arrayContaining([
      ['POST /v1/api-keys', minted.body.data.id],
      ['PATCH /v1/workspaces/{id}/members/{user_id}', expect.anything()],
    ]))
    expect(entries.filter((e) => e.user_id === b)).toEqual([])
  })

  test('the owner\'s key for a member is capped at the member\'s role too: a later transfer to that member does not raise it', async () => {
    const t = await team()
    const dev = t.targets.developer
    const minted = await h.call('POST', '/v1/api-keys', { key: t.ownerKey, body: { user_id: dev, name: 'owner-issued', workspace_id: t.ws } })
    expect(minted.body.data.role_limit).toBe('developer')
    expect((await h.call('POST', `/v1/workspaces/${t.ws}/transfer`, { key: t.ownerKey, body: { new_owner_id: dev } })).status).toBe(200)
    // The new owner itself may do it; the key minted by the former owner may not.
    expectError(await h.call('PATCH', `/v1/workspaces/${t.ws}`, { key: minted.body.data.key, body: { name: 'as owner' } }), 403, 'forbidden')
    expectError(await h.call('DELETE', `/v1/workspaces/${t.ws}`, { key: minted.body.data.key }), 403, 'forbidden')
  })

  test('an issuer demoted below admin: the keys it issued for others are revoked (it saw them in plain)', async () => {
    const t = await team()
    const a = t.actors.admin
    const issued = await h.call('POST', '/v1/api-keys', { key: t.keys.admin, body: { user_id: t.targets.user, name: 'kept by the issuer', workspace_id: t.ws } })
    const own = await h.call('POST', '/v1/api-keys', { key: t.keys.admin, body: { user_id: a, name: 'its own', workspace_id: t.ws } })
    // Cached in this process before the change: the revocation must reach the cache too.
    expect(await works(issued.body.data.key, t)).toBe(200)
    expect((await setRole(t, t.ownerKey, a, 'developer')).status).toBe(200)
    expect(await works(issued.body.data.key, t)).toBe(401)
    // Its own key follows its role: it works, as a developer.
    expect(await works(own.body.data.key, t)).toBe(200)
    expectError(await h.call('PATCH', `/v1/workspaces/${t.ws}`, { key: own.body.data.key, body: { name: 'x' } }), 403, 'forbidden')
  })

  test('the former owner after a transfer: the keys it issued for admins are revoked, for developers kept', async () => {
    const t = await team()
    const forAdmin = await h.call('POST', '/v1/api-keys', { key: t.ownerKey, body: { user_id: t.targets.admin, name: 'owner for admin', workspace_id: t.ws } })
    const forDev = await h.call('POST', '/v1/api-keys', { key: t.ownerKey, body: { user_id: t.targets.developer, name: 'owner for developer', workspace_id: t.ws } })
    expect(forAdmin.body.data.role_limit).toBe('admin')
    expect(await works(forAdmin.body.data.key, t)).toBe(200)
    expect((await h.call('POST', `/v1/workspaces/${t.ws}/transfer`, { key: t.ownerKey, body: { new_owner_id: t.actors.admin } })).status).toBe(200)
    // The former owner is an admin now, and an admin may not issue a key for another admin.
    expect(await works(forAdmin.body.data.key, t)).toBe(401)
    expect(await works(forDev.body.data.key, t)).toBe(200)
  })

  test('a removed member: its keys restricted to the workspace and the keys it issued there are revoked, and stay so if it comes back', async () => {
    const t = await team()
    const a = t.actors.admin
    const own = await h.call('POST', '/v1/api-keys', { key: t.keys.admin, body: { user_id: a, name: 'own, restricted', workspace_id: t.ws } })
    const issued = await h.call('POST', '/v1/api-keys', { key: t.keys.admin, body: { user_id: t.targets.developer, name: 'issued', workspace_id: t.ws } })
    const byOwner = await h.call('POST', '/v1/api-keys', { key: t.ownerKey, body: { user_id: a, name: 'owner for the leaver', workspace_id: t.ws } })
    for (const k of [own, issued, byOwner]) expect(await works(k.body.data.key, t)).toBe(200)
    expect((await h.call('DELETE', `/v1/workspaces/${t.ws}/members/${a}`, { key: t.ownerKey })).status).toBe(200)
    expect((await h.call('POST', `/v1/workspaces/${t.ws}/members`, { key: t.ownerKey, body: { user_id: a, role: 'admin' } })).status).toBe(201)
    for (const k of [own, issued, byOwner]) expect(await works(k.body.data.key, t)).toBe(401)
    // Its unrestricted key is about the user, not the workspace: it follows the new membership.
    expect(await works(t.keys.admin, t)).toBe(200)
    const listed = (await h.call('GET', `/v1/api-keys?workspace_id=${t.ws}&limit=100`, { key: t.ownerKey })).body.data as any[]
    for (const k of [own, issued, byOwner]) expect(listed.find((x) => x.id === k.body.data.id)?.revoked_at).toBeTruthy()
  })
})
