import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { createHmac } from 'node:crypto'
import { createParser } from 'eventsource-parser'
import { waitFor } from '../helpers/harness'
import { chain, end, start, startRunsEnv, tpl, wait, type RunsEnv } from '../helpers/runs'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The published API called exactly as it is written (docs/api.md renders it): each route with the
 * method, path and body fields the published text shows, no query parameter or header beyond
 * Authorization unless it shows one, and the answers checked field by field against the shapes it
 * gives. Written from the published text, not from our code: a client written from it is what this
 * imitates. Where it leaves a shape open ("not shown"), only what the project decided is checked: the
 * general envelope and lists of docs/api.md, and the shapes docs/agents.md, docs/models.md and
 * docs/webhooks.md give. The caller is an ordinary user who belongs to two workspaces, as in a real
 * team; calls that act in one workspace and name none (model calls, webhook registration) use a key
 * restricted to one.
 */
let env: RunsEnv
let user: string
let restricted: string
let second: string
let wf: string

const META = { version: 'v1', deprecated_warnings: [] }
const call = (method: string, path: string, key: string, body?: unknown) => env.h.call(method, path, { key, ...(body === undefined ? {} : { body }) })
/** Posted with `Accept: text/event-stream`, the one header the published text adds for streams. */
const streamed = (path: string, key: string, body: unknown) => env.h.call('POST', path, { key, headers: { accept: 'text/event-stream' }, body })
/** An event stream as any SSE client reads it (eventsource-parser): `[event, data]` in order, data as sent. */
function sseRaw(text: string): [string, string][] {
  const events: [string, string][] = []
  const parser = createParser({ onEvent: (e) => events.push([e.event ?? 'message', e.data]) })
  parser.feed(text)
  return events
}
/** The same, each data line read as the JSON the published text says it is. */
const sse = (text: string): [string, any][] => sseRaw(text).map(([e, d]) => [e, JSON.parse(d)])
const isIso = (v: unknown) => typeof v === 'string' && /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/.test(v)
const usageShape = (u: any) => {
  expect(Number.isInteger(u.tokens_in)).toBe(true)
  expect(Number.isInteger(u.tokens_out)).toBe(true)
  expect(typeof u.credits).toBe('number')
}
/** A response the published text leaves "not shown": the general envelope (docs/api.md, Responses). */
const enveloped = (res: { status: number; body: any }) => {
  expect(res.status).toBeLessThan(300)
  expect(Object.keys(res.body).sort()).toEqual(['data', 'meta', 'request_id'])
  expect(typeof res.body.request_id).toBe('string')
  expect(res.body.meta).toEqual(META)
  return res.body.data
}
/** A list: `{ data, next_cursor, has_more }` beside `request_id`. */
const listed = (res: { status: number; body: any }) => {
  expect(res.status).toBe(200)
  expect(Object.keys(res.body).sort()).toEqual(['data', 'has_more', 'next_cursor', 'request_id'])
  expect(Array.isArray(res.body.data)).toBe(true)
  expect(typeof res.body.has_more).toBe('boolean')
  expect(res.body.next_cursor === null || typeof res.body.next_cursor === 'string').toBe(true)
  return res.body.data as any[]
}
const settled = (documentId: string) =>
  waitFor(async () => {
    const d = (await call('GET', `/v1/documents/${documentId}`, user)).body
    return d.status === 'ready' || d.status === 'failed' ? d : null
  }, { what: `document ${documentId} settled` })

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
    const data = listed(await call('GET', '/v1/workspaces', user))
    const w = data.find((x: any) => x.id === second)
    for (const f of ['id', 'name', 'description', 'type', 'owner_id', 'status', 'created_at', 'join_policy']) expect(w).toHaveProperty(f)
    expect(w).toMatchObject({ name: 'Second team', description: 'Another one', type: 'team', join_policy: 'approve_required' })
    expect(Number.isInteger(w.member_count)).toBe(true)
    expect(['active', 'archived']).toContain(w.status)
    expect(isIso(w.created_at)).toBe(true)
  })

  test('GET /v1/workspaces?status=active&limit=1, then &cursor=<next_cursor>: pages of one', async () => {
    const first = await call('GET', '/v1/workspaces?status=active&limit=1', user)
    const page1 = listed(first)
    expect(page1).toHaveLength(1)
    expect(first.body.has_more).toBe(true)
    const page2 = listed(await call('GET', `/v1/workspaces?status=active&limit=1&cursor=${encodeURIComponent(first.body.next_cursor)}`, user))
    expect(page2).toHaveLength(1)
    expect(page2[0].id).not.toBe(page1[0].id)
    for (const w of [...page1, ...page2]) expect(w.status).toBe('active')
  })

  test('POST /v1/workspaces with name, description, type, join_policy: the general envelope', async () => {
    const res = await call('POST', '/v1/workspaces', user, { name: 'Literal', description: 'd', type: 'team', join_policy: 'approve_required' })
    expect([200, 201]).toContain(res.status)
    expect(enveloped(res)).toMatchObject({ name: 'Literal', description: 'd', type: 'team', join_policy: 'approve_required', status: 'active' })
  })

  test('GET, PATCH /v1/workspaces/{id}; members: GET, POST, DELETE', async () => {
    expect(enveloped(await call('GET', `/v1/workspaces/${second}`, user)).id).toBe(second)
    expect(enveloped(await call('PATCH', `/v1/workspaces/${second}`, user, { name: 'Renamed', description: 'x' }))).toMatchObject({ id: second, name: 'Renamed', description: 'x' })
    const added = await call('POST', `/v1/workspaces/${second}/members`, user, { user_id: 'literal-member', role: 'developer' })
    expect([200, 201]).toContain(added.status)
    enveloped(added)
    const members = listed(await call('GET', `/v1/workspaces/${second}/members`, user))
    expect(members.map((m: any) => [m.user_id, m.role])).toContainEqual(['literal-member', 'developer'])
    enveloped(await call('DELETE', `/v1/workspaces/${second}/members/literal-member`, user))
    expect(listed(await call('GET', `/v1/workspaces/${second}/members`, user)).map((m: any) => m.user_id)).not.toContain('literal-member')
  })

  test('POST /v1/workspaces/{id}/transfer with new_owner_id: the new owner; only the current owner may call it', async () => {
    const ws = enveloped(await call('POST', '/v1/workspaces', user, { name: 'Handed over', description: '', type: 'team', join_policy: 'approve_required' })).id
    await call('POST', `/v1/workspaces/${ws}/members`, user, { user_id: 'literal-heir', role: 'admin' })
    expect(enveloped(await call('POST', `/v1/workspaces/${ws}/transfer`, user, { new_owner_id: 'literal-heir' })).owner_id).toBe('literal-heir')
    expect(enveloped(await call('GET', `/v1/workspaces/${ws}`, user)).owner_id).toBe('literal-heir')
    // The caller is no longer the owner: rule 2 of the workspaces section refuses it.
    const again = await call('POST', `/v1/workspaces/${ws}/transfer`, user, { new_owner_id: 'runs-owner' })
    expect(again.status).toBe(403)
    expect(again.body.error.code).toBe('forbidden')
  })

  test('DELETE /v1/workspaces/{id}: deleted, then not found, and what was inside with it', async () => {
    const made = enveloped(await call('POST', '/v1/workspaces', user, { name: 'Short-lived', description: '', type: 'team', join_policy: 'approve_required' })).id
    const inside = (await call('POST', '/v1/agents', user, { workspace_id: made, name: 'Doomed', type: 'agent', model: 'local-chat' })).body.data.id
    enveloped(await call('DELETE', `/v1/workspaces/${made}`, user))
    expect((await call('GET', `/v1/workspaces/${made}`, user)).status).toBe(404)
    expect((await call('POST', `/v1/agents/${inside}/chat`, user, { message: 'Anyone there?', user_id: 'spec-user' })).status).toBe(404)
  })
})

