import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import type { Server } from 'bun'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { generateKey } from '../../src/domain/api-keys'
import { startCluster } from '../helpers/cluster'
import { startFakeProvider, writeModelsFile, type FakeProvider } from '../helpers/fake-provider'
import { waitFor } from '../helpers/harness'
import { startMcpServer, type McpTestServer } from '../helpers/mcp-server'
import { startOtlpReceiver, type OtlpReceiver } from '../helpers/otlp-receiver'
import { apiCall, EMBEDDED, freePort, killAll, spawnService, type ServiceProcess } from '../helpers/process'
import { chain } from '../helpers/runs'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * An outgoing call's URL path and query never reach a span or a log line (docs/observability.md):
 * every kind of outgoing call the service makes (an `http_request` node, an agent's `http` tool, an
 * MCP server, a webhook delivery, a model provider) to a URL whose path and query hold tokens, on
 * success and on every way of failing (a 500 whose body echoes the URL, a connection refused, a
 * time-out). The real service exports its spans to a loopback OTLP receiver and logs at debug; both
 * are searched whole for the tokens. Server mode: an API process and a worker process.
 *
 * Also the logs' shape (docs/observability.md, "Logs"): every line is JSON with `level` as a name, and
 * each failed webhook delivery attempt is one line naming the delivery and the reason.
 */
const SERVER_MODE = Boolean(process.env.DATABASE_URL && process.env.REDIS_URL)
const PATH_TOKEN = `pathtok${crypto.randomUUID().replaceAll('-', '')}`
const QUERY_TOKEN = `querytok${crypto.randomUUID().replaceAll('-', '')}`
const LEVELS = new Set(['trace', 'debug', 'info', 'warn', 'error', 'fatal'])

let otlp: OtlpReceiver
let fake: FakeProvider
let mcp: McpTestServer
let trap: Server<undefined>
/** Hanging requests of the trap, released at the end. */
const hanging = new Set<() => void>()
/** A port nobody listens on: every call to it is refused. */
let closed: number
let models: { dir: string; file: string }
let api: ServiceProcess
let processes: ServiceProcess[] = []
let key: string
let closeService: () => Promise<void>
let ws: string

const trapUrl = (kind: string) => `http://127.0.0.1:${trap.port}/${PATH_TOKEN}/${kind}?token=${QUERY_TOKEN}`
const refusedUrl = () => `http://127.0.0.1:${closed}/${PATH_TOKEN}/x?token=${QUERY_TOKEN}`
const call = (method: string, path: string, body?: unknown) => apiCall(api, key, method, path, body)
const output = () => processes.map((p) => p.output()).join('\n')
const logLines = () =>
  processes
    .flatMap((p) => p.stdout().split('\n'))
    .filter((l) => l.trim() !== '')

