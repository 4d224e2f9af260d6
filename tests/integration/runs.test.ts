import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Server } from 'bun'
import { startWorkers, type Workers } from '../../src/workers'
import { startFakeProvider, type FakeProvider } from '../helpers/fake-provider'
import { keyFor, startHarness, waitFor, workspaceOf, type Answer, type Harness } from '../helpers/harness'

/**
 * Runs end to end in-process: the real app and the real workers (run engine, timers, outbox fan-out,
 * webhook deliveries) on a fresh database and Redis. The only stand-ins are loopback servers: an
 * HTTP target for http_request nodes, a slow model provider (to cancel an LLM node mid-stream) and
 * a plain-HTTP webhook receiver.
 */

let h: Harness
let workers: Workers
let fake: FakeProvider
let target: Server<undefined>
let hooks: Server<undefined>
let dir: string
let owner: string
let reader: string
let outsider: string
let ws: string
const hookRequests: { path: string; headers: Record<string, string>; json: any }[] = []

type Node = { id: string; type: string; name?: string; config: Record<string, unknown> }
type Edge = { source: string; target: string; source_handle?: string }
interface Ev {
  seq: number
  event: string
  data: any
}

const start = (inputs: unknown[] = []): Node => ({ id: 'start', type: 'start', config: { inputs } })
const tpl = (id: string, template: string): Node => ({ id, type: 'template', config: { template } })
const end = (outputs: Record<string, string>): Node => ({ id: 'end', type: 'end', config: { outputs } })
const wait = (id: string, seconds: number): Node => ({ id, type: 'wait', config: { seconds } })
/** Nodes joined one after the other. */
const chain = (...nodes: Node[]) => ({ nodes, edges: nodes.slice(1).map((n, i) => ({ source: nodes[i]!.id, target: n.id })) })

beforeAll(async () => {
  fake = await startFakeProvider()
  // 200 chunks 20 ms apart: a stream of ~4 s, long enough to cancel in the middle.
  fake.script('slow-up', [{ chunks: Array.from({ length: 200 }, (_, i) => `t${i} `), delayMs: 20 }])
  dir = mkdtempSync(join(tmpdir(), 'ap-runs-'))
  const modelsFile = join(dir, 'models.json')
  writeFileSync(
    modelsFile,
    JSON.stringify({
      providers: [{ id: 'fake', kind: 'openai', base_url: fake.baseUrl, api_key: 'sk-fake', timeout_ms: 30_000 }],
      models: [{ id: 'slow', type: 'llm', vendor: 'test', routes: [{ provider: 'fake', model: 'slow-up' }], pricing: { input_per_1k: 0, output_per_1k: 0 } }],
    }),
  )
  target = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    async fetch(req) {
      const url = new URL(req.url)
      return Response.json({ path: url.pathname, q: url.searchParams.get('q'), method: req.method, tier: 'vip' }, { headers: { 'x-trace': 'abc' } })
    },
  })
  hooks = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    async fetch(req) {
      hookRequests.push({ path: new URL(req.url).pathname, headers: Object.fromEntries(req.headers), json: await req.json().catch(() => null) })
      return Response.json({ ok: true })
    },
  })
  h = await startHarness({
    MODELS_FILE: modelsFile,
    WEBHOOK_ALLOW_HTTP: 'true',
    WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
    RATE_LIMIT_BURST: '100000',
    RATE_LIMIT_PER_SECOND: '100000',
  })
  workers = await startWorkers(h.deps)
  ;[owner, reader, outsider] = (await Promise.all(['runs-owner', 'runs-reader', 'runs-outsider'].map((u) => keyFor(h, u)))) as [string, string, string]
  ws = await workspaceOf(h, owner, 'Runs')
  await workspaceOf(h, outsider, 'Elsewhere')
  const member = await h.call('POST', `/v1/workspaces/${ws}/members`, { key: owner, body: { user_id: 'runs-reader', role: 'readonly' } })
  expect(member.status).toBe(201)
})

afterAll(async () => {
  await workers?.stop()
  await h?.close()
  await fake?.close()
  await target?.stop(true)
  await hooks?.stop(true)
  if (dir) rmSync(dir, { recursive: true, force: true })
})

let wfSeq = 0
/** Creates a workflow in the test workspace; returns its id. */
async function workflow(graph: { nodes: Node[]; edges: Edge[] }): Promise<string> {
  const res = await h.call('POST', '/v1/workflows', { key: owner, body: { workspace_id: ws, name: `Runs ${++wfSeq}`, graph } })
  if (res.status !== 201) throw new Error(`could not create a workflow: ${res.status} ${res.text}`)
  return res.body.data.id
}