describe('agents and conversations', () => {
  let agent: string
  /** An agent with one tool (an HTTP call to the loopback target) that the local model calls when the message names it. */
  let tooled: string
  beforeAll(async () => {
    agent = (await call('POST', '/v1/agents', user, { workspace_id: env.ws, name: 'Literal agent', type: 'agent', model: 'local-chat' })).body.data.id
    const tool = {
      type: 'http', name: 'order_status', description: 'The state of an order', method: 'GET', url: `http://127.0.0.1:${env.target.port}/orders/{order_id}`,
      parameters: { type: 'object', properties: { order_id: { type: 'string' } }, required: ['order_id'] },
    }
    const made = await call('POST', '/v1/agents', user, { workspace_id: env.ws, name: 'Literal tools', type: 'agent', model: 'local-chat', tools: [tool] })
    expect(made.status).toBe(201)
    tooled = made.body.data.id
  })

  test('GET /v1/agents?workspace_id=: { data: [agent objects] } with the fields shown', async () => {
    const res = await call('GET', `/v1/agents?workspace_id=${env.ws}`, user)
    expect(res.status).toBe(200)
    expect(typeof res.body.request_id).toBe('string')
    const a = res.body.data.find((x: any) => x.id === agent)
    expect(a).toMatchObject({ id: agent, name: 'Literal agent', model: 'local-chat', workspace_id: env.ws, status: 'active' })
    expect(typeof a.type).toBe('string')
    expect(Number.isInteger(a.version)).toBe(true)
    expect(isIso(a.created_at)).toBe(true)
    for (const x of res.body.data) expect(x.workspace_id).toBe(env.ws)
  })

  test('POST /v1/agents/{id}/chat with message and user_id: the synchronous chat response; conversation_id continues it', async () => {
    const res = await call('POST', `/v1/agents/${agent}/chat`, user, { message: 'Hello there', user_id: 'spec-user' })
    expect(res.status).toBe(200)
    expect(Object.keys(res.body).sort()).toEqual(['agent_id', 'conversation_id', 'message', 'request_id', 'tool_calls', 'usage'])
    expect(typeof res.body.request_id).toBe('string')
    expect(res.body.agent_id).toBe(agent)
    expect(typeof res.body.conversation_id).toBe('string')
    expect(res.body.message.role).toBe('assistant')
    expect(typeof res.body.message.content).toBe('string')
    expect(res.body.tool_calls).toEqual([])
    usageShape(res.body.usage)
    const again = await call('POST', `/v1/agents/${agent}/chat`, user, { message: 'And again', user_id: 'spec-user', conversation_id: res.body.conversation_id })
    expect(again.status).toBe(200)
    expect(again.body.conversation_id).toBe(res.body.conversation_id)
    // Both turns are in the one conversation (its history: docs/agents.md, Conversations).
    const messages = enveloped(await call('GET', `/v1/conversations/${res.body.conversation_id}`, user)).messages
    expect(messages.map((m: any) => [m.role, m.content]).filter(([r]: string[]) => r === 'user')).toEqual(expect.arrayContaining([['user', 'Hello there'], ['user', 'And again']]))
    expect(messages).toHaveLength(4)
  })

  test('a turn that calls a tool: tool_calls items { tool, input, duration_ms }', async () => {
    const res = await call('POST', `/v1/agents/${tooled}/chat`, user, { message: 'Use order_status for order "42".', user_id: 'spec-user' })
    expect(res.status).toBe(200)
    expect(res.body.tool_calls.length).toBeGreaterThan(0)
    for (const c of res.body.tool_calls) {
      expect(Object.keys(c).sort()).toEqual(['duration_ms', 'input', 'tool'])
      expect(c.tool).toBe('order_status')
      expect(typeof c.input).toBe('object')
      expect(Number.isInteger(c.duration_ms)).toBe(true)
    }
    expect(res.body.message).toMatchObject({ role: 'assistant', content: expect.any(String) })
    usageShape(res.body.usage)
  })

  test('streaming: Accept text/event-stream with stream true: message deltas, usage, then done with finish_reason stop', async () => {
    const res = await streamed(`/v1/agents/${agent}/chat`, user, { message: 'Stream it', user_id: 'spec-user', stream: true })
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toStartWith('text/event-stream')
    const events = sse(res.text)
    const names = events.map(([e]) => e)
    expect(names).toContain('message')
    for (const [, data] of events.filter(([e]) => e === 'message')) expect(typeof data.delta).toBe('string')
    expect(events.filter(([e]) => e === 'message').map(([, d]) => d.delta).join('')).not.toBe('')
    const usage = events.find(([e]) => e === 'usage')![1]
    usageShape(usage)
    expect(names.at(-1)).toBe('done')
    expect(events.at(-1)![1].finish_reason).toBe('stop')
    expect(names.indexOf('usage')).toBeLessThan(names.indexOf('done'))
  })

  test('streaming with conversation_id continues that conversation', async () => {
    const first = await call('POST', `/v1/agents/${agent}/chat`, user, { message: 'My dog is called Rex.', user_id: 'stream-user' })
    const res = await streamed(`/v1/agents/${agent}/chat`, user, { message: 'What is my dog called?', user_id: 'stream-user', conversation_id: first.body.conversation_id, stream: true })
    expect(res.status).toBe(200)
    expect(sse(res.text).at(-1)).toEqual(['done', expect.objectContaining({ finish_reason: 'stop' })])
    const messages = enveloped(await call('GET', `/v1/conversations/${first.body.conversation_id}`, user)).messages
    expect(messages.filter((m: any) => m.role === 'user').map((m: any) => m.content).sort()).toEqual(['My dog is called Rex.', 'What is my dog called?'])
    expect(messages).toHaveLength(4)
  })

  test('streaming a turn that calls a tool: tool_call { tool, input }, tool_result { output, duration_ms }, then the answer', async () => {
    const res = await streamed(`/v1/agents/${tooled}/chat`, user, { message: 'Use order_status for order "7".', user_id: 'spec-user', stream: true })
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toStartWith('text/event-stream')
    const events = sse(res.text)
    const names = events.map(([e]) => e)
    const call = events.find(([e]) => e === 'tool_call')![1]
    expect(call.tool).toBe('order_status')
    expect(typeof call.input).toBe('object')
    const result = events.find(([e]) => e === 'tool_result')![1]
    expect(typeof result.output).toBe('object')
    expect(Number.isInteger(result.duration_ms)).toBe(true)
    expect(names.indexOf('tool_call')).toBeLessThan(names.indexOf('tool_result'))
    expect(names.indexOf('tool_result')).toBeLessThan(names.lastIndexOf('message'))
    usageShape(events.find(([e]) => e === 'usage')![1])
    expect(events.at(-1)).toEqual(['done', expect.objectContaining({ finish_reason: 'stop' })])
  })

  test('a chatflow agent: inputs are its start-node parameters', async () => {
    const flow = await env.workflow(chain(
      start([{ name: 'message', type: 'string', required: true }, { name: 'tone', type: 'string' }]),
      tpl('reply', 'A {{inputs.tone}} reply to: {{inputs.message}}'),
      end({ answer: '{{nodes.reply.output.text}}' }),
    ))
    const made = await call('POST', '/v1/agents', user, { workspace_id: env.ws, name: 'Literal chatflow', type: 'chatflow', model: 'local-chat', workflow_id: flow })
    expect(made.status).toBe(201)
    expect(made.body.data.type).toBe('chatflow')
    const res = await call('POST', `/v1/agents/${made.body.data.id}/chat`, user, { message: 'Hi', user_id: 'spec-user', inputs: { tone: 'warm' } })
    expect(res.status).toBe(200)
    expect(res.body.message).toEqual({ role: 'assistant', content: 'A warm reply to: Hi' })
    usageShape(res.body.usage)
  })

  test('GET /v1/agents/{id}/conversations?user_id=, GET and DELETE /v1/conversations/{conversation_id}', async () => {
    const chat = await call('POST', `/v1/agents/${agent}/chat`, user, { message: 'Remember me', user_id: 'listed-user' })
    const conversation = chat.body.conversation_id
    const list = listed(await call('GET', `/v1/agents/${agent}/conversations?user_id=listed-user`, user))
    expect(list.map((c: any) => c.id)).toEqual([conversation])
    // The conversation fields docs/agents.md gives.
    expect(list[0]).toMatchObject({ id: conversation, agent_id: agent, user_id: 'listed-user', message_count: 2 })
    expect(isIso(list[0].created_at)).toBe(true)
    expect(isIso(list[0].updated_at)).toBe(true)
    const history = enveloped(await call('GET', `/v1/conversations/${conversation}`, user))
    expect(history.id).toBe(conversation)
    expect(history.messages.map((m: any) => m.role).sort()).toEqual(['assistant', 'user'])
    expect(history.messages.find((m: any) => m.role === 'user').content).toBe('Remember me')
    enveloped(await call('DELETE', `/v1/conversations/${conversation}`, user))
    expect((await call('GET', `/v1/conversations/${conversation}`, user)).status).toBe(404)
    expect(listed(await call('GET', `/v1/agents/${agent}/conversations?user_id=listed-user`, user))).toEqual([])
  })
})

