import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Server } from 'bun'
import { loadConfig, type Config } from '../../src/config'
import { searchBases } from '../../src/domain/knowledge/search'
import { executors } from '../../src/domain/workflows/nodes'
import { EXPRESSION_LIMITS } from '../../src/domain/workflows/nodes/condition'
import type { GraphNode, NodeContext, NodeResult, NodeType, Variables } from '../../src/domain/workflows/types'
import { startFakeProvider, type FakeProvider } from '../helpers/fake-provider'
import { keyFor, startHarness, waitFor, workspaceOf, type Harness } from '../helpers/harness'
import { failure, vars } from '../helpers/nodes'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Every executor called directly with a NodeContext built here: the real gateway of a harness (the
 * built-in local-chat model, priced through MODELS_FILE, and a loopback provider for upstream
 * failures) and a loopback HTTP server for http_request. The code node's sandbox has its own file,
 * workflow-code.test.ts.
 */

let h: Harness
let fake: FakeProvider
let server: Server<undefined>
let base: string
let dir: string
let ws: string
let poorWs: string
/** http and private addresses allowed, as a self-hosted test setup would. */
let open: Config
/** The defaults: https only, public addresses only. */
let strict: Config
const PRICING = { input_per_1k: 1, output_per_1k: 2 }
const seen: { path: string; method: string; headers: Record<string, string>; body: string }[] = []
let hanging = 0
/** /slow requests whose client went away. */
let released = 0

beforeAll(async () => {
  fake = await startFakeProvider()
  dir = mkdtempSync(join(tmpdir(), 'ap-nodes-'))
  const file = join(dir, 'models.json')
  const route = (model: string) => [{ provider: 'fake', model }]
  writeFileSync(
    file,
    JSON.stringify({
      providers: [{ id: 'fake', kind: 'openai', base_url: fake.baseUrl, api_key: 'sk-fake', timeout_ms: 300 }],
      models: [
        { id: 'priced-chat', type: 'llm', vendor: 'test', routes: [{ provider: 'local', model: 'local-chat' }], pricing: PRICING },
        { id: 'broken', type: 'llm', vendor: 'test', routes: route('broken-up'), pricing: PRICING },
        { id: 'silent', type: 'llm', vendor: 'test', routes: route('silent-up'), pricing: PRICING },
        { id: 'slow', type: 'llm', vendor: 'test', routes: route('slow-up'), pricing: PRICING },
      ],
    }),
  )
  fake.script('broken-up', [{ status: 500 }])
  fake.script('silent-up', ['hang'])
  fake.script('slow-up', [{ chunks: Array.from({ length: 40 }, (_, i) => `w${i} `), delayMs: 50 }])
  h = await startHarness({ MODELS_FILE: file })
  const key = await keyFor(h, 'nodes-user')
  ws = await workspaceOf(h, key, 'Nodes')
  poorWs = await workspaceOf(h, key, 'Poor')
  const budget = await h.call('PUT', `/v1/workspaces/${poorWs}/budget`, { key, body: { credits: 0.000001, period: 'month', thresholds: [], hard_limit: true } })
  expect(budget.status).toBe(200)
  open = loadConfig({ WEBHOOK_ALLOW_HTTP: 'true', WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' })
  strict = loadConfig({})

  server = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    idleTimeout: 0,
    async fetch(req) {
      const path = new URL(req.url).pathname
      seen.push({ path, method: req.method, headers: Object.fromEntries(req.headers), body: await req.text() })
      switch (path) {
        case '/json':
          return Response.json({ id: 7, tags: ['a'] }, { headers: { 'x-trace': 'abc' } })
        case '/echo': {
          const last = seen.at(-1)!
          return Response.json({ method: last.method, type: last.headers['content-type'] ?? null, body: last.body })
        }
        case '/text':
          return new Response('plain words', { headers: { 'content-type': 'text/plain' } })
        case '/fail':
          return Response.json({ error: 'down' }, { status: 500 })
        case '/redirect':
          return new Response(null, { status: 302, headers: { location: 'http://169.254.169.254/latest/meta-data' } })
        case '/big':
          return new Response('x'.repeat(2 * 1024 * 1024), { headers: { 'content-type': 'text/plain' } })
        case '/slow':
          hanging++
          return new Promise<Response>((resolve) =>
            req.signal.addEventListener('abort', () => (released++, resolve(new Response(null, { status: 503 }))), { once: true }),
          )
      }
      return new Response('not found', { status: 404 })
    },
  })
  base = `http://127.0.0.1:${server.port}`
})

afterAll(async () => {
  server?.stop(true)
  await fake?.close()
  await h?.close()
  if (dir) rmSync(dir, { recursive: true, force: true })
})