beforeAll(async () => {
  otlp = await startOtlpReceiver()
  fake = await startFakeProvider()
  mcp = await startMcpServer({ path: `/${PATH_TOKEN}/mcp` })
  closed = freePort()
  // The outside world at its worst: a 500 whose body repeats the URL it was sent to (as many servers'
  // error pages do), and an answer that never comes.
  trap = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    idleTimeout: 0,
    async fetch(req) {
      const url = new URL(req.url)
      if (url.pathname.includes('/hang')) {
        return new Promise<Response>((resolve) => {
          const release = () => {
            if (hanging.delete(release)) resolve(new Response(null, { status: 503 }))
          }
          hanging.add(release)
          req.signal.addEventListener('abort', release, { once: true })
        })
      }
      if (url.pathname.includes('/fail')) {
        const echo = `Cannot ${req.method} ${url.pathname}${url.search} (${req.url})`
        return Response.json({ error: { message: echo, type: 'server_error' } }, { status: 500 })
      }
      return Response.json({ ok: true })
    },
  })
  const base = (kind: string, port = trap.port) => `http://127.0.0.1:${port}/${PATH_TOKEN}/${kind}/v1`
  models = writeModelsFile('ap-outgoing-', {
    providers: [
      { id: 'fake', kind: 'openai', base_url: fake.baseUrl, api_key: 'sk-fake-0123456789', timeout_ms: 10_000 },
      { id: 'p_fail', kind: 'openai', base_url: base('fail'), api_key: 'sk-fail-0123456789', timeout_ms: 10_000 },
      { id: 'p_hang', kind: 'openai', base_url: base('hang'), api_key: 'sk-hang-0123456789', timeout_ms: 300 },
      { id: 'p_refused', kind: 'openai', base_url: base('x', closed), api_key: 'sk-refused-0123456789', timeout_ms: 10_000 },
    ],
    models: [
      { id: 'fake-chat', type: 'llm', vendor: 'test', supports_function_call: true, routes: [{ provider: 'fake', model: 'up-chat' }] },
      { id: 'm-fail', type: 'llm', vendor: 'test', routes: [{ provider: 'p_fail', model: 'up' }] },
      { id: 'm-hang', type: 'llm', vendor: 'test', routes: [{ provider: 'p_hang', model: 'up' }] },
      { id: 'm-refused', type: 'llm', vendor: 'test', routes: [{ provider: 'p_refused', model: 'up' }] },
    ],
  })
  const env = {
    OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url,
    OTEL_BSP_SCHEDULE_DELAY: '100',
    OTEL_SERVICE_NAME: 'ap-outgoing-test',
    MODELS_FILE: models.file,
    LOG_LEVEL: 'debug',
    WEBHOOK_ALLOW_HTTP: 'true',
    WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
    WEBHOOK_RETRY_DELAYS_MS: '200',
    WEBHOOK_TIMEOUT_MS: '500',
    MCP_CALL_TIMEOUT_MS: '4000',
  }
  if (SERVER_MODE) {
    const c = await startCluster({ name: 'outgoing', workers: 1, apiOnly: true, env })
    api = c.api
    processes = [c.api, ...c.workers]
    key = c.rootKey
    closeService = () => c.close()
  } else {
    const tmp = mkdtempSync(join(tmpdir(), 'ap-e2e-outgoing-'))
    key = generateKey()
    api = spawnService({ env: { ...EMBEDDED, DATA_DIR: join(tmp, 'data'), BOOTSTRAP_API_KEY: key, RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000', ...env } })
    processes = [api]
    await api.ready(45_000)
    closeService = async () => {
      await api.stop()
      rmSync(tmp, { recursive: true, force: true })
    }
  }
  const created = await call('POST', '/v1/workspaces', { name: 'Outgoing' })
  expect(created.status).toBe(201)
  ws = created.body.data.id
}, 90_000)

afterAll(async () => {
  for (const release of [...hanging]) release()
  await closeService?.()
  await killAll()
  await otlp?.close()
  await fake?.close()
  await mcp?.close()
  await trap?.stop(true)
  if (models) rmSync(models.dir, { recursive: true, force: true })
})

/** Where a token was found: the spans' and the logs' text around it. */
function leaks(): string[] {
  const found: string[] = []
  const spans = otlp.spans.map((s) => JSON.stringify([s.name, s.attributes, s.events, s.status]))
  const lines = output().split('\n')
  for (const token of [PATH_TOKEN, QUERY_TOKEN]) {
    for (const s of spans) if (s.includes(token)) found.push(`span: ${s.slice(0, 600)}`)
    for (const l of lines) if (l.includes(token)) found.push(`log: ${l.slice(0, 600)}`)
  }
  return found
}

describe('outgoing URLs: no path or query on a span or in a log line', () => {
  test('http_request nodes: 200, 500 (its body echoing the URL), a refused connection, a time-out', async () => {
    const cases = [
      { url: trapUrl('ok'), status: 'completed' },
      { url: trapUrl('fail'), status: 'completed' },
      { url: refusedUrl(), status: 'failed', code: 'http_error' },
      { url: trapUrl('hang'), status: 'failed', code: 'http_timeout' },
    ]
    for (const c of cases) {
      const wf = await call('POST', '/v1/workflows', {
        workspace_id: ws,
        name: `Outgoing ${c.url.slice(-60)}`,
        graph: chain(
          { id: 'start', type: 'start', config: {} },
          { id: 'fetch', type: 'http_request', config: { method: 'GET', url: c.url, timeout_ms: 300 } },
          { id: 'end', type: 'end', config: { outputs: { status: '{{nodes.fetch.output.status}}' } } },
        ),
      })
      expect(wf.status).toBe(201)
      const run = await call('POST', `/v1/workflows/${wf.body.data.id}/runs`, { inputs: {} })
      expect(run.status).toBe(200)
      expect(run.body.status).toBe(c.status)
      if (c.code) {
        expect(run.body.error.code).toBe(c.code)
        // The run's error names where it went (scheme, host, port), not the path or query.
        expect(run.body.error.message).not.toContain(PATH_TOKEN)
        expect(run.body.error.message).not.toContain(QUERY_TOKEN)
        await otlp.waitFor((spans) => spans.find((s) => s.name === 'workflow.run' && s.attributes.run_id === run.body.run_id && s.status.code === 2), 'the failed run span')
      }
    }
    // Each call had its client span, the failed ones with an error status.
    await otlp.waitFor((spans) => spans.filter((s) => s.name === 'HTTP GET' && s.status.code === 2).length >= 2 && true, 'two failed HTTP GET spans')
    expect(leaks()).toEqual([])
  }, 60_000)

  test('an agent\'s http tools: 200, 500 echoing the URL, a refused connection', async () => {
    const agent = await call('POST', '/v1/agents', {
      workspace_id: ws,
      name: 'Fetcher',
      type: 'agent',
      model: 'fake-chat',
      tools: [
        {
          type: 'http', name: 'fetch_page', description: 'Fetches a page', method: 'GET', url: `http://127.0.0.1:${trap.port}/${PATH_TOKEN}/{kind}?token=${QUERY_TOKEN}`,
          parameters: { type: 'object', properties: { kind: { type: 'string' } }, required: ['kind'] },
        },
        {
          type: 'http', name: 'post_dead', description: 'Posts to a dead service', method: 'POST', url: refusedUrl(),
          parameters: { type: 'object', properties: { note: { type: 'string' } } },
        },
      ],
    })
    expect(agent.status).toBe(201)
    fake.script('up-chat', [
      { toolCalls: [
        { id: 'call_ok', name: 'fetch_page', arguments: { kind: 'ok' } },
        { id: 'call_fail', name: 'fetch_page', arguments: { kind: 'fail', extra: QUERY_TOKEN } },
        { id: 'call_dead', name: 'post_dead', arguments: { note: 'hello' } },
      ] },
      { text: 'Done.' },
    ])
    const res = await call('POST', `/v1/agents/${agent.body.data.id}/chat`, { message: 'Fetch them all', user_id: 'u1' })
    expect(res.status).toBe(200)
    const server = await otlp.waitFor((spans) => spans.find((s) => s.kind === 2 && s.attributes.request_id === res.headers.get('x-request-id')), 'the chat request span')
    await otlp.waitFor((spans) => spans.filter((s) => s.traceId === server.traceId && s.name.startsWith('execute_tool')).length === 3 && true, 'three execute_tool spans')
    const dead = otlp.spans.find((s) => s.traceId === server.traceId && s.name === 'execute_tool post_dead')!
    expect(dead.status.code).toBe(2)
    expect(leaks()).toEqual([])
  }, 60_000)

  test('MCP servers: a working one, one answering 500 echoing the URL, one refused, one that never answers', async () => {
    const tools = [
      { type: 'mcp', name: 'good', server_url: `${mcp.url}?key=${QUERY_TOKEN}`, allowed_tools: ['lookup'] },
      { type: 'mcp', name: 'failing', server_url: trapUrl('fail') },
      { type: 'mcp', name: 'dead', server_url: refusedUrl() },
      { type: 'mcp', name: 'silent', server_url: trapUrl('hang') },
    ]
    const agent = await call('POST', '/v1/agents', { workspace_id: ws, name: 'Mcp user', type: 'agent', model: 'fake-chat', tools })
    expect(agent.status).toBe(201)
    fake.script('up-chat', [{ toolCalls: [{ id: 'call_m', name: 'good__lookup', arguments: { id: 'T-1' } }] }, { text: 'T-1 is open.' }])
    const before = mcp.count('tools/call')
    const res = await call('POST', `/v1/agents/${agent.body.data.id}/chat`, { message: 'Is T-1 open?', user_id: 'u1' })
    expect(res.status).toBe(200)
    expect({ calls: mcp.count('tools/call') - before, answer: res.body, logs: logLines().filter((l) => l.includes('mcp') || l.includes('MCP')) }).toMatchObject({ calls: 1 })
    // The three that could not be listed were each logged (a warning naming the server by its origin).
    await waitFor(() => logLines().filter((l) => l.includes('tools could not be listed')).length >= 3, { timeoutMs: 15_000, what: 'three warnings of servers not listed' })
    await otlp.waitFor((spans) => spans.find((s) => s.name === 'execute_tool good__lookup'), 'the MCP tool span')
    expect(leaks()).toEqual([])
  }, 60_000)

  test('model providers whose base URL holds a token: 500 echoing the URL, a refused connection, a time-out', async () => {
    for (const model of ['m-fail', 'm-refused', 'm-hang']) {
      const res = await fetch(`${api.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-workspace-id': ws },
        body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hello' }] }),
      })
      const text = await res.text()
      expect(res.status).toBeGreaterThanOrEqual(500)
      expect(text).not.toContain(PATH_TOKEN)
      await otlp.waitFor((spans) => spans.find((s) => s.name === `chat ${model}` && s.status.code === 2), `the failed chat span of ${model}`)
    }
    expect(leaks()).toEqual([])
  }, 60_000)

  test('webhook deliveries: 500 echoing the URL, a refused connection, a time-out; one log line per failed attempt with its delivery id and reason', async () => {
    const deliveries: { webhook: string; delivery: string }[] = []
    for (const url of [trapUrl('fail'), refusedUrl(), trapUrl('hang')]) {
      const hook = await call('POST', '/v1/webhooks', { url, events: ['webhook.test'], secret: 'whsec-outgoing-0123456789', workspace_id: ws })
      expect(hook.status).toBe(201)
      const ping = await call('POST', `/v1/webhooks/${hook.body.data.id}/ping`)
      expect(ping.status).toBeLessThan(300)
      deliveries.push({ webhook: hook.body.data.id, delivery: ping.body.data.id })
    }
    const ended: any[] = []
    for (const d of deliveries) {
      let row: any
      await waitFor(async () => {
        row = (await call('GET', `/v1/webhooks/${d.webhook}/deliveries/${d.delivery}`)).body.data
        return row?.status === 'failed'
      }, { timeoutMs: 20_000, what: `delivery ${d.delivery} to fail` })
      ended.push(row)
    }
    // Every line is JSON, its level a name.
    const parsed = logLines().map((l) => JSON.parse(l))
    for (const line of parsed) expect(LEVELS.has(line.level)).toBe(true)
    for (const row of ended) {
      expect(row.attempts.length).toBe(2)
      const lines = await (async () => {
        let found: any[] = []
        await waitFor(() => (found = logLines().map((l) => JSON.parse(l)).filter((l) => l.msg === 'webhook delivery attempt failed' && l.delivery_id === row.id)).length >= 2, { timeoutMs: 10_000, what: `the log lines of ${row.id}` })
        return found
      })()
      // Exactly one per attempt, each with its reason: what the delivery's record says.
      expect(lines.map((l) => [l.level, l.attempt, l.reason])).toEqual(row.attempts.map((a: any) => ['warn', a.attempt, a.error]))
      for (const l of lines) expect(typeof l.reason === 'string' && l.reason.length > 0).toBe(true)
    }
    await otlp.waitFor((spans) => spans.filter((s) => s.name === 'webhook webhook.test' && s.status.code === 2).length >= 6 && true, 'six failed attempt spans')
    expect(leaks()).toEqual([])
  }, 60_000)
})