describe('lists that name no workspace, and with workspace_id', () => {
  test.each(['/v1/agents', '/v1/workflows', '/v1/knowledge-bases', '/v1/webhooks'])('GET %s with no parameters answers the caller\'s resources', async (path) => {
    const res = await call('GET', path, user)
    expect(res.status).toBe(200)
    expect(typeof res.body.request_id).toBe('string')
    expect(Array.isArray(res.body.data)).toBe(true)
  })

  test('GET /v1/workflows?workspace_id=, GET /v1/knowledge-bases?workspace_id=: that workspace\'s', async () => {
    const kb = (await call('POST', '/v1/knowledge-bases', user, { workspace_id: second, name: 'Listed KB' })).body.data.id
    const workflows = listed(await call('GET', `/v1/workflows?workspace_id=${env.ws}`, user))
    expect(workflows.map((w: any) => w.id)).toContain(wf)
    expect(listed(await call('GET', `/v1/workflows?workspace_id=${second}`, user)).map((w: any) => w.id)).not.toContain(wf)
    expect(listed(await call('GET', `/v1/knowledge-bases?workspace_id=${second}`, user)).map((k: any) => k.id)).toContain(kb)
    expect(listed(await call('GET', `/v1/knowledge-bases?workspace_id=${env.ws}`, user)).map((k: any) => k.id)).not.toContain(kb)
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

  test('the same Idempotency-Key twice is the same request: one run, the same result', async () => {
    const send = () => env.h.call('POST', `/v1/workflows/${wf}/runs`, { key: user, headers: { 'idempotency-key': 'literal-run-1' }, body: { inputs: { name: 'Eve' }, user_id: 'spec-user' } })
    const first = await send()
    const second = await send()
    expect(first.status).toBe(200)
    expect(second.status).toBe(200)
    expect(second.body.run_id).toBe(first.body.run_id)
    expect(second.body.outputs).toEqual({ greeting: 'Hello Eve' })
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
    const res = await streamed(`/v1/workflows/${wf}/runs`, user, { inputs: { name: 'Di' }, user_id: 'spec-user' })
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
    expect(ends.map((d) => d.node)).toEqual(starts.map((d) => d.node))
    usageShape(events.find(([e]) => e === 'usage')![1])
    expect(events.at(-1)).toEqual(['done', expect.objectContaining({ status: 'completed', outputs: { greeting: 'Hello Di' } })])
  })

  test('GET /v1/workflows/{id}/runs?status=failed&limit=20: a list of runs', async () => {
    const failing = await env.workflow(chain(start([{ name: 'name', type: 'string', required: true }]), { id: 'boom', type: 'code', config: { source: 'function main() { throw new Error("no") }' } }, end({})))
    const failed = await call('POST', `/v1/workflows/${failing}/runs`, user, { inputs: { name: 'X' }, user_id: 'spec-user' })
    expect(failed.body.status).toBe('failed')
    await call('POST', `/v1/workflows/${failing}/runs`, user, { inputs: { name: 'Y' }, user_id: 'spec-user' })
    const data = listed(await call('GET', `/v1/workflows/${failing}/runs?status=failed&limit=20`, user))
    expect(data.map((r: any) => r.run_id)).toContain(failed.body.run_id)
    for (const run of data) expect(run).toMatchObject({ workflow_id: failing, status: 'failed' })
  })

  test('the list conventions: sort, a status_in filter, and a time filter sent with a UTC offset', async () => {
    const a = await call('POST', `/v1/workflows/${wf}/runs`, user, { inputs: { name: 'Ann' }, user_id: 'spec-user' })
    const b = await call('POST', `/v1/workflows/${wf}/runs`, user, { inputs: { name: 'Ben' }, user_id: 'spec-user' })
    // The instant just before `a` started, written as local time 2 hours ahead of UTC.
    const startedAt = Date.parse((await call('GET', `/v1/runs/${a.body.run_id}`, user)).body.created_at)
    const after = encodeURIComponent(new Date(startedAt - 1 + 2 * 3_600_000).toISOString().replace('Z', '+02:00'))
    const asc = listed(await call('GET', `/v1/workflows/${wf}/runs?sort=created_at&status_in=completed,failed&created_at_after=${after}&limit=100`, user))
    expect(asc.map((r: any) => r.run_id)).toEqual([a.body.run_id, b.body.run_id])
    const desc = listed(await call('GET', `/v1/workflows/${wf}/runs?sort=-created_at&created_at_after=${after}`, user))
    expect(desc.map((r: any) => r.run_id)).toEqual([b.body.run_id, a.body.run_id])
    for (const r of asc) expect(isIso(r.created_at)).toBe(true)
  })

  test('POST /v1/runs/{run_id}/cancel: a running run is cancelled; a finished one is 409 run_not_running', async () => {
    const slow = await env.workflow(chain(start(), wait('nap', 30), end({})))
    const running = await call('POST', `/v1/workflows/${slow}/runs?async=true`, user, { inputs: {}, user_id: 'spec-user' })
    expect(running.body.status).toBe('running')
    const cancelled = await call('POST', `/v1/runs/${running.body.run_id}/cancel`, user)
    expect(cancelled.status).toBe(200)
    expect(cancelled.body).toMatchObject({ run_id: running.body.run_id, status: 'cancelled', request_id: expect.any(String) })
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
    expect(Object.keys(up.body).sort()).toEqual(['created_at', 'document_id', 'name', 'request_id', 'size_bytes', 'status'])
    // The upload answers `parsing` (the document states of the published text).
    expect(up.body).toMatchObject({ name: 'refunds.txt', size_bytes: 23, status: 'parsing' })
    expect(isIso(up.body.created_at)).toBe(true)
    const status = await call('GET', `/v1/documents/${up.body.document_id}`, user)
    expect(status.status).toBe(200)
    for (const f of ['id', 'status', 'chunks_count', 'indexed_at', 'request_id']) expect(status.body).toHaveProperty(f)
    expect(status.body.id).toBe(up.body.document_id)
    expect(['uploading', 'parsing', 'chunking', 'embedding', 'ready', 'failed']).toContain(status.body.status)
    const ready = await settled(up.body.document_id)
    expect(ready.status).toBe('ready')
    expect(ready.chunks_count).toBeGreaterThan(0)
    expect(isIso(ready.indexed_at)).toBe(true)
    const found = await call('POST', `/v1/knowledge-bases/${kb}/search`, user, { query: 'refund', top_k: 3, filters: { topic: 'refunds' }, rerank: false })
    expect(found.status).toBe(200)
    expect(Object.keys(found.body).sort()).toEqual(['request_id', 'results'])
    const item = found.body.results[0]
    for (const f of ['chunk_id', 'document_id', 'document_name', 'content', 'score', 'metadata']) expect(item).toHaveProperty(f)
    expect(item).toMatchObject({ document_id: up.body.document_id, document_name: 'refunds.txt', content: expect.any(String), metadata: { topic: 'refunds' } })
    expect(typeof item.chunk_id).toBe('string')
    expect(typeof item.score).toBe('number')
    const reranked = await call('POST', `/v1/knowledge-bases/${kb}/search`, user, { query: 'refund', top_k: 3, filters: { topic: 'refunds' }, rerank: true })
    expect(reranked.status).toBe(200)
    expect(reranked.body.results[0].document_id).toBe(up.body.document_id)
    expect((await call('POST', `/v1/knowledge-bases/${kb}/search`, user, { query: 'refund', top_k: 3, filters: { topic: 'other' }, rerank: false })).body.results).toEqual([])
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
    expect(Object.keys(up).sort()).toEqual(['created_at', 'document_id', 'name', 'request_id', 'size_bytes', 'status'])
    expect(up).toMatchObject({ name: 'shipping.txt', size_bytes: 34, status: 'parsing' })
    expect(isIso(up.created_at)).toBe(true)
    const doc = await settled(up.document_id)
    expect(doc.status).toBe('ready')
    expect(doc.chunks_count).toBeGreaterThan(0)
    expect(isIso(doc.indexed_at)).toBe(true)
    // The metadata sent as a JSON string is the document's metadata object: search filters on it.
    const search = () => call('POST', `/v1/knowledge-bases/${kb}/search`, user, { query: 'shipping', top_k: 3, filters: { topic: 'shipping' }, rerank: false })
    const hit = (await search()).body.results[0]
    expect(hit).toMatchObject({ document_id: up.document_id, document_name: 'shipping.txt', metadata: { topic: 'shipping' } })
    enveloped(await call('POST', `/v1/documents/${up.document_id}/reparse`, user))
    expect((await settled(up.document_id)).status).toBe('ready')
    enveloped(await call('DELETE', `/v1/documents/${up.document_id}`, user))
    expect((await call('GET', `/v1/documents/${up.document_id}`, user)).status).toBe(404)
    expect((await search()).body.results).toEqual([])
  })
})

describe('models', () => {
  test('GET /v1/models: { data: [model objects] } with the fields shown, by type', async () => {
    const res = await call('GET', '/v1/models', user)
    expect(res.status).toBe(200)
    expect(typeof res.body.request_id).toBe('string')
    const models = res.body.data
    expect(models.length).toBeGreaterThan(0)
    for (const m of models) {
      expect(typeof m.id).toBe('string')
      expect(typeof m.type).toBe('string')
      expect(typeof m.vendor).toBe('string')
    }
    const llm = models.find((m: any) => m.type === 'llm')
    expect(Number.isInteger(llm.context_length)).toBe(true)
    expect(typeof llm.supports_function_call).toBe('boolean')
    expect(Number.isInteger(models.find((m: any) => m.type === 'embedding').dimensions)).toBe(true)
  })

  test('POST /v1/models/embeddings with model and input: data and usage { tokens, credits }', async () => {
    const res = await call('POST', '/v1/models/embeddings', restricted, { model: 'local-embed', input: ['a', 'b'] })
    expect(res.status).toBe(200)
    expect(typeof res.body.request_id).toBe('string')
    expect(res.body.data.map((d: any) => d.index)).toEqual([0, 1])
    expect(res.body.data[0].embedding.every((x: unknown) => typeof x === 'number')).toBe(true)
    expect(Number.isInteger(res.body.usage.tokens)).toBe(true)
    expect(typeof res.body.usage.credits).toBe('number')
  })

  test('POST /v1/models/llm/chat with model, messages, temperature, max_tokens, stream false: an OpenAI chat.completion', async () => {
    const res = await call('POST', '/v1/models/llm/chat', restricted, {
      model: 'local-chat',
      messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Say hello' }],
      temperature: 0.2,
      max_tokens: 50,
      stream: false,
    })
    expect(res.status).toBe(200)
    // docs/models.md: the OpenAI object plus request_id.
    expect(res.body).toMatchObject({ object: 'chat.completion', model: 'local-chat', request_id: expect.any(String), id: expect.any(String) })
    expect(Number.isInteger(res.body.created)).toBe(true)
    expect(res.body.choices).toHaveLength(1)
    expect(res.body.choices[0]).toMatchObject({ index: 0, message: { role: 'assistant', content: expect.any(String) }, finish_reason: expect.any(String) })
    const u = res.body.usage
    for (const f of ['prompt_tokens', 'completion_tokens', 'total_tokens']) expect(Number.isInteger(u[f])).toBe(true)
    expect(u.total_tokens).toBe(u.prompt_tokens + u.completion_tokens)
  })

  test('POST /v1/models/llm/chat with stream true: OpenAI chat.completion.chunk events, then [DONE]', async () => {
    const res = await env.h.call('POST', '/v1/models/llm/chat', { key: restricted, body: { model: 'local-chat', messages: [{ role: 'user', content: 'Say hello' }], temperature: 0.2, max_tokens: 50, stream: true } })
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toStartWith('text/event-stream')
    const data = sseRaw(res.text).map(([, d]) => d)
    expect(data.at(-1)).toBe('[DONE]')
    const chunks = data.slice(0, -1).map((d) => JSON.parse(d))
    expect(chunks.length).toBeGreaterThan(0)
    for (const c of chunks) {
      expect(c.object).toBe('chat.completion.chunk')
      expect(c.model).toBe('local-chat')
      expect(Array.isArray(c.choices)).toBe(true)
    }
    expect(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('')).not.toBe('')
    expect(chunks.some((c) => typeof c.choices[0]?.finish_reason === 'string')).toBe(true)
  })

  test('POST /v1/models/rerank with model, query, documents, top_n: { model, results: [{ index, relevance_score }], usage }', async () => {
    const res = await call('POST', '/v1/models/rerank', restricted, { model: 'local-rerank', query: 'refund', documents: ['Our office is in Paris.', 'Refunds take 5 days.'], top_n: 1 })
    expect(res.status).toBe(200)
    expect(Object.keys(res.body).sort()).toEqual(['model', 'request_id', 'results', 'usage'])
    expect(res.body.model).toBe('local-rerank')
    expect(res.body.results).toHaveLength(1)
    expect(res.body.results[0].index).toBe(1)
    expect(typeof res.body.results[0].relevance_score).toBe('number')
    expect(typeof res.body.usage).toBe('object')
  })
})

describe('webhooks', () => {
  test('POST /v1/webhooks with url, events, secret; GET /v1/webhooks; GET deliveries?status=failed; DELETE', async () => {
    const url = `http://127.0.0.1:${env.hooks.port}/literal-list`
    const made = await call('POST', '/v1/webhooks', restricted, { url, events: ['workflow.run.failed'], secret: 'whsec_spec_literal_secret_list' })
    expect([200, 201]).toContain(made.status)
    const id = enveloped(made).id
    expect(made.body.data).toMatchObject({ id, url, events: ['workflow.run.failed'] })
    const item = listed(await call('GET', '/v1/webhooks', user)).find((w: any) => w.id === id)
    expect(item).toMatchObject({ id, url, events: ['workflow.run.failed'] })
    expect(item.secret).toBeUndefined()
    expect(listed(await call('GET', `/v1/webhooks/${id}/deliveries?status=failed`, user))).toEqual([])
    enveloped(await call('DELETE', `/v1/webhooks/${id}`, user))
    expect(listed(await call('GET', '/v1/webhooks', user)).map((w: any) => w.id)).not.toContain(id)
  })

  test('POST /v1/webhooks/{id}/ping: webhook.test at the receiver, signed as the Events section shows', async () => {
    const secret = 'whsec_spec_literal_secret_0123456789'
    const id = enveloped(await call('POST', '/v1/webhooks', restricted, { url: `http://127.0.0.1:${env.hooks.port}/literal-ping`, events: ['workflow.run.completed'], secret })).id
    enveloped(await call('POST', `/v1/webhooks/${id}/ping`, user))
    const ping = (await waitFor(() => env.hookRequests.find((r) => r.path === '/literal-ping'), { what: 'the ping at the receiver' }))!
    expect(ping.headers['content-type']).toStartWith('application/json')
    // HMAC-SHA256 of the raw body with the secret, lowercase hex, after `sha256=`.
    expect(ping.headers['x-service-signature']).toBe(`sha256=${createHmac('sha256', secret).update(ping.body).digest('hex')}`)
    expect(ping.headers['x-service-event']).toBe('webhook.test')
    expect(ping.headers['x-service-delivery-id']).toEqual(expect.any(String))
    expect(ping.headers['x-service-delivery-id']).not.toBe('')
    // Beside them, the Standard Webhooks id is the same delivery id (docs/webhooks.md).
    expect(ping.headers['webhook-id']).toBe(ping.headers['x-service-delivery-id'])
    expect(Object.keys(ping.json).sort()).toEqual(['data', 'delivered_at', 'event'])
    expect(ping.json.event).toBe('webhook.test')
    expect(isIso(ping.json.delivered_at)).toBe(true)
    // The data of webhook.test: docs/webhooks.md.
    expect(ping.json.data).toMatchObject({ webhook_id: id, message: expect.any(String) })
    enveloped(await call('DELETE', `/v1/webhooks/${id}`, user))
  })

  test('GET /v1/webhooks/{id}/deliveries?status=failed: a delivery the receiver refused (4xx, no retry)', async () => {
    const refusals: string[] = []
    const refusing = Bun.serve({
      hostname: '127.0.0.1',
      port: 0,
      fetch(req) {
        refusals.push(req.headers.get('x-service-delivery-id') ?? '')
        return new Response('no', { status: 400 })
      },
    })
    try {
      const id = enveloped(await call('POST', '/v1/webhooks', restricted, { url: `http://127.0.0.1:${refusing.port}/refuse`, events: ['workflow.run.completed'], secret: 'whsec_spec_literal_refused' })).id
      enveloped(await call('POST', `/v1/webhooks/${id}/ping`, user))
      const failed = (await waitFor(async () => {
        const data = listed(await call('GET', `/v1/webhooks/${id}/deliveries?status=failed`, user))
        return data.length > 0 ? data : null
      }, { what: 'the refused delivery listed as failed' }))!
      expect(failed).toHaveLength(1)
      expect(failed[0].status).toBe('failed')
      // One attempt (4xx: no retry), under the id its header carried.
      expect(refusals).toEqual([failed[0].id])
      enveloped(await call('DELETE', `/v1/webhooks/${id}`, user))
    } finally {
      refusing.stop(true)
    }
  })

  test('workflow.run.completed: the data the Events section shows, signed', async () => {
    const secret = 'whsec_spec_literal_run_completed'
    const id = enveloped(await call('POST', '/v1/webhooks', restricted, { url: `http://127.0.0.1:${env.hooks.port}/literal-run`, events: ['workflow.run.completed'], secret })).id
    const run = await call('POST', `/v1/workflows/${wf}/runs`, user, { inputs: { name: 'Hook' }, user_id: 'spec-user' })
    const got = (await waitFor(() => env.hookRequests.find((r) => r.path === '/literal-run' && r.json?.data?.run_id === run.body.run_id), { what: 'the run event at the receiver' }))!
    expect(got.headers['x-service-signature']).toBe(`sha256=${createHmac('sha256', secret).update(got.body).digest('hex')}`)
    expect(got.headers['x-service-event']).toBe('workflow.run.completed')
    expect(got.json.event).toBe('workflow.run.completed')
    expect(got.json.data).toMatchObject({ workflow_id: wf, run_id: run.body.run_id, status: 'completed', duration_ms: run.body.duration_ms, outputs: { greeting: 'Hello Hook' } })
    expect(Number.isInteger(got.json.data.duration_ms)).toBe(true)
    enveloped(await call('DELETE', `/v1/webhooks/${id}`, user))
  })
})

describe('errors', () => {
  test('no Authorization header: 401 with { request_id, error }', async () => {
    const res = await env.h.call('GET', '/v1/workspaces', { key: null })
    expect(res.status).toBe(401)
    expect(res.body).toMatchObject({ request_id: expect.any(String), error: { code: 'unauthenticated', message: expect.any(String) } })
  })

  test('an unknown id: 404 with { request_id, error: { code, message } }', async () => {
    const res = await call('GET', '/v1/runs/run_doesnotexist', user)
    expect(res.status).toBe(404)
    expect(res.body).toMatchObject({ request_id: expect.any(String), error: { code: 'not_found', message: expect.any(String) } })
  })
})