interface Run {
  ctx: NodeContext
  deltas: string[]
  controller: AbortController
}

function context(over: { config?: Config; workspaceId?: string; vars?: Variables } = {}): Run {
  const controller = new AbortController()
  const deltas: string[] = []
  const ctx: NodeContext = {
    vars: over.vars ?? vars,
    signal: controller.signal,
    config: over.config ?? open,
    gateway: h.deps.models,
    call: { workspaceId: over.workspaceId ?? ws, requestId: `req_nodes_${Math.random().toString(36).slice(2)}` },
    delta: (text) => deltas.push(text),
    knowledge: { search: (ids, input, signal) => searchBases(h.deps, over.workspaceId ?? ws, ids, input, { workspaceId: over.workspaceId ?? ws, requestId: 'req_nodes' }, signal) },
  }
  return { ctx, deltas, controller }
}

const node = (type: NodeType, config: Record<string, unknown>, id = `n_${type}`): GraphNode => ({ id, type, config })

function exec(type: NodeType, config: Record<string, unknown>, run: Run = context()): Promise<NodeResult> {
  return executors[type](node(type, config), run.ctx)
}

describe('start, template, end, wait, knowledge_retrieval', () => {
  test('start returns the inputs', async () => {
    expect(await exec('start', { inputs: [] })).toEqual({ output: vars.inputs })
  })

  test('template renders text; a missing input is a template_error', async () => {
    expect(await exec('template', { template: 'Hi {{inputs.name}}, {{nodes.search.output.total}} result' })).toEqual({ output: { text: 'Hi Ada, 1 result' } })
    expect(await exec('template', { template: '{{inputs.score}}' })).toEqual({ output: { text: '0.7' } })
    const err = await failure(exec('template', { template: '{{inputs.nope}}' }))
    expect(err.code).toBe('template_error')
  })

  test('end maps outputs, a lone placeholder keeping its type', async () => {
    const res = await exec('end', { outputs: { greeting: 'Hello {{inputs.name}}', score: '{{inputs.score}}', items: '{{inputs.items}}', fixed: 'x' } })
    expect(res.output).toEqual({ greeting: 'Hello Ada', score: 0.7, items: [1, 2, 3], fixed: 'x' })
  })

  test('wait belongs to the engine; knowledge_retrieval of an unknown base is knowledge_base_not_found', async () => {
    expect((await failure(exec('wait', { seconds: 1 }))).code).toBe('internal')
    const err = await failure(exec('knowledge_retrieval', { knowledge_base_ids: ['kb_01jbz3k9x8q7r6s5t4v3w2y1z0'], query: '{{inputs.name}}' }))
    expect(err.code).toBe('knowledge_base_not_found')
    expect(err.message).toContain('kb_01jbz3k9x8q7r6s5t4v3w2y1z0')
  })
})

describe('condition', () => {
  const cases = [
    { id: 'high', when: 'inputs.score > 0.8' },
    { id: 'medium', when: 'inputs.score > 0.5 and $count(nodes.search.output.results) > 0' },
    { id: 'also', when: 'true' },
  ]

  test('the first true case chooses the branch', async () => {
    expect(await exec('condition', { cases })).toEqual({ output: { matched: 'medium' }, handle: 'medium' })
  })

  test('none true → default; no match and an empty sequence are false, a found value is true', async () => {
    const none = [
      { id: 'a', when: 'inputs.score > 0.9' },
      { id: 'b', when: 'nodes.search.output.results[score > 5]' },
      { id: 'c', when: 'inputs.missing' },
      { id: 'd', when: 'inputs.items[$ > 10]' },
    ]
    expect(await exec('condition', { cases: none })).toEqual({ output: { matched: 'default' }, handle: 'default' })
    expect((await exec('condition', { cases: [{ id: 'found', when: 'nodes.search.output.results[score > 0.5]' }] })).handle).toBe('found')
  })

  test('a syntax error or a failing expression is an expression_error naming the case', async () => {
    const syntax = await failure(exec('condition', { cases: [{ id: 'bad', when: 'inputs.score >' }] }))
    expect(syntax.code).toBe('expression_error')
    expect(syntax.message).toContain('case bad')
    const runtime = await failure(exec('condition', { cases: [{ id: 'fn', when: '$nope(1)' }] }))
    expect(runtime.code).toBe('expression_error')
  })

  test('runaway expressions are stopped by the guardrails (depth, sequence length, time)', async () => {
    const stopped = async (when: string, code: string) => {
      const err = await failure(exec('condition', { cases: [{ id: 'r', when }] }))
      expect(err.code).toBe('expression_error')
      expect(err.message).toContain(code)
    }
    await stopped('($f := function($n) { $n = 0 ? 0 : 1 + $f($n - 1) }; $f(100000) > 0)', 'D1011')
    await stopped('$count([1..1000000].($ * 2)) > 0', 'D2015')
    const started = performance.now()
    await stopped('$sum([1..1000].($sum([1..1000].($ * 2)))) > 0', 'D1012')
    expect(performance.now() - started).toBeLessThan(EXPRESSION_LIMITS.timeout + 1_000)
  })
})

