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
const uid = (p: string) => `we-${p}-${++seq}`

/** An error body (docs/api.md, "Errors"): the code, a human message, the request id of the header. */
function expectError(res: Answer, status: number, code: string) {
  expect({ status: res.status, code: res.body?.error?.code }).toEqual({ status, code })
  expect(res.body.error.message).toBeString()
  expect(res.body.request_id).toBe(res.headers.get('x-request-id')!)
}

/** A workspace owned by a fresh user, with a developer member; returns the ids and keys. */
async function team() {
  const owner = uid('owner')
  const dev = uid('dev')
  const ownerKey = await keyFor(h, owner)
  const id = await workspaceOf(h, ownerKey, 'Team')
  expect((await h.call('POST', `${wsPath(id)}/members`, { key: ownerKey, body: { user_id: dev, role: 'developer' } })).status).toBe(201)
  return { id, owner, ownerKey, dev }
}

async function stateOf(id: string) {
  const ws = (await h.call('GET', wsPath(id))).body.data
  const members = (await h.call('GET', `${wsPath(id)}/members?limit=100`)).body.data
  return { ws, members: Object.fromEntries(members.map((m: any) => [m.user_id, m.role])) }
}

describe('unknown workspace: 404 not_found on every route', () => {
  const unknown = 'ws_01jbz3k9x8q7r6s5t4v3w2y1z0'
  test.each([
    ['GET', '', undefined],
    ['PATCH', '', { name: 'x' }],
    ['DELETE', '', undefined],
    ['POST', '/archive', undefined],
    ['POST', '/restore', undefined],
    ['POST', '/transfer', { new_owner_id: 'someone' }],
    ['GET', '/members', undefined],
    ['POST', '/members', { user_id: 'someone', role: 'user' }],
    ['PATCH', '/members/someone', { role: 'user' }],
    ['DELETE', '/members/someone', undefined],
  ] as const)('%s /workspaces/{unknown}%s', async (method, suffix, body) => {
    // With the root key, which sees every workspace: 404 means the workspace does not exist.
    const res = await h.call(method, wsPath(unknown) + suffix, { body })
    expectError(res, 404, 'not_found')
  })

  test.each([
    ['PATCH', { role: 'user' }],
    ['DELETE', undefined],
  ] as const)('%s of a member who is not in the workspace is 404', async (method, body) => {
    const { id, ownerKey } = await team()
    const res = await h.call(method, `${wsPath(id)}/members/${uid('stranger')}`, { key: ownerKey, body })
    expectError(res, 404, 'not_found')
  })
})

type Team = Awaited<ReturnType<typeof team>>
type Call = readonly [method: string, path: string, body: object | undefined]

describe('409 conflict', () => {
  test.each([
    ['adding a member twice', (t: Team): Call => ['POST', `${wsPath(t.id)}/members`, { user_id: t.dev, role: 'user' }]],
    ['adding the owner as a member', (t: Team): Call => ['POST', `${wsPath(t.id)}/members`, { user_id: t.owner, role: 'readonly' }]],
    ['removing the owner', (t: Team): Call => ['DELETE', `${wsPath(t.id)}/members/${t.owner}`, undefined]],
    ['demoting the owner to developer', (t: Team): Call => ['PATCH', `${wsPath(t.id)}/members/${t.owner}`, { role: 'developer' }]],
    ['demoting the owner to readonly', (t: Team): Call => ['PATCH', `${wsPath(t.id)}/members/${t.owner}`, { role: 'readonly' }]],
    ['transferring to a non-member', (t: Team): Call => ['POST', `${wsPath(t.id)}/transfer`, { new_owner_id: uid('outsider') }]],
    ['transferring to the current owner', (t: Team): Call => ['POST', `${wsPath(t.id)}/transfer`, { new_owner_id: t.owner }]],
  ] as const)('%s', async (_, request) => {
    const t = await team()
    const before = await stateOf(t.id)
    const [method, path, body] = request(t)
    const res = await h.call(method, path, { key: t.ownerKey, body })
    expectError(res, 409, 'conflict')
    // Nothing changed.
    expect(await stateOf(t.id)).toEqual(before)
  })

  test('the owner may be set to admin, the role it already has', async () => {
    const t = await team()
    const res = await h.call('PATCH', `${wsPath(t.id)}/members/${t.owner}`, { key: t.ownerKey, body: { role: 'admin' } })
    expect(res.status).toBe(200)
    expect(res.body.data).toMatchObject({ user_id: t.owner, role: 'admin', is_owner: true })
  })
})

