import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { rmSync } from 'node:fs'
import type { Socket, TCPSocketListener } from 'bun'
import { context, propagation, ROOT_CONTEXT, trace, TraceFlags } from '@opentelemetry/api'
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks'
import { W3CTraceContextPropagator } from '@opentelemetry/core'
import pino from 'pino'
import { closeMcpClients } from '../../src/domain/agents/mcp-client'
import { pricedLlm } from '../helpers/agents'
import { startFakeProvider, writeModelsFile, type FakeProvider, type FakeRequest } from '../helpers/fake-provider'
import { keyFor, startHarness, workspaceOf, type Answer, type Harness } from '../helpers/harness'
import { expectError } from '../helpers/knowledge'
import { startMcpServer, TOOLS, type McpTestServer } from '../helpers/mcp-server'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Agents' `mcp` tools (docs/agents.md, "MCP tools") through the real app against a loopback model
 * provider (a catalogue model per test, upstream `<id>-up`) and loopback MCP servers built with the
 * SDK's server side. MCP_CALL_TIMEOUT_MS is short so the slow tool times out. A second harness keeps
 * the default SSRF rules (https only, no private addresses); a raw TCP listener proves that nothing
 * connected where the rules refuse.
 */

const PRICING = { input_per_1k: 1, output_per_1k: 2 }
const LLMS = ['text', 'structured', 'stream', 'slow', 'errors', 'allowed', 'cache', 'secret', 'down', 'died', 'trace', 'guard', 'forgot', 'masked']
const SECRET = 'Bearer crm-secret-7f3a9c'
const CALL_TIMEOUT_MS = 1_000

let h: Harness
let strict: Harness
let fake: FakeProvider
let mcp: McpTestServer
let dir: string
let key: string
let ws: string
let strictKey: string
let strictWs: string