const trigger = (wf: string, inputs: Record<string, unknown> = {}, opts: { async?: boolean; key?: string; headers?: Record<string, string> } = {}) =>
  h.call('POST', `/v1/workflows/${wf}/runs${opts.async ? '?async=true' : ''}`, { key: opts.key ?? owner, body: { inputs }, headers: opts.headers })

async function eventsOf(runId: string, key = owner): Promise<Ev[]> {
  const res = await h.call('GET', `/v1/runs/${runId}/events`, { key })
  expect(res.status).toBe(200)
  return res.body.data.map((e: Ev) => ({ seq: e.seq, event: e.event, data: e.data }))
}

async function runOf(runId: string): Promise<any> {
  const res = await h.call('GET', `/v1/runs/${runId}`, { key: owner })
  expect(res.status).toBe(200)
  return res.body.data
}

const finished = (runId: string, timeoutMs = 10_000) =>
  waitFor(async () => {
    const run = await runOf(runId)
    return run.status !== 'running' ? run : null
  }, { timeoutMs, what: `run ${runId} to finish` })

const starts = (events: Ev[], node: string) => events.filter((e) => e.event === 'node_start' && e.data.node_id === node)
const ends = (events: Ev[], node: string) => events.filter((e) => e.event === 'node_end' && e.data.node_id === node)

/** The outbox rows of a run. */
const outboxOf = (runId: string) => h.deps.db.sql<{ type: string; data: any }[]>`select type, data from events where data->>'run_id' = ${runId}`

/** Strict SSE framing: `id:`, `event:`, `data:` lines, one blank line after each event. */
function parseSse(text: string): Ev[] {
  expect(text.endsWith('\n\n')).toBe(true)
  return text
    .slice(0, -2)
    .split('\n\n')
    .map((block) => {
      const lines = block.split('\n')
      expect(lines.length).toBe(3)
      const [id, event, data] = lines as [string, string, string]
      expect(id).toMatch(/^id: \d+$/)
      expect(event).toMatch(/^event: [a-z_]+$/)
      expect(data.startsWith('data: ')).toBe(true)
      return { seq: Number(id.slice(4)), event: event.slice(7), data: JSON.parse(data.slice(6)) }
    })
}

