import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { keyFor, startHarness, workspaceOf, type Answer, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * A list that names no workspace answers the resources of every workspace the caller can read, and
 * `workspace_id` is then a filter (docs/api.md, "Lists"): webhooks, agents, workflows and knowledge
 * bases alike. The workspace lists (members, audit log, a workflow's runs...) name theirs in the path.
 */

let h: Harness
// A user with two workspaces A and B, a readonly member of A with a workspace R of its own, and an outsider
// with a workspace O of its own.
let two: string
let reader: string
let outsider: string
let wsA: string
let wsB: string
let wsO: string
let wsR: string

const GRAPH = {
  nodes: [{ id: 'start', type: 'start', config: { inputs: [] } }, { id: 'end', type: 'end', config: { outputs: {} } }],
  edges: [{ source: 'start', target: 'end' }],
}

interface Kind {
  path: string
  create: (ws: string, i: number) => unknown
}
const kinds: Kind[] = [
  { path: '/v1/webhooks', create: (workspace_id, i) => ({ workspace_id, url: `https://1.1.1.1/hook-${i}`, events: ['webhook.test'], secret: `a-secret-of-lists-${i}` }) },
  { path: '/v1/agents', create: (workspace_id, i) => ({ workspace_id, name: `Agent ${i}`, type: 'agent', model: 'local-chat' }) },
  { path: '/v1/workflows', create: (workspace_id, i) => ({ workspace_id, name: `Workflow ${i}`, graph: GRAPH }) },
  { path: '/v1/knowledge-bases', create: (workspace_id, i) => ({ workspace_id, name: `Base ${i}` }) },
]
// What each kind holds, per workspace, in creation order.
const made = new Map<string, Record<string, string[]>>()

const ids = (res: Answer) => {
  expect(res.status).toBe(200)
  expect(Object.keys(res.body).sort()).toEqual(['data', 'has_more', 'next_cursor', 'request_id'])
  return res.body.data.map((r: { id: string }) => r.id) as string[]
}
const sorted = (list: string[]) => [...list].sort()

beforeAll(async () => {
  h = await startHarness({ RATE_LIMIT_PER_SECOND: '100000', RATE_LIMIT_BURST: '100000' })
  two = await keyFor(h, 'lists-two')
  reader = await keyFor(h, 'lists-reader')
  outsider = await keyFor(h, 'lists-outsider')
  wsA = await workspaceOf(h, two, 'Lists A')
  wsB = await workspaceOf(h, two, 'Lists B')
  wsO = await workspaceOf(h, outsider, 'Lists O')
  wsR = await workspaceOf(h, reader, 'Lists R')
  expect((await h.call('POST', `/v1/workspaces/${wsA}/members`, { key: two, body: { user_id: 'lists-reader', role: 'readonly' } })).status).toBe(201)
  let i = 0
  for (const kind of kinds) {
    const per: Record<string, string[]> = { [wsA]: [], [wsB]: [], [wsO]: [], [wsR]: [] }
    // Interleaved A, B, A, B, A, then one of the outsider's and one of the reader's: pages cut across workspaces.
    for (const [ws, key] of [[wsA, two], [wsB, two], [wsA, two], [wsB, two], [wsA, two], [wsO, outsider], [wsR, reader]] as const) {
      const res = await h.call('POST', kind.path, { key, body: kind.create(ws, ++i) })
      expect([kind.path, res.status, res.text]).toEqual([kind.path, 201, res.text])
      per[ws]!.push(res.body.data.id)
    }
    made.set(kind.path, per)
  }
}, 60_000)
afterAll(() => h.close())

describe.each(kinds.map((k) => [k.path, k] as const))('GET %s', (path) => {
  const of = (ws: string) => made.get(path)![ws]!

  test('no parameters, a user in two workspaces: both workspaces\' items, newest first', async () => {
    expect(ids(await h.call('GET', path, { key: two }))).toEqual(sorted([...of(wsA), ...of(wsB)]).reverse())
  })

  test('no parameters, root: every workspace\'s items', async () => {
    const all = ids(await h.call('GET', `${path}?limit=100`))
    expect(sorted(all)).toEqual(sorted([...of(wsA), ...of(wsB), ...of(wsO), ...of(wsR)]))
  })

  test('a key restricted to a workspace: its own only, where its user\'s other key sees both', async () => {
    expect(sorted(ids(await h.call('GET', path, { key: two })))).toEqual(sorted([...of(wsA), ...of(wsB)]))
    const restricted = await keyFor(h, 'lists-two', { workspace_id: wsB })
    expect(sorted(ids(await h.call('GET', path, { key: restricted })))).toEqual(sorted(of(wsB)))
    const other = await h.call('GET', `${path}?workspace_id=${wsA}`, { key: restricted })
    expect(other.status).toBe(404)
    expect(other.body.error.code).toBe('not_found')
  })

  test('workspace_id (or X-Workspace-Id) is a filter over every workspace the caller reads', async () => {
    expect(sorted(ids(await h.call('GET', `${path}?limit=100`, { key: two })))).toEqual(sorted([...of(wsA), ...of(wsB)]))
    expect(sorted(ids(await h.call('GET', `${path}?workspace_id=${wsA}`, { key: two })))).toEqual(sorted(of(wsA)))
    expect(sorted(ids(await h.call('GET', path, { key: two, headers: { 'x-workspace-id': wsB } })))).toEqual(sorted(of(wsB)))
    expect(sorted(ids(await h.call('GET', `${path}?workspace_id=${wsO}`)))).toEqual(sorted(of(wsO)))
  })

  test('a readonly member of A (owner of R) sees A\'s and R\'s items, never B\'s; naming B is 404', async () => {
    expect(sorted(ids(await h.call('GET', path, { key: reader })))).toEqual(sorted([...of(wsA), ...of(wsR)]))
    const named = await h.call('GET', `${path}?workspace_id=${wsB}`, { key: reader })
    expect(named.status).toBe(404)
    expect(named.body.error.code).toBe('not_found')
    expect(sorted(ids(await h.call('GET', path, { key: outsider })))).toEqual(sorted(of(wsO)))
  })

  test('pages of 2 across workspaces: every item once, in order, both directions', async () => {
    for (const sort of ['-created_at', 'created_at']) {
      const seen: string[] = []
      let cursor: string | null = null
      let pages = 0
      do {
        const res: Answer = await h.call('GET', `${path}?limit=2&sort=${sort}${cursor ? `&cursor=${cursor}` : ''}`, { key: two })
        seen.push(...ids(res))
        cursor = res.body.next_cursor
        expect(++pages).toBeLessThan(10)
      } while (cursor)
      expect(pages).toBe(3)
      expect(seen).toEqual(ids(await h.call('GET', `${path}?limit=100&sort=${sort}`, { key: two })))
      expect(sorted(seen)).toEqual(sorted([...of(wsA), ...of(wsB)]))
    }
  })
})

test('a user in no workspace lists nothing, not a 400', async () => {
  const nobody = await keyFor(h, 'lists-nobody')
  for (const kind of kinds) expect(await h.call('GET', kind.path, { key: nobody })).toMatchObject({ status: 200, body: { data: [], has_more: false, next_cursor: null } })
})
