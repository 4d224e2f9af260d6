import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import type { Server } from 'bun'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { McpError, type CallToolResult } from '@modelcontextprotocol/sdk/types.js'
import { ChatBody } from '../../src/routes/agents.model'
import { SearchBody } from '../../src/routes/knowledge.model'
import { TriggerBody } from '../../src/routes/runs.model'
import { startWorkers, type Workers } from '../../src/workers'
import { createAgent, createWorkflow } from '../helpers/agents'
import { keyFor, startHarness, workspaceOf, type Harness } from '../helpers/harness'
import { createKb, settled, uploadText } from '../helpers/knowledge'
import { lintSchema, lintTools } from '../helpers/mcp-schema-lint'
import { chain, end, start } from '../helpers/runs'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The service as an MCP server (docs/mcp.md), driven by the official MCP SDK's own client over a real
 * HTTP listener on loopback: the app and its workers in-process on this mode's database and Redis
 * (embedded, or server Postgres and Redis when DATABASE_URL and REDIS_URL are set).
 */
let h: Harness
let workers: Workers
let listener: Server<undefined>
let url: string
const clients: Client[] = []

/** Workspace A: its owner, a readonly member and a member of role user; B: another owner's. */
let owner: string
let reader: string
let user: string
let outsider: string
let wsA: string
let wsB: string
let kbA: string
let docA: string
let wfA: string
let agentA: string
let kbB: string
let wfB: string
let agentB: string

beforeAll(async () => {
  h = await startHarness({ RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000' })
  workers = await startWorkers(h.deps)
  listener = Bun.serve({ hostname: '127.0.0.1', port: 0, fetch: (request) => h.app.handle(request) })
  url = `http://127.0.0.1:${listener.port}/v1/mcp`
  ;[owner, reader, user, outsider] = (await Promise.all(['mcp-owner', 'mcp-reader', 'mcp-user', 'mcp-outsider'].map((u) => keyFor(h, u)))) as [string, string, string, string]
  wsA = await workspaceOf(h, owner, 'MCP A')
  wsB = await workspaceOf(h, outsider, 'MCP B')
  for (const [userId, role] of [['mcp-reader', 'readonly'], ['mcp-user', 'user']]) {
    const added = await h.call('POST', `/v1/workspaces/${wsA}/members`, { key: owner, body: { user_id: userId, role } })
    expect(added.status).toBe(201)
  }
  kbA = (await createKb(h, owner, { workspace_id: wsA, name: 'Policies' })).id
  docA = await uploadText(h, owner, kbA, { name: 'returns.md', content: '# Returns\n\nRefunds take five business days after the parcel arrives at our warehouse.', metadata: { topic: 'returns' } })
  await uploadText(h, owner, kbA, { name: 'office.md', content: '# Office\n\nOur office is in Lisbon and opens at nine.', metadata: { topic: 'office' } })
  wfA = await createWorkflow(h, owner, wsA)
  agentA = (await createAgent(h, owner, wsA)).id
  kbB = (await createKb(h, outsider, { workspace_id: wsB, name: 'Secrets' })).id
  wfB = await createWorkflow(h, outsider, wsB)
  agentB = (await createAgent(h, outsider, wsB)).id
  expect((await settled(h, owner, docA)).status).toBe('ready')
}, 60_000)

afterAll(async () => {
  await Promise.all(clients.map((c) => c.close()))
  listener?.stop(true)
  await workers?.stop()
  await h?.close()
})

/** An SDK client connected (initialize done) with `key` as its bearer token. */
async function connect(key: string, headers: Record<string, string> = {}): Promise<Client> {
  const client = new Client({ name: 'mcp-server-test', version: '1.0.0' })
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { Authorization: `Bearer ${key}`, ...headers } } }))
  clients.push(client)
  return client
}

const clientOf = new Map<string, Promise<Client>>()
/** One connected client per key, shared by the tests. */
const as = (key: string) => {
  let c = clientOf.get(key)
  if (!c) clientOf.set(key, (c = connect(key)))
  return c
}

async function call(key: string, name: string, args: Record<string, unknown>): Promise<CallToolResult & { structuredContent: any }> {
  return (await (await as(key)).callTool({ name, arguments: args })) as CallToolResult & { structuredContent: any }
}

