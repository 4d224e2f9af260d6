import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { rmSync } from 'node:fs'
import type { Server } from 'bun'
import { startFakeProvider, writeModelsFile, type FakeProvider, type Reply } from '../helpers/fake-provider'
import { pricedLlm } from '../helpers/agents'
import { keyFor, startHarness, waitFor, workspaceOf, type Answer, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Streamed agent chat (docs/agents.md: `stream: true` with `Accept: text/event-stream`) through the real
 * app against a loopback model provider (a catalogue model per test, upstream `<id>-up`) and a
 * loopback HTTP receiver for the `http` tool. The disconnect case goes through a real HTTP server.
 */

const PRICING = { input_per_1k: 1, output_per_1k: 2 }
const LLMS = ['frame', 'serr', 'sdrop', 'slow', 'replay']
/** The disconnect case: 200 chunks 20 ms apart, ~4 s if nobody left. */
const SLOW_WORDS = Array.from({ length: 200 }, (_, i) => `w${i} `)

let h: Harness
let fake: FakeProvider
let receiver: Server<undefined>
let base: string
let dir: string
let key: string
let ws: string

beforeAll(async () => {
  fake = await startFakeProvider()
  let file: string
  ;({ dir, file } = writeModelsFile('ap-agents-stream-', {
    providers: [{ id: 'fake', kind: 'openai', base_url: fake.baseUrl, api_key: 'sk-fake', timeout_ms: 10_000 }],
    models: LLMS.map((id) => pricedLlm(id, 'fake', PRICING)),
  }))
  receiver = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    fetch: (req) => Response.json({ order: new URL(req.url).pathname.split('/').at(-1), state: 'shipped' }),
  })
  base = `http://127.0.0.1:${receiver.port}`
  h = await startHarness({ MODELS_FILE: file, RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000', WEBHOOK_ALLOW_HTTP: 'true', WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' })
  key = await keyFor(h, 'as-owner')
  ws = await workspaceOf(h, key, 'Agents stream')
})

afterAll(async () => {
  await h?.close()
  await fake?.close()
  receiver?.stop(true)
  if (dir) rmSync(dir, { recursive: true, force: true })
})

let agentSeq = 0
async function agent(model: string, tools: unknown[] = []): Promise<string> {
  const res = await h.call('POST', '/v1/agents', { key, body: { workspace_id: ws, name: `Streamer ${++agentSeq}`, type: 'agent', model, tools } })
  if (res.status !== 201) throw new Error(`could not create an agent: ${res.status} ${res.text}`)
  return res.body.data.id
}

const SSE = { accept: 'text/event-stream' }
const streamBody = (message: string) => ({ message, user_id: 'end-user-1', stream: true })
const stream = (agentId: string, message: string, headers: Record<string, string> = {}) =>
  h.call('POST', `/v1/agents/${agentId}/chat`, { key, headers: { ...SSE, ...headers }, body: streamBody(message) })

interface Ev {
  event: string
  data: any
}

/** Strict framing: each event an `event:` line and one `data:` line of JSON, a blank line after it. */
function parseSse(res: Answer): Ev[] {
  expect(res.status).toBe(200)
  expect(res.headers.get('content-type')).toStartWith('text/event-stream')
  expect(res.text.endsWith('\n\n')).toBe(true)
  return res.text.slice(0, -2).split('\n\n').map((block) => {
    const lines = block.split('\n')
    expect(lines).toHaveLength(2)
    expect(lines[0]).toMatch(/^event: [a-z_]+$/)
    expect(lines[1]).toStartWith('data: ')
    return { event: lines[0]!.slice('event: '.length), data: JSON.parse(lines[1]!.slice('data: '.length)) }
  })
}

const deltas = (events: Ev[]) => events.filter((e) => e.event === 'message').map((e) => e.data.delta).join('')

async function messagesOf(conversationId: string): Promise<any[]> {
  const res = await h.call('GET', `/v1/conversations/${conversationId}?sort=created_at&limit=100`, { key })
  expect(res.status).toBe(200)
  return res.body.data.messages
}

const sent = (upstream: string) => fake.requests.filter((r) => r.model === upstream)
const ledgerOf = async (requestId: string) => (await h.deps.models.charges.flush(), h.deps.db.sql<{ tokens_out: number; credits: string }[]>`select tokens_out, credits::text as credits from credit_ledger where request_id = ${requestId}`)

