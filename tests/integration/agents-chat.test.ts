import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { rmSync } from 'node:fs'
import type { Server } from 'bun'
import { countChatTokens } from '../../src/lib/tokens'
import { startWorkers, type Workers } from '../../src/workers'
import { startFakeProvider, writeModelsFile, type FakeProvider, type FakeRequest, type Step } from '../helpers/fake-provider'
import { pricedLlm } from '../helpers/agents'
import { keyFor, startHarness, workspaceOf, type Harness } from '../helpers/harness'
import { createKb, expectError, settled, uploadText } from '../helpers/knowledge'
import { chain, end, start, tpl } from '../helpers/runs'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Synchronous agent chat (docs/agents.md) through the real app, its workers and the gateway,
 * against a loopback model provider (each test has a catalogue model of its own, upstream `<id>-up`,
 * so scripts and recorded requests never mix) and a loopback HTTP receiver for `http` tools. A second
 * harness keeps the default SSRF rule for private addresses (http allowed, loopback refused).
 */

const PRICING = { input_per_1k: 1, output_per_1k: 2 }
const LLMS = ['kbc', 'kb', 'wf', 'http', 'pair', 'loop', 'ssrf', 'credits', 'idem']
/** Small enough that a few 50-token turns overflow it (a quarter is kept for the answer). */
const TRIM_CONTEXT = 300

let h: Harness
let strict: Harness
let workers: Workers
let fake: FakeProvider
let receiver: Server<undefined>
let base: string
let dir: string
let key: string
let ws: string
let strictKey: string
let strictWs: string

/** What the receiver got, in arrival order. */
const seen: { path: string; method: string; query: Record<string, string>; body: string; type: string | null }[] = []
let secondArrived: () => void = () => {}
const second = new Promise<void>((resolve) => (secondArrived = resolve))

