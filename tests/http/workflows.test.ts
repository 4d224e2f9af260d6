import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { getWorkflowVersion } from '../../src/store/workflows'
import { AppError } from '../../src/lib/errors'
import { keyFor, startHarness, workspaceOf, type Answer, type CallOptions, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

let h: Harness
let owner: string
let dev: string
let user: string
let ro: string
let outsider: string
let ws: string
let otherWs: string

const call = (method: string, path: string, opts: CallOptions = {}): Promise<Answer> => h.call(method, path, opts)

beforeAll(async () => {
  h = await startHarness({ RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000' })
  ;[owner, dev, user, ro, outsider] = (await Promise.all(['wf-owner', 'wf-dev', 'wf-user', 'wf-ro', 'wf-outsider'].map((u) => keyFor(h, u)))) as [string, string, string, string, string]
  ws = await workspaceOf(h, owner, 'Flows')
  otherWs = await workspaceOf(h, outsider, 'Elsewhere')
  for (const [userId, role] of [['wf-dev', 'developer'], ['wf-user', 'user'], ['wf-ro', 'readonly']]) {
    const res = await h.call('POST', `/v1/workspaces/${ws}/members`, { key: owner, body: { user_id: userId, role } })
    expect(res.status).toBe(201)
  }
})
afterAll(() => h?.close())

const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/
const META = { version: 'v1', deprecated_warnings: [] }

function graph(text = 'Hello {{inputs.name}}') {
  return {
    nodes: [
      { id: 'start', type: 'start', config: { inputs: [{ name: 'name', type: 'string', required: true }] } },
      { id: 'greet', type: 'template', name: 'Greet', config: { template: text } },
      { id: 'end', type: 'end', config: { outputs: { text: '{{nodes.greet.output.text}}' } } },
    ],
    edges: [{ source: 'start', target: 'greet' }, { source: 'greet', target: 'end' }],
  }
}

let seq = 0
async function created(opts: { key?: string; body?: Record<string, unknown> } = {}): Promise<Answer> {
  const res = await call('POST', '/v1/workflows', { key: opts.key ?? owner, body: { workspace_id: ws, name: `Flow ${++seq}`, graph: graph(), ...opts.body } })
  expect(res.status).toBe(201)
  return res
}

async function versionGraph(id: string, version: number): Promise<unknown> {
  try {
    return await getWorkflowVersion(h.deps.db.sql, id, version)
  } catch (err) {
    if (err instanceof AppError) return err.code
    throw err
  }
}

describe('create and get', () => {
  test('201 in the general envelope, version 1, the graph as sent', async () => {
    const res = await created({ body: { name: 'Greeter', description: 'Says hello' } })
    expect(res.body).toEqual({
      request_id: expect.stringMatching(/^req_/),
      data: {
        id: expect.stringMatching(/^wf_[0-9a-z]{26}$/),
        workspace_id: ws,
        name: 'Greeter',
        description: 'Says hello',
        graph: graph(),
        version: 1,
        created_by: 'wf-owner',
        created_at: expect.stringMatching(ISO_MS),
        updated_at: expect.stringMatching(ISO_MS),
      },
      meta: META,
    })
    const got = await call('GET', `/v1/workflows/${res.body.data.id}`, { key: ro })
    expect(got.status).toBe(200)
    expect(got.body.data).toEqual(res.body.data)
    expect(await versionGraph(res.body.data.id, 1)).toEqual(graph())
  })

  test('description defaults to empty; the workspace comes from X-Workspace-Id or the caller\'s only workspace', async () => {
    const byHeader = await call('POST', '/v1/workflows', { key: owner, headers: { 'x-workspace-id': ws }, body: { name: 'H', graph: graph() } })
    expect(byHeader.status).toBe(201)
    expect(byHeader.body.data).toMatchObject({ workspace_id: ws, description: '' })
    const implicit = await call('POST', '/v1/workflows', { key: outsider, body: { name: 'Mine', graph: graph() } })
    expect(implicit.status).toBe(201)
    expect(implicit.body.data.workspace_id).toBe(otherWs)
    const root = await call('POST', '/v1/workflows', { body: { name: 'Nowhere', graph: graph() } })
    expect(root.status).toBe(400)
    expect(root.body.error.param).toBe('workspace_id')
  })

  test('unknown workflow: 404 naming it', async () => {
    const res = await call('GET', '/v1/workflows/wf_01jbz3k9x8q7r6s5t4v3w2y1z0', { key: owner })
    expect(res.status).toBe(404)
    expect(res.body.error).toEqual({ code: 'not_found', message: 'workflow wf_01jbz3k9x8q7r6s5t4v3w2y1z0 not found' })
  })
})

describe('list', () => {
  let listWs: string
  const names = ['delta', 'alpha', 'charlie', 'bravo', 'echo']
  beforeAll(async () => {
    listWs = await workspaceOf(h, owner, 'Listing')
    for (const name of names) await created({ body: { workspace_id: listWs, name } })
  })

  test('newest first by default, pages without repeats', async () => {
    const seen: string[] = []
    let cursor: string | null = null
    do {
      const res: Answer = await call('GET', `/v1/workflows?workspace_id=${listWs}&limit=2${cursor ? `&cursor=${cursor}` : ''}`, { key: owner })
      expect(res.status).toBe(200)
      expect(Object.keys(res.body).sort()).toEqual(['data', 'has_more', 'next_cursor', 'request_id'])
      seen.push(...res.body.data.map((w: any) => w.name))
      cursor = res.body.next_cursor
    } while (cursor)
    expect(seen).toEqual([...names].reverse())
  })

  test('sort by name, filter by name and creation time', async () => {
    const byName = await call('GET', `/v1/workflows?workspace_id=${listWs}&sort=name`, { key: owner })
    expect(byName.body.data.map((w: any) => w.name)).toEqual([...names].sort())
    const one = await call('GET', `/v1/workflows?workspace_id=${listWs}&name=charlie`, { key: owner })
    expect(one.body.data.map((w: any) => w.name)).toEqual(['charlie'])
    const some = await call('GET', `/v1/workflows?workspace_id=${listWs}&name_in=alpha,echo&sort=-name`, { key: owner })
    expect(some.body.data.map((w: any) => w.name)).toEqual(['echo', 'alpha'])
    const future = await call('GET', `/v1/workflows?workspace_id=${listWs}&created_at_after=2999-01-01T00:00:00Z`, { key: owner })
    expect(future.body).toMatchObject({ data: [], has_more: false, next_cursor: null })
  })

  test('list errors: unknown sort and filter; naming no workspace lists every one the caller reads', async () => {
    expect((await call('GET', `/v1/workflows?workspace_id=${listWs}&sort=version`, { key: owner })).body.error.code).toBe('invalid_sort')
    expect((await call('GET', `/v1/workflows?workspace_id=${listWs}&status=active`, { key: owner })).body.error.code).toBe('invalid_filter')
    const inList = (await call('GET', `/v1/workflows?workspace_id=${listWs}&limit=100`, { key: owner })).body.data.map((w: any) => w.id)
    const several = await call('GET', '/v1/workflows?limit=100', { key: owner })
    expect(several.status).toBe(200)
    const everywhere = several.body.data.map((w: any) => w.id)
    expect(everywhere.length).toBeGreaterThan(inList.length)
    for (const id of inList) expect(everywhere).toContain(id)
  })
})

describe('replace and delete', () => {
  test('PUT replaces name, description and graph, bumps the version and keeps the old version\'s graph', async () => {
    const first = (await created({ body: { description: 'first' } })).body.data
    const put = await call('PUT', `/v1/workflows/${first.id}`, { key: dev, body: { name: 'Renamed', graph: graph('Hi {{inputs.name}}!') } })
    expect(put.status).toBe(200)
    expect(put.body.data).toMatchObject({ id: first.id, name: 'Renamed', description: '', version: 2, graph: graph('Hi {{inputs.name}}!'), created_at: first.created_at, created_by: 'wf-owner' })
    expect(Date.parse(put.body.data.updated_at)).toBeGreaterThanOrEqual(Date.parse(first.updated_at))
    const again = await call('PUT', `/v1/workflows/${first.id}`, { key: owner, body: { name: 'Renamed', description: 'third', graph: graph('Yo') } })
    expect(again.body.data.version).toBe(3)
    expect((await call('GET', `/v1/workflows/${first.id}`, { key: ro })).body.data).toEqual(again.body.data)
    expect(await versionGraph(first.id, 1)).toEqual(graph())
    expect(await versionGraph(first.id, 2)).toEqual(graph('Hi {{inputs.name}}!'))
    expect(await versionGraph(first.id, 3)).toEqual(graph('Yo'))
  })

  test('DELETE answers { id, deleted: true }, then the workflow and its versions are gone', async () => {
    const { id } = (await created()).body.data
    const del = await call('DELETE', `/v1/workflows/${id}`, { key: dev })
    expect(del.status).toBe(200)
    expect(del.body).toMatchObject({ data: { id, deleted: true }, meta: META })
    expect((await call('GET', `/v1/workflows/${id}`, { key: owner })).status).toBe(404)
    expect((await call('DELETE', `/v1/workflows/${id}`, { key: owner })).status).toBe(404)
    expect((await call('PUT', `/v1/workflows/${id}`, { key: owner, body: { name: 'x', graph: graph() } })).status).toBe(404)
    expect(await versionGraph(id, 1)).toBe('not_found')
  })
})

describe('roles', () => {
  test.each([
    ['readonly', () => ro, 403],
    ['user', () => user, 403],
    ['developer', () => dev, 201],
  ])('create as %s: %d', async (_, key, status) => {
    const res = await call('POST', '/v1/workflows', { key: key(), body: { workspace_id: ws, name: 'By role', graph: graph() } })
    expect(res.status).toBe(status)
    if (status === 403) expect(res.body.error.code).toBe('forbidden')
  })

  test('readonly and user members read but cannot replace or delete', async () => {
    const { id } = (await created()).body.data
    for (const key of [ro, user]) {
      expect((await call('GET', `/v1/workflows/${id}`, { key })).status).toBe(200)
      expect((await call('GET', `/v1/workflows?workspace_id=${ws}`, { key })).status).toBe(200)
      const put = await call('PUT', `/v1/workflows/${id}`, { key, body: { name: 'No', graph: graph() } })
      expect(put.status).toBe(403)
      expect((await call('DELETE', `/v1/workflows/${id}`, { key })).status).toBe(403)
    }
    expect((await call('GET', `/v1/workflows/${id}`, { key: owner })).body.data.version).toBe(1)
  })

  test('a non-member gets 404 for the workflow itself, never 403, whatever it sends', async () => {
    const { id } = (await created()).body.data
    const get = await call('GET', `/v1/workflows/${id}`, { key: outsider })
    expect(get.status).toBe(404)
    expect(get.body.error.message).toBe(`workflow ${id} not found`)
    for (const res of [
      await call('PUT', `/v1/workflows/${id}`, { key: outsider, body: { name: 'Mine now', graph: graph() } }),
      // An invalid graph still answers 404: access is checked before the graph is.
      await call('PUT', `/v1/workflows/${id}`, { key: outsider, body: { name: 'Mine now', graph: { nodes: [], edges: [] } } }),
      await call('DELETE', `/v1/workflows/${id}`, { key: outsider }),
    ]) {
      expect(res.status).toBe(404)
      expect(res.body.error.message).toBe(`workflow ${id} not found`)
    }
    expect((await call('GET', `/v1/workflows?workspace_id=${ws}`, { key: outsider })).status).toBe(404)
    expect((await call('POST', '/v1/workflows', { key: outsider, body: { workspace_id: ws, name: 'x', graph: { nodes: [] , edges: [] } } })).status).toBe(404)
    expect((await call('GET', `/v1/workflows/${id}`, { key: owner })).body.data.name).not.toBe('Mine now')
  })

  test('a key restricted to another workspace sees nothing of this one', async () => {
    const { id } = (await created()).body.data
    const restricted = await keyFor(h, 'wf-owner', { workspace_id: otherWs })
    expect((await call('GET', `/v1/workflows/${id}`, { key: restricted })).status).toBe(404)
  })

  test('an archived workspace is read-only', async () => {
    const archWs = await workspaceOf(h, owner, 'Archive me')
    const { id } = (await created({ body: { workspace_id: archWs } })).body.data
    expect((await h.call('POST', `/v1/workspaces/${archWs}/archive`, { key: owner })).status).toBe(200)
    expect((await call('GET', `/v1/workflows/${id}`, { key: owner })).status).toBe(200)
    expect((await call('PUT', `/v1/workflows/${id}`, { key: owner, body: { name: 'x', graph: graph() } })).status).toBe(403)
    expect((await call('POST', '/v1/workflows', { key: owner, body: { workspace_id: archWs, name: 'x', graph: graph() } })).status).toBe(403)
  })
})

describe('validation', () => {
  const cond = (when: string) => ({
    nodes: [
      { id: 'start', type: 'start', config: { inputs: [{ name: 'score', type: 'number', required: true }] } },
      { id: 'cond1', type: 'condition', config: { cases: [{ id: 'high', when }] } },
      { id: 'end', type: 'end', config: { outputs: {} } },
    ],
    edges: [{ source: 'start', target: 'cond1' }, { source: 'cond1', target: 'end', source_handle: 'high' }, { source: 'cond1', target: 'end', source_handle: 'default' }],
  })

  test('the same graph saves once its expression compiles', async () => {
    expect((await call('POST', '/v1/workflows', { key: owner, body: { workspace_id: ws, name: 'Cond', graph: cond('inputs.score > 0.5') } })).status).toBe(201)
  })

  test.each([
    ['a JSONata syntax error', { graph: cond('inputs.score >') }, 'graph.nodes.1.config.cases.0.when', 'graph.nodes[1] (id "cond1"): cases[0].when: is not a valid JSONata expression'],
    ['a cycle', { graph: { ...graph(), edges: [...graph().edges, { source: 'greet', target: 'greet' }] } }, 'graph.edges.2.target', 'graph.edges[2] ("greet" → "greet")'],
    ['an unknown node type', { graph: { ...graph(), nodes: graph().nodes.map((n) => (n.id === 'greet' ? { ...n, type: 'python' } : n)) } }, 'graph.nodes.1.type', 'graph.nodes[1] (id "greet"): type: unknown node type "python"'],
    ['no graph', { graph: undefined }, 'graph', 'graph'],
    ['a node without config (body schema)', { graph: { nodes: [{ id: 'start', type: 'start' }], edges: [] } }, 'graph.nodes.0.config', 'graph.nodes.0.config'],
    ['an empty name', { name: '' }, 'name', 'name'],
    ['an unknown body field', { version: 7 }, 'version', 'version'],
  ])('POST with %s: 400 naming the place', async (_, patch, param, message) => {
    const res = await call('POST', '/v1/workflows', { key: owner, body: { workspace_id: ws, name: 'Bad', graph: graph(), ...patch } })
    expect(res.status).toBe(400)
    expect(res.body.error.code).toBe('validation_error')
    expect(res.body.error.param).toBe(param)
    expect(res.body.error.message).toContain(message)
    expect(res.body.error.details[0].path).toBe(param)
  })

  test('PUT with an invalid graph: 400, and the workflow keeps its version', async () => {
    const { id } = (await created()).body.data
    const res = await call('PUT', `/v1/workflows/${id}`, { key: owner, body: { name: 'x', graph: { ...graph(), edges: [{ source: 'start', target: 'greet' }] } } })
    expect(res.status).toBe(400)
    expect(res.body.error).toEqual({
      code: 'validation_error',
      message: 'graph.nodes[0] (id "start"): no end node is reachable from it; every path must lead to an end node',
      param: 'graph.nodes.0',
      details: [
        { path: 'graph.nodes.0', message: 'graph.nodes[0] (id "start"): no end node is reachable from it; every path must lead to an end node' },
        { path: 'graph.nodes.1', message: 'graph.nodes[1] (id "greet"): no end node is reachable from it; every path must lead to an end node' },
        { path: 'graph.nodes.2', message: 'graph.nodes[2] (id "end"): is not reachable from the start node "start"; connect it or remove it' },
      ],
    })
    const after = (await call('GET', `/v1/workflows/${id}`, { key: owner })).body.data
    expect(after).toMatchObject({ version: 1, graph: graph() })
  })

  test('a malformed id is a 400, not a 500', async () => {
    const res = await call('GET', `/v1/workflows/${encodeURIComponent('wf x')}`, { key: owner })
    expect(res.status).toBe(400)
  })
})