/** A tool result that must have succeeded: its structuredContent. */
async function ok(key: string, name: string, args: Record<string, unknown>): Promise<any> {
  const r = await call(key, name, args)
  if (r.isError) throw new Error(`${name} failed: ${JSON.stringify(r.content)}`)
  // The text content carries the same answer, for clients that read only text.
  expect(JSON.parse((r.content[0] as { text: string }).text)).toEqual(r.structuredContent)
  return r.structuredContent
}

/** A tool result that must have failed: its error body ({ request_id, error: { code, message, param? } }). */
async function refused(key: string, name: string, args: Record<string, unknown>): Promise<{ code: string; message: string; param?: string }> {
  const r = await call(key, name, args)
  expect(r.isError).toBe(true)
  expect(r.structuredContent.request_id).toMatch(/^req_/)
  expect((r.content[0] as { text: string }).text).toStartWith(`${r.structuredContent.error.code}: `)
  return r.structuredContent.error
}

/** One JSON-RPC message POSTed as is (no SDK), for what the SDK client never sends (a repeated id). */
async function rpc(key: string | null, message: unknown, headers: Record<string, string> = {}): Promise<{ status: number; headers: Headers; body: any }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { ...(key === null ? {} : { authorization: `Bearer ${key}` }), 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
    body: JSON.stringify(message),
  })
  const text = await res.text()
  return { status: res.status, headers: res.headers, body: text ? JSON.parse(text) : null }
}

const toolCall = (id: number | string, name: string, args: Record<string, unknown>) => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args } })

async function runsOf(workflowId: string): Promise<any[]> {
  const res = await h.call('GET', `/v1/workflows/${workflowId}/runs?limit=100`)
  expect(res.status).toBe(200)
  return res.body.data
}

async function messagesOf(conversationId: string): Promise<any[]> {
  const res = await h.call('GET', `/v1/conversations/${conversationId}?sort=created_at&limit=100`)
  expect(res.status).toBe(200)
  return res.body.data.messages
}

describe('tools/list', () => {
  test('four tools whose input schemas are the REST models (path id beside the body)', async () => {
    const { tools } = await (await as(owner)).listTools()
    const byName = Object.fromEntries(tools.map((t) => [t.name, t]))
    expect(Object.keys(byName).sort()).toEqual(['chat_with_agent', 'list_resources', 'run_workflow', 'search_knowledge'])
    const keys = (name: string) => Object.keys(byName[name]!.inputSchema.properties ?? {}).sort()
    expect(keys('search_knowledge')).toEqual(['knowledge_base_id', ...Object.keys(SearchBody.properties)].sort())
    expect(keys('run_workflow')).toEqual(['workflow_id', ...Object.keys(TriggerBody.properties)].sort())
    expect(keys('chat_with_agent')).toEqual(['agent_id', ...Object.keys(ChatBody.properties).filter((k) => k !== 'stream')].sort())
    expect(keys('list_resources')).toEqual(['cursor', 'limit', 'type', 'workspace_id'])
    expect(byName.search_knowledge!.inputSchema.required).toEqual(['knowledge_base_id', 'query'])
    expect(byName.run_workflow!.inputSchema.required).toEqual(['workflow_id'])
    expect(byName.chat_with_agent!.inputSchema.required).toEqual(['agent_id', 'message'])
    expect(byName.list_resources!.inputSchema.required).toEqual(['type'])
    for (const t of tools) {
      expect(t.inputSchema.type).toBe('object')
      expect((t.inputSchema as { additionalProperties?: unknown }).additionalProperties).toBe(false)
      expect(t.description!.length).toBeGreaterThan(40)
      expect(t.annotations?.readOnlyHint).toBe(t.name === 'search_knowledge' || t.name === 'list_resources')
    }
    // The REST model's limits, and an integer that is only an integer.
    expect(byName.search_knowledge!.inputSchema.properties!.top_k).toMatchObject({ type: 'integer', minimum: 1, maximum: 100 })
    expect(byName.search_knowledge!.inputSchema.properties!.query).toMatchObject({ type: 'string', minLength: 1, maxLength: 8000 })
    expect((byName.list_resources!.inputSchema.properties!.type as { enum: string[] }).enum).toEqual(['agents', 'workflows', 'knowledge_bases'])
  })

  test('the input schemas pass the MCP Inspector\'s --strict rules: no error and no warning', async () => {
    const { tools } = await (await as(owner)).listTools()
    expect(lintTools(tools)).toEqual([])
    // What a free-form value (workflow inputs, search filters) is announced as: any JSON value, each kind typed.
    const inputs = (tools.find((t) => t.name === 'run_workflow')!.inputSchema.properties!.inputs as { patternProperties: Record<string, { anyOf: { type: string }[] }> })
    expect(Object.values(inputs.patternProperties)[0]!.anyOf.map((a) => a.type)).toEqual(['string', 'number', 'boolean', 'object', 'array', 'null'])
  })

  test('those rules find what --strict reports (the check above is not vacuous)', () => {
    expect(lintSchema({ type: 'object', properties: { a: {}, b: true, c: { type: ['string', 'null'] }, d: { $ref: 'https://example.com/s.json' }, e: { description: 'anything' } }, additionalProperties: false }).map((f) => `${f.path} ${f.rule}`)).toEqual([
      'inputSchema.properties.a untyped-schema',
      'inputSchema.properties.b boolean-schema',
      'inputSchema.properties.c type-union',
      'inputSchema.properties.d remote-ref',
      'inputSchema.properties.e untyped-schema',
    ])
    expect(lintSchema({ type: 'object', patternProperties: { '^(.*)$': {} } })).toEqual([{ rule: 'untyped-schema', severity: 'warning', path: 'inputSchema.patternProperties.^(.*)$' }])
    expect(lintSchema({ type: 'object', additionalProperties: true, properties: { n: { not: {} } } })).toEqual([])
  })

  test('the server names itself and offers tools only', async () => {
    const client = await as(owner)
    expect(client.getServerVersion()).toMatchObject({ name: 'agent-platform-api' })
    expect(client.getServerCapabilities()).toEqual({ tools: { listChanged: false } })
    expect(await client.ping()).toEqual({})
  })
})

