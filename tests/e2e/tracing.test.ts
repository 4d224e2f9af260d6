import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import type { Server } from 'bun'
import { mkdtempSync, rmSync } from 'node:fs'
import { lookup } from 'node:dns/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { generateKey } from '../../src/domain/api-keys'
import { createCertificate, type Certificate } from '../helpers/certificate'
import { startCluster } from '../helpers/cluster'
import { startFakeProvider, writeModelsFile, type FakeProvider } from '../helpers/fake-provider'
import { startMcpServer, type McpTestServer } from '../helpers/mcp-server'
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from '../helpers/otlp-receiver'
import { apiCall, EMBEDDED, killAll, spawnService, type ServiceProcess } from '../helpers/process'
import { startReceiver, type Receiver } from '../helpers/receiver'
import { chain } from '../helpers/runs'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Traces exported over OTLP/HTTP (docs/observability.md) by the real service to a loopback
 * collector that decodes the protobuf wire format. Embedded: one process runs the API and the
 * workers; server mode (DATABASE_URL, REDIS_URL): an API-only process and a worker process, so a
 * run's, a document's and a delivery's trace crosses processes through the stored trace context.
 * The provider is process-global, so each configuration (content capture off, then on) is a
 * service of its own.
 */
const SERVER_MODE = Boolean(process.env.DATABASE_URL && process.env.REDIS_URL)
const PROVIDER_KEY = 'sk-fake-provider-key-0123456789abcdef'
const WEBHOOK_SECRET = 'whsec-tracing-test-0123456789'
const COLLECTOR_TOKEN = 'collector-token-0123456789'
const PROMPT = 'Which lighthouse keeps the longest log?'

interface Service {
  api: ServiceProcess
  key: string
  close(): Promise<void>
}

let otlp: OtlpReceiver
let fake: FakeProvider
let certificate: Certificate
let hooks: Receiver
let tool: Server<undefined>
let mcp: McpTestServer
const toolRequests: Record<string, string>[] = []
let models: { dir: string; file: string }
let svc: Service
let ws: string

async function startService(name: string, env: Record<string, string>): Promise<Service> {
  if (SERVER_MODE) {
    const c = await startCluster({ name, workers: 1, apiOnly: true, env })
    return { api: c.api, key: c.rootKey, close: () => c.close() }
  }
  const tmp = mkdtempSync(join(tmpdir(), `ap-e2e-${name}-`))
  const key = generateKey()
  const api = spawnService({ env: { ...EMBEDDED, DATA_DIR: join(tmp, 'data'), BOOTSTRAP_API_KEY: key, RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000', ...env } })
  await api.ready(45_000)
  return {
    api,
    key,
    close: async () => {
      await api.stop()
      rmSync(tmp, { recursive: true, force: true })
    },
  }
}

function serviceEnv(extra: Record<string, string> = {}): Record<string, string> {
  return {
    OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url,
    OTEL_EXPORTER_OTLP_HEADERS: `x-collector-token=${COLLECTOR_TOKEN}`,
    OTEL_SERVICE_NAME: 'ap-tracing-test',
    OTEL_BSP_SCHEDULE_DELAY: '100',
    MODELS_FILE: models.file,
    NODE_EXTRA_CA_CERTS: certificate.certFile,
    WEBHOOK_ALLOW_HTTP: 'true',
    WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
    WEBHOOK_RETRY_DELAYS_MS: '200',
    ...extra,
  }
}

const call = (method: string, path: string, body?: unknown, s: Service = svc) => apiCall(s.api, s.key, method, path, body)

/** POST /v1/chat/completions in `workspace` (the root key names it with X-Workspace-Id). */
async function completion(s: Service, workspace: string, content: string) {
  const res = await fetch(`${s.api.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${s.key}`, 'content-type': 'application/json', 'x-workspace-id': workspace },
    body: JSON.stringify({ model: 'fake-chat', messages: [{ role: 'user', content }] }),
  })
  expect(res.status).toBe(200)
  await res.text()
  return res.headers.get('x-request-id')!
}

beforeAll(async () => {
  otlp = await startOtlpReceiver()
  mcp = await startMcpServer()
  fake = await startFakeProvider()
  certificate = createCertificate()
  hooks = await startReceiver({ certificate, hostname: (await lookup('localhost', { all: true, verbatim: true }))[0]!.address })
  tool = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    fetch(req) {
      toolRequests.push(Object.fromEntries(req.headers))
      return Response.json({ order: new URL(req.url).pathname.split('/').at(-1), status: 'shipped' })
    },
  })
  models = writeModelsFile('ap-tracing-', {
    providers: [{ id: 'fake', kind: 'openai', base_url: fake.baseUrl, api_key: PROVIDER_KEY, timeout_ms: 10_000 }],
    models: [
      { id: 'fake-chat', type: 'llm', vendor: 'test', supports_function_call: true, routes: [{ provider: 'fake', model: 'up-chat' }] },
      { id: 'fake-embed', type: 'embedding', vendor: 'test', dimensions: 8, routes: [{ provider: 'fake', model: 'up-embed' }] },
    ],
  })
  svc = await startService('tracing', serviceEnv())
  const created = await call('POST', '/v1/workspaces', { name: 'Traced' })
  expect(created.status).toBe(201)
  ws = created.body.data.id
}, 90_000)