beforeAll(async () => {
  fake = await startFakeProvider()
  const provider = (id: string) => ({ id, kind: 'openai', base_url: fake.baseUrl, api_key: `sk-${id}`, timeout_ms: 5_000 })
  let file: string
  ;({ dir, file } = writeModelsFile('ap-agents-chat-', {
    providers: [provider('primary'), provider('secondary')],
    models: [
      ...LLMS.map((id) => pricedLlm(id, 'primary', PRICING)),
      { id: 'trim', type: 'llm', vendor: 'test', context_length: TRIM_CONTEXT, routes: [{ provider: 'primary', model: 'trim-up' }], pricing: PRICING },
      { id: 'pemb', type: 'embedding', vendor: 'test', dimensions: 8, routes: [{ provider: 'primary', model: 'pemb-up' }], pricing: { input_per_1k: 1 } },
      { id: 'fo', type: 'llm', vendor: 'test', routes: [{ provider: 'primary', model: 'fo-p' }, { provider: 'secondary', model: 'fo-s' }], pricing: PRICING },
    ],
  }))
  receiver = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    async fetch(req) {
      const url = new URL(req.url)
      const rec = { path: url.pathname, method: req.method, query: Object.fromEntries(url.searchParams), body: await req.text(), type: req.headers.get('content-type') }
      seen.push(rec)
      // The parallel case: the first call answers only once the second has arrived (bounded, so a
      // serial implementation fails the test instead of hanging it).
      if (rec.path === '/pair/second') secondArrived()
      if (rec.path === '/pair/first') {
        const alone = await Promise.race([second.then(() => false), Bun.sleep(3_000).then(() => true)])
        if (alone) return Response.json({ error: 'the second call never came while the first was open' }, { status: 504 })
      }
      return Response.json({ path: rec.path, method: rec.method, query: rec.query, body: rec.body ? JSON.parse(rec.body) : null })
    },
  })
  base = `http://127.0.0.1:${receiver.port}`
  const env = { MODELS_FILE: file, RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000', WEBHOOK_ALLOW_HTTP: 'true' }
  h = await startHarness({ ...env, WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' })
  workers = await startWorkers(h.deps)
  key = await keyFor(h, 'ac-owner')
  ws = await workspaceOf(h, key, 'Agents chat')
  strict = await startHarness(env)
  strictKey = await keyFor(strict, 'ac-strict')
  strictWs = await workspaceOf(strict, strictKey, 'Strict')
}, 60_000)

afterAll(async () => {
  await workers?.stop()
  await h?.close()
  await strict?.close()
  await fake?.close()
  receiver?.stop(true)
  if (dir) rmSync(dir, { recursive: true, force: true })
})

let agentSeq = 0
async function agent(body: Record<string, unknown>, on: { h: Harness; key: string; ws: string } = { h, key, ws }): Promise<string> {
  const res = await on.h.call('POST', '/v1/agents', { key: on.key, body: { workspace_id: on.ws, name: `Agent ${++agentSeq}`, type: 'agent', ...body } })
  if (res.status !== 201) throw new Error(`could not create an agent: ${res.status} ${res.text}`)
  return res.body.data.id
}

const chat = (agentId: string, body: Record<string, unknown>, opts: { on?: Harness; key?: string; headers?: Record<string, string> } = {}) =>
  (opts.on ?? h).call('POST', `/v1/agents/${agentId}/chat`, { key: opts.key ?? key, headers: opts.headers, body: { user_id: 'end-user-1', ...body } })

/** The conversation's messages, oldest first. */
async function messagesOf(conversationId: string, on = h, k = key): Promise<any[]> {
  const res = await on.call('GET', `/v1/conversations/${conversationId}?sort=created_at&limit=100`, { key: k })
  expect(res.status).toBe(200)
  return res.body.data.messages
}

const sent = (upstream: string): FakeRequest[] => fake.requests.filter((r) => r.model === upstream)
/** The `tool` messages of a request to the model, their content parsed. */
const toolMessages = (r: FakeRequest) => r.json.messages.filter((m: any) => m.role === 'tool').map((m: any) => ({ id: m.tool_call_id, output: JSON.parse(m.content) }))
const call = (name: string, args: Record<string, unknown>, id?: string) => ({ ...(id ? { id } : {}), name, arguments: args })
const ledgerOf = async (requestId: string, on = h) => (await on.deps.models.charges.flush(),
  on.deps.db.sql<{ model: string; kind: string; credits: string }[]>`select model, kind, credits::text as credits from credit_ledger where request_id = ${requestId} order by created_at, id`)

const ordersTool = () => ({
  type: 'http', name: 'lookup_order', description: 'Looks an order up', method: 'GET', url: `${base}/orders/{order_id}`,
  parameters: { type: 'object', properties: { order_id: { type: 'string' }, verbose: { type: 'boolean' } }, required: ['order_id'] },
})

describe('a tool round trip per tool type', () => {
  test('knowledge_search: the passage of a ready document goes back to the model as a tool message', async () => {
    const kb = (await createKb(h, key, { workspace_id: ws, name: 'Handbook' })).id
    const doc = await uploadText(h, key, kb, { name: 'lighthouse.txt', content: 'The Lumora lighthouse was built in 1872 on the northern cape. Its keeper lives in the village.' })
    expect((await settled(h, key, doc)).status).toBe('ready')
    const id = await agent({ model: 'kb', instructions: 'Answer from the handbook.', knowledge_base_ids: [kb], tools: [{ type: 'knowledge_search' }] })
    fake.script('kb-up', [{ toolCalls: [call('knowledge_search', { query: 'when was the lighthouse built', top_k: 3 })] }, { text: 'It was built in 1872.' }])
    const res = await chat(id, { message: 'When was the Lumora lighthouse built?' })
    expect(res.status).toBe(200)
    expect(Object.keys(res.body).sort()).toEqual(['agent_id', 'conversation_id', 'message', 'request_id', 'tool_calls', 'usage'])
    expect(res.body.message).toEqual({ role: 'assistant', content: 'It was built in 1872.' })
    expect(res.body.tool_calls).toEqual([{ tool: 'knowledge_search', input: { query: 'when was the lighthouse built', top_k: 3 }, duration_ms: expect.any(Number) }])
    const [first, next] = sent('kb-up') as [FakeRequest, FakeRequest]
    expect(sent('kb-up')).toHaveLength(2)
    expect(first.json.messages).toEqual([{ role: 'system', content: 'Answer from the handbook.' }, { role: 'user', content: 'When was the Lumora lighthouse built?' }])
    expect(first.json.tools.map((t: any) => t.function.name)).toEqual(['knowledge_search'])
    const [tool] = toolMessages(next)
    expect(tool.id).toBe('call_fake_0')
    expect(tool.output.results.length).toBeGreaterThan(0)
    expect(tool.output.results[0]).toMatchObject({ document_name: 'lighthouse.txt', knowledge_base_id: kb })
    expect(tool.output.results[0].content).toContain('built in 1872')
    // The stored answer keeps the tool's output.
    const stored = (await messagesOf(res.body.conversation_id)).at(-1)
    expect(stored.tool_calls[0].output).toEqual(tool.output)
  })

  test('workflow: the run\'s outputs reach the model', async () => {
    const wfRes = await h.call('POST', '/v1/workflows', {
      key,
      body: { workspace_id: ws, name: 'Forecast', graph: chain(start([{ name: 'city', type: 'string', required: true }]), tpl('say', 'Sunny in {{inputs.city}}'), end({ report: '{{nodes.say.output.text}}' })) },
    })
    expect(wfRes.status).toBe(201)
    const wf = wfRes.body.data.id
    const id = await agent({ model: 'wf', tools: [{ type: 'workflow', workflow_id: wf }] })
    fake.script('wf-up', [{ toolCalls: [call(`workflow_${wf}`, { city: 'Lisbon' })] }, { text: 'It is sunny in Lisbon.' }])
    const res = await chat(id, { message: 'Weather in Lisbon?' })
    expect(res.status).toBe(200)
    expect(res.body.message.content).toBe('It is sunny in Lisbon.')
    expect(res.body.tool_calls).toEqual([{ tool: `workflow_${wf}`, input: { city: 'Lisbon' }, duration_ms: expect.any(Number) }])
    const [first, next] = sent('wf-up') as [FakeRequest, FakeRequest]
    expect(first.json.tools[0].function).toMatchObject({ name: `workflow_${wf}`, parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } })
    const [tool] = toolMessages(next)
    expect(tool.output).toEqual({ run_id: expect.stringMatching(/^run_/), status: 'completed', outputs: { report: 'Sunny in Lisbon' } })
    const run = await h.call('GET', `/v1/runs/${tool.output.run_id}`, { key })
    expect(run.status).toBe(200)
    expect(run.body.status).toBe('completed')
  })

  test.each<{ method: string; args: Record<string, unknown>; path: string; query: Record<string, string>; body: unknown }>([
    { method: 'GET', args: { order_id: 'A 7/1', verbose: true }, path: '/orders/A%207%2F1', query: { verbose: 'true' }, body: '' },
    { method: 'POST', args: { order_id: 'B9', note: 'rush', qty: 2 }, path: '/orders/B9', query: {}, body: { note: 'rush', qty: 2 } },
  ])('http $method: the {param} placeholder, then the other arguments in the query or a JSON body', async ({ method, args, path, query, body }) => {
    const id = await agent({ model: 'http', tools: [{ ...ordersTool(), method }] })
    fake.script('http-up', [{ toolCalls: [call('lookup_order', args)] }, { text: 'Found it.' }])
    const before = seen.length
    const res = await chat(id, { message: 'Where is my order?' })
    expect(res.status).toBe(200)
    expect(res.body.tool_calls).toEqual([{ tool: 'lookup_order', input: args, duration_ms: expect.any(Number) }])
    const got = seen.slice(before)
    expect(got).toHaveLength(1)
    expect({ method: got[0]!.method, path: got[0]!.path, query: got[0]!.query }).toEqual({ method, path, query })
    if (method === 'POST') {
      expect(got[0]!.type).toBe('application/json')
      expect(JSON.parse(got[0]!.body)).toEqual(body)
    } else expect(got[0]!.body).toBe('')
    const [tool] = toolMessages(sent('http-up').at(-1)!)
    expect(tool.output).toMatchObject({ status: 200, body: { path, method } })
    expect(tool.output.headers['content-type']).toContain('application/json')
  })
})