describe('transfer by anyone but the current owner: 403 forbidden', () => {
  test.each([
    ['an admin member', 'admin'],
    ['a developer member', 'developer'],
    ['the root key (a platform administrator, not the owner)', 'root'],
  ] as const)('%s', async (_, who) => {
    const t = await team()
    let key = h.rootKey
    if (who !== 'root') {
      const user = uid(who)
      expect((await h.call('POST', `${wsPath(t.id)}/members`, { key: t.ownerKey, body: { user_id: user, role: who } })).status).toBe(201)
      key = await keyFor(h, user)
    }
    const before = await stateOf(t.id)
    const res = await h.call('POST', `${wsPath(t.id)}/transfer`, { key, body: { new_owner_id: t.dev } })
    expectError(res, 403, 'forbidden')
    expect(await stateOf(t.id)).toEqual(before)
    expect(before.ws.owner_id).toBe(t.owner)
  })
})

describe('archived workspaces are read-only', () => {
  test.each([
    ['PATCH', '', { name: 'renamed' }],
    ['POST', '/members', { user_id: 'we-archived-newcomer', role: 'user' }],
    ['PATCH', '/members/{dev}', { role: 'readonly' }],
    ['DELETE', '/members/{dev}', undefined],
    ['POST', '/transfer', { new_owner_id: '{dev}' }],
  ] as const)('%s /workspaces/{id}%s answers 403 forbidden', async (method, suffix, body) => {
    const t = await team()
    expect((await h.call('POST', `${wsPath(t.id)}/archive`, { key: t.ownerKey })).status).toBe(200)
    const before = await stateOf(t.id)
    const fill = (s: string) => s.replace('{dev}', t.dev)
    const res = await h.call(method, wsPath(t.id) + fill(suffix), {
      key: t.ownerKey,
      body: body && JSON.parse(fill(JSON.stringify(body))),
    })
    expectError(res, 403, 'forbidden')
    expect(res.body.error.message).toContain('archived')
    expect(await stateOf(t.id)).toEqual(before)
  })

  test('reads still work, restore works, and writes work again after it', async () => {
    const t = await team()
    const devKey = await keyFor(h, t.dev)
    expect((await h.call('POST', `${wsPath(t.id)}/archive`, { key: t.ownerKey })).status).toBe(200)

    const got = await h.call('GET', wsPath(t.id), { key: devKey })
    expect(got.status).toBe(200)
    expect(got.body.data.status).toBe('archived')
    expect((await h.call('GET', `${wsPath(t.id)}/members`, { key: devKey })).body.data).toHaveLength(2)
    const listed = await h.call('GET', '/v1/workspaces?status=archived', { key: t.ownerKey })
    expect(listed.body.data.map((w: any) => w.id)).toEqual([t.id])
    expect((await h.call('PATCH', wsPath(t.id), { key: t.ownerKey, body: { name: 'still archived' } })).status).toBe(403)

    const restored = await h.call('POST', `${wsPath(t.id)}/restore`, { key: t.ownerKey })
    expect(restored.status).toBe(200)
    expect(restored.body.data.status).toBe('active')
    const patched = await h.call('PATCH', wsPath(t.id), { key: t.ownerKey, body: { name: 'alive again' } })
    expect(patched.status).toBe(200)
    expect(patched.body.data.name).toBe('alive again')
  })
})

