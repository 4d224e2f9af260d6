import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { keyFor, startHarness, workspaceOf, type Answer, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

let h: Harness
beforeAll(async () => {
  h = await startHarness({ RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000' })
})
afterAll(() => h.close())

const wsPath = (id: string) => `/v1/workspaces/${id}`
let seq = 0
const uid = (p: string) => `rs-${p}-${++seq}`

/** Workspace state as the root key sees it: the workspace (or null) and the members' roles. */
async function snapshot(id: string) {
  const ws = await h.call('GET', wsPath(id))
  if (ws.status === 404) return { ws: null, members: {} }
  const members = (await h.call('GET', `${wsPath(id)}/members?limit=100`)).body.data
  return { ws: ws.body.data, members: Object.fromEntries(members.map((m: any) => [m.user_id, m.role])) as Record<string, string> }
}

async function addMember(key: string, id: string, user_id: string, role: string) {
  const res = await h.call('POST', `${wsPath(id)}/members`, { key, body: { user_id, role } })
  expect(res.status).toBe(201)
}

type Role = 'readonly' | 'user' | 'developer' | 'admin' | 'owner'
const ROLES: Role[] = ['readonly', 'user', 'developer', 'admin', 'owner']
const rank: Record<Role, number> = { readonly: 0, user: 1, developer: 2, admin: 3, owner: 4 }

interface Scene {
  id: string
  owner: string
  /** A plain member (role user), the object of the member and key actions. */
  target: string
  newcomer: string
}
type Snapshot = Awaited<ReturnType<typeof snapshot>>

interface Action {
  name: string
  /** The lowest role allowed (docs/api.md, "Keys, roles and workspaces"). */
  needs: Role
  setup?: (s: Scene) => Promise<void>
  call: (s: Scene, key: string) => Promise<Answer>
  /** The effect, seen through the root key afterwards. */
  done: (s: Scene, after: Snapshot, res: Answer) => Promise<boolean> | boolean
}

const actions: Action[] = [
  {
    name: 'get workspace',
    needs: 'readonly',
    call: (s, key) => h.call('GET', wsPath(s.id), { key }),
    done: (s, _, res) => res.body.data?.id === s.id,
  },
  {
    name: 'list members',
    needs: 'readonly',
    call: (s, key) => h.call('GET', `${wsPath(s.id)}/members`, { key }),
    done: (s, _, res) => Array.isArray(res.body.data) && res.body.data.some((m: any) => m.user_id === s.target),
  },
  {
    name: 'patch workspace',
    needs: 'admin',
    call: (s, key) => h.call('PATCH', wsPath(s.id), { key, body: { name: 'renamed' } }),
    done: (_, after) => after.ws?.name === 'renamed',
  },
  {
    name: 'add member',
    needs: 'admin',
    call: (s, key) => h.call('POST', `${wsPath(s.id)}/members`, { key, body: { user_id: s.newcomer, role: 'user' } }),
    done: (s, after) => after.members[s.newcomer] === 'user',
  },
  {
    name: 'change role',
    needs: 'admin',
    call: (s, key) => h.call('PATCH', `${wsPath(s.id)}/members/${s.target}`, { key, body: { role: 'developer' } }),
    done: (s, after) => after.members[s.target] === 'developer',
  },
  {
    name: 'remove member',
    needs: 'admin',
    call: (s, key) => h.call('DELETE', `${wsPath(s.id)}/members/${s.target}`, { key }),
    done: (s, after) => after.ws !== null && !(s.target in after.members),
  },
  {
    name: 'archive',
    needs: 'admin',
    call: (s, key) => h.call('POST', `${wsPath(s.id)}/archive`, { key }),
    done: (_, after) => after.ws?.status === 'archived',
  },
  {
    name: 'restore',
    needs: 'admin',
    setup: async (s) => {
      expect((await h.call('POST', `${wsPath(s.id)}/archive`)).status).toBe(200)
    },
    call: (s, key) => h.call('POST', `${wsPath(s.id)}/restore`, { key }),
    done: (_, after) => after.ws?.status === 'active',
  },
  {
    name: 'transfer',
    needs: 'owner',
    call: (s, key) => h.call('POST', `${wsPath(s.id)}/transfer`, { key, body: { new_owner_id: s.target } }),
    done: (s, after) => after.ws?.owner_id === s.target,
  },
  {
    name: 'delete workspace',
    needs: 'owner',
    call: (s, key) => h.call('DELETE', wsPath(s.id), { key }),
    done: (_, after) => after.ws === null,
  },
  {
    name: 'issue a workspace key for a member',
    needs: 'admin',
    call: (s, key) => h.call('POST', '/v1/api-keys', { key, body: { user_id: s.target, name: 'for target', workspace_id: s.id } }),
    done: async (s, _, res) => {
      const keys = (await h.call('GET', `/v1/api-keys?user_id=${s.target}&workspace_id=${s.id}`)).body.data
      return keys.length === 1 && res.status === 201 && (await h.call('GET', wsPath(s.id), { key: res.body.data.key })).status === 200
    },
  },
]

/** A fresh workspace with an actor of `role` (the owner itself for 'owner') and a plain member. */
async function scene(role: Role): Promise<{ s: Scene; key: string }> {
  const owner = uid('owner')
  const ownerKey = await keyFor(h, owner)
  const id = await workspaceOf(h, ownerKey, 'Matrix')
  const s: Scene = { id, owner, target: uid('target'), newcomer: uid('newcomer') }
  await addMember(ownerKey, id, s.target, 'user')
  if (role === 'owner') return { s, key: ownerKey }
  const actor = uid(role)
  await addMember(ownerKey, id, actor, role)
  return { s, key: await keyFor(h, actor) }
}

describe('role matrix (docs/api.md, "Keys, roles and workspaces")', () => {
  const table = ROLES.flatMap((role) => actions.map((a) => [role, a.name, rank[role] >= rank[a.needs] ? '2xx' : '403'] as const))

  test.each(table)('%s: %s → %s', async (role, name, expected) => {
    const action = actions.find((a) => a.name === name)!
    const allowed = expected === '2xx'
    const { s, key } = await scene(role)
    await action.setup?.(s)
    const before = await snapshot(s.id)
    await expectOutcome(action, s, before, await action.call(s, key), allowed)
  })
})

/** Allowed: a 2xx whose effect is visible. Refused: 403 forbidden, and the workspace unchanged. */
async function expectOutcome(action: (typeof actions)[number], s: Parameters<(typeof actions)[number]['call']>[0], before: Awaited<ReturnType<typeof snapshot>>, res: Answer, allowed: boolean) {
  if (allowed) {
    expect(res.status).toBeGreaterThanOrEqual(200)
    expect(res.status).toBeLessThan(300)
    expect(await action.done(s, await snapshot(s.id), res)).toBe(true)
  } else {
    expect({ status: res.status, code: res.body.error?.code }).toEqual({ status: 403, code: 'forbidden' })
    expect(await snapshot(s.id)).toEqual(before)
  }
}

describe('role_limit on a key caps the user\'s role', () => {
  test.each([
    ['an admin with a key limited to user cannot patch', 'admin', 'user', 'patch workspace', false],
    ['an admin with a key limited to user cannot add members', 'admin', 'user', 'add member', false],
    ['an admin with a key limited to readonly can still read', 'admin', 'readonly', 'list members', true],
    ['an admin with a key limited to admin can patch', 'admin', 'admin', 'patch workspace', true],
    ['the owner with a key limited to admin cannot delete', 'owner', 'admin', 'delete workspace', false],
    ['the owner with a key limited to admin cannot transfer', 'owner', 'admin', 'transfer', false],
    ['the owner with a key limited to admin can archive', 'owner', 'admin', 'archive', true],
    ['a developer with a key limited to admin still cannot patch (a limit never raises)', 'developer', 'admin', 'patch workspace', false],
  ] as const)('%s', async (_, role, limit, name, allowed) => {
    const action = actions.find((a) => a.name === name)!
    const { s } = await scene(role)
    let user = s.owner
    if (role !== 'owner') {
      const members = (await snapshot(s.id)).members
      user = Object.keys(members).find((u) => members[u] === role && u !== s.owner)!
    }
    const key = await keyFor(h, user, { role_limit: limit })
    const before = await snapshot(s.id)
    await expectOutcome(action, s, before, await action.call(s, key), allowed)
  })
})

describe('tenant isolation: nothing of workspace B is visible from A', () => {
  // One user owns A and B; its key restricted to A must not reach B. Another user is an admin of A only.
  let a: string
  let b: string
  let restricted: string
  let memberOfA: string
  let unrestricted: string
  const bMember = 'rs-iso-b-member'
  beforeAll(async () => {
    unrestricted = await keyFor(h, 'rs-iso-owner')
    a = await workspaceOf(h, unrestricted, 'Tenant A')
    b = await workspaceOf(h, unrestricted, 'Tenant B')
    await addMember(unrestricted, a, 'rs-iso-a-admin', 'admin')
    await addMember(unrestricted, b, bMember, 'developer')
    restricted = await keyFor(h, 'rs-iso-owner', { workspace_id: a })
    memberOfA = await keyFor(h, 'rs-iso-a-admin')
  })

  const routes = [
    ['GET', '', undefined],
    ['PATCH', '', { name: 'taken over' }],
    ['DELETE', '', undefined],
    ['POST', '/archive', undefined],
    ['POST', '/restore', undefined],
    ['POST', '/transfer', { new_owner_id: bMember }],
    ['GET', '/members', undefined],
    ['POST', '/members', { user_id: 'rs-iso-intruder', role: 'admin' }],
    ['PATCH', `/members/${bMember}`, { role: 'readonly' }],
    ['DELETE', `/members/${bMember}`, undefined],
  ] as const
  const callers = ['the key restricted to A', 'a user who is only a member of A'] as const
  const table = callers.flatMap((who) => routes.map(([method, suffix, body]) => [who, method, suffix, body] as const))

  test.each(table)('%s: %s /workspaces/{B}%s is 404, never 403', async (who, method, suffix, body) => {
    const key = who === 'the key restricted to A' ? restricted : memberOfA
    // Sanity: the same caller does reach A.
    expect((await h.call('GET', wsPath(a), { key })).status).toBe(200)
    const before = await snapshot(b)
    const res = await h.call(method, wsPath(b) + suffix, { key, body })
    expect({ status: res.status, code: res.body.error?.code }).toEqual({ status: 404, code: 'not_found' })
    expect(res.text).not.toContain('Tenant B')
    expect(await snapshot(b)).toEqual(before)
  })

  test('B never appears in the workspace list of either caller, with or without filters', async () => {
    for (const key of [restricted, memberOfA]) {
      for (const q of ['', '?status=active', '?status_in=active,archived', '?sort=name', `?owner_id=rs-iso-owner`]) {
        const res = await h.call('GET', `/v1/workspaces${q}`, { key })
        expect(res.status).toBe(200)
        expect(res.body.data.map((w: any) => w.id)).toEqual([a])
      }
    }
    // Sanity: the owner's unrestricted key sees both.
    const all = await h.call('GET', '/v1/workspaces', { key: unrestricted })
    expect(all.body.data.map((w: any) => w.id).sort()).toEqual([a, b].sort())
  })

  test('a key restricted to A cannot issue keys for B (403) and lists no key of B', async () => {
    const bKey = await h.call('POST', '/v1/api-keys', { key: unrestricted, body: { user_id: bMember, name: 'b', workspace_id: b } })
    expect(bKey.status).toBe(201)
    const ownBKey = await keyFor(h, 'rs-iso-owner', { workspace_id: b })
    expect(ownBKey).toStartWith('ap_')

    const res = await h.call('POST', '/v1/api-keys', { key: restricted, body: { user_id: 'rs-iso-owner', name: 'escape', workspace_id: b } })
    expect({ status: res.status, code: res.body.error?.code }).toEqual({ status: 403, code: 'forbidden' })

    for (const key of [restricted, memberOfA]) {
      const listed = await h.call('GET', '/v1/api-keys?limit=100', { key })
      expect(listed.status).toBe(200)
      expect(listed.body.data.filter((k: any) => k.workspace_id === b)).toEqual([])
      expect(listed.text).not.toContain(b)
    }
  })
})