describe('each tool, for real', () => {
  test('search_knowledge finds the ready document, with the REST search\'s answer', async () => {
    const out = await ok(owner, 'search_knowledge', { knowledge_base_id: kbA, query: 'How long do refunds take?', top_k: 2 })
    expect(out.results.length).toBeGreaterThan(0)
    expect(out.results[0]).toMatchObject({ document_id: docA, document_name: 'returns.md', metadata: { topic: 'returns' } })
    expect(out.results[0].content).toContain('five business days')
    const rest = await h.call('POST', `/v1/knowledge-bases/${kbA}/search`, { key: owner, body: { query: 'How long do refunds take?', top_k: 2 } })
    expect(rest.status).toBe(200)
    expect(out.results.map((r: any) => r.chunk_id)).toEqual(rest.body.results.map((r: any) => r.chunk_id))
    // Filters as REST: only the office document.
    const office = await ok(owner, 'search_knowledge', { knowledge_base_id: kbA, query: 'refunds', filters: { topic: 'office' } })
    expect(office.results.map((r: any) => r.document_name)).toEqual(['office.md'])
  })

  test('run_workflow waits for the outputs; the run is listed and audited as a REST trigger', async () => {
    const out = await ok(owner, 'run_workflow', { workflow_id: wfA, inputs: { message: 'hello over MCP' } })
    expect(out).toMatchObject({ workflow_id: wfA, status: 'completed', outputs: { answer: 'You said: hello over MCP' } })
    expect(out.run_id).toMatch(/^run_/)
    const listed = (await runsOf(wfA)).find((r) => r.run_id === out.run_id)
    expect(listed).toMatchObject({ status: 'completed', user_id: 'mcp-owner', inputs: { message: 'hello over MCP' } })
    const audit = await h.call('GET', `/v1/workspaces/${wsA}/audit-log?limit=100`, { key: owner })
    expect(audit.status).toBe(200)
    const entry = audit.body.data.find((e: any) => e.resource_id === out.run_id)
    expect(entry).toMatchObject({ action: 'POST /v1/workflows/{id}/runs', user_id: 'mcp-owner', params: { id: wfA } })
    // No entry for the MCP endpoint itself.
    expect(audit.body.data.some((e: any) => e.action.includes('/mcp'))).toBe(false)
  })

  test('run_workflow: a failed run is a tool error carrying the run\'s error; bad inputs are refused as REST refuses them', async () => {
    const graph = chain(start(), { id: 'boom', type: 'code', config: { source: 'function main() { throw new Error("kaput") }' } }, end({}))
    const failing = await createWorkflow(h, owner, wsA, graph)
    const r = await call(owner, 'run_workflow', { workflow_id: failing })
    expect(r.isError).toBe(true)
    expect(r.structuredContent).toMatchObject({ workflow_id: failing, status: 'failed', error: { code: 'code_error', node: 'boom' } })
    expect(r.structuredContent.error.message).toContain('kaput')
    const before = (await runsOf(wfA)).length
    const missing = await refused(owner, 'run_workflow', { workflow_id: wfA, inputs: {} })
    const rest = await h.call('POST', `/v1/workflows/${wfA}/runs`, { key: owner, body: { inputs: {} } })
    expect(rest.status).toBe(400)
    expect(missing).toMatchObject({ code: 'validation_error', param: 'inputs.message' })
    expect(missing).toMatchObject({ code: rest.body.error.code, param: rest.body.error.param })
    expect((await runsOf(wfA)).length).toBe(before)
  })

  test('chat_with_agent answers, stores the conversation as the key\'s user, and continues it', async () => {
    const first = await ok(owner, 'chat_with_agent', { agent_id: agentA, message: 'Hello, who are you?' })
    expect(first.agent_id).toBe(agentA)
    expect(first.conversation_id).toMatch(/^conv_/)
    expect(first.message.role).toBe('assistant')
    expect(first.message.content.length).toBeGreaterThan(0)
    expect(first.usage.tokens_in).toBeGreaterThan(0)
    const conversation = await h.call('GET', `/v1/conversations/${first.conversation_id}`)
    expect(conversation.body.data).toMatchObject({ agent_id: agentA, user_id: 'mcp-owner' })
    const second = await ok(owner, 'chat_with_agent', { agent_id: agentA, message: 'And again?', conversation_id: first.conversation_id })
    expect(second.conversation_id).toBe(first.conversation_id)
    const messages = await messagesOf(first.conversation_id)
    expect(messages.map((m) => [m.role, m.role === 'user' ? m.content : m.content === first.message.content || m.content === second.message.content])).toEqual([
      ['user', 'Hello, who are you?'], ['assistant', true], ['user', 'And again?'], ['assistant', true],
    ])
  })

  test('chat_with_agent with a user_id: a developer-level key chats for any end user', async () => {
    const out = await ok(owner, 'chat_with_agent', { agent_id: agentA, message: 'Hi', user_id: 'end-user-7' })
    expect((await h.call('GET', `/v1/conversations/${out.conversation_id}`)).body.data.user_id).toBe('end-user-7')
  })

  test.each(['agents', 'workflows', 'knowledge_bases'] as const)('list_resources %s: the caller\'s, newest first, a page at a time', async (type) => {
    const mine = { agents: agentA, workflows: wfA, knowledge_bases: kbA }[type]
    const theirs = { agents: agentB, workflows: wfB, knowledge_bases: kbB }[type]
    const out = await ok(owner, 'list_resources', { type })
    expect(out.type).toBe(type)
    const ids = out.data.map((r: any) => r.id)
    expect(ids).toContain(mine)
    expect(ids).not.toContain(theirs)
    const restPath = { agents: '/v1/agents', workflows: '/v1/workflows', knowledge_bases: '/v1/knowledge-bases' }[type]
    const rest = await h.call('GET', restPath, { key: owner })
    expect(out.data).toEqual(rest.body.data)
    expect(out.has_more).toBe(false)
  })

  test('list_resources pages with limit and cursor', async () => {
    await createWorkflow(h, owner, wsA)
    const first = await ok(owner, 'list_resources', { type: 'workflows', limit: 1 })
    expect(first.data.length).toBe(1)
    expect(first.has_more).toBe(true)
    const second = await ok(owner, 'list_resources', { type: 'workflows', limit: 1, cursor: first.next_cursor })
    expect(second.data.length).toBe(1)
    expect(second.data[0].id).not.toBe(first.data[0].id)
    expect(await refused(owner, 'list_resources', { type: 'workflows', cursor: 'not-a-cursor' })).toMatchObject({ code: 'invalid_cursor' })
  })

  test('list_resources resolves the workspace as REST: the argument, else X-Workspace-Id', async () => {
    // A user in two workspaces (A as readonly member, and a workspace of its own).
    const own = await workspaceOf(h, reader, 'Reader\'s own')
    const wf = await createWorkflow(h, reader, own)
    const all = (await ok(reader, 'list_resources', { type: 'workflows', limit: 100 })).data.map((r: any) => r.id)
    expect(all).toEqual(expect.arrayContaining([wf, wfA]))
    const onlyOwn = (await ok(reader, 'list_resources', { type: 'workflows', workspace_id: own })).data.map((r: any) => r.id)
    expect(onlyOwn).toEqual([wf])
    const viaHeader = await connect(reader, { 'X-Workspace-Id': own })
    const listed = (await viaHeader.callTool({ name: 'list_resources', arguments: { type: 'workflows' } })) as { structuredContent: any }
    expect(listed.structuredContent.data.map((r: any) => r.id)).toEqual([wf])
  })
})