beforeAll(async () => {
  fake = await startFakeProvider()
  mcp = await startMcpServer()
  let file: string
  ;({ dir, file } = writeModelsFile('ap-agents-mcp-', {
    providers: [{ id: 'fake', kind: 'openai', base_url: fake.baseUrl, api_key: 'sk-fake', timeout_ms: 10_000 }],
    models: LLMS.map((id) => pricedLlm(id, 'fake', PRICING)),
  }))
  const env = { MODELS_FILE: file, RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000', MCP_CALL_TIMEOUT_MS: String(CALL_TIMEOUT_MS) }
  h = await startHarness({ ...env, WEBHOOK_ALLOW_HTTP: 'true', WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' })
  key = await keyFor(h, 'mcp-owner')
  ws = await workspaceOf(h, key, 'MCP tools')
  strict = await startHarness(env)
  strictKey = await keyFor(strict, 'mcp-strict')
  strictWs = await workspaceOf(strict, strictKey, 'Strict')
}, 60_000)

afterAll(async () => {
  await closeMcpClients()
  await h?.close()
  await strict?.close()
  await mcp?.close()
  await fake?.close()
  if (dir) rmSync(dir, { recursive: true, force: true })
})

let seq = 0
const crm = (over: Record<string, unknown> = {}) => ({ type: 'mcp', name: 'crm', server_url: mcp.url, headers: { Authorization: SECRET }, ...over })

function postAgent(body: Record<string, unknown>, on: { h: Harness; key: string; ws: string } = { h, key, ws }): Promise<Answer> {
  return on.h.call('POST', '/v1/agents', { key: on.key, body: { workspace_id: on.ws, name: `MCP agent ${++seq}`, type: 'agent', ...body } })
}

async function agent(body: Record<string, unknown>): Promise<string> {
  const res = await postAgent(body)
  if (res.status !== 201) throw new Error(`could not create an agent: ${res.status} ${res.text}`)
  return res.body.data.id
}

const chat = (agentId: string, message: string, opts: { on?: Harness; key?: string; headers?: Record<string, string>; stream?: boolean } = {}) =>
  (opts.on ?? h).call('POST', `/v1/agents/${agentId}/chat`, { key: opts.key ?? key, headers: opts.headers, body: { user_id: 'end-user-1', message, ...(opts.stream ? { stream: true } : {}) } })

const sent = (upstream: string): FakeRequest[] => fake.requests.filter((r) => r.model === upstream)
const offered = (r: FakeRequest): string[] => (r.json.tools ?? []).map((t: any) => t.function.name)
const toolMessages = (r: FakeRequest) => r.json.messages.filter((m: any) => m.role === 'tool').map((m: any) => ({ id: m.tool_call_id, output: JSON.parse(m.content) }))
const call = (name: string, args: Record<string, unknown>, id?: string) => ({ ...(id ? { id } : {}), name, arguments: args })

async function messagesOf(conversationId: string): Promise<any[]> {
  const res = await h.call('GET', `/v1/conversations/${conversationId}?sort=created_at&limit=100`, { key })
  expect(res.status).toBe(200)
  return res.body.data.messages
}

const rawTools = async (on: Harness, id: string) => (await on.deps.db.sql<{ tools: string }[]>`select tools::text as tools from agents where id = ${id}`)[0]!.tools

describe('calls reach the server and their results the model', () => {
  test('a text result goes back to the model; the answer and the stored message carry the call', async () => {
    const id = await agent({ model: 'text', tools: [crm()] })
    fake.script('text-up', [{ toolCalls: [call('crm__lookup', { id: '42' })] }, { text: 'Record 42 is open.' }])
    const before = mcp.requests.length
    const res = await chat(id, 'Is record 42 open?')
    expect(res.status).toBe(200)
    expect(res.body.message).toEqual({ role: 'assistant', content: 'Record 42 is open.' })
    expect(res.body.tool_calls).toEqual([{ tool: 'crm__lookup', input: { id: '42' }, duration_ms: expect.any(Number) }])

    const [first, next] = sent('text-up') as [FakeRequest, FakeRequest]
    expect(offered(first)).toEqual(TOOLS.map((t) => `crm__${t.name}`))
    const lookup = first.json.tools.find((t: any) => t.function.name === 'crm__lookup')
    expect(lookup.function).toEqual({ name: 'crm__lookup', description: 'Looks a record up by id', parameters: TOOLS[0]!.inputSchema })
    expect(toolMessages(next)).toEqual([{ id: 'call_fake_0', output: { text: 'record 42: status open' } }])

    const stored = (await messagesOf(res.body.conversation_id)).at(-1)
    expect(stored.tool_calls).toEqual([{ tool: 'crm__lookup', input: { id: '42' }, output: { text: 'record 42: status open' }, duration_ms: expect.any(Number) }])

    const calls = mcp.requests.slice(before).filter((r) => r.rpc.includes('tools/call'))
    expect(calls.map((r) => r.tool)).toEqual(['lookup'])
    expect(calls[0]!.headers.authorization).toBe(SECRET)
  })

  test('structured content goes back as JSON', async () => {
    const id = await agent({ model: 'structured', tools: [crm()] })
    fake.script('structured-up', [{ toolCalls: [call('crm__stats', { region: 'south' })] }, { text: '42 orders.' }])
    const res = await chat(id, 'How many orders in the south?')
    expect(res.status).toBe(200)
    const [tool] = toolMessages(sent('structured-up')[1]!)
    expect(tool.output).toEqual({ result: { region: 'south', orders: 42, revenue: 1234.5 } })
  })

  test('a stream tells tool_call and tool_result', async () => {
    const id = await agent({ model: 'stream', tools: [crm()] })
    fake.script('stream-up', [{ toolCalls: [call('crm__echo', { text: 'ping' })] }, { text: 'pong' }])
    const res = await chat(id, 'Echo ping', { stream: true, headers: { accept: 'text/event-stream' } })
    expect(res.status).toBe(200)
    const events = res.text.trim().split('\n\n').map((block) => {
      const [event, data] = block.split('\n')
      return { event: event!.slice('event: '.length), data: JSON.parse(data!.slice('data: '.length)) }
    })
    expect(events.filter((e) => e.event.startsWith('tool_'))).toEqual([
      { event: 'tool_call', data: { tool: 'crm__echo', input: { text: 'ping' } } },
      { event: 'tool_result', data: { output: { text: 'ping' }, duration_ms: expect.any(Number) } },
    ])
    expect(events.at(-1)).toEqual({ event: 'done', data: { finish_reason: 'stop' } })
  })
})

describe('failures are the tool\'s, not the turn\'s', () => {
  test('a call slower than MCP_CALL_TIMEOUT_MS is mcp_timeout and the turn still answers', async () => {
    const id = await agent({ model: 'slow', tools: [crm()] })
    fake.script('slow-up', [{ toolCalls: [call('crm__slow', { ms: 30_000 })] }, { text: 'The service is slow today.' }])
    const res = await chat(id, 'Take your time')
    expect(res.status).toBe(200)
    expect(res.body.message.content).toBe('The service is slow today.')
    const [tool] = toolMessages(sent('slow-up')[1]!)
    expect(tool.output.error.code).toBe('mcp_timeout')
    expect(tool.output.error.message).toContain(`${CALL_TIMEOUT_MS} ms`)
    // The SDK told the server it gave up (its handler then stops).
    expect(mcp.count('notifications/cancelled')).toBeGreaterThan(0)
  })

  test('a tool that throws and one answering isError are errors the model reads, side by side', async () => {
    const id = await agent({ model: 'errors', tools: [crm()] })
    fake.script('errors-up', [{ toolCalls: [call('crm__explode', {}), call('crm__refuse', { reason: 'quota exceeded' })] }, { text: 'Both failed.' }])
    const res = await chat(id, 'Try both')
    expect(res.status).toBe(200)
    const [exploded, refused] = toolMessages(sent('errors-up')[1]!)
    expect(exploded.output.error.code).toBe('mcp_error')
    expect(exploded.output.error.message).toContain('the lookup table is on fire')
    expect(refused.output).toEqual({ error: { code: 'tool_error', message: 'refused: quota exceeded' } })
    const stored = (await messagesOf(res.body.conversation_id)).at(-1)
    expect(stored.tool_calls.map((c: any) => c.output.error.code)).toEqual(['mcp_error', 'tool_error'])
  })

  test('a server that cannot be reached leaves its tools out of the turn (logged without its headers); the others stay', async () => {
    const gone = await startMcpServer()
    const url = gone.url
    await gone.close()
    const id = await agent({ model: 'down', tools: [crm(), { type: 'mcp', name: 'gone', server_url: url, headers: { 'X-Api-Key': 'gone-secret-55aa' } }] })
    fake.script('down-up', [{ text: 'Answered without it.' }])
    const lines: string[] = []
    const log = h.deps.log
    h.deps.log = pino({ level: 'warn' }, { write: (s: string) => void lines.push(s) })
    try {
      const res = await chat(id, 'Anything?')
      expect(res.status).toBe(200)
      expect(res.body.message.content).toBe('Answered without it.')
    } finally {
      h.deps.log = log
    }
    expect(offered(sent('down-up')[0]!)).toEqual(TOOLS.map((t) => `crm__${t.name}`))
    const warned = lines.map((l) => JSON.parse(l)).find((l) => l.tool === 'gone')
    // Named by its origin: the path or query of a server's URL may hold its token (docs/observability.md).
    expect(warned).toMatchObject({ agent_id: id, server_url: new URL(url).origin })
    expect(lines.join('\n')).not.toContain('gone-secret-55aa')
  })

  test('a session the server forgot (404) is opened again and the call goes through', async () => {
    const own = await startMcpServer()
    try {
      const id = await agent({ model: 'forgot', tools: [{ type: 'mcp', name: 'own', server_url: own.url }] })
      fake.script('forgot-up', [{ toolCalls: [call('own__lookup', { id: 'a' })] }, { text: 'one' }, { toolCalls: [call('own__lookup', { id: 'b' })] }, { text: 'two' }])
      expect((await chat(id, 'first')).status).toBe(200)
      await own.dropSessions()
      expect((await chat(id, 'second')).status).toBe(200)
      expect(toolMessages(sent('forgot-up')[3]!)[0].output).toEqual({ text: 'record b: status open' })
      expect(own.count('initialize')).toBe(2)
    } finally {
      await closeMcpClients()
      await own.close()
    }
  })

  test('a server gone after listing fails the call (mcp_unavailable), not the turn', async () => {
    const dying = await startMcpServer()
    const id = await agent({ model: 'died', tools: [{ type: 'mcp', name: 'dying', server_url: dying.url }] })
    fake.script('died-up', [{ toolCalls: [call('dying__lookup', { id: '1' })] }, { text: 'first' }, { toolCalls: [call('dying__lookup', { id: '2' })] }, { text: 'second' }])
    expect((await chat(id, 'One')).status).toBe(200)
    await dying.close()
    const res = await chat(id, 'Two')
    expect(res.status).toBe(200)
    expect(res.body.message.content).toBe('second')
    const requests = sent('died-up')
    expect(toolMessages(requests[1]!)[0].output).toEqual({ text: 'record 1: status open' })
    // The list was still cached: the tool was offered, and its call failed.
    expect(offered(requests[2]!)).toContain('dying__lookup')
    expect(toolMessages(requests[3]!)[0].output.error.code).toBe('mcp_unavailable')
  })
})

describe('lists, filters and the cache', () => {
  test('allowed_tools offers only those; another is an unknown tool', async () => {
    const id = await agent({ model: 'allowed', tools: [crm({ allowed_tools: ['stats', 'lookup'] })] })
    fake.script('allowed-up', [{ toolCalls: [call('crm__echo', { text: 'x' })] }, { text: 'No echo here.' }])
    const res = await chat(id, 'Echo x')
    expect(res.status).toBe(200)
    const [first, next] = sent('allowed-up') as [FakeRequest, FakeRequest]
    expect(offered(first)).toEqual(['crm__lookup', 'crm__stats'])
    expect(toolMessages(next)[0].output.error.code).toBe('unknown_tool')
  })

  test('the tool list is fetched once for two turns, on one session', async () => {
    const own = await startMcpServer()
    try {
      const id = await agent({ model: 'cache', tools: [{ type: 'mcp', name: 'own', server_url: own.url }] })
      fake.script('cache-up', [{ toolCalls: [call('own__lookup', { id: 'a' })] }, { text: 'one' }, { toolCalls: [call('own__lookup', { id: 'b' })] }, { text: 'two' }])
      expect((await chat(id, 'first')).status).toBe(200)
      expect((await chat(id, 'second')).status).toBe(200)
      expect({ initialize: own.count('initialize'), list: own.count('tools/list'), calls: own.count('tools/call') }).toEqual({ initialize: 1, list: 1, calls: 2 })
      expect(offered(sent('cache-up')[2]!)).toContain('own__lookup')
    } finally {
      await closeMcpClients()
      await own.close()
    }
  })
})

describe('headers are secrets', () => {
  test('answers show "***", the row holds them sealed, the server gets them, and "***" keeps them across a PATCH', async () => {
    const created = await postAgent({ model: 'secret', tools: [crm({ headers: { Authorization: SECRET, 'X-Tenant': 'acme-tenant-1' } })] })
    expect(created.status).toBe(201)
    const masked = { type: 'mcp', name: 'crm', server_url: mcp.url, headers: { Authorization: '***', 'X-Tenant': '***' } }
    expect(created.body.data.tools).toEqual([masked])
    expect(created.text).not.toContain('crm-secret')
    const id = created.body.data.id

    const got = await h.call('GET', `/v1/agents/${id}`, { key })
    expect(got.body.data.tools).toEqual([masked])
    expect(got.text).not.toContain('crm-secret')
    const listed = await h.call('GET', `/v1/agents?workspace_id=${ws}&limit=100`, { key })
    expect(listed.text).not.toContain('crm-secret')
    expect(listed.text).not.toContain('acme-tenant-1')

    const raw = await rawTools(h, id)
    expect(raw).not.toContain('crm-secret')
    expect(raw).not.toContain('acme-tenant-1')
    expect(JSON.parse(raw)[0].headers_sealed.Authorization).toMatch(/^v1\.[0-9a-f]{8}\./)

    // The GET answer sent back as it is keeps both values; the version goes up.
    const kept = await h.call('PATCH', `/v1/agents/${id}`, { key, body: { tools: got.body.data.tools, instructions: 'Be brief.' } })
    expect(kept.status).toBe(200)
    expect(kept.body.data.tools).toEqual([masked])
    expect(await rawTools(h, id)).toBe(raw)

    fake.script('secret-up', [{ toolCalls: [call('crm__lookup', { id: 's' })] }, { text: 'ok' }])
    const before = mcp.requests.length
    expect((await chat(id, 'Look s up')).status).toBe(200)
    const arrived = mcp.requests.slice(before).filter((r) => r.rpc.includes('tools/call'))
    expect(arrived.map((r) => [r.headers.authorization, r.headers['x-tenant']])).toEqual([[SECRET, 'acme-tenant-1']])

    // null keeps too; a new value replaces; a header left out is dropped.
    const changed = await h.call('PATCH', `/v1/agents/${id}`, { key, body: { tools: [crm({ headers: { Authorization: null, 'X-Region': 'eu' } })] } })
    expect(changed.status).toBe(200)
    expect(changed.body.data.tools[0].headers).toEqual({ Authorization: '***', 'X-Region': '***' })
    const after = JSON.parse(await rawTools(h, id))[0].headers_sealed
    expect(after.Authorization).toBe(JSON.parse(raw)[0].headers_sealed.Authorization)
    expect(Object.keys(after).sort()).toEqual(['Authorization', 'X-Region'])
  })

  test('a server that echoes the request\'s headers in its error: no value reaches the model, the conversation or the answer, however short', async () => {
    // Short values too: a 3-character key, a 1-character flag, a value inside another.
    const headers = { 'X-Key': 'Q7z', 'X-Flag': '%', Authorization: 'Bearer Q7z-and-more-9c1e' }
    const id = await agent({ model: 'masked', tools: [crm({ headers })] })
    fake.script('masked-up', [{ toolCalls: [call('crm__explode', { reveal: true })] }, { text: 'It failed.' }])
    const res = await chat(id, 'Explode, loudly')
    expect(res.status).toBe(200)
    const [exploded] = toolMessages(sent('masked-up').at(-1)!)
    expect(exploded.output.error.code).toBe('mcp_error')
    const message: string = exploded.output.error.message
    // The server did echo them (its own header names are there), and every value is masked.
    expect(message).toContain('the request had')
    expect(message).toContain('x-key')
    for (const value of Object.values(headers)) expect(message).not.toContain(value)
    expect(message).toContain('"x-key":"***"')
    expect(message).toContain('"authorization":"***"')
    const stored = JSON.stringify((await messagesOf(res.body.conversation_id)).at(-1))
    for (const value of ['Q7z', '%']) expect(stored).not.toContain(value)
  })

  test('a kept value needs a stored one of the same server_url; reserved and malformed headers are refused', async () => {
    const id = (await postAgent({ model: 'secret', tools: [crm()] })).body.data.id
    const elsewhere = await h.call('PATCH', `/v1/agents/${id}`, { key, body: { tools: [crm({ server_url: `${mcp.url}/other`, headers: { Authorization: '***' } })] } })
    expectError(elsewhere, 400, 'validation_error', 'tools[0].headers.Authorization')
    expect(elsewhere.body.error.message).toContain('same server_url')
    const nothing = await h.call('PATCH', `/v1/agents/${id}`, { key, body: { tools: [crm({ headers: { 'X-Other': '***' } })] } })
    expectError(nothing, 400, 'validation_error', 'tools[0].headers.X-Other')
    expectError(await postAgent({ model: 'secret', tools: [crm({ headers: { Authorization: '***' } })] }), 400, 'validation_error', 'tools[0].headers.Authorization')
    expectError(await postAgent({ model: 'secret', tools: [crm({ headers: { 'Mcp-Session-Id': 'x' } })] }), 400, 'validation_error', 'tools[0].headers.Mcp-Session-Id')
    expectError(await postAgent({ model: 'secret', tools: [crm({ headers: { 'X-A': 'a', 'x-a': 'b' } })] }), 400, 'validation_error')
    expectError(await postAgent({ model: 'secret', tools: [crm({ headers: { 'X-A': 'a\r\nInjected: 1' } })] }), 400, 'validation_error', 'tools[0].headers.X-A')
    expectError(await postAgent({ model: 'secret', tools: [crm({ headers: { 'Bad Name': 'x' } })] }), 400, 'validation_error')
    // Unchanged by the refusals.
    expect((await h.call('GET', `/v1/agents/${id}`, { key })).body.data.version).toBe(1)
  })

  test('names: an mcp name is unique and owns the <name>__ prefix', async () => {
    expectError(await postAgent({ model: 'secret', tools: [crm(), crm({ server_url: `${mcp.url}/2` })] }), 400, 'validation_error', 'tools[1].name')
    const http = { type: 'http', name: 'crm__lookup', description: 'Shadows a tool of crm', method: 'GET', url: 'https://example.com/x', parameters: { type: 'object' } }
    expectError(await postAgent({ model: 'secret', tools: [crm(), http] }), 400, 'validation_error', 'tools[1].name')
    expectError(await postAgent({ model: 'secret', tools: [crm({ name: 'a'.repeat(33) })] }), 400, 'validation_error')
  })
})

describe('trace context', () => {
  test('a call inside an active span carries its traceparent to the server', async () => {
    const manager = new AsyncLocalStorageContextManager().enable()
    context.setGlobalContextManager(manager)
    propagation.setGlobalPropagator(new W3CTraceContextPropagator())
    try {
      const id = await agent({ model: 'trace', tools: [crm()] })
      fake.script('trace-up', [{ toolCalls: [call('crm__lookup', { id: 't' })] }, { text: 'traced' }])
      const traceId = '4bf92f3577b34da6a3ce929d0e0e4736'
      const span = trace.setSpanContext(ROOT_CONTEXT, { traceId, spanId: '00f067aa0ba902b7', traceFlags: TraceFlags.SAMPLED, isRemote: true })
      const before = mcp.requests.length
      const res = await context.with(span, () => chat(id, 'Trace me'))
      expect(res.status).toBe(200)
      const [arrived] = mcp.requests.slice(before).filter((r) => r.rpc.includes('tools/call'))
      expect(arrived!.headers.traceparent).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`))
    } finally {
      propagation.disable()
      context.disable()
    }
  })
})

describe('the SSRF rules (default: https only, no private addresses)', () => {
  const on = () => ({ h: strict, key: strictKey, ws: strictWs })

  test.each([
    ['http:// without WEBHOOK_ALLOW_HTTP', 'http://mcp.example.com/mcp'],
    ['a loopback address', 'https://127.0.0.1:8443/mcp'],
    ['an IPv6 loopback', 'https://[::1]/mcp'],
    ['a private address', 'https://10.1.2.3/mcp'],
    ['localhost', 'https://localhost/mcp'],
    ['a reserved (TEST-NET) address', 'https://203.0.113.5/mcp'],
    ['credentials in the URL', 'https://user:pw@mcp.example.com/mcp'],
  ])('%s is refused at save (400)', async (_, url) => {
    expectError(await postAgent({ model: 'guard', tools: [{ type: 'mcp', name: 'inside', server_url: url }] }, on()), 400, 'validation_error', 'tools[0].server_url')
  })

  test('a stored URL the rules refuse now is never connected to: its tools are not offered', async () => {
    let connections = 0
    const listener: TCPSocketListener<undefined> = Bun.listen({
      hostname: '127.0.0.1',
      port: 0,
      socket: { open: (s: Socket<undefined>) => void (connections++, s.end()), data: () => {} },
    })
    try {
      const id = (await postAgent({ model: 'guard', tools: [] }, on())).body.data.id
      // As saved while WEBHOOK_ALLOW_PRIVATE_NETWORKS was on: the rules apply again at each connection.
      const tools = [
        { type: 'mcp', name: 'loop', server_url: `https://127.0.0.1:${listener.port}/mcp` },
        { type: 'mcp', name: 'named', server_url: `https://localhost:${listener.port}/mcp` },
        { type: 'mcp', name: 'testnet', server_url: 'https://203.0.113.5/mcp' },
      ]
      await strict.deps.db.sql`update agents set tools = ${strict.deps.db.sql.json(tools as never)} where id = ${id}`
      fake.script('guard-up', [{ text: 'Nothing to call.' }])
      const lines: string[] = []
      const log = strict.deps.log
      strict.deps.log = pino({ level: 'warn' }, { write: (s: string) => void lines.push(s) })
      try {
        const res = await chat(id, 'Reach inside', { on: strict, key: strictKey })
        expect(res.status).toBe(200)
        expect(res.body.message.content).toBe('Nothing to call.')
      } finally {
        strict.deps.log = log
      }
      expect(sent('guard-up')).toHaveLength(1)
      expect(sent('guard-up')[0]!.json.tools).toBeUndefined()
      expect(connections).toBe(0)
      // Each was refused by the address check, which comes before any connection (TEST-NET included).
      const warned = lines.map((l) => JSON.parse(l))
      for (const name of ['loop', 'named', 'testnet']) expect(warned.find((l) => l.tool === name)?.reason).toMatch(/non-public address/)
    } finally {
      listener.stop(true)
    }
  })
})
