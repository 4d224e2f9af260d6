import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { countChatTokens, countTokens } from '../../src/lib/tokens'
import { startFakeProvider, type FakeProvider } from '../helpers/fake-provider'
import { keyFor, startHarness, workspaceOf, type Answer, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The model endpoints (docs/models.md) and the OpenAI drop-ins through the real app in-process. The local models answer most
 * calls; a MODELS_FILE adds models routed to a loopback fake provider (shape checks of an upstream
 * answer) and one priced model served by local-chat (so credits are not all 0).
 */
let h: Harness
let fake: FakeProvider
let tmp: string
let alice: string
let ws: string
let ws2: string

const PRICED = { input_per_1k: 1.5, output_per_1k: 2.5 }
const CONTEXT = 'Our office is in Lisbon. It opens at 9 am on weekdays. The cafeteria serves lunch from noon. Parking is free for visitors.'
const QUESTION = 'Where is the office?'
const MESSAGES = [{ role: 'system', content: CONTEXT }, { role: 'user', content: QUESTION }]

beforeAll(async () => {
  fake = await startFakeProvider()
  tmp = mkdtempSync(join(tmpdir(), 'ap-models-happy-'))
  const file = join(tmp, 'models.json')
  writeFileSync(file, JSON.stringify({
    providers: [{ id: 'acme', kind: 'openai', base_url: fake.baseUrl, api_key: 'sk-fake-test-key', timeout_ms: 5_000 }],
    models: [
      { id: 'acme-chat', type: 'llm', vendor: 'acme', context_length: 8_000, supports_function_call: true, routes: [{ provider: 'acme', model: 'up-chat' }], pricing: PRICED },
      { id: 'acme-embed', type: 'embedding', vendor: 'acme', dimensions: 8, routes: [{ provider: 'acme', model: 'up-embed' }] },
      { id: 'acme-rerank', type: 'rerank', vendor: 'acme', routes: [{ provider: 'acme', model: 'up-rerank' }] },
      { id: 'house-chat', type: 'llm', vendor: 'house', routes: [{ provider: 'local', model: 'local-chat' }], pricing: PRICED },
    ],
  }))
  h = await startHarness({ RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000', MODELS_FILE: file })
  alice = await keyFor(h, 'mh-alice')
  ws = await workspaceOf(h, alice, 'Models one')
})
afterAll(async () => {
  await h?.close()
  await fake?.close()
  rmSync(tmp, { recursive: true, force: true })
})

/** The workspace the ledger charged for a request (every call writes one row, also at 0 credits). */
async function chargedTo(requestId: string): Promise<{ workspace_id: string; model: string; kind: string; tokens_in: number; tokens_out: number; credits: number }[]> {
  // Charges reach the ledger in batches (docs/models.md, "Credits and budgets"): this process' are written first.
  await h.deps.models.charges.flush()
  const rows = await h.deps.db.sql<any[]>`select workspace_id, model, kind, tokens_in, tokens_out, credits from credit_ledger where request_id = ${requestId}`
  return rows.map((r) => ({ ...r, tokens_in: Number(r.tokens_in), tokens_out: Number(r.tokens_out), credits: Number(r.credits) }))
}

const priced = (tokensIn: number, tokensOut: number) => Math.round(((tokensIn / 1000) * PRICED.input_per_1k + (tokensOut / 1000) * PRICED.output_per_1k) * 1e6) / 1e6

/** The SSE text as the `data:` payloads, each event checked to be one `data:` line. */
function sseData(res: Answer): string[] {
  expect(res.status).toBe(200)
  expect(res.headers.get('content-type')).toStartWith('text/event-stream')
  expect(res.text.endsWith('\n\n')).toBe(true)
  const events = res.text.split('\n\n').slice(0, -1)
  return events.map((e) => {
    expect(e).toMatch(/^data: [^\n]*$/)
    return e.slice('data: '.length)
  })
}

describe('GET /v1/models', () => {
  const LOCAL = [
    { id: 'local-chat', object: 'model', type: 'llm', vendor: 'local', context_length: 32_768, supports_function_call: true },
    { id: 'local-embed', object: 'model', type: 'embedding', vendor: 'local', dimensions: 384 },
    { id: 'local-rerank', object: 'model', type: 'rerank', vendor: 'local' },
  ]

  test('lists the three local models with the fields of docs/models.md, and the file\'s models', async () => {
    const res = await h.call('GET', '/v1/models', { key: alice })
    expect(res.status).toBe(200)
    expect(Object.keys(res.body).sort()).toEqual(['data', 'object', 'request_id'])
    expect(res.body.object).toBe('list')
    expect(res.body.request_id).toBe(res.headers.get('x-request-id'))
    // OpenAI's own two fields on every model: owned_by is the vendor, created a Unix time in seconds.
    for (const m of res.body.data) expect([m.owned_by, Number.isInteger(m.created)]).toEqual([m.vendor, true])
    const byId = Object.fromEntries(res.body.data.map(({ created: _c, owned_by: _o, ...m }: any) => [m.id, m]))
    for (const m of LOCAL) expect(byId[m.id]).toEqual(m)
    expect(byId['acme-chat']).toEqual({ id: 'acme-chat', object: 'model', type: 'llm', vendor: 'acme', context_length: 8_000, supports_function_call: true })
    expect(byId['acme-embed']).toEqual({ id: 'acme-embed', object: 'model', type: 'embedding', vendor: 'acme', dimensions: 8 })
    expect(byId['acme-rerank']).toEqual({ id: 'acme-rerank', object: 'model', type: 'rerank', vendor: 'acme' })
    // An llm without the two optional fields: no context_length, and supports_function_call false.
    expect(byId['house-chat']).toEqual({ id: 'house-chat', object: 'model', type: 'llm', vendor: 'house', supports_function_call: false })
    expect(res.body.data.map((m: any) => m.id).sort()).toEqual(['acme-chat', 'acme-embed', 'acme-rerank', 'house-chat', 'local-chat', 'local-embed', 'local-rerank'])
    // Nothing of a provider (routes, keys, base URLs, pricing) leaks into the list.
    expect(res.text).not.toContain('sk-fake-test-key')
    expect(res.text).not.toContain(fake.url)
    expect(res.text).not.toContain('routes')
  })

  test('filters by type and by vendor, and by both', async () => {
    const ids = async (query: string) => {
      const res = await h.call('GET', `/v1/models${query}`, { key: alice })
      expect(res.status).toBe(200)
      return res.body.data.map((m: any) => m.id).sort()
    }
    expect(await ids('?vendor=local')).toEqual(['local-chat', 'local-embed', 'local-rerank'])
    expect(await ids('?type=embedding')).toEqual(['acme-embed', 'local-embed'])
    expect(await ids('?type=llm')).toEqual(['acme-chat', 'house-chat', 'local-chat'])
    expect(await ids('?type=rerank')).toEqual(['acme-rerank', 'local-rerank'])
    expect(await ids('?type=llm&vendor=acme')).toEqual(['acme-chat'])
    expect(await ids('?vendor=nobody')).toEqual([])
    const full = await h.call('GET', '/v1/models?vendor=local&type=embedding', { key: alice })
    expect(full.body.data.map(({ created: _c, owned_by: _o, ...m }: any) => m)).toEqual([LOCAL[1]])
  })

  test('any authenticated caller may list, even one with no workspace', async () => {
    const loner = await keyFor(h, 'mh-loner')
    const res = await h.call('GET', '/v1/models', { key: loner })
    expect(res.status).toBe(200)
    expect(res.body.data.length).toBe(7)
  })
})

async function chat(body: Record<string, unknown>, opts: { key?: string; headers?: Record<string, string>; path?: string } = {}) {
  return h.call('POST', opts.path ?? '/v1/models/llm/chat', { key: opts.key ?? alice, headers: opts.headers, body })
}

describe('POST /v1/models/llm/chat', () => {
  test('local-chat: the OpenAI chat.completion object plus request_id and usage.credits, answered from the context', async () => {
    const res = await chat({ model: 'local-chat', messages: MESSAGES, temperature: 0.2, max_tokens: 200 })
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toStartWith('application/json')
    const b = res.body
    expect(Object.keys(b).sort()).toEqual(['choices', 'created', 'id', 'model', 'object', 'request_id', 'usage'])
    expect(b.request_id).toBe(res.headers.get('x-request-id'))
    expect(b.request_id).toMatch(/^req_/)
    expect(b.id).toMatch(/^chatcmpl-/)
    expect(b.object).toBe('chat.completion')
    expect(Number.isInteger(b.created)).toBe(true)
    expect(Math.abs(b.created - Date.now() / 1000)).toBeLessThan(60)
    expect(b.model).toBe('local-chat')
    expect(b.choices).toEqual([{ index: 0, message: { role: 'assistant', content: 'From the context: Our office is in Lisbon.' }, finish_reason: 'stop' }])
    const completion = countTokens(b.choices[0].message.content)
    const prompt = countChatTokens(MESSAGES)
    expect(b.usage).toEqual({ prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion, credits: 0 })
    expect(await chargedTo(b.request_id)).toEqual([{ workspace_id: ws, model: 'local-chat', kind: 'chat', tokens_in: prompt, tokens_out: completion, credits: 0 }])
  })

  test('the same input gives the same content; several context sentences are quoted in order', async () => {
    const messages = [{ role: 'system', content: CONTEXT }, { role: 'user', content: 'When does the office open, and is parking free?' }]
    const a = await chat({ model: 'local-chat', messages })
    const b = await chat({ model: 'local-chat', messages })
    expect(a.status).toBe(200)
    expect(a.body.choices[0].message.content).toBe(b.body.choices[0].message.content)
    expect(a.body.id).not.toBe(b.body.id)
    expect(a.body.choices[0].message.content).toStartWith('From the context: ')
    expect(a.body.choices[0].message.content).toContain('Parking is free for visitors.')
  })

  test('a priced model: usage.credits is the tokens priced per 1 000, and the ledger holds the same figure', async () => {
    const res = await chat({ model: 'house-chat', messages: MESSAGES })
    expect(res.status).toBe(200)
    expect(res.body.model).toBe('house-chat')
    const u = res.body.usage
    expect(u.prompt_tokens).toBeGreaterThan(0)
    expect(u.completion_tokens).toBeGreaterThan(0)
    expect(u.credits).toBe(priced(u.prompt_tokens, u.completion_tokens))
    expect(u.credits).toBeGreaterThan(0)
    const [row] = await chargedTo(res.body.request_id)
    expect(row).toEqual({ workspace_id: ws, model: 'house-chat', kind: 'chat', tokens_in: u.prompt_tokens, tokens_out: u.completion_tokens, credits: u.credits })
  })

  // OpenAI's extra top-level fields (system_fingerprint, service_tier) are dropped from the answer.
  test('an upstream model (fake provider): the upstream answer in the same shape, the model named by our id, usage as reported', async () => {
    fake.script('up-chat', [{ text: 'Hello from upstream.', usage: { prompt_tokens: 40, completion_tokens: 4 } }])
    const res = await chat({ model: 'acme-chat', messages: MESSAGES, max_tokens: 50 })
    expect(res.status).toBe(200)
    // OpenAI's fields, and what the upstream added to them as it sent it (docs/models.md, "OpenAI compatibility").
    expect(Object.keys(res.body).sort()).toEqual(['choices', 'created', 'id', 'model', 'object', 'request_id', 'system_fingerprint', 'usage'])
    expect(res.body.system_fingerprint).toBe('fp_fake')
    expect(res.body.object).toBe('chat.completion')
    expect(res.body.model).toBe('acme-chat')
    expect(res.body.choices[0]).toMatchObject({ index: 0, message: { role: 'assistant', content: 'Hello from upstream.' }, finish_reason: 'stop' })
    expect(res.body.usage).toEqual({ prompt_tokens: 40, completion_tokens: 4, total_tokens: 44, credits: priced(40, 4) })
    const sent = fake.requests.at(-1)!
    expect(sent.path).toBe('/v1/chat/completions')
    expect(sent.json.model).toBe('up-chat')
    expect(sent.json.messages).toEqual(MESSAGES)
    expect(sent.headers.authorization).toBe('Bearer sk-fake-test-key')
    expect('tool_choice' in sent.json).toBe(false)
  })

  test('an upstream model streamed: the upstream pieces under our model id, usage as reported and priced', async () => {
    fake.script('up-chat', [{ text: 'Hello from upstream.', chunks: ['Hello ', 'from ', 'upstream.'], usage: { prompt_tokens: 40, completion_tokens: 4 } }])
    const data = sseData(await chat({ model: 'acme-chat', messages: MESSAGES, stream: true }))
    expect(data.at(-1)).toBe('[DONE]')
    const chunks = data.slice(0, -1).map((d) => JSON.parse(d))
    for (const c of chunks) expect(c).toMatchObject({ object: 'chat.completion.chunk', model: 'acme-chat' })
    expect(chunks.slice(0, -1).map((c: any) => c.choices[0].delta.content ?? '').join('')).toBe('Hello from upstream.')
    expect(chunks.at(-1)).toMatchObject({ choices: [], usage: { prompt_tokens: 40, completion_tokens: 4, total_tokens: 44, credits: priced(40, 4) } })
    const sent = fake.requests.at(-1)!
    expect(sent.json).toMatchObject({ model: 'up-chat', stream: true, messages: MESSAGES })
  })

  test('stream: chat.completion.chunk events, deltas that add up to the sync answer, a usage chunk, then [DONE]', async () => {
    const sync = await chat({ model: 'local-chat', messages: MESSAGES })
    const res = await chat({ model: 'local-chat', messages: MESSAGES, stream: true })
    expect(res.headers.get('x-request-id')).toMatch(/^req_/)
    const data = sseData(res)
    expect(data.at(-1)).toBe('[DONE]')
    expect(data.filter((d) => d === '[DONE]').length).toBe(1)
    const chunks = data.slice(0, -1).map((d) => JSON.parse(d))
    expect(chunks.length).toBeGreaterThan(3)
    for (const c of chunks) {
      expect(c.object).toBe('chat.completion.chunk')
      expect(c.id).toBe(chunks[0].id)
      expect(c.model).toBe('local-chat')
      expect(Number.isInteger(c.created)).toBe(true)
    }
    const usageChunk = chunks.at(-1)
    expect(usageChunk.choices).toEqual([])
    const content = sync.body.choices[0].message.content
    const { credits: syncCredits, ...syncUsage } = sync.body.usage
    expect(usageChunk.usage).toEqual({ ...syncUsage, credits: syncCredits })
    const choiceChunks = chunks.slice(0, -1)
    for (const c of choiceChunks) {
      expect(c.choices.length).toBe(1)
      expect(c.choices[0].index).toBe(0)
      expect(c.usage ?? null).toBeNull()
    }
    expect(choiceChunks[0].choices[0].delta.role).toBe('assistant')
    expect(choiceChunks.map((c: any) => c.choices[0].delta.content ?? '').join('')).toBe(content)
    // finish_reason only on the last choice chunk.
    expect(choiceChunks.at(-1).choices[0].finish_reason).toBe('stop')
    for (const c of choiceChunks.slice(0, -1)) expect(c.choices[0].finish_reason).toBeNull()
    // One ledger row for the stream, charged once.
    const rows = await chargedTo(res.headers.get('x-request-id')!)
    expect(rows).toEqual([{ workspace_id: ws, model: 'local-chat', kind: 'chat', tokens_in: syncUsage.prompt_tokens, tokens_out: syncUsage.completion_tokens, credits: 0 }])
  })

  test('stream of a priced model: the usage chunk carries the credits charged', async () => {
    const res = await chat({ model: 'house-chat', messages: MESSAGES, stream: true })
    const data = sseData(res)
    const usage = JSON.parse(data.at(-2)!).usage
    expect(usage.credits).toBe(priced(usage.prompt_tokens, usage.completion_tokens))
    const [row] = await chargedTo(res.headers.get('x-request-id')!)
    expect(row!.credits).toBe(usage.credits)
  })

  const TOOLS = [{ type: 'function', function: { name: 'get_weather', description: 'Forecast', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }]

  /** The tool round trip; `toolChoice` is spread into both requests (an explicit tool_choice or none). */
  async function toolRoundTrip(toolChoice: Record<string, unknown>, path = '/v1/models/llm/chat') {
    const tools = TOOLS
    const ask = { role: 'user', content: 'Use get_weather for "Paris"' }
    const first = await chat({ model: 'local-chat', messages: [ask], tools, ...toolChoice }, { path })
    expect(first.status).toBe(200)
    const choice = first.body.choices[0]
    expect(choice.finish_reason).toBe('tool_calls')
    expect(choice.message.content).toBeNull()
    expect(choice.message.tool_calls).toEqual([{ id: expect.stringMatching(/^call_/), type: 'function', function: { name: 'get_weather', arguments: JSON.stringify({ city: 'Paris' }) } }])
    const second = await chat({
      model: 'local-chat',
      tools,
      messages: [ask, choice.message, { role: 'tool', tool_call_id: choice.message.tool_calls[0].id, content: '{"temp_c": 21}' }],
    }, { path })
    expect(second.status).toBe(200)
    expect(second.body.choices[0]).toEqual({ index: 0, message: { role: 'assistant', content: 'From get_weather: {"temp_c": 21}' }, finish_reason: 'stop' })
  }

  test('a tool named in the user message (tool_choice auto): tool_calls; the tool result sent back gives the final answer', async () => {
    await toolRoundTrip({ tool_choice: 'auto' })
    await toolRoundTrip({ tool_choice: 'auto' }, '/v1/chat/completions')
  })

  // No tool_choice means auto (OpenAI's default), not the first value of the enum.
  test('a tool named in the user message, no tool_choice (OpenAI\'s default is auto): tool_calls, then the final answer', async () => {
    await toolRoundTrip({})
    await toolRoundTrip({}, '/v1/chat/completions')
  })

  test('text parts are joined; max_tokens cuts the answer with finish_reason length', async () => {
    const parts = await chat({ model: 'local-chat', messages: [{ role: 'system', content: [{ type: 'text', text: 'Our office is ' }, { type: 'text', text: 'in Lisbon.' }] }, { role: 'user', content: [{ type: 'text', text: QUESTION }] }] })
    expect(parts.status).toBe(200)
    expect(parts.body.choices[0].message.content).toBe('From the context: Our office is in Lisbon.')
    const cut = await chat({ model: 'local-chat', messages: MESSAGES, max_tokens: 2 })
    expect(cut.status).toBe(200)
    expect(cut.body.choices[0].finish_reason).toBe('length')
    expect(cut.body.usage.completion_tokens).toBeLessThanOrEqual(2)
  })
})

describe('embeddings and rerank', () => {
  const TEXTS = ['refund policy', 'how do I get my money back?', 'Our office is in Lisbon.']
  const norm = (v: number[]) => Math.sqrt(v.reduce((s, x) => s + x * x, 0))

  test('POST /v1/models/embeddings: one 384-dimension unit vector per input, by index, tokens counted', async () => {
    const res = await h.call('POST', '/v1/models/embeddings', { key: alice, body: { model: 'local-embed', input: TEXTS } })
    expect(res.status).toBe(200)
    expect(Object.keys(res.body).sort()).toEqual(['data', 'model', 'request_id', 'usage'])
    expect(res.body.model).toBe('local-embed')
    expect(res.body.data.map((d: any) => d.index)).toEqual([0, 1, 2])
    for (const d of res.body.data) {
      expect(Object.keys(d).sort()).toEqual(['embedding', 'index'])
      expect(d.embedding.length).toBe(384)
      expect(Math.abs(norm(d.embedding) - 1)).toBeLessThan(1e-9)
    }
    const tokens = TEXTS.reduce((n, t) => n + countTokens(t), 0)
    expect(res.body.usage).toEqual({ tokens, credits: 0 })
    expect(tokens).toBeGreaterThan(0)
    // Each vector is the text's own: embedding one text alone gives the same vector.
    const alone = await h.call('POST', '/v1/models/embeddings', { key: alice, body: { model: 'local-embed', input: [TEXTS[2]] } })
    expect(alone.body.data[0].embedding).toEqual(res.body.data[2].embedding)
    expect(res.body.data[0].embedding).not.toEqual(res.body.data[1].embedding)
    expect((await chargedTo(res.body.request_id))[0]).toMatchObject({ workspace_id: ws, model: 'local-embed', kind: 'embedding', tokens_in: tokens, tokens_out: 0 })
  })

  test('an upstream embedding model answering out of order: data sorted by index', async () => {
    fake.script('up-embed', [{ reverse: true, dimensions: 8 }])
    const res = await h.call('POST', '/v1/models/embeddings', { key: alice, body: { model: 'acme-embed', input: TEXTS } })
    expect(res.status).toBe(200)
    expect(res.body.model).toBe('acme-embed')
    expect(res.body.data.map((d: any) => d.index)).toEqual([0, 1, 2])
    for (const d of res.body.data) expect(d.embedding.length).toBe(8)
    const sent = fake.requests.at(-1)!
    expect(sent.path).toBe('/v1/embeddings')
    expect(sent.json.input).toEqual(TEXTS)
    // The vectors follow their inputs: the same text alone gives the vector found at its index.
    fake.script('up-embed', [{ dimensions: 8 }])
    const alone = await h.call('POST', '/v1/models/embeddings', { key: alice, body: { model: 'acme-embed', input: [TEXTS[1]] } })
    expect(alone.body.data[0].embedding).toEqual(res.body.data[1].embedding)
  })

  test('POST /v1/models/rerank: results sorted by relevance, top_n honoured, the shape of docs/models.md', async () => {
    const documents = ['Our office is in Paris.', 'Refunds take 5 days after the refund request.', 'The refund form is online.', 'Lunch is at noon.']
    const res = await h.call('POST', '/v1/models/rerank', { key: alice, body: { model: 'local-rerank', query: 'refund', documents } })
    expect(res.status).toBe(200)
    expect(Object.keys(res.body).sort()).toEqual(['model', 'request_id', 'results', 'usage'])
    expect(res.body.model).toBe('local-rerank')
    const results = res.body.results
    expect(results.length).toBe(documents.length)
    for (const r of results) expect(Object.keys(r).sort()).toEqual(['index', 'relevance_score'])
    expect(results.map((r: any) => r.index).sort()).toEqual([0, 1, 2, 3])
    for (let i = 1; i < results.length; i++) expect(results[i - 1].relevance_score).toBeGreaterThanOrEqual(results[i].relevance_score)
    expect([1, 2]).toContain(results[0].index)
    expect(results[0].relevance_score).toBeGreaterThan(results.at(-1).relevance_score)
    expect(res.body.usage.tokens).toBeGreaterThan(0)
    expect(res.body.usage.credits).toBe(0)

    const top = await h.call('POST', '/v1/models/rerank', { key: alice, body: { model: 'local-rerank', query: 'refund', documents, top_n: 2 } })
    expect(top.status).toBe(200)
    expect(top.body.results).toEqual(results.slice(0, 2))
    const more = await h.call('POST', '/v1/models/rerank', { key: alice, body: { model: 'local-rerank', query: 'refund', documents, top_n: 10 } })
    expect(more.body.results).toEqual(results)
  })

  test('an upstream rerank model: results sorted whatever order the provider scores in', async () => {
    fake.script('up-rerank', [{ scores: [0.1, 0.9, 0.5] }])
    const res = await h.call('POST', '/v1/models/rerank', { key: alice, body: { model: 'acme-rerank', query: 'q', documents: ['a', 'b', 'c'], top_n: 2 } })
    expect(res.status).toBe(200)
    expect(res.body.model).toBe('acme-rerank')
    expect(res.body.results).toEqual([{ index: 1, relevance_score: 0.9 }, { index: 2, relevance_score: 0.5 }])
  })
})

describe('OpenAI drop-ins', () => {
  test('POST /v1/chat/completions: the same answer as /v1/models/llm/chat', async () => {
    const spec = await chat({ model: 'local-chat', messages: MESSAGES })
    const res = await chat({ model: 'local-chat', messages: MESSAGES, n: 1, frequency_penalty: 0, store: false }, { path: '/v1/chat/completions' })
    expect(res.status).toBe(200)
    expect(Object.keys(res.body).sort()).toEqual(['choices', 'created', 'id', 'model', 'object', 'request_id', 'usage'])
    expect(res.body.object).toBe('chat.completion')
    expect(res.body.choices).toEqual(spec.body.choices)
    expect(res.body.usage).toEqual(spec.body.usage)
  })

  test('POST /v1/chat/completions stream: no usage chunk unless stream_options.include_usage', async () => {
    const plain = sseData(await chat({ model: 'local-chat', messages: MESSAGES, stream: true }, { path: '/v1/chat/completions' }))
    expect(plain.at(-1)).toBe('[DONE]')
    for (const d of plain.slice(0, -1)) expect(JSON.parse(d).choices.length).toBe(1)
    const withUsage = sseData(await chat({ model: 'local-chat', messages: MESSAGES, stream: true, stream_options: { include_usage: true } }, { path: '/v1/chat/completions' }))
    expect(withUsage.length).toBe(plain.length + 1)
    const usage = JSON.parse(withUsage.at(-2)!)
    expect(usage.choices).toEqual([])
    expect(usage.usage.total_tokens).toBe(usage.usage.prompt_tokens + usage.usage.completion_tokens)
  })

  test('POST /v1/embeddings: float and base64 (little-endian float32) give the same vectors', async () => {
    const input = ['refund policy', 'office hours']
    const float = await h.call('POST', '/v1/embeddings', { key: alice, body: { model: 'local-embed', input, encoding_format: 'float' } })
    expect(float.status).toBe(200)
    expect(Object.keys(float.body).sort()).toEqual(['data', 'model', 'object', 'request_id', 'usage'])
    expect(float.body.object).toBe('list')
    expect(float.body.model).toBe('local-embed')
    const tokens = countTokens(input[0]!) + countTokens(input[1]!)
    expect(float.body.usage).toEqual({ prompt_tokens: tokens, total_tokens: tokens, credits: 0 })
    expect(float.body.data.map((d: any) => [d.object, d.index])).toEqual([['embedding', 0], ['embedding', 1]])
    const spec = await h.call('POST', '/v1/models/embeddings', { key: alice, body: { model: 'local-embed', input } })
    expect(float.body.data.map((d: any) => d.embedding)).toEqual(spec.body.data.map((d: any) => d.embedding))
    // Without encoding_format: floats, as OpenAI answers.
    const dflt = await h.call('POST', '/v1/embeddings', { key: alice, body: { model: 'local-embed', input } })
    expect(dflt.body.data.map((d: any) => d.embedding)).toEqual(spec.body.data.map((d: any) => d.embedding))

    const b64 = await h.call('POST', '/v1/embeddings', { key: alice, body: { model: 'local-embed', input, encoding_format: 'base64' } })
    expect(b64.status).toBe(200)
    for (const [i, d] of b64.body.data.entries()) {
      expect(typeof d.embedding).toBe('string')
      const bytes = Buffer.from(d.embedding, 'base64')
      expect(bytes.length).toBe(384 * 4)
      const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength)
      const decoded = Array.from({ length: 384 }, (_, k) => view.getFloat32(k * 4, true))
      expect(decoded).toEqual(float.body.data[i].embedding.map(Math.fround))
    }
  })

  test('POST /v1/embeddings takes a single string', async () => {
    const one = await h.call('POST', '/v1/embeddings', { key: alice, body: { model: 'local-embed', input: 'refund policy' } })
    expect(one.status).toBe(200)
    expect(one.body.data.length).toBe(1)
    expect(one.body.data[0].embedding.length).toBe(384)
  })
})

describe('workspace resolution and roles', () => {
  let bob: string
  let reader: string
  let restricted: string
  beforeAll(async () => {
    bob = await keyFor(h, 'mh-bob')
    ws2 = await workspaceOf(h, bob, 'Bob one')
    // Alice now has two workspaces: nothing is implied any more.
    const added = await h.call('POST', `/v1/workspaces/${ws2}/members`, { key: bob, body: { user_id: 'mh-alice', role: 'user' } })
    expect(added.status).toBe(201)
    const r = await h.call('POST', `/v1/workspaces/${ws2}/members`, { key: bob, body: { user_id: 'mh-reader', role: 'readonly' } })
    expect(r.status).toBe(201)
    reader = await keyFor(h, 'mh-reader')
    restricted = await keyFor(h, 'mh-alice', { workspace_id: ws2 })
  })

  const calls: [string, string, (w: Record<string, unknown>) => Record<string, unknown>][] = [
    ['chat', '/v1/models/llm/chat', (w) => ({ model: 'local-chat', messages: MESSAGES, ...w })],
    ['embeddings', '/v1/models/embeddings', (w) => ({ model: 'local-embed', input: ['x'], ...w })],
    ['rerank', '/v1/models/rerank', (w) => ({ model: 'local-rerank', query: 'x', documents: ['x y'], ...w })],
  ]

  test('X-Workspace-Id names the workspace charged', async () => {
    for (const [name, path, body] of calls) {
      for (const target of [ws, ws2]) {
        const res = await h.call('POST', path, { key: alice, headers: { 'x-workspace-id': target }, body: body({}) })
        expect({ name, status: res.status }).toEqual({ name, status: 200 })
        expect((await chargedTo(res.body.request_id)).map((r) => r.workspace_id)).toEqual([target])
      }
    }
  })

  test('body workspace_id names it, and wins over the header', async () => {
    for (const [name, path, body] of calls) {
      const res = await h.call('POST', path, { key: alice, headers: { 'x-workspace-id': ws }, body: body({ workspace_id: ws2 }) })
      expect({ name, status: res.status }).toEqual({ name, status: 200 })
      expect((await chargedTo(res.body.request_id)).map((r) => r.workspace_id)).toEqual([ws2])
    }
  })

  test('a key restricted to a workspace needs no header; the drop-ins resolve it too', async () => {
    for (const [name, path, body] of [...calls, ['openai chat', '/v1/chat/completions', calls[0]![2]] as const, ['openai embeddings', '/v1/embeddings', calls[1]![2]] as const]) {
      const res = await h.call('POST', path, { key: restricted, body: body({}) })
      expect({ name, status: res.status }).toEqual({ name, status: 200 })
      expect((await chargedTo(res.body.request_id)).map((r) => r.workspace_id)).toEqual([ws2])
    }
  })

  test('the user\'s only workspace is used when nothing names one', async () => {
    const carol = await keyFor(h, 'mh-carol')
    const only = await workspaceOf(h, carol, 'Carol only')
    const res = await chat({ model: 'local-chat', messages: MESSAGES }, { key: carol })
    expect(res.status).toBe(200)
    expect((await chargedTo(res.body.request_id)).map((r) => r.workspace_id)).toEqual([only])
  })

  test('a readonly member gets 403 on chat, embeddings and rerank (nothing charged); a user member 200', async () => {
    for (const [name, path, body] of calls) {
      const ro = await h.call('POST', path, { key: reader, headers: { 'x-workspace-id': ws2 }, body: body({}) })
      expect({ name, status: ro.status, code: ro.body.error?.code }).toEqual({ name, status: 403, code: 'forbidden' })
      expect(await chargedTo(ro.body.request_id)).toEqual([])
      const ok = await h.call('POST', path, { key: alice, headers: { 'x-workspace-id': ws2 }, body: body({}) })
      expect({ name, status: ok.status }).toEqual({ name, status: 200 })
    }
    const stream = await h.call('POST', '/v1/models/llm/chat', { key: reader, body: { model: 'local-chat', messages: MESSAGES, stream: true, workspace_id: ws2 } })
    expect(stream.status).toBe(403)
    const dropIn = await h.call('POST', '/v1/chat/completions', { key: reader, headers: { 'x-workspace-id': ws2 }, body: { model: 'local-chat', messages: MESSAGES } })
    expect(dropIn.status).toBe(403)
    // Reading the catalogue is allowed.
    expect((await h.call('GET', '/v1/models', { key: reader })).status).toBe(200)
  })

  test('another workspace\'s id answers 404, by header or body', async () => {
    const stranger = await keyFor(h, 'mh-stranger')
    await workspaceOf(h, stranger, 'Stranger')
    for (const [name, path, body] of calls) {
      const byHeader = await h.call('POST', path, { key: stranger, headers: { 'x-workspace-id': ws }, body: body({}) })
      expect({ name, status: byHeader.status, code: byHeader.body.error?.code }).toEqual({ name, status: 404, code: 'not_found' })
      const byBody = await h.call('POST', path, { key: stranger, body: body({ workspace_id: ws }) })
      expect({ name, status: byBody.status }).toEqual({ name, status: 404 })
    }
    // A key restricted to ws2 cannot name ws (alice is a member of both).
    const res = await h.call('POST', '/v1/models/llm/chat', { key: restricted, headers: { 'x-workspace-id': ws }, body: { model: 'local-chat', messages: MESSAGES } })
    expect([403, 404]).toContain(res.status)
  })
})