describe('roles: the same checks as the REST call each tool stands for', () => {
  /** The REST twin of each call: its status decides whether the tool succeeds, its error code what the tool says. */
  const cases: { name: string; key: () => string; tool: string; args: () => Record<string, unknown>; rest: () => [string, string, Record<string, unknown> | undefined] }[] = [
    { name: 'readonly searches', key: () => reader, tool: 'search_knowledge', args: () => ({ knowledge_base_id: kbA, query: 'refunds' }), rest: () => ['POST', `/v1/knowledge-bases/${kbA}/search`, { query: 'refunds' }] },
    { name: 'readonly lists', key: () => reader, tool: 'list_resources', args: () => ({ type: 'agents', workspace_id: wsA }), rest: () => ['GET', `/v1/agents?workspace_id=${wsA}`, undefined] },
    { name: 'readonly may not run a workflow', key: () => reader, tool: 'run_workflow', args: () => ({ workflow_id: wfA, inputs: { message: 'x' } }), rest: () => ['POST', `/v1/workflows/${wfA}/runs`, { inputs: { message: 'x' } }] },
    { name: 'readonly may not chat', key: () => reader, tool: 'chat_with_agent', args: () => ({ agent_id: agentA, message: 'x' }), rest: () => ['POST', `/v1/agents/${agentA}/chat`, { message: 'x', user_id: 'mcp-reader' }] },
    { name: 'user runs a workflow as itself', key: () => user, tool: 'run_workflow', args: () => ({ workflow_id: wfA, inputs: { message: 'x' } }), rest: () => ['POST', `/v1/workflows/${wfA}/runs`, { inputs: { message: 'x' } }] },
    { name: 'user may not run for another user_id', key: () => user, tool: 'run_workflow', args: () => ({ workflow_id: wfA, inputs: { message: 'x' }, user_id: 'someone' }), rest: () => ['POST', `/v1/workflows/${wfA}/runs`, { inputs: { message: 'x' }, user_id: 'someone' }] },
    { name: 'user chats as itself', key: () => user, tool: 'chat_with_agent', args: () => ({ agent_id: agentA, message: 'x' }), rest: () => ['POST', `/v1/agents/${agentA}/chat`, { message: 'x', user_id: 'mcp-user' }] },
    { name: 'user may not chat as another user_id', key: () => user, tool: 'chat_with_agent', args: () => ({ agent_id: agentA, message: 'x', user_id: 'someone' }), rest: () => ['POST', `/v1/agents/${agentA}/chat`, { message: 'x', user_id: 'someone' }] },
  ]

  test.each(cases.map((c) => [c.name, c] as const))('%s', async (_, c) => {
    const [method, path, body] = c.rest()
    const rest = await h.call(method, path, { key: c.key(), body })
    const r = await call(c.key(), c.tool, c.args())
    if (rest.status === 200) {
      expect(r.isError).toBeFalsy()
    } else {
      expect(rest.status).toBe(403)
      expect(r.isError).toBe(true)
      expect(r.structuredContent.error).toMatchObject({ code: rest.body.error.code, ...(rest.body.error.param ? { param: rest.body.error.param } : {}) })
    }
  })

  test('a refused run_workflow creates no run', async () => {
    const before = (await runsOf(wfA)).length
    expect(await refused(reader, 'run_workflow', { workflow_id: wfA, inputs: { message: 'x' } })).toMatchObject({ code: 'forbidden' })
    expect((await runsOf(wfA)).length).toBe(before)
  })
})

