import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { createParser } from 'eventsource-parser'
import { waitFor } from '../helpers/harness'
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
/** An event stream as any SSE client reads it (eventsource-parser): `[event, data]` in order. */
function sse(text: string): [string, any][] {
  const events: [string, any][] = []
  const parser = createParser({ onEvent: (e) => events.push([e.event ?? 'message', JSON.parse(e.data)]) })
  parser.feed(text)
  return events
}
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

  test('DELETE /v1/workspaces/{id}: deleted, then not found', async () => {
    const made = (await call('POST', '/v1/workspaces', user, { name: 'Short-lived', description: '', type: 'team', join_policy: 'approve_required' })).body.data.id
    const res = await call('DELETE', `/v1/workspaces/${made}`, user)
    expect(res.status).toBe(200)
    expect(res.body.request_id).toEqual(expect.any(String))
    expect((await call('GET', `/v1/workspaces/${made}`, user)).status).toBe(404)
  })
})

describe('agents and conversations', () => {
  let agent: string
  beforeAll(async () => {
    agent = (await call('POST', '/v1/agents', user, { workspace_id: env.ws, name: 'Literal agent', type: 'agent', model: 'local-chat' })).body.data.id
  })

  test('GET /v1/agents?workspace_id=: { data: [agent objects] } with the fields shown', async () => {
    const res = await call('GET', `/v1/agents?workspace_id=${env.ws}`, user)
    expect(res.status).toBe(200)
    const a = res.body.data.find((x: any) => x.id === agent)
    expect(a).toMatchObject({ id: agent, name: 'Literal agent', model: 'local-chat', workspace_id: env.ws, status: 'active' })
    expect(typeof a.type).toBe('string')
    expect(Number.isInteger(a.version)).toBe(true)
    expect(isIso(a.created_at)).toBe(true)
  })

  test('POST /v1/agents/{id}/chat with message and user_id: the synchronous chat response; conversation_id continues it', async () => {
    const res = await call('POST', `/v1/agents/${agent}/chat`, user, { message: 'Hello there', user_id: 'spec-user' })
    expect(res.status).toBe(200)
    for (const f of ['request_id', 'agent_id', 'conversation_id', 'message', 'tool_calls', 'usage']) expect(res.body).toHaveProperty(f)
    expect(res.body.agent_id).toBe(agent)
    expect(typeof res.body.conversation_id).toBe('string')
    expect(res.body.message.role).toBe('assistant')
    expect(typeof res.body.message.content).toBe('string')
    expect(Array.isArray(res.body.tool_calls)).toBe(true)
    usageShape(res.body.usage)
    const again = await call('POST', `/v1/agents/${agent}/chat`, user, { message: 'And again', user_id: 'spec-user', conversation_id: res.body.conversation_id })
    expect(again.status).toBe(200)
    expect(again.body.conversation_id).toBe(res.body.conversation_id)
  })

  test('streaming: Accept text/event-stream with stream true: message deltas, usage, then done with finish_reason stop', async () => {
    const res = await env.h.call('POST', `/v1/agents/${agent}/chat`, { key: user, headers: { accept: 'text/event-stream' }, body: { message: 'Stream it', user_id: 'spec-user', stream: true } })
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toStartWith('text/event-stream')
    const events = sse(res.text)
    const names = events.map(([e]) => e)
    expect(names).toContain('message')
    for (const [, data] of events.filter(([e]) => e === 'message')) expect(typeof data.delta).toBe('string')
    const usage = events.find(([e]) => e === 'usage')![1]
    usageShape(usage)
    expect(names.at(-1)).toBe('done')
    expect(events.at(-1)![1].finish_reason).toBe('stop')
    expect(names.indexOf('usage')).toBeLessThan(names.indexOf('done'))
  })

  test('GET /v1/agents/{id}/conversations?user_id=, GET and DELETE /v1/conversations/{conversation_id}', async () => {
    const chat = await call('POST', `/v1/agents/${agent}/chat`, user, { message: 'Remember me', user_id: 'listed-user' })
    const conversation = chat.body.conversation_id
    const list = await call('GET', `/v1/agents/${agent}/conversations?user_id=listed-user`, user)
    expect(list.status).toBe(200)
    expect(JSON.stringify(list.body.data)).toContain(conversation)
    const history = await call('GET', `/v1/conversations/${conversation}`, user)
    expect(history.status).toBe(200)
    expect(JSON.stringify(history.body)).toContain('Remember me')
    expect((await call('DELETE', `/v1/conversations/${conversation}`, user)).status).toBe(200)
    expect((await call('GET', `/v1/conversations/${conversation}`, user)).status).toBe(404)
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

  test('POST /v1/workflows/{id}/runs with Accept text/event-stream: node_start, node_end, usage, done', async () => {
    const res = await env.h.call('POST', `/v1/workflows/${wf}/runs`, { key: user, headers: { accept: 'text/event-stream' }, body: { inputs: { name: 'Di' }, user_id: 'spec-user' } })
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toStartWith('text/event-stream')
    const events = sse(res.text)
    const starts = events.filter(([e]) => e === 'node_start').map(([, d]) => d)
    const ends = events.filter(([e]) => e === 'node_end').map(([, d]) => d)
    expect(starts.length).toBe(3)
    for (const d of starts) {
      expect(typeof d.node).toBe('string')
      expect(isIso(d.started_at)).toBe(true)
    }
    expect(ends.length).toBe(3)
    for (const d of ends) {
      expect(typeof d.node).toBe('string')
      expect(Number.isInteger(d.duration_ms)).toBe(true)
      expect(typeof d.output).toBe('object')
    }
    usageShape(events.find(([e]) => e === 'usage')![1])
    expect(events.at(-1)).toEqual(['done', expect.objectContaining({ status: 'completed', outputs: { greeting: 'Hello Di' } })])
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
    const ready = await waitFor(async () => {
      const d = (await call('GET', `/v1/documents/${up.body.document_id}`, user)).body
      return d.status === 'ready' || d.status === 'failed' ? d : null
    }, { what: 'the document settled' })
    expect(ready.status).toBe('ready')
    const found = await call('POST', `/v1/knowledge-bases/${kb}/search`, user, { query: 'refund', top_k: 3, filters: { topic: 'refunds' }, rerank: false })
    expect(found.status).toBe(200)
    const item = found.body.results[0]
    for (const f of ['chunk_id', 'document_id', 'document_name', 'content', 'score', 'metadata']) expect(item).toHaveProperty(f)
    expect(typeof item.score).toBe('number')
  })

  test('multipart upload with file, group and metadata as a JSON string; reparse; DELETE', async () => {
    const kb = (await call('POST', '/v1/knowledge-bases', user, { workspace_id: env.ws, name: 'Literal files' })).body.data.id
    const form = new FormData()
    form.append('file', new File(['Shipping is free over fifty euros.'], 'shipping.txt', { type: 'text/plain' }))
    form.append('group', 'policies')
    form.append('metadata', JSON.stringify({ topic: 'shipping' }))
    const res = await env.h.app.handle(new Request(`${env.h.base}/v1/knowledge-bases/${kb}/documents`, { method: 'POST', headers: { authorization: `Bearer ${user}` }, body: form }))
    expect(res.status).toBe(201)
    const up = (await res.json()) as any
    for (const f of ['document_id', 'name', 'size_bytes', 'status', 'created_at']) expect(up).toHaveProperty(f)
    expect(up.name).toBe('shipping.txt')
    expect(up.size_bytes).toBe(34)
    const doc = await waitFor(async () => {
      const d = (await call('GET', `/v1/documents/${up.document_id}`, user)).body
      return d.status === 'ready' || d.status === 'failed' ? d : null
    }, { what: 'the document settled' })
    expect(doc.status).toBe('ready')
    expect(doc.chunks_count).toBeGreaterThan(0)
    expect(isIso(doc.indexed_at)).toBe(true)
    const reparse = await call('POST', `/v1/documents/${up.document_id}/reparse`, user)
    expect(reparse.status).toBeLessThan(300)
    expect((await call('GET', `/v1/documents/${up.document_id}`, user)).body.status).not.toBe('failed')
    expect((await call('DELETE', `/v1/documents/${up.document_id}`, user)).status).toBe(200)
    expect((await call('GET', `/v1/documents/${up.document_id}`, user)).status).toBe(404)
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

  test('GET /v1/models: the model fields shown, by type', async () => {
    const models = (await call('GET', '/v1/models', user)).body.data
    for (const m of models) {
      expect(typeof m.id).toBe('string')
      expect(typeof m.vendor).toBe('string')
    }
    const llm = models.find((m: any) => m.type === 'llm')
    expect(Number.isInteger(llm.context_length)).toBe(true)
    expect(typeof llm.supports_function_call).toBe('boolean')
    expect(Number.isInteger(models.find((m: any) => m.type === 'embedding').dimensions)).toBe(true)
  })

  test('POST /v1/models/llm/chat with model, messages, temperature, max_tokens, stream false: an OpenAI-style answer', async () => {
    const res = await call('POST', '/v1/models/llm/chat', restricted, {
      model: 'local-chat',
      messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Say hello' }],
      temperature: 0.2,
      max_tokens: 50,
      stream: false,
    })
    expect(res.status).toBe(200)
    expect(res.body.choices[0].message.role).toBe('assistant')
    expect(typeof res.body.choices[0].message.content).toBe('string')
  })

  test('POST /v1/models/llm/chat with stream true: an event stream of OpenAI-style chunks', async () => {
    const res = await env.h.call('POST', '/v1/models/llm/chat', { key: restricted, body: { model: 'local-chat', messages: [{ role: 'user', content: 'Say hello' }], temperature: 0.2, max_tokens: 50, stream: true } })
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toStartWith('text/event-stream')
    expect(res.text).toContain('data: ')
  })

  test('POST /v1/models/rerank with model, query, documents, top_n', async () => {
    const res = await call('POST', '/v1/models/rerank', restricted, { model: 'local-rerank', query: 'refund', documents: ['Refunds take 5 days.', 'Paris office'], top_n: 1 })
    expect(res.status).toBe(200)
    expect(JSON.stringify(res.body)).toContain('index')
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
    expect(JSON.stringify((await call('GET', '/v1/webhooks', user)).body.data)).toContain(id)
    expect((await call('POST', `/v1/webhooks/${id}/ping`, user)).status).toBeLessThan(300)
    // The ping reaches the receiver as the Events section shows it: the three headers, { event, delivered_at, data }.
    const ping = (await waitFor(() => env.hookRequests.find((r) => r.path === '/spec-literal'), { what: 'the ping at the receiver' }))!
    expect(ping.headers['content-type']).toStartWith('application/json')
    expect(ping.headers['x-service-signature']).toMatch(/^sha256=[0-9a-f]{64}$/)
    expect(ping.headers['x-service-event']).toBe('webhook.test')
    expect(ping.headers['x-service-delivery-id']).toEqual(expect.any(String))
    expect(ping.json).toMatchObject({ event: 'webhook.test', data: expect.any(Object) })
    expect(isIso(ping.json.delivered_at)).toBe(true)
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