describe('sync runs', () => {
  test('a 5-node template chain completes with its outputs, zero usage and a duration', async () => {
    const wf = await workflow(
      chain(
        start([{ name: 'name', type: 'string', required: true }]),
        { ...tpl('a', 'Hello {{inputs.name}}'), name: 'Greet' },
        tpl('b', '{{nodes.a.output.text}}!'),
        tpl('c', '[{{nodes.b.output.text}}]'),
        end({ text: '{{nodes.c.output.text}}', first: '{{nodes.a.output.text}}' }),
      ),
    )
    const res = await trigger(wf, { name: 'Ada' })
    expect(res.status).toBe(200)
    expect(Object.keys(res.body).sort()).toEqual(['duration_ms', 'outputs', 'request_id', 'run_id', 'status', 'usage', 'workflow_id'])
    expect(res.body).toMatchObject({ workflow_id: wf, status: 'completed', outputs: { text: '[Hello Ada!]', first: 'Hello Ada' }, usage: { tokens_in: 0, tokens_out: 0, credits: 0 } })
    expect(res.body.run_id).toMatch(/^run_/)
    expect(Number.isInteger(res.body.duration_ms) && res.body.duration_ms >= 0).toBe(true)
    const events = await eventsOf(res.body.run_id)
    for (const n of ['start', 'a', 'b', 'c', 'end']) {
      expect(starts(events, n).length).toBe(1)
      expect(ends(events, n).length).toBe(1)
    }
    // One after the other: each node starts after its predecessor ended.
    const order = ['start', 'a', 'b', 'c', 'end']
    for (let i = 1; i < order.length; i++) expect(starts(events, order[i]!)[0]!.seq).toBeGreaterThan(ends(events, order[i - 1]!)[0]!.seq)
    expect(ends(events, 'c')[0]!.data.output).toEqual({ text: '[Hello Ada!]' })
    // `node` is the node's name when it has one, else its id.
    expect(starts(events, 'a')[0]!.data.node).toBe('Greet')
    expect(ends(events, 'a')[0]!.data.node).toBe('Greet')
    expect(starts(events, 'b')[0]!.data.node).toBe('b')
  })

  test('a condition takes one branch; the other never starts', async () => {
    const wf = await workflow({
      nodes: [
        start([{ name: 'score', type: 'number', required: true }]),
        { id: 'route', type: 'condition', config: { cases: [{ id: 'high', when: 'inputs.score > 0.5' }] } },
        tpl('hi', 'high'),
        tpl('lo', 'low'),
        tpl('summary', 'branch {{nodes.route.output.matched}}'),
        end({ branch: '{{nodes.summary.output.text}}' }),
      ],
      edges: [
        { source: 'start', target: 'route' },
        { source: 'route', target: 'hi', source_handle: 'high' },
        { source: 'route', target: 'lo', source_handle: 'default' },
        { source: 'hi', target: 'summary' },
        { source: 'lo', target: 'summary' },
        { source: 'summary', target: 'end' },
      ],
    })
    for (const [score, taken, skipped, matched] of [[0.9, 'hi', 'lo', 'high'], [0.1, 'lo', 'hi', 'default']] as const) {
      const res = await trigger(wf, { score })
      expect(res.body).toMatchObject({ status: 'completed', outputs: { branch: `branch ${matched}` } })
      const events = await eventsOf(res.body.run_id)
      expect(starts(events, taken).length).toBe(1)
      expect(starts(events, skipped).length).toBe(0)
      expect(ends(events, skipped).length).toBe(0)
      expect(starts(events, 'summary').length).toBe(1)
    }
  })

  test('parallel branches join: the join node runs once, after both ended', async () => {
    const wf = await workflow({
      nodes: [start(), tpl('left', 'L'), tpl('right', 'R'), tpl('join', '{{nodes.left.output.text}}+{{nodes.right.output.text}}'), end({ joined: '{{nodes.join.output.text}}' })],
      edges: [
        { source: 'start', target: 'left' },
        { source: 'start', target: 'right' },
        { source: 'left', target: 'join' },
        { source: 'right', target: 'join' },
        { source: 'join', target: 'end' },
      ],
    })
    const res = await trigger(wf)
    expect(res.body).toMatchObject({ status: 'completed', outputs: { joined: 'L+R' } })
    const events = await eventsOf(res.body.run_id)
    expect(starts(events, 'left').length).toBe(1)
    expect(starts(events, 'right').length).toBe(1)
    expect(starts(events, 'join').length).toBe(1)
    expect(ends(events, 'join').length).toBe(1)
    const joinAt = starts(events, 'join')[0]!.seq
    expect(joinAt).toBeGreaterThan(ends(events, 'left')[0]!.seq)
    expect(joinAt).toBeGreaterThan(ends(events, 'right')[0]!.seq)
  })

  test("a code node's output is used downstream, types kept by a lone placeholder", async () => {
    const wf = await workflow(
      chain(
        start([{ name: 'x', type: 'number', required: true }]),
        { id: 'calc', type: 'code', config: { source: 'function main(vars) { return { n: vars.inputs.x * 2, list: [1, 2, 3] } }' } },
        tpl('say', 'n={{nodes.calc.output.n}} second={{nodes.calc.output.list.1}}'),
        end({ n: '{{nodes.calc.output.n}}', said: '{{nodes.say.output.text}}' }),
      ),
    )
    const res = await trigger(wf, { x: 21 })
    expect(res.body).toMatchObject({ status: 'completed', outputs: { n: 42, said: 'n=42 second=2' } })
  })

  test('an llm node (local-chat) streams message deltas that make up its text; usage counted', async () => {
    const wf = await workflow(
      chain(
        start([{ name: 'q', type: 'string', required: true }]),
        { id: 'answer', type: 'llm', config: { model: 'local-chat', messages: [{ role: 'system', content: 'Runs carry their events in order.' }, { role: 'user', content: '{{inputs.q}}' }] } },
        end({ text: '{{nodes.answer.output.text}}' }),
      ),
    )
    const res = await trigger(wf, { q: 'What do runs carry?' })
    expect(res.body.status).toBe('completed')
    const text = res.body.outputs.text as string
    expect(text.length).toBeGreaterThan(0)
    expect(res.body.usage.tokens_in).toBeGreaterThan(0)
    expect(res.body.usage.tokens_out).toBeGreaterThan(0)
    const events = await eventsOf(res.body.run_id)
    const messages = events.filter((e) => e.event === 'message')
    expect(messages.length).toBeGreaterThan(0)
    for (const m of messages) expect(m.data).toMatchObject({ node: 'answer', node_id: 'answer' })
    expect(messages.map((m) => m.data.delta).join('')).toBe(text)
    expect(ends(events, 'answer')[0]!.data.output.text).toBe(text)
    // Every delta arrived before the node ended.
    expect(Math.max(...messages.map((m) => m.seq))).toBeLessThan(ends(events, 'answer')[0]!.seq)
    const usage = events.find((e) => e.event === 'usage')!
    expect(usage.data).toEqual(res.body.usage)
  })

  test('an http_request node calls a loopback server (WEBHOOK_ALLOW_HTTP, private networks allowed)', async () => {
    const wf = await workflow(
      chain(
        start([{ name: 'q', type: 'string', required: true }]),
        { id: 'fetch', type: 'http_request', config: { method: 'GET', url: `http://127.0.0.1:${target.port}/lookup?q={{inputs.q}}`, timeout_ms: 5000 } },
        end({ status: '{{nodes.fetch.output.status}}', tier: '{{nodes.fetch.output.body.tier}}', q: '{{nodes.fetch.output.body.q}}' }),
      ),
    )
    const res = await trigger(wf, { q: 'abc' })
    expect(res.body).toMatchObject({ status: 'completed', outputs: { status: 200, tier: 'vip', q: 'abc' } })
    const out = ends(await eventsOf(res.body.run_id), 'fetch')[0]!.data.output
    expect(out.headers['x-trace']).toBe('abc')
    expect(out.body).toMatchObject({ path: '/lookup', method: 'GET' })
  })

  test('knowledge_retrieval fails the run: HTTP 200, status failed, error not_available naming the node', async () => {
    const wf = await workflow(
      chain(start(), { id: 'search', type: 'knowledge_retrieval', config: { knowledge_base_ids: ['kb_01jbz3k9x8q7r6s5t4v3w2y1z0'], query: 'anything' } }, end({})),
    )
    const res = await trigger(wf)
    expect(res.status).toBe(200)
    expect(res.body.status).toBe('failed')
    expect(res.body.error).toMatchObject({ code: 'not_available', node: 'search' })
    expect(typeof res.body.error.message).toBe('string')
    expect(res.body.error.message.length).toBeGreaterThan(0)
    const events = await eventsOf(res.body.run_id)
    expect(starts(events, 'end').length).toBe(0)
    expect(events.at(-1)).toMatchObject({ event: 'done', data: { status: 'failed', error: res.body.error } })
  })

  test('a code node that throws fails the run with code_error', async () => {
    const wf = await workflow(chain(start(), { id: 'boom', type: 'code', config: { source: 'function main() { throw new Error("kaput") }' } }, end({})))
    const res = await trigger(wf)
    expect(res.status).toBe(200)
    expect(res.body.status).toBe('failed')
    expect(res.body.error).toMatchObject({ code: 'code_error', node: 'boom' })
    expect(res.body.error.message).toContain('kaput')
  })

  test('inputs are validated: a missing required input and an unknown one are 400 naming inputs.<name>', async () => {
    const wf = await workflow(chain(start([{ name: 'name', type: 'string', required: true }]), tpl('a', '{{inputs.name}}'), end({ a: '{{nodes.a.output.text}}' })))
    const before = await h.deps.db.sql`select count(*)::int as n from runs where workflow_id = ${wf}`
    const missing = await trigger(wf, {})
    expect(missing.status).toBe(400)
    expect(missing.body.error).toMatchObject({ code: 'validation_error', param: 'inputs.name' })
    const unknown = await trigger(wf, { name: 'x', extra: 1 })
    expect(unknown.status).toBe(400)
    expect(unknown.body.error).toMatchObject({ code: 'validation_error', param: 'inputs.extra' })
    const wrongType = await trigger(wf, { name: 5 })
    expect(wrongType.status).toBe(400)
    expect(wrongType.body.error).toMatchObject({ code: 'validation_error', param: 'inputs.name' })
    const after = await h.deps.db.sql`select count(*)::int as n from runs where workflow_id = ${wf}`
    expect(after[0]!.n).toBe(before[0]!.n)
  })
})