describe('tenant isolation: another workspace\'s resources are not found', () => {
  test.each([
    ['search_knowledge', () => ({ knowledge_base_id: kbA, query: 'refunds' })],
    ['run_workflow', () => ({ workflow_id: wfA, inputs: { message: 'x' } })],
    ['chat_with_agent', () => ({ agent_id: agentA, message: 'x' })],
    ['list_resources', () => ({ type: 'workflows', workspace_id: wsA })],
  ] as const)('%s of workspace A with a key of B', async (tool, args) => {
    expect(await refused(outsider, tool, args())).toMatchObject({ code: 'not_found' })
  })

  test('lists of B\'s key name none of A\'s resources', async () => {
    for (const type of ['agents', 'workflows', 'knowledge_bases']) {
      const ids = (await ok(outsider, 'list_resources', { type, limit: 100 })).data.map((r: any) => r.id)
      expect(ids.length).toBeGreaterThan(0)
      expect(ids).not.toContain(type === 'agents' ? agentA : type === 'workflows' ? wfA : kbA)
    }
  })

  test('a key restricted to workspace B cannot name A', async () => {
    const restricted = await keyFor(h, 'mcp-outsider', { workspace_id: wsB })
    expect(await refused(restricted, 'list_resources', { type: 'agents', workspace_id: wsA })).toMatchObject({ code: 'not_found' })
    expect(await refused(restricted, 'run_workflow', { workflow_id: wfA })).toMatchObject({ code: 'not_found' })
  })
})