describe('the agent loop', () => {
  test('two tool calls in one round run in parallel; both results go back in the calls\' order', async () => {
    const id = await agent({ model: 'pair', tools: [{ ...ordersTool(), name: 'lookup_pair', url: `${base}/pair/{which}` }] })
    fake.script('pair-up', [{ toolCalls: [call('lookup_pair', { which: 'first' }, 'call_a'), call('lookup_pair', { which: 'second' }, 'call_b')] }, { text: 'Both found.' }])
    const res = await chat(id, { message: 'Look both up' })
    expect(res.status).toBe(200)
    expect(res.body.tool_calls).toEqual([
      { tool: 'lookup_pair', input: { which: 'first' }, duration_ms: expect.any(Number) },
      { tool: 'lookup_pair', input: { which: 'second' }, duration_ms: expect.any(Number) },
    ])
    for (const c of res.body.tool_calls) expect(Number.isInteger(c.duration_ms) && c.duration_ms >= 0).toBe(true)
    expect(seen.filter((s) => s.path.startsWith('/pair/')).map((s) => s.path).sort()).toEqual(['/pair/first', '/pair/second'])
    const next = sent('pair-up')[1]!
    const assistant = next.json.messages.find((m: any) => m.role === 'assistant')
    expect(assistant.tool_calls.map((c: any) => c.id)).toEqual(['call_a', 'call_b'])
    const tools = toolMessages(next)
    expect(tools.map((t: any) => [t.id, t.output.body.path])).toEqual([['call_a', '/pair/first'], ['call_b', '/pair/second']])
    // The first call was answered only once the second had arrived: they ran side by side.
    expect(tools.map((t: any) => t.output.status)).toEqual([200, 200])
    expect(next.json.messages.at(-1).role).toBe('tool')
  })

  test('a model that always asks for a tool: 502 upstream_error after 8 model requests, the 7 rounds stored and charged', async () => {
    const id = await agent({ model: 'loop', tools: [ordersTool()] })
    fake.script('loop-up', [{ toolCalls: [call('lookup_order', { order_id: 'loop' })] }])
    const res = await chat(id, { message: 'Loop forever' })
    expectError(res, 502, 'upstream_error')
    expect(sent('loop-up')).toHaveLength(8)
    expect(seen.filter((s) => s.path === '/orders/loop')).toHaveLength(7)
    expect(await ledgerOf(res.body.request_id)).toHaveLength(8)
    const conv = await h.call('GET', `/v1/agents/${id}/conversations?user_id=end-user-1`, { key })
    const stored = await messagesOf(conv.body.data[0].id)
    expect(stored.map((m) => [m.role, m.finish_reason])).toEqual([['user', null], ['assistant', 'error']])
    expect(stored[1].tool_calls).toHaveLength(7)
  })

  test('history is trimmed to the model\'s context_length: the newest turns and the new message, the oldest dropped', async () => {
    const id = await agent({ model: 'trim' })
    const long = (i: number) => `turn ${i}: ${Array.from({ length: 45 }, (_, j) => `word${j}`).join(' ')}`
    fake.script('trim-up', Array.from({ length: 6 }, (_, i): Step => ({ text: `noted ${i + 1}` })))
    let conversation: string | undefined
    for (let i = 1; i <= 6; i++) {
      const res = await chat(id, { message: long(i), ...(conversation ? { conversation_id: conversation } : {}) })
      expect(res.status).toBe(200)
      conversation = res.body.conversation_id
    }
    const stored = (await messagesOf(conversation!)).map((m) => ({ role: m.role, content: m.content }))
    expect(stored).toHaveLength(12)
    const requests = sent('trim-up')
    // Turn 2 still had all of turn 1.
    expect(requests[1]!.json.messages).toEqual([...stored.slice(0, 2), { role: 'user', content: long(2) }])
    // Turn 6: the tail of the 10 earlier messages, then the new one.
    const last = requests[5]!.json.messages
    expect(last.at(-1)).toEqual({ role: 'user', content: long(6) })
    const history = last.slice(0, -1)
    expect(history.length).toBeGreaterThanOrEqual(2)
    expect(history.length).toBeLessThan(10)
    expect(history).toEqual(stored.slice(10 - history.length, 10))
    expect(history.some((m: any) => m.content === long(1))).toBe(false)
    expect(countChatTokens(last)).toBeLessThanOrEqual(TRIM_CONTEXT)
  })

  test('failover mid-conversation: the first route fails on turn 2, the second answers with the history, the conversation goes on', async () => {
    const id = await agent({ model: 'fo' })
    fake.script('fo-p', [{ text: 'Lisbon is the capital.' }, { status: 500 }])
    fake.script('fo-s', [{ text: 'About half a million people.' }, { text: 'It is on the Tagus.' }])
    const one = await chat(id, { message: 'Capital of Portugal?' })
    expect(one.body.message.content).toBe('Lisbon is the capital.')
    const conversation_id = one.body.conversation_id
    const two = await chat(id, { message: 'How many live there?', conversation_id })
    expect(two.status).toBe(200)
    expect(two.body.message.content).toBe('About half a million people.')
    expect(two.body.conversation_id).toBe(conversation_id)
    expect(sent('fo-p').length).toBeGreaterThanOrEqual(2)
    expect(sent('fo-s')[0]!.json.messages).toEqual([
      { role: 'user', content: 'Capital of Portugal?' },
      { role: 'assistant', content: 'Lisbon is the capital.' },
      { role: 'user', content: 'How many live there?' },
    ])
    const three = await chat(id, { message: 'Which river?', conversation_id })
    expect(three.status).toBe(200)
    expect(three.body.message.content).toBe('It is on the Tagus.')
    expect((await messagesOf(conversation_id)).map((m) => m.content)).toEqual([
      'Capital of Portugal?', 'Lisbon is the capital.', 'How many live there?', 'About half a million people.', 'Which river?', 'It is on the Tagus.',
    ])
  })

  test('a refused tool call (SSRF: loopback without WEBHOOK_ALLOW_PRIVATE_NETWORKS) is fed back to the model as the tool\'s error', async () => {
    const on = { h: strict, key: strictKey, ws: strictWs }
    const id = await agent({ model: 'ssrf', tools: [{ ...ordersTool(), url: `${base}/orders/{order_id}/ssrf` }] }, on)
    fake.script('ssrf-up', [{ toolCalls: [call('lookup_order', { order_id: 'inside' })] }, { text: 'I could not reach the order service.' }])
    const res = await chat(id, { message: 'Find order inside' }, { on: strict, key: strictKey })
    expect(res.status).toBe(200)
    expect(res.body.message.content).toBe('I could not reach the order service.')
    const [tool] = toolMessages(sent('ssrf-up')[1]!)
    expect(tool.output.error.code).toBe('ssrf_refused')
    expect(typeof tool.output.error.message).toBe('string')
    expect(seen.some((s) => s.path.endsWith('/ssrf'))).toBe(false)
    const stored = (await messagesOf(res.body.conversation_id, strict, strictKey)).at(-1)
    expect(stored.tool_calls[0].output.error.code).toBe('ssrf_refused')
  })
})