describe('framing', () => {
  test('tool_call then tool_result for a tool round, message deltas that add up to the answer, usage then done last, X-Conversation-Id', async () => {
    const id = await agent('frame', [{
      type: 'http', name: 'order_status', description: 'The state of an order', method: 'GET', url: `${base}/orders/{order_id}`,
      parameters: { type: 'object', properties: { order_id: { type: 'string' } }, required: ['order_id'] },
    }])
    fake.script('frame-up', [
      { toolCalls: [{ name: 'order_status', arguments: { order_id: '42' } }] },
      { text: 'Order 42 has shipped.', chunks: ['Order ', '42 ', 'has ', 'shipped.'] },
    ])
    const res = await stream(id, 'Where is order 42?')
    const events = parseSse(res)
    expect(events.map((e) => e.event)).toEqual(['tool_call', 'tool_result', 'message', 'message', 'message', 'message', 'usage', 'done'])
    expect(events[0]!.data).toEqual({ tool: 'order_status', input: { order_id: '42' } })
    const result = events[1]!.data
    expect(Object.keys(result).sort()).toEqual(['duration_ms', 'output'])
    expect(Number.isInteger(result.duration_ms)).toBe(true)
    expect(result.output).toMatchObject({ status: 200, body: { order: '42', state: 'shipped' } })
    expect(events.filter((e) => e.event === 'message').map((e) => e.data)).toEqual([{ delta: 'Order ' }, { delta: '42 ' }, { delta: 'has ' }, { delta: 'shipped.' }])
    expect(deltas(events)).toBe('Order 42 has shipped.')
    const usage = events.at(-2)!.data
    expect(Object.keys(usage).sort()).toEqual(['credits', 'tokens_in', 'tokens_out'])
    expect(usage.tokens_in).toBeGreaterThan(0)
    expect(usage.credits).toBeGreaterThan(0)
    expect(events.at(-1)!.data).toEqual({ finish_reason: 'stop' })
    // The tool's output went back to the model.
    const toolMsg = sent('frame-up')[1]!.json.messages.find((m: any) => m.role === 'tool')
    expect(JSON.parse(toolMsg.content)).toEqual(result.output)
    const conversation = res.headers.get('x-conversation-id')!
    expect(conversation).toMatch(/^conv_/)
    const stored = await messagesOf(conversation)
    expect(stored.map((m) => [m.role, m.content, m.finish_reason])).toEqual([['user', 'Where is order 42?', null], ['assistant', 'Order 42 has shipped.', 'stop']])
    expect(stored[1].usage).toEqual(usage)
    expect(stored[1].tool_calls).toEqual([{ tool: 'order_status', input: { order_id: '42' }, output: result.output, duration_ms: result.duration_ms }])
  })
})