describe('bad arguments are tool errors naming the field; an unknown tool is JSON-RPC -32602', () => {
  test.each([
    ['a missing field', 'search_knowledge', () => ({ knowledge_base_id: kbA }), 'query'],
    ['a wrong type', 'search_knowledge', () => ({ knowledge_base_id: kbA, query: 'refunds', top_k: 'many' }), 'top_k'],
    ['out of range', 'search_knowledge', () => ({ knowledge_base_id: kbA, query: 'refunds', top_k: 1000 }), 'top_k'],
    ['an unknown field', 'run_workflow', () => ({ workflow_id: wfA, stream: true }), 'stream'],
    ['a malformed id', 'chat_with_agent', () => ({ agent_id: 'agt with spaces', message: 'x' }), 'agent_id'],
    ['an empty message', 'chat_with_agent', () => ({ agent_id: agentA, message: '' }), 'message'],
    ['an unknown type', 'list_resources', () => ({ type: 'secrets' }), 'type'],
    ['a limit of 0', 'list_resources', () => ({ type: 'agents', limit: 0 }), 'limit'],
  ] as const)('%s (%s)', async (_, tool, args, field) => {
    const error = await refused(owner, tool, args())
    expect(error.code).toBe('validation_error')
    expect(error.param).toBe(field)
    expect(error.message).toStartWith(`${field}: `)
  })

  test('an unknown tool', async () => {
    let thrown: unknown
    try {
      await (await as(owner)).callTool({ name: 'delete_everything', arguments: {} })
    } catch (err) {
      thrown = err
    }
    expect(thrown).toBeInstanceOf(McpError)
    expect((thrown as McpError).code).toBe(-32602)
    // The code once: the client's SDK prefixes it to what the server sent, which is the text alone.
    expect((thrown as McpError).message).toBe('MCP error -32602: unknown tool "delete_everything"; tools/list names search_knowledge, run_workflow, chat_with_agent, list_resources')
    const raw = await rpc(owner, toolCall(9001, 'delete_everything', {}))
    expect(raw.status).toBe(200)
    expect(raw.body.error).toEqual({ code: -32602, message: 'unknown tool "delete_everything"; tools/list names search_knowledge, run_workflow, chat_with_agent, list_resources' })
  })

  test.each([
    ['tools/call without a name', { method: 'tools/call', params: {} }, 'params.name: '],
    ['tools/call with a number for a name', { method: 'tools/call', params: { name: 5 } }, 'params.name: '],
    ['tools/call with arguments that are not an object', { method: 'tools/call', params: { name: 'list_resources', arguments: 'agents' } }, 'params.arguments: '],
    ['tools/list with a number for a cursor', { method: 'tools/list', params: { cursor: 5 } }, 'params.cursor: '],
  ])('malformed params: JSON-RPC -32602 naming the field, not an internal error (%s)', async (_, message, start) => {
    const res = await rpc(owner, { jsonrpc: '2.0', id: 77, ...message })
    expect(res.status).toBe(200)
    expect(res.body.id).toBe(77)
    expect(res.body.error.code).toBe(-32602)
    expect(res.body.error.message).toStartWith(start)
    expect(res.body.error.message).not.toContain('[')
  })

  test('a body that is not a JSON-RPC message is a 400 in the error shape', async () => {
    const res = await rpc(owner, { id: 1, method: 'tools/list' })
    expect(res.status).toBe(400)
    expect(res.body.error).toMatchObject({ code: 'validation_error', param: 'jsonrpc' })
    const batch = await rpc(owner, [{ jsonrpc: '2.0', id: 1, method: 'tools/list' }])
    expect(batch.status).toBe(400)
    expect(batch.body.error.code).toBe('validation_error')
    const version = await rpc(owner, { jsonrpc: '2.0', id: 1, method: 'tools/list' }, { 'mcp-protocol-version': '1999-01-01' })
    expect(version.status).toBe(400)
    expect(version.body.error).toMatchObject({ code: 'validation_error', message: expect.stringContaining('1999-01-01') })
    const notJson = await fetch(url, { method: 'POST', headers: { authorization: `Bearer ${owner}`, 'content-type': 'application/json' }, body: '{"jsonrpc":' })
    expect(notJson.status).toBe(400)
    expect(((await notJson.json()) as any).error.code).toBe('invalid_json')
  })
})

