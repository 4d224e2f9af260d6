import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { startWorkers, type Workers } from '../../src/workers'
import { keyFor, startHarness, waitFor, workspaceOf, type Answer, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

/** The audit trail: every successful write recorded with who, what, when and the request id. */
let h: Harness
let workers: Workers
let admin: string
let dev: string
let outsider: string
let ws: string
let adminKeyId: string
let devKeyId: string

const log = async (query = '', key = admin): Promise<Answer> => h.call('GET', `/v1/workspaces/${ws}/audit-log${query}`, { key })
const entries = async (query = '') => {
  const res = await log(query)
  expect(res.status).toBe(200)
  return res.body.data as { action: string; user_id: string; api_key_id: string; request_id: string; resource_id: string | null; params: Record<string, string>; status: number; workspace_id: string; created_at: string }[]
}
const keyIdOf = async (key: string) => (await h.call('GET', '/v1/api-keys', { key })).body.data[0].id as string

beforeAll(async () => {
  h = await startHarness({ RATE_LIMIT_PER_SECOND: '100000', RATE_LIMIT_BURST: '100000' })
  workers = await startWorkers(h.deps)
  admin = await keyFor(h, 'audit-admin')
  dev = await keyFor(h, 'audit-dev')
  outsider = await keyFor(h, 'audit-outsider')
  ws = await workspaceOf(h, admin, 'Audited')
  expect((await h.call('POST', `/v1/workspaces/${ws}/members`, { key: admin, body: { user_id: 'audit-dev', role: 'developer' } })).status).toBe(201)
  adminKeyId = await keyIdOf(admin)
  devKeyId = await keyIdOf(dev)
}, 30_000)
afterAll(async () => {
  await workers?.stop()
  await h?.close()
})

describe('what is recorded', () => {
  test('a write: who (user_id, key), what (action, resource, params), when, its status and request id', async () => {
    const res = await h.call('PATCH', `/v1/workspaces/${ws}`, { key: admin, body: { description: 'now audited' } })
    expect(res.status).toBe(200)
    const [latest] = await entries('?limit=1')
    expect(latest).toEqual({
      id: expect.stringMatching(/^aud_/),
      workspace_id: ws,
      user_id: 'audit-admin',
      api_key_id: adminKeyId,
      issued_by: 'root',
      action: 'PATCH /v1/workspaces/{id}',
      resource_id: ws,
      params: { id: ws },
      status: 200,
      request_id: res.headers.get('x-request-id')!,
      created_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/),
    } as never)
  })

  test('creating the workspace and adding the member were recorded first, oldest last', async () => {
    const all = await entries('?limit=100')
    expect(all.slice(-2).map((e) => [e.action, e.resource_id, e.status])).toEqual([
      ['POST /v1/workspaces/{id}/members', 'audit-dev', 201],
      ['POST /v1/workspaces', ws, 201],
    ])
  })

  test('creates, updates and deletes of every kind of resource, under their workspace; a deleted row keeps its record', async () => {
    const dev1 = { key: dev }
    const wf = (await h.call('POST', '/v1/workflows', { ...dev1, body: { workspace_id: ws, name: 'Audited flow', graph: { nodes: [{ id: 'start', type: 'start', config: {} }, { id: 'end', type: 'end', config: { outputs: {} } }], edges: [{ source: 'start', target: 'end' }] } } })).body.data.id
    const kb = (await h.call('POST', '/v1/knowledge-bases', { ...dev1, body: { workspace_id: ws, name: 'Audited base' } })).body.data.id
    const doc = (await h.call('POST', `/v1/knowledge-bases/${kb}/documents`, { ...dev1, body: { type: 'text', name: 'a.txt', content: 'Audited text.' } })).body.document_id
    const agent = (await h.call('POST', '/v1/agents', { ...dev1, body: { workspace_id: ws, name: 'Audited agent', type: 'agent', model: 'local-chat' } })).body.data.id
    expect((await h.call('PATCH', `/v1/agents/${agent}`, { ...dev1, body: { instructions: 'Be brief.' } })).status).toBe(200)
    const deleted = await h.call('DELETE', `/v1/agents/${agent}`, dev1)
    expect(deleted.status).toBe(200)
    await waitFor(async () => (await h.call('GET', `/v1/documents/${doc}`)).body.status !== 'uploading')
    const mine = (await entries(`?user_id=audit-dev&limit=100`)).reverse()
    expect(mine.map((e) => [e.action, e.resource_id, e.workspace_id, e.api_key_id])).toEqual([
      ['POST /v1/workflows', wf, ws, devKeyId],
      ['POST /v1/knowledge-bases', kb, ws, devKeyId],
      ['POST /v1/knowledge-bases/{id}/documents', doc, ws, devKeyId],
      ['POST /v1/agents', agent, ws, devKeyId],
      ['PATCH /v1/agents/{id}', agent, ws, devKeyId],
      ['DELETE /v1/agents/{id}', agent, ws, devKeyId],
    ])
    expect(mine.at(-1)!.request_id).toBe(deleted.headers.get('x-request-id')!)
  })

  test('not recorded: reads, refused writes, searches, model calls, chat turns, and an idempotent replay', async () => {
    const kb = (await h.call('POST', '/v1/knowledge-bases', { key: admin, body: { workspace_id: ws, name: 'Searched' } })).body.data.id
    const agent = (await h.call('POST', '/v1/agents', { key: admin, body: { workspace_id: ws, name: 'Chatty', type: 'agent', model: 'local-chat' } })).body.data.id
    const before = (await entries('?limit=100')).length
    await h.call('GET', `/v1/workspaces/${ws}`, { key: admin })
    expect((await h.call('POST', `/v1/knowledge-bases/${kb}/search`, { key: admin, body: { query: 'anything' } })).status).toBe(200)
    expect((await h.call('POST', `/v1/agents/${agent}/chat`, { key: admin, body: { message: 'hello', user_id: 'someone' } })).status).toBe(200)
    expect((await h.call('POST', '/v1/models/llm/chat', { key: admin, body: { model: 'local-chat', messages: [{ role: 'user', content: 'hi' }], workspace_id: ws } })).status).toBeLessThan(500)
    expect((await h.call('POST', `/v1/workspaces/${ws}/members`, { key: dev, body: { user_id: 'x', role: 'admin' } })).status).toBe(403)
    expect((await h.call('POST', `/v1/workspaces/${ws}/members`, { key: admin, body: { user_id: '' } })).status).toBe(400)
    expect((await h.call('POST', '/v1/models/embeddings', { key: admin, body: { model: 'local-embed', input: ['x'], workspace_id: ws } })).status).toBeLessThan(500)
    const body = { name: 'Replayed flow', workspace_id: ws, graph: { nodes: [{ id: 'start', type: 'start', config: {} }, { id: 'end', type: 'end', config: { outputs: {} } }], edges: [{ source: 'start', target: 'end' }] } }
    const first = await h.call('POST', '/v1/workflows', { key: admin, body, headers: { 'idempotency-key': 'audit-replay-1' } })
    const again = await h.call('POST', '/v1/workflows', { key: admin, body, headers: { 'idempotency-key': 'audit-replay-1' } })
    expect([first.status, again.status]).toEqual([201, 201])
    const after = await entries('?limit=100')
    expect(after.length).toBe(before + 1)
    expect(after[0]!.action).toBe('POST /v1/workflows')
    expect(after[0]!.request_id).toBe(first.headers.get('x-request-id')!)
  })

  test('a run triggered as a stream is recorded with the run it created', async () => {
    const wf = (await h.call('POST', '/v1/workflows', { key: dev, body: { workspace_id: ws, name: 'Streamed flow', graph: { nodes: [{ id: 'start', type: 'start', config: {} }, { id: 'end', type: 'end', config: { outputs: {} } }], edges: [{ source: 'start', target: 'end' }] } } })).body.data.id
    const res = await h.call('POST', `/v1/workflows/${wf}/runs`, { key: dev, body: { inputs: {} }, headers: { accept: 'text/event-stream' } })
    expect(res.status).toBe(200)
    expect(res.text).toContain('event: done')
    const runId = res.headers.get('x-run-id')!
    expect(runId).toMatch(/^run_/)
    await waitFor(async () => (await entries('?limit=1'))[0]!.action === 'POST /v1/workflows/{id}/runs')
    const [latest] = await entries('?limit=1')
    expect([latest!.resource_id, latest!.workspace_id, latest!.user_id, latest!.request_id]).toEqual([runId, ws, 'audit-dev', res.headers.get('x-request-id')!])
  })
})