describe('async and streamed runs', () => {
  let simple: string
  beforeAll(async () => {
    simple = await workflow(chain(start([{ name: 'name', type: 'string', default: 'world' }]), tpl('greet', 'Hello {{inputs.name}}'), tpl('shout', '{{nodes.greet.output.text}}!'), end({ text: '{{nodes.shout.output.text}}' })))
  })

  test('?async=true answers 202 { request_id, run_id, status: running } and the run completes', async () => {
    const res = await trigger(simple, { name: 'async' }, { async: true })
    expect(res.status).toBe(202)
    expect(Object.keys(res.body).sort()).toEqual(['request_id', 'run_id', 'status'])
    expect(res.body.status).toBe('running')
    const run = await finished(res.body.run_id)
    expect(run).toMatchObject({ run_id: res.body.run_id, workflow_id: simple, workflow_version: 1, status: 'completed', inputs: { name: 'async' }, outputs: { text: 'Hello async!' } })
    expect(run.finished_at).not.toBeNull()
    expect(run.duration_ms).toBeGreaterThanOrEqual(0)
  })

  test('an SSE trigger: exact framing, ids from 1, usage then done last; the stored log is the same; Last-Event-ID resumes', async () => {
    const res = await trigger(simple, {}, { headers: { accept: 'text/event-stream' } })
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toStartWith('text/event-stream')
    const events = parseSse(res.text)
    expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1))
    const done = events.at(-1)!
    expect(done).toMatchObject({ event: 'done', data: { status: 'completed', outputs: { text: 'Hello world!' } } })
    expect(events.at(-2)).toMatchObject({ event: 'usage', data: { tokens_in: 0, tokens_out: 0, credits: 0 } })
    expect(events.filter((e) => e.event === 'done').length).toBe(1)
    const first = events[0]!
    expect(first.event).toBe('node_start')
    expect(Object.keys(first.data).sort()).toEqual(['node', 'node_id', 'started_at'])
    const greetEnd = events.find((e) => e.event === 'node_end' && e.data.node_id === 'greet')!
    expect(Object.keys(greetEnd.data).sort()).toEqual(['duration_ms', 'node', 'node_id', 'output'])
    const runId = (await h.deps.db.sql`select id from runs where workflow_id = ${simple} order by created_at desc limit 1`)[0]!.id as string
    expect(await eventsOf(runId)).toEqual(events)

    const resumed = await h.call('GET', `/v1/runs/${runId}/events`, { key: owner, headers: { accept: 'text/event-stream', 'last-event-id': '3' } })
    expect(resumed.status).toBe(200)
    expect(parseSse(resumed.text)).toEqual(events.filter((e) => e.seq > 3))
    const after = await h.call('GET', `/v1/runs/${runId}/events?after=3`, { key: owner })
    expect(after.body.data.map((e: Ev) => e.seq)).toEqual(events.filter((e) => e.seq > 3).map((e) => e.seq))
  })

  test('a wait node parks the run: running while waiting, completed after at least its delay', async () => {
    const wf = await workflow(chain(start(), wait('pause', 1), tpl('after', 'woke'), end({ text: '{{nodes.after.output.text}}' })))
    const t0 = Date.now()
    const res = await trigger(wf, {}, { async: true })
    expect(res.status).toBe(202)
    const runId = res.body.run_id
    await waitFor(async () => starts(await eventsOf(runId), 'pause').length === 1, { what: 'the wait node to start' })
    const during = await runOf(runId)
    if (Date.now() - t0 < 1000) expect(during.status).toBe('running')
    const run = await finished(runId, 10_000)
    expect(run).toMatchObject({ status: 'completed', outputs: { text: 'woke' } })
    expect(Date.now() - t0).toBeGreaterThanOrEqual(1000)
    expect(run.duration_ms).toBeGreaterThanOrEqual(1000)
    const events = await eventsOf(runId)
    expect(starts(events, 'after')[0]!.seq).toBeGreaterThan(ends(events, 'pause')[0]!.seq)
  })
})