describe('400 validation_error names the field in param and details', () => {
  const long = 'x'.repeat(201)
  test.each([
    ['create: missing name', 'POST', '', { description: 'no name' }, 'name'],
    ['create: empty name', 'POST', '', { name: '' }, 'name'],
    ['create: blank name', 'POST', '', { name: '   ' }, 'name'],
    ['create: name too long', 'POST', '', { name: long }, 'name'],
    ['create: name not a string', 'POST', '', { name: 42 }, 'name'],
    ['create: unknown type', 'POST', '', { name: 'ok', type: 'galaxy' }, 'type'],
    ['create: unknown join_policy', 'POST', '', { name: 'ok', join_policy: 'anyone' }, 'join_policy'],
    ['create: unknown field', 'POST', '', { name: 'ok', owner_id: 'someone-else' }, 'owner_id'],
    ['patch: name too long', 'PATCH', '/{id}', { name: long }, 'name'],
    ['patch: unknown field', 'PATCH', '/{id}', { status: 'archived' }, 'status'],
    ['add member: missing user_id', 'POST', '/{id}/members', { role: 'user' }, 'user_id'],
    ['add member: wrong role value', 'POST', '/{id}/members', { user_id: 'we-v-x', role: 'superuser' }, 'role'],
    ['add member: role owner is not a member role', 'POST', '/{id}/members', { user_id: 'we-v-x', role: 'owner' }, 'role'],
    ['add member: unknown field', 'POST', '/{id}/members', { user_id: 'we-v-x', role: 'user', admin: true }, 'admin'],
    ['change role: wrong role value', 'PATCH', '/{id}/members/{dev}', { role: 'boss' }, 'role'],
    ['change role: missing role', 'PATCH', '/{id}/members/{dev}', {}, 'role'],
    ['transfer: missing new_owner_id', 'POST', '/{id}/transfer', {}, 'new_owner_id'],
    ['transfer: new_owner_id not a string', 'POST', '/{id}/transfer', { new_owner_id: 7 }, 'new_owner_id'],
  ] as const)('%s', async (_, method, suffix, body, param) => {
    const t = await team()
    const before = await stateOf(t.id)
    const path = '/v1/workspaces' + suffix.replace('{id}', t.id).replace('{dev}', t.dev)
    const res = await h.call(method, path, { key: t.ownerKey, body })
    expectError(res, 400, 'validation_error')
    expect(res.body.error.param).toBe(param)
    expect(res.body.error.details).toBeArray()
    expect(res.body.error.details[0]).toEqual({ path: param, message: expect.any(String) })
    expect(await stateOf(t.id)).toEqual(before)
    // Nothing was created either.
    expect((await h.call('GET', '/v1/workspaces', { key: t.ownerKey })).body.data).toHaveLength(1)
  })

  test('patch with an empty body is a validation_error', async () => {
    const t = await team()
    const res = await h.call('PATCH', wsPath(t.id), { key: t.ownerKey, body: {} })
    expectError(res, 400, 'validation_error')
    expect(res.body.error.param).toBeString()
    expect(res.body.error.details.length).toBeGreaterThan(0)
  })
})

describe('who may not create a workspace: 403 forbidden', () => {
  test.each([
    ['a readonly key', { role_limit: 'readonly' }],
    ['a key restricted to a workspace', { workspace_id: '{ws}' }],
  ] as const)('%s', async (_, extra) => {
    const user = uid('creator')
    const ws = await workspaceOf(h, await keyFor(h, user), 'Existing')
    const key = await keyFor(h, user, JSON.parse(JSON.stringify(extra).replace('{ws}', ws)))
    const res = await h.call('POST', '/v1/workspaces', { key, body: { name: 'Not allowed' } })
    expectError(res, 403, 'forbidden')
    const mine = await h.call('GET', `/v1/workspaces?owner_id=${user}`)
    expect(mine.body.data.map((w: any) => w.id)).toEqual([ws])
  })

  test('a key limited to user may create one (the limit only caps roles inside workspaces)', async () => {
    const key = await keyFor(h, uid('limited'), { role_limit: 'user' })
    expect((await h.call('POST', '/v1/workspaces', { key, body: { name: 'Allowed' } })).status).toBe(201)
  })
})
