import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { chain, end, start, startRunsEnv, tpl, type RunsEnv } from '../helpers/runs'

/**
 * The published API called exactly as it is written (docs/api.md renders it): each route with the
 * method, path and body fields the published text shows, no query parameter or header beyond
 * Authorization unless it shows one, and the answers checked field by field against the shapes it
 * gives. Written from the published text, not from our code: a client written from it is what this
 * imitates. The caller is an ordinary user who belongs to two workspaces, as in a real team; calls that
 * act in one workspace and name none (model calls, webhook registration) use a key restricted to one.
 */
let env: RunsEnv
let user: string
let restricted: string
let second: string
let wf: string

const call = (method: string, path: string, key: string, body?: unknown) => env.h.call(method, path, { key, ...(body === undefined ? {} : { body }) })
const isIso = (v: unknown) => typeof v === 'string' && /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/.test(v)
const usageShape = (u: any) => {
  expect(Number.isInteger(u.tokens_in)).toBe(true)
  expect(Number.isInteger(u.tokens_out)).toBe(true)
  expect(typeof u.credits).toBe('number')
}

beforeAll(async () => {
  env = await startRunsEnv()
  user = env.owner
  second = (await call('POST', '/v1/workspaces', user, { name: 'Second team', description: 'Another one', type: 'team', join_policy: 'approve_required' })).body.data.id
  const issued = await call('POST', '/v1/api-keys', env.h.rootKey, { user_id: (await call('GET', `/v1/workspaces/${env.ws}`, user)).body.data.owner_id, name: 'restricted', workspace_id: env.ws })
  restricted = issued.body.data.key
  wf = await env.workflow(chain(start([{ name: 'name', type: 'string' }]), tpl('greet', 'Hello {{inputs.name}}'), end({ greeting: '{{nodes.greet.output.text}}' })))
}, 60_000)

afterAll(async () => {
  await env?.close()
})

describe('workspaces', () => {
  test('GET /v1/workspaces: the list envelope of workspace objects', async () => {
    const res = await call('GET', '/v1/workspaces', user)
    expect(res.status).toBe(200)
    expect(Object.keys(res.body).sort()).toEqual(['data', 'has_more', 'next_cursor', 'request_id'])
    const w = res.body.data.find((x: any) => x.id === second)
    for (const f of ['id', 'name', 'description', 'type', 'owner_id', 'status', 'created_at', 'join_policy']) expect(w).toHaveProperty(f)
    expect(Number.isInteger(w.member_count)).toBe(true)
    expect(['active', 'archived']).toContain(w.status)
    expect(isIso(w.created_at)).toBe(true)
  })

  test('POST /v1/workspaces with name, description, type, join_policy: the general envelope', async () => {
    const res = await call('POST', '/v1/workspaces', user, { name: 'Literal', description: 'd', type: 'team', join_policy: 'approve_required' })
    expect([200, 201]).toContain(res.status)
    expect(Object.keys(res.body).sort()).toEqual(['data', 'meta', 'request_id'])
    expect(res.body.data).toMatchObject({ name: 'Literal', description: 'd', type: 'team', join_policy: 'approve_required', status: 'active' })
  })

  test('GET, PATCH /v1/workspaces/{id}; members: GET, POST, DELETE; transfer', async () => {
    expect((await call('GET', `/v1/workspaces/${second}`, user)).body.data.id).toBe(second)
    expect((await call('PATCH', `/v1/workspaces/${second}`, user, { name: 'Renamed', description: 'x' })).body.data.name).toBe('Renamed')
    const added = await call('POST', `/v1/workspaces/${second}/members`, user, { user_id: 'literal-member', role: 'developer' })
    expect([200, 201]).toContain(added.status)
    const members = await call('GET', `/v1/workspaces/${second}/members`, user)
    expect(members.body.data.map((m: any) => [m.user_id, m.role])).toContainEqual(['literal-member', 'developer'])
    expect((await call('DELETE', `/v1/workspaces/${second}/members/literal-member`, user)).status).toBe(200)
    const t = await call('POST', `/v1/workspaces/${second}/transfer`, user, { new_owner_id: (await call('GET', `/v1/workspaces/${second}`, user)).body.data.owner_id })
    expect(t.status).toBeLessThan(500)
  })
})

describe('lists that name no workspace', () => {
  test.each(['/v1/agents', '/v1/workflows', '/v1/knowledge-bases', '/v1/webhooks'])('GET %s with no parameters answers the caller\'s resources', async (path) => {
    const res = await call('GET', path, user)
    expect(res.status).toBe(200)
    expect(Array.isArray(res.body.data)).toBe(true)
  })
})