describe('usage and idempotency', () => {
  test('the answer\'s credits are the sum of the ledger rows of its request (one per model round)', async () => {
    const id = await agent({ model: 'credits', tools: [ordersTool()] })
    fake.script('credits-up', [
      { toolCalls: [call('lookup_order', { order_id: 'c1' })], usage: { prompt_tokens: 120, completion_tokens: 10 } },
      { text: 'Shipped.', usage: { prompt_tokens: 200, completion_tokens: 30 } },
    ])
    const res = await chat(id, { message: 'Status of c1?' })
    expect(res.status).toBe(200)
    // 320 tokens in at 1/1k, 40 out at 2/1k.
    expect(res.body.usage).toEqual({ tokens_in: 320, tokens_out: 40, credits: 0.4 })
    const rows = await ledgerOf(res.body.request_id)
    expect(rows.map((r) => [r.model, r.kind])).toEqual([['credits', 'chat'], ['credits', 'chat']])
    const sum = rows.reduce((n, r) => n + Number(r.credits), 0)
    const stored = (await messagesOf(res.body.conversation_id)).at(-1)
    expect(stored.usage.credits).toBeGreaterThan(0)
    expect(stored.usage.credits).toBeCloseTo(sum, 6)
    expect(stored.usage).toEqual(res.body.usage)
  })

  // The query embedding a knowledge_search call makes is one of the turn's charges: in usage.credits
  // and committed with the answer (it once went to the ledger at once and was left out: 0.026 against 0.031).
  test('with a priced embedding model, the query embedding of knowledge_search is in usage.credits too', async () => {
    const kb = (await createKb(h, key, { workspace_id: ws, name: 'Priced', embedding_model: 'pemb' })).id
    const doc = await uploadText(h, key, kb, { name: 'ferry.txt', content: 'The ferry leaves at noon every day from pier four.' })
    expect((await settled(h, key, doc)).status).toBe('ready')
    const id = await agent({ model: 'kbc', knowledge_base_ids: [kb], tools: [{ type: 'knowledge_search' }] })
    fake.script('kbc-up', [{ toolCalls: [call('knowledge_search', { query: 'when does the ferry leave' })] }, { text: 'At noon.' }])
    const res = await chat(id, { message: 'When does the ferry leave?' })
    expect(res.status).toBe(200)
    const rows = await ledgerOf(res.body.request_id)
    expect(rows.map((r) => r.kind).sort()).toEqual(['chat', 'chat', 'embedding'])
    expect(res.body.usage.credits).toBeCloseTo(rows.reduce((n, r) => n + Number(r.credits), 0), 6)
  })

  test('the same Idempotency-Key twice: the same body replayed, one user and one assistant message, one provider call', async () => {
    const id = await agent({ model: 'idem' })
    fake.script('idem-up', [{ text: 'Only once.' }])
    const headers = { 'idempotency-key': `idem-${crypto.randomUUID()}` }
    const first = await chat(id, { message: 'Say it once' }, { headers })
    expect(first.status).toBe(200)
    expect(first.headers.get('idempotent-replayed')).toBeNull()
    const again = await chat(id, { message: 'Say it once' }, { headers })
    expect(again.status).toBe(200)
    expect(again.headers.get('idempotent-replayed')).toBe('true')
    expect(again.text).toBe(first.text)
    expect(sent('idem-up')).toHaveLength(1)
    const convs = await h.call('GET', `/v1/agents/${id}/conversations?user_id=end-user-1`, { key })
    expect(convs.body.data).toHaveLength(1)
    expect((await messagesOf(first.body.conversation_id)).map((m) => [m.role, m.content])).toEqual([['user', 'Say it once'], ['assistant', 'Only once.']])
  })
})