describe('authentication and methods', () => {
  test.each([
    ['no key', undefined],
    ['a malformed key', 'Bearer nope'],
    ['an unknown key', 'Bearer ap_0000000000000000000000000000000000000000'],
  ])('%s: 401 in the error shape, surfaced by the SDK client', async (_, authorization) => {
    const client = new Client({ name: 'mcp-server-test', version: '1.0.0' })
    const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: authorization ? { Authorization: authorization } : {} } })
    let thrown: unknown
    try {
      await client.connect(transport)
    } catch (err) {
      thrown = err
    } finally {
      await client.close()
    }
    expect(thrown).toBeInstanceOf(StreamableHTTPError)
    expect((thrown as StreamableHTTPError).code).toBe(401)
    expect((thrown as Error).message).toContain('"code":"unauthenticated"')
    const raw = await rpc(null, { jsonrpc: '2.0', id: 1, method: 'tools/list' }, authorization ? { authorization } : {})
    expect(raw.status).toBe(401)
    expect(raw.headers.get('www-authenticate')).toStartWith('Bearer')
    expect(raw.body).toMatchObject({ request_id: expect.stringMatching(/^req_/), error: { code: 'unauthenticated' } })
  })

  test.each(['GET', 'DELETE'])('%s /v1/mcp: 405 with Allow: POST (after the key is checked)', async (method) => {
    const res = await fetch(url, { method, headers: { authorization: `Bearer ${owner}`, accept: 'text/event-stream' } })
    expect(res.status).toBe(405)
    expect(res.headers.get('allow')).toBe('POST')
    expect(((await res.json()) as any).error.code).toBe('method_not_allowed')
    expect((await fetch(url, { method })).status).toBe(401)
  })

  test('a client that accepts only JSON is answered JSON; a notification is 202 with no body', async () => {
    const res = await rpc(owner, { jsonrpc: '2.0', id: 'only-json', method: 'tools/list' }, { accept: 'application/json' })
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toStartWith('application/json')
    expect(res.headers.get('x-request-id')).toMatch(/^req_/)
    expect(res.body.result.tools.length).toBe(4)
    const note = await rpc(owner, { jsonrpc: '2.0', method: 'notifications/initialized' })
    expect(note.status).toBe(202)
    expect(note.body).toBeNull()
    expect(note.headers.get('x-request-id')).toMatch(/^req_/)
  })
})