describe('cancel', () => {
  test('during a wait: 200 cancelled, done says cancelled, the node after the wait never starts', async () => {
    const wf = await workflow(chain(start(), wait('pause', 1), tpl('after', 'woke'), end({})))
    const res = await trigger(wf, {}, { async: true })
    const runId = res.body.run_id
    await waitFor(async () => starts(await eventsOf(runId), 'pause').length === 1, { what: 'the wait node to start' })
    const cancel = await h.call('POST', `/v1/runs/${runId}/cancel`, { key: owner })
    expect(cancel.status).toBe(200)
    expect(cancel.body.data).toMatchObject({ run_id: runId, status: 'cancelled' })
    // A run started after the cancelled one has a later wake-up: once it completed, the cancelled
    // run's timer has fired too, and must not have resumed it.
    const later = await trigger(wf, {}, { async: true })
    expect((await finished(later.body.run_id)).status).toBe('completed')
    const events = await eventsOf(runId)
    expect(events.at(-1)).toMatchObject({ event: 'done', data: { status: 'cancelled' } })
    expect(events.filter((e) => e.event === 'done').length).toBe(1)
    expect(starts(events, 'after').length).toBe(0)
    expect((await runOf(runId)).status).toBe('cancelled')
    const outbox = await outboxOf(runId)
    expect(outbox.map((e) => e.type)).toEqual(['workflow.run.cancelled'])
    expect(outbox[0]!.data).toEqual({ workflow_id: wf, run_id: runId, status: 'cancelled', duration_ms: expect.any(Number) })
  })

  test('during an llm stream: cancelled at once and the upstream connection is closed', async () => {
    const wf = await workflow(chain(start(), { id: 'talk', type: 'llm', config: { model: 'slow', messages: [{ role: 'user', content: 'go on' }] } }, end({ text: '{{nodes.talk.output.text}}' })))
    const requestsBefore = fake.requests.length
    const res = await trigger(wf, {}, { async: true })
    const runId = res.body.run_id
    // Mid-stream: some deltas are in the log.
    await waitFor(async () => (await eventsOf(runId)).some((e) => e.event === 'message'), { what: 'the first LLM delta' })
    const upstream = fake.requests[requestsBefore]!
    expect(upstream.model).toBe('slow-up')
    const t0 = performance.now()
    const cancel = await h.call('POST', `/v1/runs/${runId}/cancel`, { key: owner })
    expect(cancel.status).toBe(200)
    expect(cancel.body.data.status).toBe('cancelled')
    await waitFor(() => upstream.closed, { timeoutMs: 2000, what: 'the fake provider to see its connection closed' })
    const elapsed = performance.now() - t0
    expect(elapsed).toBeLessThan(2000)
    const events = await eventsOf(runId)
    expect(ends(events, 'talk').length).toBe(0)
    expect(events.at(-1)).toMatchObject({ event: 'done', data: { status: 'cancelled' } })
    // Far from the 200 chunks: the stream stopped.
    const text = events.filter((e) => e.event === 'message').map((e) => e.data.delta).join('')
    expect(text.split(' ').filter(Boolean).length).toBeLessThan(200)
  })

  test('a finished run: 409 run_not_running', async () => {
    const wf = await workflow(chain(start(), tpl('a', 'x'), end({})))
    const res = await trigger(wf)
    expect(res.body.status).toBe('completed')
    const cancel = await h.call('POST', `/v1/runs/${res.body.run_id}/cancel`, { key: owner })
    expect(cancel.status).toBe(409)
    expect(cancel.body.error.code).toBe('run_not_running')
    expect((await runOf(res.body.run_id)).status).toBe('completed')
  })
})