describe('workflows and runs', () => {
  test('POST /v1/workflows/{id}/runs with inputs and user_id: the synchronous run response', async () => {
    const res = await call('POST', `/v1/workflows/${wf}/runs`, user, { inputs: { name: 'Ada' }, user_id: 'spec-user' })
    expect(res.status).toBe(200)
    expect(Object.keys(res.body).sort()).toEqual(['duration_ms', 'outputs', 'request_id', 'run_id', 'status', 'usage', 'workflow_id'])
    expect(res.body).toMatchObject({ workflow_id: wf, status: 'completed', outputs: { greeting: 'Hello Ada' } })
    expect(Number.isInteger(res.body.duration_ms)).toBe(true)
    usageShape(res.body.usage)
  })

  test('?async=true answers { run_id, status: running }; GET /v1/runs/{run_id} is the run object, flat', async () => {
    const res = await call('POST', `/v1/workflows/${wf}/runs?async=true`, user, { inputs: { name: 'Bo' }, user_id: 'spec-user' })
    expect(res.status).toBe(202)
    const runId = res.body.run_id as string
    expect(typeof runId).toBe('string')
    expect(res.body.status).toBe('running')
    const run = await env.finished(runId)
    expect(run.status).toBe('completed')
    const got = await call('GET', `/v1/runs/${runId}`, user)
    expect(got.status).toBe(200)
    expect(got.body.data).toBeUndefined()
    expect(got.body).toMatchObject({ run_id: runId, workflow_id: wf, status: 'completed', outputs: { greeting: 'Hello Bo' }, request_id: expect.any(String) })
    expect(Number.isInteger(got.body.duration_ms)).toBe(true)
    usageShape(got.body.usage)
  })

  test('GET /v1/workflows/{id}/runs?status=failed&limit=20: a list of runs', async () => {
    const res = await call('GET', `/v1/workflows/${wf}/runs?status=failed&limit=20`, user)
    expect(res.status).toBe(200)
    expect(Object.keys(res.body).sort()).toEqual(['data', 'has_more', 'next_cursor', 'request_id'])
    for (const run of res.body.data) expect(run.status).toBe('failed')
  })

  test('POST /v1/runs/{run_id}/cancel of a finished run: 409 run_not_running', async () => {
    const done = await call('POST', `/v1/workflows/${wf}/runs`, user, { inputs: { name: 'Cy' }, user_id: 'spec-user' })
    const res = await call('POST', `/v1/runs/${done.body.run_id}/cancel`, user)
    expect(res.status).toBe(409)
    expect(res.body.error.code).toBe('run_not_running')
  })
})

describe('knowledge', () => {
  test('text upload, document status, search: the shapes shown', async () => {
    const kb = (await call('POST', '/v1/knowledge-bases', user, { workspace_id: env.ws, name: 'Literal KB' })).body.data.id
    const up = await call('POST', `/v1/knowledge-bases/${kb}/documents`, user, { type: 'text', name: 'refunds.txt', content: 'Refunds take five days.', metadata: { topic: 'refunds' } })
    expect(up.status).toBe(201)
    for (const f of ['document_id', 'name', 'size_bytes', 'status', 'created_at']) expect(up.body).toHaveProperty(f)
    const status = await call('GET', `/v1/documents/${up.body.document_id}`, user)
    expect(status.status).toBe(200)
    for (const f of ['id', 'status', 'chunks_count', 'indexed_at']) expect(status.body).toHaveProperty(f)
    let ready = status.body
    for (let i = 0; i < 200 && ready.status !== 'ready' && ready.status !== 'failed'; i++) {
      await Bun.sleep(50)
      ready = (await call('GET', `/v1/documents/${up.body.document_id}`, user)).body
    }
    expect(ready.status).toBe('ready')
    const found = await call('POST', `/v1/knowledge-bases/${kb}/search`, user, { query: 'refund', top_k: 3, filters: { topic: 'refunds' }, rerank: false })
    expect(found.status).toBe(200)
    const item = found.body.results[0]
    for (const f of ['chunk_id', 'document_id', 'document_name', 'content', 'score', 'metadata']) expect(item).toHaveProperty(f)
    expect(typeof item.score).toBe('number')
  })
})

describe('models', () => {
  test('GET /v1/models: { data: [model objects] }', async () => {
    const res = await call('GET', '/v1/models', user)
    expect(res.status).toBe(200)
    expect(res.body.data.length).toBeGreaterThan(0)
  })

  test('POST /v1/models/embeddings with model and input: data and usage { tokens, credits }', async () => {
    const res = await call('POST', '/v1/models/embeddings', restricted, { model: 'local-embed', input: ['a', 'b'] })
    expect(res.status).toBe(200)
    expect(res.body.data.map((d: any) => d.index)).toEqual([0, 1])
    expect(res.body.data[0].embedding.every((x: unknown) => typeof x === 'number')).toBe(true)
    expect(Object.keys(res.body.usage).sort()).toEqual(expect.arrayContaining(['credits', 'tokens']))
  })

  test('POST /v1/models/rerank with model, query, documents, top_n', async () => {
    const res = await call('POST', '/v1/models/rerank', restricted, { model: 'local-rerank', query: 'refund', documents: ['Refunds take 5 days.', 'Paris office'], top_n: 1 })
    expect(res.status).toBe(200)
  })
})

describe('webhooks', () => {
  test('POST /v1/webhooks with url, events, secret; GET deliveries?status=failed; ping; DELETE', async () => {
    const url = `http://127.0.0.1:${env.hooks.port}/spec-literal`
    const made = await call('POST', '/v1/webhooks', restricted, { url, events: ['workflow.run.completed'], secret: 'whsec_spec_literal_secret_0123456789' })
    expect([200, 201]).toContain(made.status)
    const id = made.body.data.id
    expect(made.body.data).toMatchObject({ id, url, events: ['workflow.run.completed'] })
    expect((await call('GET', `/v1/webhooks/${id}/deliveries?status=failed`, user)).status).toBe(200)
    expect((await call('POST', `/v1/webhooks/${id}/ping`, user)).status).toBeLessThan(300)
    expect((await call('DELETE', `/v1/webhooks/${id}`, user)).status).toBe(200)
  })
})

describe('errors', () => {
  test('an unknown id: 404 with { request_id, error: { code, message } }', async () => {
    const res = await call('GET', '/v1/runs/run_doesnotexist', user)
    expect(res.status).toBe(404)
    expect(res.body).toMatchObject({ request_id: expect.any(String), error: { code: 'not_found', message: expect.any(String) } })
  })
})