describe('retries: creating tools are idempotent per key, session and JSON-RPC id', () => {
  test('the same id twice: one run, the first answer again', async () => {
    const before = (await runsOf(wfA)).length
    const message = toolCall(9001, 'run_workflow', { workflow_id: wfA, inputs: { message: 'once' } })
    const first = await rpc(owner, message)
    const again = await rpc(owner, message)
    expect(first.status).toBe(200)
    expect(first.body.result.structuredContent).toMatchObject({ status: 'completed', outputs: { answer: 'You said: once' } })
    expect(again.body).toEqual(first.body)
    expect((await runsOf(wfA)).length).toBe(before + 1)
    // The same arguments in another key order are the same call.
    const reordered = await rpc(owner, { jsonrpc: '2.0', id: 9001, method: 'tools/call', params: { arguments: { inputs: { message: 'once' }, workflow_id: wfA }, name: 'run_workflow' } })
    expect(reordered.body.result).toEqual(first.body.result)
    expect((await runsOf(wfA)).length).toBe(before + 1)
  })

  test('the same id with other arguments or another tool: a clear error, nothing created', async () => {
    const before = (await runsOf(wfA)).length
    expect((await rpc(owner, toolCall('retry-2', 'run_workflow', { workflow_id: wfA, inputs: { message: 'first' } }))).body.result.isError).toBeUndefined()
    const other = await rpc(owner, toolCall('retry-2', 'run_workflow', { workflow_id: wfA, inputs: { message: 'second' } }))
    expect(other.body.result.isError).toBe(true)
    expect(other.body.result.structuredContent.error).toMatchObject({ code: 'idempotency_key_reused', param: 'id' })
    const otherTool = await rpc(owner, toolCall('retry-2', 'chat_with_agent', { agent_id: agentA, message: 'hi' }))
    expect(otherTool.body.result.structuredContent.error.code).toBe('idempotency_key_reused')
    expect((await runsOf(wfA)).length).toBe(before + 1)
  })

  test('scoped by API key and by session: the same id elsewhere is a new call', async () => {
    const before = (await runsOf(wfA)).length
    const message = toolCall(9100, 'run_workflow', { workflow_id: wfA, inputs: { message: 'scoped' } })
    await rpc(owner, message)
    await rpc(owner, message, { 'mcp-session-id': 'session-one' })
    await rpc(owner, message, { 'mcp-session-id': 'session-one' })
    await rpc(user, message)
    expect((await runsOf(wfA)).length).toBe(before + 3)
    expect((await rpc(owner, message, { 'mcp-session-id': 'bad session' })).status).toBe(400)
    // The session ids MCP clients echo are handed out at initialize, a new one each time.
    const initialize = { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } }
    const [one, two] = [await rpc(owner, initialize), await rpc(owner, initialize)]
    expect(one.body.result.protocolVersion).toBe('2025-11-25')
    expect(one.headers.get('mcp-session-id')).toMatch(/^mcp-[0-9a-f-]{36}$/)
    expect(two.headers.get('mcp-session-id')).not.toBe(one.headers.get('mcp-session-id'))
    expect((await rpc(owner, { jsonrpc: '2.0', id: 1, method: 'tools/list' })).headers.get('mcp-session-id')).toBeNull()
  })

  test('two SDK connections each number their calls from the start: each first run_workflow runs', async () => {
    const before = (await runsOf(wfA)).length
    for (let i = 0; i < 2; i++) {
      const client = await connect(owner)
      const result = (await client.callTool({ name: 'run_workflow', arguments: { workflow_id: wfA, inputs: { message: 'per connection' } } })) as { structuredContent: any }
      expect(result.structuredContent.status).toBe('completed')
    }
    expect((await runsOf(wfA)).length).toBe(before + 2)
  })

  test('chat_with_agent: a retried id stores one turn', async () => {
    const message = toolCall(9200, 'chat_with_agent', { agent_id: agentA, message: 'Only once, please' })
    const first = await rpc(owner, message)
    const again = await rpc(owner, message)
    expect(again.body).toEqual(first.body)
    expect((await messagesOf(first.body.result.structuredContent.conversation_id)).length).toBe(2)
  })

  test('a refusal that a retry may change is not kept: the same id succeeds once allowed', async () => {
    const disabled = await createAgent(h, owner, wsA, { status: 'disabled' })
    const message = toolCall(9300, 'chat_with_agent', { agent_id: disabled.id, message: 'hello' })
    expect((await rpc(owner, message)).body.result.structuredContent.error.code).toBe('conflict')
    expect((await h.call('PATCH', `/v1/agents/${disabled.id}`, { key: owner, body: { status: 'active' } })).status).toBe(200)
    const retried = await rpc(owner, message)
    expect(retried.body.result.isError).toBeUndefined()
    expect(retried.body.result.structuredContent.agent_id).toBe(disabled.id)
  })

  test('read-only tools are not recorded: the same id searches again', async () => {
    const message = toolCall(9400, 'search_knowledge', { knowledge_base_id: kbA, query: 'refunds' })
    expect((await rpc(owner, message)).body.result.isError).toBeUndefined()
    const other = await rpc(owner, toolCall(9400, 'search_knowledge', { knowledge_base_id: kbA, query: 'office' }))
    expect(other.body.result.isError).toBeUndefined()
  })
})