describe('idempotency and disconnects', () => {
  let wf: string
  let slow: string
  beforeAll(async () => {
    wf = await workflow(chain(start([{ name: 'n', type: 'number', default: 1 }]), tpl('a', '{{inputs.n}}'), end({ a: '{{nodes.a.output.text}}' })))
    slow = await workflow(chain(start(), wait('pause', 1), tpl('after', 'done'), end({ text: '{{nodes.after.output.text}}' })))
  })
  const count = async (workflowId: string) => (await h.deps.db.sql`select count(*)::int as n from runs where workflow_id = ${workflowId}`)[0]!.n as number

  test('the same Idempotency-Key twice (sync, then async): the same run, one row', async () => {
    const before = await count(wf)
    const headers = { 'idempotency-key': `sync-${crypto.randomUUID()}` }
    const a = await trigger(wf, { n: 7 }, { headers })
    const b = await trigger(wf, { n: 7 }, { headers })
    expect(a.status).toBe(200)
    expect(b.status).toBe(200)
    expect(b.body.run_id).toBe(a.body.run_id)
    expect(b.headers.get('idempotent-replayed')).toBe('true')
    const asyncHeaders = { 'idempotency-key': `async-${crypto.randomUUID()}` }
    const c = await trigger(wf, { n: 8 }, { async: true, headers: asyncHeaders })
    const d = await trigger(wf, { n: 8 }, { async: true, headers: asyncHeaders })
    expect(c.status).toBe(202)
    expect(d.status).toBe(202)
    expect(d.body.run_id).toBe(c.body.run_id)
    expect(await count(wf)).toBe(before + 2)
    await finished(c.body.run_id)
  })

  test('an SSE trigger with a key, then the same key while it streams: JSON 202 with the same run', async () => {
    const before = await count(slow)
    const key = `sse-${crypto.randomUUID()}`
    const first = await h.app.handle(
      new Request(`${h.base}/v1/workflows/${slow}/runs`, {
        method: 'POST',
        headers: { authorization: `Bearer ${owner}`, 'content-type': 'application/json', accept: 'text/event-stream', 'idempotency-key': key },
        body: JSON.stringify({ inputs: {} }),
      }),
    )
    expect(first.status).toBe(200)
    const reader = first.body!.getReader()
    const firstChunk = new TextDecoder().decode((await reader.read()).value)
    expect(firstChunk).toStartWith('id: 1\n')
    const replay = await trigger(slow, {}, { headers: { accept: 'text/event-stream', 'idempotency-key': key } })
    expect(replay.status).toBe(202)
    expect(replay.headers.get('content-type')).toStartWith('application/json')
    expect(replay.body.status).toBe('running')
    const runId = (await h.deps.db.sql`select id from runs where workflow_id = ${slow} order by created_at desc limit 1`)[0]!.id
    expect(replay.body.run_id).toBe(runId)
    // The first stream still runs to its end.
    let rest = firstChunk
    for (;;) {
      const { value, done } = await reader.read()
      if (done) break
      rest += new TextDecoder().decode(value)
    }
    expect(parseSse(rest).at(-1)).toMatchObject({ event: 'done', data: { status: 'completed' } })
    expect(await count(slow)).toBe(before + 1)
    // And after the stream ended, the key still replays the same run.
    const again = await trigger(slow, {}, { headers: { accept: 'text/event-stream', 'idempotency-key': key } })
    expect(again.status).toBe(202)
    expect(again.body.run_id).toBe(runId)
  })

  test('a client that disconnects from an SSE trigger does not stop the run', async () => {
    const server = Bun.serve({ hostname: '127.0.0.1', port: 0, fetch: (r) => h.app.handle(r) })
    try {
      const ac = new AbortController()
      const res = await fetch(`http://127.0.0.1:${server.port}/v1/workflows/${slow}/runs`, {
        method: 'POST',
        headers: { authorization: `Bearer ${owner}`, 'content-type': 'application/json', accept: 'text/event-stream' },
        body: JSON.stringify({ inputs: {} }),
        signal: ac.signal,
      })
      expect(res.status).toBe(200)
      const reader = res.body!.getReader()
      const chunk = new TextDecoder().decode((await reader.read()).value)
      expect(chunk).toStartWith('id: 1\n')
      ac.abort()
      await reader.cancel().catch(() => {})
      const runId = (await h.deps.db.sql`select id from runs where workflow_id = ${slow} order by created_at desc limit 1`)[0]!.id
      const run = await finished(runId)
      expect(run).toMatchObject({ status: 'completed', outputs: { text: 'done' } })
    } finally {
      await server.stop(true)
    }
  })
})