afterAll(async () => {
  await svc?.close()
  await killAll()
  await otlp?.close()
  await fake?.close()
  await hooks?.close()
  await tool?.stop(true)
  await mcp?.close()
  rmSync(models.dir, { recursive: true, force: true })
})

/** The spans of one trace. */
const traceOf = (traceId: string) => otlp.spans.filter((s) => s.traceId === traceId)
/** The server span of the request that answered with `requestId`. */
const serverSpan = (requestId: string) => otlp.waitFor((spans) => spans.find((s) => s.kind === 2 && s.attributes.request_id === requestId), `the server span of ${requestId}`)
const childrenOf = (parent: ReceivedSpan, name?: string) => traceOf(parent.traceId).filter((s) => s.parentSpanId === parent.spanId && (name === undefined || s.name === name))
/** `traceparent` = 00-<trace id>-<parent span id>-<flags>. */
const parseTraceparent = (value: string | undefined) => {
  const m = /^00-([0-9a-f]{32})-([0-9a-f]{16})-0[01]$/.exec(value ?? '')
  if (!m) throw new Error(`not a traceparent: ${value}`)
  return { traceId: m[1]!, parentId: m[2]! }
}
/** Every attribute value (spans and their events) as one text, to look for what must not be there. */
const allAttributeText = () => JSON.stringify(otlp.spans.map((s) => [s.name, s.attributes, s.events, s.status.message]))