describe('llm', () => {
  const messages = [
    { role: 'system', content: 'The user is called {{inputs.name}}. Ada wrote the first program.' },
    { role: 'user', content: 'Who wrote the first program, {{inputs.name}}?' },
  ]

  test('streams its deltas, which concatenate to the text; usage and credits are the charged ones', async () => {
    const run = context()
    const res = await exec('llm', { model: 'priced-chat', messages, temperature: 0, max_tokens: 200 }, run)
    const out = res.output as { text: string; usage: { tokens_in: number; tokens_out: number; credits: number } }
    expect(out.text.length).toBeGreaterThan(0)
    expect(run.deltas.length).toBeGreaterThan(1)
    expect(run.deltas.join('')).toBe(out.text)
    expect(out.usage.tokens_in).toBeGreaterThan(0)
    expect(out.usage.tokens_out).toBeGreaterThan(0)
    const credits = Math.round(((out.usage.tokens_in * PRICING.input_per_1k + out.usage.tokens_out * PRICING.output_per_1k) / 1000) * 1e6) / 1e6
    expect(out.usage.credits).toBe(credits)
    expect(res.usage).toEqual(out.usage)
    await h.deps.models.charges.flush()
    const [row] = await h.deps.db.sql<{ credits: string }[]>`select credits::text as credits from credit_ledger where request_id = ${run.ctx.call.requestId}`
    expect(Number(row!.credits)).toBe(credits)
  })

  test.each([
    ['an unknown model', 'no-such-model', 'model_not_found'],
    ['a model of another type', 'local-embed', 'invalid_config'],
    ['an upstream 500', 'broken', 'upstream_error'],
    ['an upstream that never answers', 'silent', 'upstream_timeout'],
  ])('%s (%s) → %s', async (_what, model, code) => {
    const err = await failure(exec('llm', { model, messages }))
    expect(err.code).toBe(code)
  })

  test('a workspace over its hard budget → budget_exceeded', async () => {
    await exec('llm', { model: 'priced-chat', messages }, context({ workspaceId: poorWs }))
    const err = await failure(exec('llm', { model: 'priced-chat', messages }, context({ workspaceId: poorWs })))
    expect(err.code).toBe('budget_exceeded')
  })

  test('aborting stops the stream: the node fails as aborted and the upstream request is closed', async () => {
    const run = context()
    const before = fake.requests.length
    const pending = failure(exec('llm', { model: 'slow', messages }, run))
    await waitFor(() => run.deltas.length >= 2, { what: 'the first deltas' })
    run.controller.abort()
    expect((await pending).code).toBe('aborted')
    expect(run.deltas.length).toBeLessThan(40)
    await waitFor(() => fake.requests.slice(before).some((r) => r.model === 'slow-up' && r.closed), { what: 'the upstream stream to be closed' })
  })
})