describe('GET /v1/workspaces/{id}/audit-log', () => {
  test('admins only: a developer gets 403, a non-member 404', async () => {
    expect((await log('', dev)).status).toBe(403)
    expect((await log('', outsider)).status).toBe(404)
    expect((await log('', outsider)).body.error.code).toBe('not_found')
  })

  test('pages newest first without repeating or skipping; filters by user, action, status and time', async () => {
    const all = await entries('?limit=100')
    const seen: string[] = []
    let cursor: string | null = null
    do {
      const page: Answer = await log(`?limit=3${cursor ? `&cursor=${cursor}` : ''}`)
      seen.push(...page.body.data.map((e: { id: string }) => e.id))
      cursor = page.body.next_cursor
    } while (cursor)
    expect(seen).toEqual(all.map((e) => (e as unknown as { id: string }).id))
    const times = all.map((e) => e.created_at)
    expect([...times].sort().reverse()).toEqual(times)
    expect((await entries('?user_id=audit-admin&limit=100')).every((e) => e.user_id === 'audit-admin')).toBe(true)
    const deletes = await entries(`?action=${encodeURIComponent('DELETE /v1/agents/{id}')}`)
    expect(deletes.length).toBe(1)
    expect((await entries('?status=201&limit=100')).every((e) => e.status === 201)).toBe(true)
    expect(await entries('?created_at_after=2999-01-01T00:00:00.000Z')).toEqual([])
    expect((await log('?sort=created_at&limit=1')).body.data[0].action).toBe('POST /v1/workspaces')
    expect((await log('?sort=name')).status).toBe(400)
    // Found by the fuzz test: a status that is not a number was a failed statement (500).
    const bad = await log('?status=%29n')
    expect([bad.status, bad.body.error.code]).toEqual([400, 'invalid_filter'])
  })

  test('deleting a workspace deletes its trail; the deletion itself is kept outside any workspace', async () => {
    const doomed = await workspaceOf(h, admin, 'Doomed')
    expect((await h.call('PATCH', `/v1/workspaces/${doomed}`, { key: admin, body: { description: 'soon gone' } })).status).toBe(200)
    const res = await h.call('DELETE', `/v1/workspaces/${doomed}`, { key: admin })
    expect(res.status).toBe(200)
    const rows = await h.deps.db.sql<{ workspace_id: string | null; action: string; request_id: string }[]>`
      select workspace_id, action, request_id from audit_log where params->>'id' = ${doomed} order by created_at`
    expect([...rows]).toEqual([{ workspace_id: null, action: 'DELETE /v1/workspaces/{id}', request_id: res.headers.get('x-request-id')! }])
  })

  test('an archived workspace\'s trail stays readable, and archiving is in it', async () => {
    expect((await h.call('POST', `/v1/workspaces/${ws}/archive`, { key: admin })).status).toBe(200)
    const [latest] = await entries('?limit=1')
    expect(latest!.action).toBe('POST /v1/workspaces/{id}/archive')
    expect((await h.call('POST', `/v1/workspaces/${ws}/restore`, { key: admin })).status).toBe(200)
  })
})