describe('traces exported over OTLP/HTTP (protobuf)', () => {
  test('a streamed run with an llm node: server span → run → nodes → chat span with GenAI attributes; traceparent reaches the provider', async () => {
    const wf = await call('POST', '/v1/workflows', {
      workspace_id: ws,
      name: 'Traced run',
      graph: chain(
        { id: 'start', type: 'start', config: {} },
        { id: 'answer', type: 'llm', config: { model: 'fake-chat', messages: [{ role: 'user', content: PROMPT }] } },
        { id: 'end', type: 'end', config: { outputs: { text: '{{nodes.answer.output.text}}' } } },
      ),
    })
    expect(wf.status).toBe(201)
    fake.script('up-chat', [{ text: 'The one at the end of the pier.', usage: { prompt_tokens: 11, completion_tokens: 7 } }])
    const res = await fetch(`${svc.api.url}/v1/workflows/${wf.body.data.id}/runs`, {
      method: 'POST',
      headers: { authorization: `Bearer ${svc.key}`, 'content-type': 'application/json', accept: 'text/event-stream' },
      body: JSON.stringify({ inputs: {} }),
    })
    expect(res.status).toBe(200)
    const text = await res.text()
    expect(text).toContain('event: done')
    const runId = res.headers.get('x-run-id')!
    const server = await serverSpan(res.headers.get('x-request-id')!)
    expect(server.attributes['http.route']).toBe('/v1/workflows/:id/runs')
    expect(server.attributes['http.request.method']).toBe('POST')
    expect(server.attributes['http.response.status_code']).toBe(200)
    expect(server.resource['service.name']).toBe('ap-tracing-test')

    const run = await otlp.waitFor((spans) => spans.find((s) => s.name === 'workflow.run' && s.attributes.run_id === runId && s.attributes['run.status'] === 'completed'), 'the run span')
    expect(run.traceId).toBe(server.traceId)
    expect(run.parentSpanId).toBe(server.spanId)
    expect(run.attributes.workspace_id).toBe(ws)
    const chat = await otlp.waitFor((spans) => spans.find((s) => s.traceId === run.traceId && s.name === 'chat fake-chat'), 'the chat span')
    const nodes = childrenOf(run).filter((s) => s.name.startsWith('workflow.node '))
    expect(nodes.map((n) => n.attributes.node_id).sort()).toEqual(['answer', 'end', 'start'])
    const llm = nodes.find((n) => n.attributes.node_id === 'answer')!
    expect(llm.name).toBe('workflow.node llm')
    expect(chat.parentSpanId).toBe(llm.spanId)
    expect(chat.kind).toBe(3)
    expect(chat.attributes).toMatchObject({
      'gen_ai.operation.name': 'chat',
      'gen_ai.request.model': 'fake-chat',
      'gen_ai.provider.name': 'openai',
      'gen_ai.response.model': 'up-chat',
      'gen_ai.usage.input_tokens': 11,
      'gen_ai.usage.output_tokens': 7,
      'gen_ai.response.finish_reasons': ['stop'],
      workspace_id: ws,
    })
    // The provider's request carries the chat span as its parent.
    const sent = fake.requests.filter((r) => r.model === 'up-chat' && JSON.stringify(r.json.messages).includes(PROMPT)).at(-1)!
    expect(parseTraceparent(sent.headers.traceparent)).toEqual({ traceId: chat.traceId, parentId: chat.spanId })
  }, 30_000)

  test('an incoming traceparent makes the request span a child of that remote parent', async () => {
    const traceId = '4bf92f3577b34da6a3ce929d0e0e4736'
    const parentId = '00f067aa0ba902b7'
    const res = await fetch(`${svc.api.url}/v1/workspaces/${ws}`, { headers: { authorization: `Bearer ${svc.key}`, traceparent: `00-${traceId}-${parentId}-01` } })
    expect(res.status).toBe(200)
    const span = await serverSpan(res.headers.get('x-request-id')!)
    expect(span.traceId).toBe(traceId)
    expect(span.parentSpanId).toBe(parentId)
    expect(span.attributes['http.route']).toBe('/v1/workspaces/:id')
    expect(span.attributes.workspace_id).toBe(ws)
    // A request that names none starts a trace of its own.
    const plain = await fetch(`${svc.api.url}/v1/workspaces/${ws}`, { headers: { authorization: `Bearer ${svc.key}` } })
    const own = await serverSpan(plain.headers.get('x-request-id')!)
    expect(own.traceId).not.toBe(traceId)
    expect(own.parentSpanId).toBe('')
  }, 20_000)

  test('an agent turn with an http tool: invoke_agent → execute_tool (its HTTP call carries the trace) and the chat rounds, one trace', async () => {
    const agent = await call('POST', '/v1/agents', {
      workspace_id: ws,
      name: 'Tracer',
      type: 'agent',
      model: 'fake-chat',
      tools: [{
        type: 'http', name: 'lookup_order', description: 'Looks an order up', method: 'GET', url: `http://127.0.0.1:${tool.port}/orders/{order_id}`,
        parameters: { type: 'object', properties: { order_id: { type: 'string' } }, required: ['order_id'] },
      }],
    })
    expect(agent.status).toBe(201)
    fake.script('up-chat', [{ toolCalls: [{ id: 'call_1', name: 'lookup_order', arguments: { order_id: '42' } }] }, { text: 'Order 42 has shipped.' }])
    const before = toolRequests.length
    const res = await call('POST', `/v1/agents/${agent.body.data.id}/chat`, { message: 'Where is order 42?', user_id: 'u1' })
    expect(res.status).toBe(200)
    const server = await serverSpan(res.headers.get('x-request-id')!)
    const turn = await otlp.waitFor((spans) => spans.find((s) => s.traceId === server.traceId && s.name === 'invoke_agent Tracer'), 'the agent turn span')
    expect(turn.parentSpanId).toBe(server.spanId)
    expect(turn.attributes).toMatchObject({ 'gen_ai.operation.name': 'invoke_agent', agent_id: agent.body.data.id, workspace_id: ws })
    const exec = await otlp.waitFor((spans) => spans.find((s) => s.traceId === server.traceId && s.name === 'execute_tool lookup_order'), 'the execute_tool span')
    expect(exec.parentSpanId).toBe(turn.spanId)
    expect(exec.attributes).toMatchObject({ 'gen_ai.operation.name': 'execute_tool', 'gen_ai.tool.name': 'lookup_order', 'gen_ai.tool.call.id': 'call_1' })
    expect(exec.status.code).not.toBe(2)
    expect(await otlp.waitFor(() => childrenOf(turn, 'chat fake-chat').length === 2, 'two chat rounds under the turn')).toBe(true)
    // The tool's request: same trace, its parent the tool's HTTP client span under execute_tool.
    expect(toolRequests.length).toBe(before + 1)
    const tp = parseTraceparent(toolRequests.at(-1)!.traceparent)
    expect(tp.traceId).toBe(server.traceId)
    const http = await otlp.waitFor((spans) => spans.find((s) => s.spanId === tp.parentId), 'the tool call\'s HTTP span')
    expect(http.parentSpanId).toBe(exec.spanId)
    expect(http.attributes['http.response.status_code']).toBe(200)
  }, 30_000)

  test('an agent turn with an MCP tool: execute_tool under the turn, and the tools/call request carries its traceparent to the MCP server', async () => {
    const agent = await call('POST', '/v1/agents', {
      workspace_id: ws, name: 'Mcp tracer', type: 'agent', model: 'fake-chat', tools: [{ type: 'mcp', name: 'crm', server_url: mcp.url, allowed_tools: ['lookup'] }],
    })
    expect(agent.status).toBe(201)
    fake.script('up-chat', [{ toolCalls: [{ id: 'call_m', name: 'crm__lookup', arguments: { id: 'T-1' } }] }, { text: 'T-1 is open.' }])
    const before = mcp.requests.length
    const res = await call('POST', `/v1/agents/${agent.body.data.id}/chat`, { message: 'Is T-1 open?', user_id: 'u1' })
    expect(res.status).toBe(200)
    const server = await serverSpan(res.headers.get('x-request-id')!)
    const exec = await otlp.waitFor((spans) => spans.find((s) => s.traceId === server.traceId && s.name === 'execute_tool crm__lookup'), 'the execute_tool span')
    expect(exec.attributes).toMatchObject({ 'gen_ai.tool.name': 'crm__lookup', 'gen_ai.tool.call.id': 'call_m' })
    const [callRequest] = mcp.requests.slice(before).filter((r) => r.rpc.includes('tools/call'))
    const tp = parseTraceparent(callRequest!.headers.traceparent)
    expect(tp).toEqual({ traceId: server.traceId, parentId: exec.spanId })
    // Listing the tools happened inside the turn too, in the same trace.
    const [list] = mcp.requests.slice(before).filter((r) => r.rpc.includes('tools/list'))
    expect(parseTraceparent(list!.headers.traceparent).traceId).toBe(server.traceId)
  }, 30_000)

  test('a webhook delivery retried (500, then 200): both attempts in the trace of the request whose event caused it; traceparent reaches the receiver', async () => {
    hooks.script('/traced', [500, 200])
    const hook = await call('POST', '/v1/webhooks', { url: hooks.url('/traced'), events: ['agent.message.received'], secret: WEBHOOK_SECRET, workspace_id: ws })
    expect(hook.status).toBe(201)
    const agent = await call('POST', '/v1/agents', { workspace_id: ws, name: 'Notifier', type: 'agent', model: 'fake-chat' })
    fake.script('up-chat', [{ text: 'Noted.' }])
    const res = await call('POST', `/v1/agents/${agent.body.data.id}/chat`, { message: 'Tell the webhook', user_id: 'u1' })
    expect(res.status).toBe(200)
    const server = await serverSpan(res.headers.get('x-request-id')!)
    const received = await hooks.waitForRequests('/traced', 2, 20_000)
    for (const r of received) expect(parseTraceparent(r.headers.traceparent).traceId).toBe(server.traceId)
    const attempts = await otlp.waitFor((spans) => {
      const found = spans.filter((s) => s.name === 'webhook agent.message.received' && s.attributes.webhook_id === hook.body.data.id)
      return found.length >= 2 && found
    }, 'two attempt spans')
    attempts.sort((a, b) => Number(a.attributes['webhook.attempt']) - Number(b.attributes['webhook.attempt']))
    expect(attempts.map((a) => [a.traceId, a.attributes['webhook.attempt'], a.attributes['http.response.status_code'], a.status.code])).toEqual([
      [server.traceId, 1, 500, 2],
      [server.traceId, 2, 200, 0],
    ])
    expect(attempts[0]!.attributes.delivery_id).toBe(attempts[1]!.attributes.delivery_id!)
    // Each attempt's span is the receiver's parent.
    expect(received.map((r) => parseTraceparent(r.headers.traceparent).parentId).sort()).toEqual(attempts.map((a) => a.spanId).sort())
  }, 30_000)

  test('a document\'s ingestion: the upload request → document.ingest in the worker → parse, embed (with its embeddings span), write', async () => {
    const kb = await call('POST', '/v1/knowledge-bases', { workspace_id: ws, name: 'Traced docs', embedding_model: 'fake-embed' })
    expect(kb.status).toBe(201)
    const up = await call('POST', `/v1/knowledge-bases/${kb.body.data.id}/documents`, { type: 'text', name: 'keepers.txt', content: 'Lighthouse keepers wrote logs every night. '.repeat(20) })
    expect(up.status).toBe(201)
    const documentId = up.body.document_id
    const server = await serverSpan(up.headers.get('x-request-id')!)
    const ingest = await otlp.waitFor((spans) => spans.find((s) => s.name === 'document.ingest' && s.attributes.document_id === documentId && s.attributes['document.status'] === 'ready'), 'the ingestion span')
    expect(ingest.traceId).toBe(server.traceId)
    expect(ingest.parentSpanId).toBe(server.spanId)
    expect(ingest.attributes.workspace_id).toBe(ws)
    const stages = childrenOf(ingest).map((s) => s.name)
    expect(stages).toContain('document.parse')
    expect(stages).toContain('document.embed')
    expect(stages).toContain('document.write')
    const embed = childrenOf(ingest, 'document.embed')[0]!
    const embeddings = childrenOf(embed, 'embeddings fake-embed')
    expect(embeddings.length).toBe(1)
    expect(embeddings[0]!.attributes['gen_ai.operation.name']).toBe('embeddings')
    expect(Number(embeddings[0]!.attributes['gen_ai.usage.input_tokens'])).toBeGreaterThan(0)
  }, 30_000)

  test('no span holds a secret (API key, provider key, webhook secret, exporter headers) nor, with capture off, a prompt or completion', async () => {
    const requestId = await completion(svc, ws, PROMPT)
    await serverSpan(requestId)
    await otlp.waitFor((spans) => spans.find((s) => s.name === 'chat fake-chat' && s.attributes.request_id === requestId), 'the chat span')
    const text = allAttributeText()
    for (const secret of [svc.key, PROVIDER_KEY, WEBHOOK_SECRET, COLLECTOR_TOKEN]) expect(text).not.toContain(secret)
    expect(text).not.toContain(PROMPT)
    expect(text).not.toContain('gen_ai.input.messages')
    expect(otlp.contentTypes.every((t) => t.startsWith('application/x-protobuf'))).toBe(true)
  }, 20_000)
})