describe('failures', () => {
  test.each([
    // Every chunk, then an error event in the stream.
    { model: 'serr', step: { chunks: ['Partial ', 'answer ', 'so ', 'far'], streamError: 'server_error' } as Reply, partial: 'Partial answer so far' },
    // The role chunk and two pieces, then the connection is reset.
    { model: 'sdrop', step: { chunks: ['Partial ', 'answer ', 'so ', 'far'], drop: 3 } as Reply, partial: 'Partial answer ' },
  ])('the provider stream fails mid-way ($model): the deltas so far, an error event last, the partial answer stored with finish_reason error', async ({ model, step, partial }) => {
    const id = await agent(model)
    fake.script(`${model}-up`, [step])
    const res = await stream(id, 'Tell me everything')
    const events = parseSse(res)
    expect(events.slice(0, -1).every((e) => e.event === 'message')).toBe(true)
    expect(deltas(events)).toBe(partial)
    const last = events.at(-1)!
    expect(last.event).toBe('error')
    expect(Object.keys(last.data).sort()).toEqual(['error', 'request_id'])
    expect(last.data.request_id).toBe(res.headers.get('x-request-id')!)
    expect(last.data.error.code).toBe('upstream_error')
    expect(typeof last.data.error.message).toBe('string')
    const stored = (await waitFor(async () => {
      const messages = await messagesOf(res.headers.get('x-conversation-id')!)
      return messages.length === 2 ? messages : null
    }, { what: 'the partial answer to be stored' }))!
    expect(stored[1]).toMatchObject({ role: 'assistant', content: partial, finish_reason: 'error' })
    // What the model produced is charged.
    const rows = await ledgerOf(last.data.request_id)
    expect(rows).toHaveLength(1)
    expect(rows[0]!.tokens_out).toBeGreaterThan(0)
  })

  test('the client leaves mid-stream: the partial answer is stored with finish_reason client_closed, the upstream closed', async () => {
    const id = await agent('slow')
    fake.script('slow-up', [{ chunks: SLOW_WORDS, delayMs: 20 }])
    const server: Server<undefined> = Bun.serve({ hostname: '127.0.0.1', port: 0, idleTimeout: 0, fetch: (r) => h.app.handle(r) })
    try {
      const ctl = new AbortController()
      const res = await fetch(`http://127.0.0.1:${server.port}/v1/agents/${id}/chat`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...SSE },
        body: JSON.stringify(streamBody('Count slowly')),
        signal: ctl.signal,
      })
      expect(res.status).toBe(200)
      const conversation = res.headers.get('x-conversation-id')!
      expect(conversation).toMatch(/^conv_/)
      const reader = res.body!.getReader()
      const decoder = new TextDecoder()
      let received = ''
      while ((received.match(/event: message\n/g) ?? []).length < 3) {
        const { value, done } = await reader.read()
        expect(done).toBe(false)
        received += decoder.decode(value, { stream: true })
      }
      ctl.abort()
      await reader.cancel().catch(() => {})
      const seenDeltas = [...received.matchAll(/event: message\ndata: (.*)\n\n/g)].map((m) => JSON.parse(m[1]!).delta).join('')
      const stored = await waitFor(async () => {
        const messages = await messagesOf(conversation)
        return messages.length === 2 ? messages[1] : null
      }, { what: 'the partial answer to be stored' })
      expect(stored.finish_reason).toBe('client_closed')
      expect(stored.content).toStartWith(seenDeltas)
      expect(stored.content.length).toBeGreaterThan(0)
      expect(stored.content.length).toBeLessThan(SLOW_WORDS.join('').length)
      expect(SLOW_WORDS.join('')).toStartWith(stored.content)
      await waitFor(() => sent('slow-up')[0]!.closed, { what: 'the upstream stream to be closed' })
    } finally {
      await server.stop(true)
    }
  })
})

describe('idempotency', () => {
  test('a streamed chat replayed with its Idempotency-Key: the same text byte for byte, one provider call, one turn stored', async () => {
    const id = await agent('replay')
    fake.script('replay-up', [{ text: 'Said only once, streamed.' }])
    const headers = { 'idempotency-key': `stream-${crypto.randomUUID()}` }
    const first = await stream(id, 'Say it once', headers)
    const events = parseSse(first)
    expect(events.at(-1)).toEqual({ event: 'done', data: { finish_reason: 'stop' } })
    expect(first.headers.get('idempotent-replayed')).toBeNull()
    // The record is written as the stream ends: until then the key is in use (409), and a client retries.
    const again = (await waitFor(async () => {
      const r = await stream(id, 'Say it once', headers)
      return r.status === 409 ? null : r
    }, { what: 'the replay of the stream' }))!
    expect(again.status).toBe(200)
    expect(again.headers.get('idempotent-replayed')).toBe('true')
    expect(again.headers.get('content-type')).toStartWith('text/event-stream')
    expect(again.text).toBe(first.text)
    expect(sent('replay-up')).toHaveLength(1)
    const conversation = first.headers.get('x-conversation-id')!
    expect((await messagesOf(conversation)).map((m) => [m.role, m.content])).toEqual([['user', 'Say it once'], ['assistant', 'Said only once, streamed.']])
    const convs = await h.call('GET', `/v1/agents/${id}/conversations?user_id=end-user-1`, { key })
    expect(convs.body.data.map((c: any) => c.id)).toEqual([conversation])
  })

  // X-Conversation-Id is the only place a stream names its conversation, so the replay keeps it.
  test('the replayed stream names its conversation in X-Conversation-Id, as the first answer did', async () => {
    const id = await agent('replay')
    const headers = { 'idempotency-key': `stream-${crypto.randomUUID()}` }
    const first = await stream(id, 'Which conversation?', headers)
    expect(first.status).toBe(200)
    const again = (await waitFor(async () => {
      const r = await stream(id, 'Which conversation?', headers)
      return r.status === 409 ? null : r
    }, { what: 'the replay of the stream' }))!
    expect(again.headers.get('idempotent-replayed')).toBe('true')
    expect(again.headers.get('x-conversation-id')).toBe(first.headers.get('x-conversation-id'))
  })
})