describe('http_request', () => {
  const call = (config: Record<string, unknown>, run?: Run) => exec('http_request', config, run)
  const last = () => seen.at(-1)!

  test('GET: status, headers as an object, a JSON body parsed; Host and User-Agent sent', async () => {
    const res = await call({ method: 'GET', url: `${base}/json?who={{inputs.name}}`, headers: { 'X-Name': '{{inputs.name}}' } })
    const out = res.output as { status: number; headers: Record<string, string>; body: unknown }
    expect(out.status).toBe(200)
    expect(out.body).toEqual({ id: 7, tags: ['a'] })
    expect(out.headers['x-trace']).toBe('abc')
    expect(out.headers['content-type']).toContain('application/json')
    expect(last().headers['x-name']).toBe('Ada')
    expect(last().headers.host).toBe(`127.0.0.1:${server.port}`)
    expect(last().headers['user-agent']).toContain('agent-platform-api-workflows')
  })

  test('POST: an object body is rendered and sent as JSON; a string body as text', async () => {
    const json = await call({ method: 'POST', url: `${base}/echo`, body: { name: '{{inputs.name}}', score: '{{inputs.score}}', items: '{{inputs.items}}' } })
    const echoed = (json.output as { body: { method: string; type: string; body: string } }).body
    expect(echoed.method).toBe('POST')
    expect(echoed.type).toBe('application/json')
    expect(JSON.parse(echoed.body)).toEqual({ name: 'Ada', score: 0.7, items: [1, 2, 3] })
    const text = await call({ method: 'PUT', url: `${base}/echo`, headers: { 'content-type': 'text/plain' }, body: 'name={{inputs.name}}' })
    expect((text.output as { body: unknown }).body).toEqual({ method: 'PUT', type: 'text/plain', body: 'name=Ada' })
    expect((await call({ method: 'GET', url: `${base}/text` })).output).toMatchObject({ status: 200, body: 'plain words' })
  })

  test('a 500 (or 404, or a redirect) is the output, not a failure; redirects are not followed', async () => {
    expect((await call({ method: 'GET', url: `${base}/fail` })).output).toMatchObject({ status: 500, body: { error: 'down' } })
    expect((await call({ method: 'DELETE', url: `${base}/missing` })).output).toMatchObject({ status: 404, body: 'not found' })
    const redirect = (await call({ method: 'GET', url: `${base}/redirect` })).output as { status: number; headers: Record<string, string> }
    expect(redirect.status).toBe(302)
    expect(redirect.headers.location).toBe('http://169.254.169.254/latest/meta-data')
  })

  test('time-out → http_timeout; abort → aborted; both close the connection', async () => {
    const started = performance.now()
    const timedOut = await failure(call({ method: 'GET', url: `${base}/slow`, timeout_ms: 200 }))
    expect(timedOut.code).toBe('http_timeout')
    expect(performance.now() - started).toBeLessThan(2_000)
    const run = context()
    const before = hanging
    const pending = failure(call({ method: 'GET', url: `${base}/slow`, timeout_ms: 30_000 }, run))
    await waitFor(() => hanging > before, { what: 'the request to arrive' })
    run.controller.abort()
    expect((await pending).code).toBe('aborted')
    await waitFor(() => released === hanging, { what: 'both connections to be closed' })
  })

  test('a body over 1 MB, a refused connection → http_error', async () => {
    const big = await failure(call({ method: 'GET', url: `${base}/big` }))
    expect(big.code).toBe('http_error')
    expect(big.message).toContain('1048576')
    const probe = Bun.serve({ hostname: '127.0.0.1', port: 0, fetch: () => new Response() })
    const closed = probe.port
    probe.stop(true)
    expect((await failure(call({ method: 'GET', url: `http://127.0.0.1:${closed}/` }))).code).toBe('http_error')
  })

  test('the SSRF rules of webhooks: http and private addresses refused without the flags', async () => {
    const refused = async (url: string, config: Config) => {
      const err = await failure(call({ method: 'GET', url }, context({ config })))
      expect(err.code).toBe('ssrf_refused')
      return err.message
    }
    const before = seen.length
    expect(await refused(`${base}/json`, strict)).toContain('https')
    const httpOnly = { ...strict, webhookAllowHttp: true }
    expect(await refused(`${base}/json`, httpOnly)).toContain('127.0.0.1')
    expect(await refused('http://[::1]:9/', httpOnly)).toContain('::1')
    // IPv6 forms of 127.0.0.1 and of the metadata address, at the port where the server listens.
    expect(await refused(`http://[::127.0.0.1]:${server.port}/json`, httpOnly)).toContain('::7f00:1')
    expect(await refused(`http://[::ffff:0:127.0.0.1]:${server.port}/json`, httpOnly)).toContain('::ffff:0:7f00:1')
    expect(await refused(`http://[64:ff9b::127.0.0.1]:${server.port}/json`, httpOnly)).toContain('64:ff9b::7f00:1')
    expect(await refused('http://[::a9fe:a9fe]/latest/meta-data', httpOnly)).toContain('::a9fe:a9fe')
    expect(await refused('http://localhost:9/', httpOnly)).toMatch(/127\.0\.0\.1|::1/)
    expect(await refused('https://10.0.0.1/', strict)).toContain('10.0.0.1')
    expect(await refused('https://169.254.169.254/latest/meta-data', strict)).toContain('169.254.169.254')
    expect(await refused('https://user:pw@example.com/', strict)).toContain('credentials')
    expect(await refused('ftp://example.com/', strict)).toContain('https')
    expect(await refused('{{inputs.name}}', strict)).toContain('valid absolute URL')
    expect(seen.length).toBe(before)
  })

  test('a GET with a body is a configuration error', async () => {
    expect((await failure(call({ method: 'GET', url: `${base}/json`, body: { a: 1 } }))).code).toBe('invalid_config')
  })
})
