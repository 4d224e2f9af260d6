import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { keyFor, startHarness, workspaceOf, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

let h: Harness
beforeAll(async () => {
  // Many calls with the root key in a few seconds: the rate limit is not what these tests are about.
  h = await startHarness({ RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000' })
})
afterAll(() => h.close())

const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/
const WS_ID = /^ws_[0-9a-z]{26}$/
const META = { version: 'v1', deprecated_warnings: [] }

const wsPath = (id: string) => `/v1/workspaces/${id}`

async function addMember(key: string, ws: string, user_id: string, role: string) {
  const res = await h.call('POST', `${wsPath(ws)}/members`, { key, body: { user_id, role } })
  expect(res.status).toBe(201)
  return res.body.data
}

async function members(ws: string): Promise<Record<string, { role: string; is_owner: boolean }>> {
  const res = await h.call('GET', `${wsPath(ws)}/members?limit=100`)
  expect(res.status).toBe(200)
  return Object.fromEntries(res.body.data.map((m: any) => [m.user_id, { role: m.role, is_owner: m.is_owner }]))
}

describe('workspaces', () => {
  test('create answers 201 in the general envelope with the whole workspace', async () => {
    const key = await keyFor(h, 'wh-create')
    const res = await h.call('POST', '/v1/workspaces', {
      key,
      body: { name: 'Support bots', description: 'Agents for the help desk', type: 'personal', join_policy: 'open' },
    })
    expect(res.status).toBe(201)
    expect(res.headers.get('content-type')).toContain('application/json')
    expect(res.body).toEqual({
      request_id: res.headers.get('x-request-id')!,
      data: {
        id: expect.stringMatching(WS_ID),
        name: 'Support bots',
        description: 'Agents for the help desk',
        type: 'personal',
        owner_id: 'wh-create',
        member_count: 1,
        status: 'active',
        join_policy: 'open',
        created_at: expect.stringMatching(ISO_MS),
        updated_at: expect.stringMatching(ISO_MS),
        archived_at: null,
      },
      meta: META,
    })
    expect(res.body.request_id).toMatch(/^req_/)
  })

  test('create fills the defaults: type team, join_policy approve_required, empty description', async () => {
    const key = await keyFor(h, 'wh-defaults')
    const res = await h.call('POST', '/v1/workspaces', { key, body: { name: 'Plain' } })
    expect(res.status).toBe(201)
    expect(res.body.data).toMatchObject({ name: 'Plain', description: '', type: 'team', join_policy: 'approve_required' })
  })

  test('the creator is the owner and an admin member', async () => {
    const key = await keyFor(h, 'wh-creator')
    const id = await workspaceOf(h, key, 'Mine')
    const res = await h.call('GET', `${wsPath(id)}/members`, { key })
    expect(res.status).toBe(200)
    expect(res.body).toEqual({
      request_id: res.headers.get('x-request-id')!,
      data: [
        {
          workspace_id: id,
          user_id: 'wh-creator',
          role: 'admin',
          is_owner: true,
          created_at: expect.stringMatching(ISO_MS),
          updated_at: expect.stringMatching(ISO_MS),
        },
      ],
      next_cursor: null,
      has_more: false,
    })
  })

  test('get answers the same workspace that create answered', async () => {
    const key = await keyFor(h, 'wh-get')
    const created = await h.call('POST', '/v1/workspaces', { key, body: { name: 'Round trip', description: 'd' } })
    const got = await h.call('GET', wsPath(created.body.data.id), { key })
    expect(got.status).toBe(200)
    expect(got.body.data).toEqual(created.body.data)
    expect(got.body.meta).toEqual(META)
    expect(got.body.request_id).toBe(got.headers.get('x-request-id')!)
  })

  test('list shows only the caller\'s workspaces, newest first, filtered by status', async () => {
    const key = await keyFor(h, 'wh-list')
    const other = await keyFor(h, 'wh-list-other')
    const foreign = await workspaceOf(h, other, 'Not mine')
    const ids: string[] = []
    for (let i = 0; i < 5; i++) ids.push(await workspaceOf(h, key, `List ${i}`))
    for (const id of ids.slice(0, 2)) expect((await h.call('POST', `${wsPath(id)}/archive`, { key })).status).toBe(200)

    const all = await h.call('GET', '/v1/workspaces', { key })
    expect(all.status).toBe(200)
    expect(all.body).toMatchObject({ request_id: all.headers.get('x-request-id')!, next_cursor: null, has_more: false })
    expect(all.body.data.map((w: any) => w.id)).toEqual([...ids].reverse())
    expect(all.body.data.map((w: any) => w.id)).not.toContain(foreign)

    const active = await h.call('GET', '/v1/workspaces?status=active', { key })
    expect(active.status).toBe(200)
    expect(active.body.data.map((w: any) => w.id)).toEqual(ids.slice(2).reverse())
    expect(active.body.data.every((w: any) => w.status === 'active')).toBe(true)

    const archived = await h.call('GET', '/v1/workspaces?status=archived', { key })
    expect(archived.body.data.map((w: any) => w.id)).toEqual(ids.slice(0, 2).reverse())
    expect(archived.body.data.every((w: any) => w.status === 'archived' && ISO_MS.test(w.archived_at))).toBe(true)

    const both = await h.call('GET', '/v1/workspaces?status_in=active,archived', { key })
    expect(both.body.data).toHaveLength(5)
  })

  test('list pages with limit and next_cursor: no repeats, no gaps, has_more false at the end', async () => {
    const key = await keyFor(h, 'wh-pages')
    const ids: string[] = []
    for (let i = 0; i < 5; i++) ids.push(await workspaceOf(h, key, `Page ${i}`))
    const seen: string[] = []
    const shapes: [number, boolean][] = []
    let cursor: string | null = null
    do {
      const q: string = cursor ? `?limit=2&cursor=${encodeURIComponent(cursor)}` : '?limit=2'
      const res = await h.call('GET', `/v1/workspaces${q}`, { key })
      expect(res.status).toBe(200)
      seen.push(...res.body.data.map((w: any) => w.id))
      shapes.push([res.body.data.length, res.body.has_more])
      expect(res.body.next_cursor === null).toBe(!res.body.has_more)
      cursor = res.body.next_cursor
    } while (cursor && shapes.length < 10)
    expect(shapes).toEqual([[2, true], [2, true], [1, false]])
    expect(seen).toEqual([...ids].reverse())
  })

  test('list sorts by name when asked', async () => {
    const key = await keyFor(h, 'wh-sort')
    for (const name of ['bravo', 'alpha', 'charlie']) await workspaceOf(h, key, name)
    const asc = await h.call('GET', '/v1/workspaces?sort=name', { key })
    expect(asc.status).toBe(200)
    expect(asc.body.data.map((w: any) => w.name)).toEqual(['alpha', 'bravo', 'charlie'])
    const desc = await h.call('GET', '/v1/workspaces?sort=-name', { key })
    expect(desc.body.data.map((w: any) => w.name)).toEqual(['charlie', 'bravo', 'alpha'])
  })

  test('patch changes name and description and nothing else', async () => {
    const key = await keyFor(h, 'wh-patch')
    const created = (await h.call('POST', '/v1/workspaces', { key, body: { name: 'Before', description: 'old', type: 'personal' } })).body.data
    const renamed = await h.call('PATCH', wsPath(created.id), { key, body: { name: 'After' } })
    expect(renamed.status).toBe(200)
    expect(renamed.body.meta).toEqual(META)
    expect(renamed.body.data).toEqual({ ...created, name: 'After', updated_at: expect.stringMatching(ISO_MS) })
    expect(Date.parse(renamed.body.data.updated_at)).toBeGreaterThanOrEqual(Date.parse(created.updated_at))

    const described = await h.call('PATCH', wsPath(created.id), { key, body: { description: 'new' } })
    expect(described.body.data).toMatchObject({ name: 'After', description: 'new', type: 'personal' })
    expect((await h.call('GET', wsPath(created.id), { key })).body.data).toMatchObject({ name: 'After', description: 'new' })
  })

  test('archive then restore flips status and archived_at; archiving twice changes nothing', async () => {
    const key = await keyFor(h, 'wh-archive')
    const id = await workspaceOf(h, key, 'Seasonal')
    const archived = await h.call('POST', `${wsPath(id)}/archive`, { key })
    expect(archived.status).toBe(200)
    expect(archived.body.meta).toEqual(META)
    const archivedAt: string = archived.body.data.archived_at
    expect(archivedAt).toMatch(ISO_MS)
    expect(archived.body.data).toMatchObject({ id, status: 'archived' })

    const again = await h.call('POST', `${wsPath(id)}/archive`, { key })
    expect(again.status).toBe(200)
    expect(again.body.data.archived_at).toBe(archivedAt)

    const restored = await h.call('POST', `${wsPath(id)}/restore`, { key })
    expect(restored.status).toBe(200)
    expect(restored.body.data).toMatchObject({ id, status: 'active', archived_at: null })
    expect((await h.call('GET', wsPath(id), { key })).body.data.status).toBe('active')
  })

  test('delete answers { id, deleted: true }; the workspace is gone from get and list', async () => {
    const key = await keyFor(h, 'wh-delete')
    const id = await workspaceOf(h, key, 'Doomed')
    const res = await h.call('DELETE', wsPath(id), { key })
    expect(res.status).toBe(200)
    expect(res.body).toEqual({ request_id: res.headers.get('x-request-id')!, data: { id, deleted: true }, meta: META })
    const got = await h.call('GET', wsPath(id), { key })
    expect(got.status).toBe(404)
    expect(got.body.error.code).toBe('not_found')
    expect((await h.call('GET', '/v1/workspaces', { key })).body.data.map((w: any) => w.id)).not.toContain(id)
    expect((await h.call('GET', wsPath(id))).status).toBe(404)
  })

  test('transfer makes a member the owner and an admin; the previous owner stays an admin', async () => {
    const owner = await keyFor(h, 'wh-tr-owner')
    const heir = await keyFor(h, 'wh-tr-heir')
    const id = await workspaceOf(h, owner, 'Inherited')
    await addMember(owner, id, 'wh-tr-heir', 'developer')

    const res = await h.call('POST', `${wsPath(id)}/transfer`, { key: owner, body: { new_owner_id: 'wh-tr-heir' } })
    expect(res.status).toBe(200)
    expect(res.body.meta).toEqual(META)
    expect(res.body.data).toMatchObject({ id, owner_id: 'wh-tr-heir', member_count: 2 })
    expect(await members(id)).toEqual({
      'wh-tr-owner': { role: 'admin', is_owner: false },
      'wh-tr-heir': { role: 'admin', is_owner: true },
    })
    // The owner powers moved with it: only the new owner may now delete.
    expect((await h.call('DELETE', wsPath(id), { key: owner })).status).toBe(403)
    expect((await h.call('DELETE', wsPath(id), { key: heir })).status).toBe(200)
  })
})

describe('members', () => {
  test('add answers 201 with the member; list, change role and remove follow', async () => {
    const key = await keyFor(h, 'wh-m-owner')
    const id = await workspaceOf(h, key, 'Team')

    const added = await h.call('POST', `${wsPath(id)}/members`, { key, body: { user_id: 'wh-m-dev', role: 'developer' } })
    expect(added.status).toBe(201)
    expect(added.body).toEqual({
      request_id: added.headers.get('x-request-id')!,
      data: {
        workspace_id: id,
        user_id: 'wh-m-dev',
        role: 'developer',
        is_owner: false,
        created_at: expect.stringMatching(ISO_MS),
        updated_at: expect.stringMatching(ISO_MS),
      },
      meta: META,
    })
    await addMember(key, id, 'wh-m-reader', 'readonly')
    expect((await h.call('GET', wsPath(id), { key })).body.data.member_count).toBe(3)
    expect(await members(id)).toEqual({
      'wh-m-owner': { role: 'admin', is_owner: true },
      'wh-m-dev': { role: 'developer', is_owner: false },
      'wh-m-reader': { role: 'readonly', is_owner: false },
    })

    const changed = await h.call('PATCH', `${wsPath(id)}/members/wh-m-reader`, { key, body: { role: 'user' } })
    expect(changed.status).toBe(200)
    expect(changed.body.meta).toEqual(META)
    expect(changed.body.data).toMatchObject({ workspace_id: id, user_id: 'wh-m-reader', role: 'user', is_owner: false })

    const removed = await h.call('DELETE', `${wsPath(id)}/members/wh-m-dev`, { key })
    expect(removed.status).toBe(200)
    expect(removed.body).toEqual({
      request_id: removed.headers.get('x-request-id')!,
      data: { workspace_id: id, user_id: 'wh-m-dev', deleted: true },
      meta: META,
    })
    expect(await members(id)).toEqual({
      'wh-m-owner': { role: 'admin', is_owner: true },
      'wh-m-reader': { role: 'user', is_owner: false },
    })
    expect((await h.call('GET', wsPath(id), { key })).body.data.member_count).toBe(2)
  })

  test('a member sees the workspace in its list and can read it; a removed member no longer can', async () => {
    const owner = await keyFor(h, 'wh-mv-owner')
    const guest = await keyFor(h, 'wh-mv-guest')
    const id = await workspaceOf(h, owner, 'Visible')
    expect((await h.call('GET', wsPath(id), { key: guest })).status).toBe(404)
    await addMember(owner, id, 'wh-mv-guest', 'readonly')
    expect((await h.call('GET', wsPath(id), { key: guest })).status).toBe(200)
    expect((await h.call('GET', '/v1/workspaces', { key: guest })).body.data.map((w: any) => w.id)).toEqual([id])
    expect((await h.call('DELETE', `${wsPath(id)}/members/wh-mv-guest`, { key: owner })).status).toBe(200)
    expect((await h.call('GET', wsPath(id), { key: guest })).status).toBe(404)
    expect((await h.call('GET', '/v1/workspaces', { key: guest })).body.data).toEqual([])
  })

  test('the member list filters by role and pages by user_id', async () => {
    const key = await keyFor(h, 'wh-ml-owner')
    const id = await workspaceOf(h, key, 'Crowd')
    for (const [user, role] of [['wh-ml-c', 'user'], ['wh-ml-a', 'developer'], ['wh-ml-b', 'user']] as const) await addMember(key, id, user, role)

    const users = await h.call('GET', `${wsPath(id)}/members?role=user&sort=user_id`, { key })
    expect(users.status).toBe(200)
    expect(users.body.data.map((m: any) => m.user_id)).toEqual(['wh-ml-b', 'wh-ml-c'])

    const first = await h.call('GET', `${wsPath(id)}/members?sort=user_id&limit=2`, { key })
    expect(first.body.data.map((m: any) => m.user_id)).toEqual(['wh-ml-a', 'wh-ml-b'])
    expect(first.body.has_more).toBe(true)
    const second = await h.call('GET', `${wsPath(id)}/members?sort=user_id&limit=2&cursor=${first.body.next_cursor}`, { key })
    expect(second.body.data.map((m: any) => m.user_id)).toEqual(['wh-ml-c', 'wh-ml-owner'])
    expect(second.body).toMatchObject({ has_more: false, next_cursor: null })
  })
})

describe('delete cascades', () => {
  test('members and workspace-restricted keys go with the workspace; the restricted key then gets 401', async () => {
    const owner = await keyFor(h, 'wh-cas-owner')
    const id = await workspaceOf(h, owner, 'Cascade')
    const keep = await workspaceOf(h, owner, 'Survivor')
    await addMember(owner, id, 'wh-cas-dev', 'developer')
    await addMember(owner, keep, 'wh-cas-dev', 'developer')
    const issued = await h.call('POST', '/v1/api-keys', { key: owner, body: { user_id: 'wh-cas-dev', name: 'ci', workspace_id: id } })
    expect(issued.status).toBe(201)
    const restricted: string = issued.body.data.key
    const ownersRestricted = await keyFor(h, 'wh-cas-owner', { workspace_id: id })
    // Used once before the delete, so each key is in the in-process cache.
    expect((await h.call('GET', wsPath(id), { key: restricted })).status).toBe(200)
    expect((await h.call('GET', wsPath(id), { key: ownersRestricted })).status).toBe(200)
    const sql = h.deps.db.sql
    expect((await sql`select count(*)::int as n from workspace_members where workspace_id = ${id}`)[0]!.n).toBe(2)
    expect((await sql`select count(*)::int as n from api_keys where workspace_id = ${id}`)[0]!.n).toBe(2)

    expect((await h.call('DELETE', wsPath(id), { key: owner })).status).toBe(200)

    for (const key of [restricted, ownersRestricted]) {
      const res = await h.call('GET', '/v1/workspaces', { key })
      expect(res.status).toBe(401)
      expect(res.body.error.code).toBe('unauthenticated')
      expect(res.headers.get('www-authenticate')).toStartWith('Bearer')
    }
    expect((await h.call('GET', wsPath(id), { key: owner })).status).toBe(404)
    expect((await h.call('GET', `${wsPath(id)}/members`, { key: owner })).status).toBe(404)
    expect((await sql`select count(*)::int as n from workspace_members where workspace_id = ${id}`)[0]!.n).toBe(0)
    expect((await sql`select count(*)::int as n from api_keys where workspace_id = ${id}`)[0]!.n).toBe(0)
    const keys = await h.call('GET', '/v1/api-keys?limit=100')
    expect(keys.body.data.filter((k: any) => k.workspace_id === id)).toEqual([])
    // Nothing outside the workspace is touched: the owner's own key and the other workspace live on.
    expect((await h.call('GET', wsPath(keep), { key: owner })).body.data.member_count).toBe(2)
    expect((await members(keep))['wh-cas-dev']).toEqual({ role: 'developer', is_owner: false })
  })
})
