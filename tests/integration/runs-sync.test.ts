import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { waitFor } from '../helpers/harness'
import { chain, end, ends, parseSse, start, startRunsEnv, starts, tpl, wait, type Ev, type RunsEnv } from '../helpers/runs'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Runs end to end in-process (tests/helpers/runs.ts): sync runs (templates, conditions, parallel
 * branches, code, llm and http_request nodes, failures, input validation), then async and streamed
 * ones (SSE framing, the stored log, Last-Event-ID, a wait node).
 */

let env: RunsEnv

beforeAll(async () => {
  env = await startRunsEnv()
})

afterAll(async () => {
  await env?.close()
})

describe('sync runs', () => {
  test('a 5-node template chain completes with its outputs, zero usage and a duration', async () => {
    const wf = await env.workflow(
      chain(
        start([{ name: 'name', type: 'string', required: true }]),
        { ...tpl('a', 'Hello {{inputs.name}}'), name: 'Greet' },
        tpl('b', '{{nodes.a.output.text}}!'),
        tpl('c', '[{{nodes.b.output.text}}]'),
        end({ text: '{{nodes.c.output.text}}', first: '{{nodes.a.output.text}}' }),
      ),
    )
    const res = await env.trigger(wf, { name: 'Ada' })
    expect(res.status).toBe(200)
    expect(Object.keys(res.body).sort()).toEqual(['duration_ms', 'outputs', 'request_id', 'run_id', 'status', 'usage', 'workflow_id'])
    expect(res.body).toMatchObject({ workflow_id: wf, status: 'completed', outputs: { text: '[Hello Ada!]', first: 'Hello Ada' }, usage: { tokens_in: 0, tokens_out: 0, credits: 0 } })
    expect(res.body.run_id).toMatch(/^run_/)
    expect(Number.isInteger(res.body.duration_ms) && res.body.duration_ms >= 0).toBe(true)
    const events = await env.eventsOf(res.body.run_id)
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
    const wf = await env.workflow({
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
      const res = await env.trigger(wf, { score })
      expect(res.body).toMatchObject({ status: 'completed', outputs: { branch: `branch ${matched}` } })
      const events = await env.eventsOf(res.body.run_id)
      expect(starts(events, taken).length).toBe(1)
      expect(starts(events, skipped).length).toBe(0)
      expect(ends(events, skipped).length).toBe(0)
      expect(starts(events, 'summary').length).toBe(1)
    }
  })

  test('parallel branches join: the join node runs once, after both ended', async () => {
    const wf = await env.workflow({
      nodes: [start(), tpl('left', 'L'), tpl('right', 'R'), tpl('join', '{{nodes.left.output.text}}+{{nodes.right.output.text}}'), end({ joined: '{{nodes.join.output.text}}' })],
      edges: [
        { source: 'start', target: 'left' },
        { source: 'start', target: 'right' },
        { source: 'left', target: 'join' },
        { source: 'right', target: 'join' },
        { source: 'join', target: 'end' },
      ],
    })
    const res = await env.trigger(wf)
    expect(res.body).toMatchObject({ status: 'completed', outputs: { joined: 'L+R' } })
    const events = await env.eventsOf(res.body.run_id)
    expect(starts(events, 'left').length).toBe(1)
    expect(starts(events, 'right').length).toBe(1)
    expect(starts(events, 'join').length).toBe(1)
    expect(ends(events, 'join').length).toBe(1)
    const joinAt = starts(events, 'join')[0]!.seq
    expect(joinAt).toBeGreaterThan(ends(events, 'left')[0]!.seq)
    expect(joinAt).toBeGreaterThan(ends(events, 'right')[0]!.seq)
  })

  test("a code node's output is used downstream, types kept by a lone placeholder", async () => {
    const wf = await env.workflow(
      chain(
        start([{ name: 'x', type: 'number', required: true }]),
        { id: 'calc', type: 'code', config: { source: 'function main(vars) { return { n: vars.inputs.x * 2, list: [1, 2, 3] } }' } },
        tpl('say', 'n={{nodes.calc.output.n}} second={{nodes.calc.output.list.1}}'),
        end({ n: '{{nodes.calc.output.n}}', said: '{{nodes.say.output.text}}' }),
      ),
    )
    const res = await env.trigger(wf, { x: 21 })
    expect(res.body).toMatchObject({ status: 'completed', outputs: { n: 42, said: 'n=42 second=2' } })
  })

  test('an llm node (local-chat) streams message deltas that make up its text; usage counted', async () => {
    const wf = await env.workflow(
      chain(
        start([{ name: 'q', type: 'string', required: true }]),
        { id: 'answer', type: 'llm', config: { model: 'local-chat', messages: [{ role: 'system', content: 'Runs carry their events in order.' }, { role: 'user', content: '{{inputs.q}}' }] } },
        end({ text: '{{nodes.answer.output.text}}' }),
      ),
    )
    const res = await env.trigger(wf, { q: 'What do runs carry?' })
    expect(res.body.status).toBe('completed')
    const text = res.body.outputs.text as string
    expect(text.length).toBeGreaterThan(0)
    expect(res.body.usage.tokens_in).toBeGreaterThan(0)
    expect(res.body.usage.tokens_out).toBeGreaterThan(0)
    const events = await env.eventsOf(res.body.run_id)
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
    const wf = await env.workflow(
      chain(
        start([{ name: 'q', type: 'string', required: true }]),
        { id: 'fetch', type: 'http_request', config: { method: 'GET', url: `http://127.0.0.1:${env.target.port}/lookup?q={{inputs.q}}`, timeout_ms: 5000 } },
        end({ status: '{{nodes.fetch.output.status}}', tier: '{{nodes.fetch.output.body.tier}}', q: '{{nodes.fetch.output.body.q}}' }),
      ),
    )
    const res = await env.trigger(wf, { q: 'abc' })
    expect(res.body).toMatchObject({ status: 'completed', outputs: { status: 200, tier: 'vip', q: 'abc' } })
    const out = ends(await env.eventsOf(res.body.run_id), 'fetch')[0]!.data.output
    expect(out.headers['x-trace']).toBe('abc')
    expect(out.body).toMatchObject({ path: '/lookup', method: 'GET' })
  })

  test('knowledge_retrieval of a base deleted since the save fails the run: HTTP 200, status failed, error knowledge_base_not_found naming the node', async () => {
    // An unknown base is refused when the workflow is saved; one deleted afterwards is found missing by the run.
    const kb = await env.h.call('POST', '/v1/knowledge-bases', { key: env.owner, body: { workspace_id: env.ws, name: 'Soon gone' } })
    expect(kb.status).toBe(201)
    const wf = await env.workflow(
      chain(start(), { id: 'search', type: 'knowledge_retrieval', config: { knowledge_base_ids: [kb.body.data.id], query: 'anything' } }, end({})),
    )
    expect((await env.h.call('DELETE', `/v1/knowledge-bases/${kb.body.data.id}`, { key: env.owner })).status).toBe(200)
    const res = await env.trigger(wf)
    expect(res.status).toBe(200)
    expect(res.body.status).toBe('failed')
    expect(res.body.error).toMatchObject({ code: 'knowledge_base_not_found', node: 'search' })
    expect(typeof res.body.error.message).toBe('string')
    expect(res.body.error.message.length).toBeGreaterThan(0)
    const events = await env.eventsOf(res.body.run_id)
    expect(starts(events, 'end').length).toBe(0)
    expect(events.at(-1)).toMatchObject({ event: 'done', data: { status: 'failed', error: res.body.error } })
  })

  test('a code node that throws fails the run with code_error', async () => {
    const wf = await env.workflow(chain(start(), { id: 'boom', type: 'code', config: { source: 'function main() { throw new Error("kaput") }' } }, end({})))
    const res = await env.trigger(wf)
    expect(res.status).toBe(200)
    expect(res.body.status).toBe('failed')
    expect(res.body.error).toMatchObject({ code: 'code_error', node: 'boom' })
    expect(res.body.error.message).toContain('kaput')
  })

  test('inputs are validated: a missing required input and an unknown one are 400 naming inputs.<name>', async () => {
    const wf = await env.workflow(chain(start([{ name: 'name', type: 'string', required: true }]), tpl('a', '{{inputs.name}}'), end({ a: '{{nodes.a.output.text}}' })))
    const before = await env.h.deps.db.sql`select count(*)::int as n from runs where workflow_id = ${wf}`
    const missing = await env.trigger(wf, {})
    expect(missing.status).toBe(400)
    expect(missing.body.error).toMatchObject({ code: 'validation_error', param: 'inputs.name' })
    const unknown = await env.trigger(wf, { name: 'x', extra: 1 })
    expect(unknown.status).toBe(400)
    expect(unknown.body.error).toMatchObject({ code: 'validation_error', param: 'inputs.extra' })
    const wrongType = await env.trigger(wf, { name: 5 })
    expect(wrongType.status).toBe(400)
    expect(wrongType.body.error).toMatchObject({ code: 'validation_error', param: 'inputs.name' })
    const after = await env.h.deps.db.sql`select count(*)::int as n from runs where workflow_id = ${wf}`
    expect(after[0]!.n).toBe(before[0]!.n)
  })
})

describe('async and streamed runs', () => {
  let simple: string
  beforeAll(async () => {
    simple = await env.workflow(chain(start([{ name: 'name', type: 'string', default: 'world' }]), tpl('greet', 'Hello {{inputs.name}}'), tpl('shout', '{{nodes.greet.output.text}}!'), end({ text: '{{nodes.shout.output.text}}' })))
  })

  test('?async=true answers 202 { request_id, run_id, status: running } and the run completes', async () => {
    const res = await env.trigger(simple, { name: 'async' }, { async: true })
    expect(res.status).toBe(202)
    expect(Object.keys(res.body).sort()).toEqual(['request_id', 'run_id', 'status'])
    expect(res.body.status).toBe('running')
    const run = await env.finished(res.body.run_id)
    expect(run).toMatchObject({ run_id: res.body.run_id, workflow_id: simple, workflow_version: 1, status: 'completed', inputs: { name: 'async' }, outputs: { text: 'Hello async!' } })
    expect(run.finished_at).not.toBeNull()
    expect(run.duration_ms).toBeGreaterThanOrEqual(0)
  })

  test('an SSE trigger: exact framing, ids from 1, usage then done last; the stored log is the same; Last-Event-ID resumes', async () => {
    const res = await env.trigger(simple, {}, { headers: { accept: 'text/event-stream' } })
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
    expect(Object.keys(first.data).sort()).toEqual(['attempt', 'node', 'node_id', 'started_at'])
    const greetEnd = events.find((e) => e.event === 'node_end' && e.data.node_id === 'greet')!
    expect(Object.keys(greetEnd.data).sort()).toEqual(['attempt', 'duration_ms', 'node', 'node_id', 'output'])
    const runId = (await env.h.deps.db.sql`select id from runs where workflow_id = ${simple} order by created_at desc limit 1`)[0]!.id as string
    expect(await env.eventsOf(runId)).toEqual(events)

    const resumed = await env.h.call('GET', `/v1/runs/${runId}/events`, { key: env.owner, headers: { accept: 'text/event-stream', 'last-event-id': '3' } })
    expect(resumed.status).toBe(200)
    expect(parseSse(resumed.text)).toEqual(events.filter((e) => e.seq > 3))
    const after = await env.h.call('GET', `/v1/runs/${runId}/events?after=3`, { key: env.owner })
    expect(after.body.data.map((e: Ev) => e.seq)).toEqual(events.filter((e) => e.seq > 3).map((e) => e.seq))
  })

  test('a wait node parks the run: running while waiting, completed after at least its delay', async () => {
    const wf = await env.workflow(chain(start(), wait('pause', 1), tpl('after', 'woke'), end({ text: '{{nodes.after.output.text}}' })))
    const t0 = Date.now()
    const res = await env.trigger(wf, {}, { async: true })
    expect(res.status).toBe(202)
    const runId = res.body.run_id
    await waitFor(async () => starts(await env.eventsOf(runId), 'pause').length === 1, { what: 'the wait node to start' })
    const during = await env.runOf(runId)
    if (Date.now() - t0 < 1000) expect(during.status).toBe('running')
    const run = await env.finished(runId, 10_000)
    expect(run).toMatchObject({ status: 'completed', outputs: { text: 'woke' } })
    expect(Date.now() - t0).toBeGreaterThanOrEqual(1000)
    expect(run.duration_ms).toBeGreaterThanOrEqual(1000)
    const events = await env.eventsOf(runId)
    expect(starts(events, 'after')[0]!.seq).toBeGreaterThan(ends(events, 'pause')[0]!.seq)
  })
})