describe('OTEL_GENAI_CAPTURE_CONTENT=true', () => {
  let captured: Service
  beforeAll(async () => {
    captured = await startService('tracing-content', serviceEnv({ OTEL_GENAI_CAPTURE_CONTENT: 'true', OTEL_SERVICE_NAME: 'ap-tracing-content' }))
  }, 90_000)
  afterAll(async () => {
    await captured?.close()
  })

  test('prompts and completions are on the chat span; secrets still are not', async () => {
    const ws2 = await call('POST', '/v1/workspaces', { name: 'Captured' }, captured)
    expect(ws2.status).toBe(201)
    fake.script('up-chat', [{ text: 'The Bell Rock log.' }])
    await completion(captured, ws2.body.data.id, PROMPT)
    const chat = await otlp.waitFor((spans) => spans.find((s) => s.resource['service.name'] === 'ap-tracing-content' && s.name === 'chat fake-chat'), 'the captured chat span')
    expect(String(chat.attributes['gen_ai.input.messages'])).toContain(PROMPT)
    expect(String(chat.attributes['gen_ai.output.messages'])).toContain('The Bell Rock log.')
    const text = JSON.stringify(otlp.spans.filter((s) => s.resource['service.name'] === 'ap-tracing-content').map((s) => [s.attributes, s.events]))
    for (const secret of [captured.key, PROVIDER_KEY, COLLECTOR_TOKEN]) expect(text).not.toContain(secret)
  }, 30_000)
})