describe('outbox, lists, roles, webhooks', () => {
  let wf: string
  beforeAll(async () => {
    wf = await workflow(
      chain(
        start([{ name: 'fail', type: 'boolean', default: false }]),
        { id: 'check', type: 'code', config: { source: 'function main(vars) { if (vars.inputs.fail) throw new Error("asked to fail"); return { ok: true } }' } },
        end({ ok: '{{nodes.check.output.ok}}' }),
      ),
    )
  })

  test('a completed run writes one workflow.run.completed event; a failed one workflow.run.failed', async () => {
    const ok = await trigger(wf)
    expect(ok.body.status).toBe('completed')
    const completed = await outboxOf(ok.body.run_id)
    expect(completed.length).toBe(1)
    expect(completed[0]!.type).toBe('workflow.run.completed')
    const run = await runOf(ok.body.run_id)
    expect(completed[0]!.data).toEqual({ workflow_id: wf, run_id: ok.body.run_id, status: 'completed', duration_ms: run.duration_ms, outputs: { ok: true } })

    const bad = await trigger(wf, { fail: true })
    expect(bad.body.status).toBe('failed')
    const failed = await outboxOf(bad.body.run_id)
    expect(failed.map((e) => e.type)).toEqual(['workflow.run.failed'])
    expect(failed[0]!.data).toEqual({ workflow_id: wf, run_id: bad.body.run_id, status: 'failed', duration_ms: expect.any(Number), error: bad.body.error })
    expect(bad.body.error).toMatchObject({ code: 'code_error', node: 'check' })
  })

  test('runs list: status filters and pagination', async () => {
    const list = await workflow(chain(start([{ name: 'fail', type: 'boolean', default: false }]), { id: 'check', type: 'code', config: { source: 'function main(vars) { if (vars.inputs.fail) throw new Error("no"); return {} }' } }, end({})))
    const ids: string[] = []
    for (const fail of [false, true, false, false, true]) ids.push((await trigger(list, { fail })).body.run_id)
    const get = (q: string) => h.call('GET', `/v1/workflows/${list}/runs?${q}`, { key: owner })
    const completed = await get('status=completed')
    expect(completed.status).toBe(200)
    expect(completed.body.data.map((r: any) => r.status)).toEqual(['completed', 'completed', 'completed'])
    expect((await get('status=failed')).body.data.length).toBe(2)
    expect((await get('status_in=completed,failed')).body.data.length).toBe(5)
    expect((await get('status=running')).body.data.length).toBe(0)
    // Pages of two, newest first by default.
    const seen: string[] = []
    let cursor: string | null = null
    do {
      const page: Answer = await get(`limit=2${cursor ? `&cursor=${cursor}` : ''}`)
      expect(page.status).toBe(200)
      expect(page.body.data.length).toBeLessThanOrEqual(2)
      expect(page.body.has_more).toBe(page.body.next_cursor !== null)
      seen.push(...page.body.data.map((r: any) => r.run_id))
      cursor = page.body.next_cursor
    } while (cursor)
    expect(seen).toEqual([...ids].reverse())
    const oldest = await get('sort=created_at&limit=1')
    expect(oldest.body.data[0].run_id).toBe(ids[0])
  })

  test('roles: a readonly member reads runs but may not trigger or cancel (403); a non-member gets 404', async () => {
    const ok = await trigger(wf)
    const runId = ok.body.run_id
    expect((await h.call('GET', `/v1/runs/${runId}`, { key: reader })).status).toBe(200)
    expect((await h.call('GET', `/v1/runs/${runId}/events`, { key: reader })).status).toBe(200)
    expect((await h.call('GET', `/v1/workflows/${wf}/runs`, { key: reader })).status).toBe(200)
    const denied = await trigger(wf, {}, { key: reader })
    expect(denied.status).toBe(403)
    expect(denied.body.error.code).toBe('forbidden')
    const waiting = await workflow(chain(start(), wait('pause', 30), end({})))
    const running = (await trigger(waiting, {}, { async: true })).body.run_id
    const cancel = await h.call('POST', `/v1/runs/${running}/cancel`, { key: reader })
    expect(cancel.status).toBe(403)
    expect((await runOf(running)).status).toBe('running')
    for (const [method, path] of [
      ['GET', `/v1/runs/${runId}`],
      ['GET', `/v1/runs/${runId}/events`],
      ['GET', `/v1/workflows/${wf}/runs`],
      ['POST', `/v1/workflows/${wf}/runs`],
      ['POST', `/v1/runs/${running}/cancel`],
    ] as const) {
      const res = await h.call(method, path, { key: outsider, body: method === 'POST' ? {} : undefined })
      expect([method, path, res.status]).toEqual([method, path, 404])
      expect(res.body.error.code).toBe('not_found')
    }
    // Leave nothing running.
    expect((await h.call('POST', `/v1/runs/${running}/cancel`, { key: owner })).status).toBe(200)
  })

  test('a webhook for workflow.run.completed receives the run with the spec payload', async () => {
    const hook = await h.call('POST', '/v1/webhooks', {
      key: owner,
      body: { url: `http://127.0.0.1:${hooks.port}/runs-hook`, events: ['workflow.run.completed'], secret: 'a-secret-of-runs', workspace_id: ws },
    })
    expect(hook.status).toBe(201)
    const ok = await trigger(wf)
    expect(ok.body.status).toBe('completed')
    const got = (await waitFor(() => hookRequests.find((r) => r.path === '/runs-hook' && r.json?.data?.run_id === ok.body.run_id), { timeoutMs: 10_000, what: 'the webhook delivery' }))!
    expect(got.headers['x-service-event']).toBe('workflow.run.completed')
    expect(got.json.event).toBe('workflow.run.completed')
    const run = await runOf(ok.body.run_id)
    expect(got.json.data).toEqual({ workflow_id: wf, run_id: ok.body.run_id, status: 'completed', duration_ms: run.duration_ms, outputs: { ok: true } })
    // A failed run is not this webhook's event.
    const bad = await trigger(wf, { fail: true })
    const ok2 = await trigger(wf)
    await waitFor(() => hookRequests.some((r) => r.json?.data?.run_id === ok2.body.run_id), { what: 'the second delivery' })
    expect(hookRequests.some((r) => r.json?.data?.run_id === bad.body.run_id)).toBe(false)
    expect(hookRequests.filter((r) => r.json?.data?.run_id === ok.body.run_id).length).toBe(1)
  })
})
