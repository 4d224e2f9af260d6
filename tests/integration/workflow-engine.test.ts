import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import type { Server } from 'bun'
import { waitFor } from '../helpers/harness'
import { end, ends, start, startRunsEnv, starts, tpl, type Edge, type Node, type RunsEnv } from '../helpers/runs'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The engine's second level, end to end in-process with real workers and a loopback receiver that
 * counts what reaches it (docs/workflows.md, "Errors and retries", "Parallel branches",
 * "Sub-workflows and iteration", "Human input"): retries and time-outs counted at the receiver, error
 * branches, branches open at the same time, child runs, and runs that wait for a person.
 */

let env: RunsEnv
let receiver: Server<undefined>
/** Requests per key, in arrival order; `open` and `peak`: requests in flight now and at most, per key. */
const seen = new Map<string, { n: number; items: string[]; open: number; peak: number }>()
const counter = (key: string) => {
  let c = seen.get(key)
  if (!c) seen.set(key, (c = { n: 0, items: [], open: 0, peak: 0 }))
  return c
}

beforeAll(async () => {
  env = await startRunsEnv()
  receiver = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    idleTimeout: 0,
    async fetch(req) {
      const url = new URL(req.url)
      const key = url.searchParams.get('key') ?? 'none'
      const c = counter(key)
      c.n++
      c.items.push(url.searchParams.get('item') ?? '')
      c.open++
      c.peak = Math.max(c.peak, c.open)
      try {
        // The receiver's own pace (not a wait in the test): the first `slow` calls of a key take
        // longer than the node's timeout_ms; `hold` keeps a call open so that overlaps can be seen.
        if (c.n <= Number(url.searchParams.get('slow') ?? 0)) await Bun.sleep(3_000)
        const hold = Number(url.searchParams.get('hold') ?? 0)
        if (hold > 0) await Bun.sleep(hold)
        return Response.json({ key, n: c.n, item: url.searchParams.get('item') })
      } finally {
        c.open--
      }
    },
  })
})

afterAll(async () => {
  await receiver?.stop(true)
  await env?.close()
})

const url = (query: string) => `http://127.0.0.1:${receiver.port}/call?${query}`
const http = (id: string, query: string, extra: Partial<Node> = {}): Node => ({ id, type: 'http_request', config: { method: 'GET', url: url(query) }, ...extra })
const graph = (nodes: Node[], edges: [string, string, string?][]) => ({
  nodes,
  edges: edges.map(([source, target, handle]): Edge => ({ source, target, ...(handle ? { source_handle: handle } : {}) })),
})
const async = async (wf: string, inputs: Record<string, unknown> = {}) => {
  const res = await env.trigger(wf, inputs, { async: true })
  expect(res.status).toBe(202)
  return res.body.run_id as string
}

describe('errors and retries', () => {
  test('retry: two attempts time out at the receiver, the third answers; node events carry their attempt', async () => {
    const wf = await env.workflow(graph(
      [start(), http('call', 'key=retry3&slow=2', { retry: { max_attempts: 3, backoff_ms: 20 }, timeout_ms: 300 }), end({ n: '{{nodes.call.output.body.n}}' })],
      [['start', 'call'], ['call', 'end']],
    ))
    const run = await env.finished(await async(wf))
    expect(run).toMatchObject({ status: 'completed', outputs: { n: 3 } })
    expect(counter('retry3').n).toBe(3)
    const events = await env.eventsOf(run.run_id)
    expect(starts(events, 'call').map((e) => e.data.attempt)).toEqual([1, 2, 3])
    expect(ends(events, 'call').map((e) => [e.data.attempt, e.data.output.error?.code ?? 'ok'])).toEqual([[1, 'node_timeout'], [2, 'node_timeout'], [3, 'ok']])
  })

  test('the last attempt failing fails the run with the node\'s error (on_error fail, the default)', async () => {
    const wf = await env.workflow(graph(
      [start(), http('call', 'key=fail2&slow=5', { retry: { max_attempts: 2, backoff_ms: 0 }, timeout_ms: 200 }), end({})],
      [['start', 'call'], ['call', 'end']],
    ))
    const run = await env.finished(await async(wf))
    expect(run).toMatchObject({ status: 'failed', error: { code: 'node_timeout', node: 'call' } })
    expect(counter('fail2').n).toBe(2)
    const nodes = (await env.h.call('GET', `/v1/runs/${run.run_id}/nodes`, { key: env.owner })).body.data
    expect(nodes.find((n: any) => n.node === 'call')).toMatchObject({ state: 'failed', attempt: 2, error: { code: 'node_timeout' } })
  })

  test('on_error continue: the error becomes the output and the run goes on', async () => {
    const wf = await env.workflow(graph(
      [start(), http('call', 'key=cont&slow=5', { timeout_ms: 200, on_error: 'continue' }), end({ code: '{{nodes.call.output.error.code}}' })],
      [['start', 'call'], ['call', 'end']],
    ))
    const run = await env.finished(await async(wf))
    expect(run).toMatchObject({ status: 'completed', outputs: { code: 'node_timeout' } })
  })

  test('on_error branch: the error edges are followed, the others skipped; on success the reverse', async () => {
    const g = (query: string) => graph(
      [
        start(), http('call', query, { timeout_ms: 200, on_error: 'branch' }),
        tpl('fine', 'fine'), tpl('fallback', 'fell back: {{nodes.call.output.error.code}}'),
        end({ fine: '{{nodes.fine.output.text}}', fallback: '{{nodes.fallback.output.text}}' }),
      ],
      [['start', 'call'], ['call', 'fine'], ['call', 'fallback', 'error'], ['fine', 'end'], ['fallback', 'end']],
    )
    const failing = await env.finished(await async(await env.workflow(g('key=branch1&slow=5'))))
    // A node on a branch not taken reads as null, and an output of nothing is left out.
    expect(failing).toMatchObject({ status: 'completed' })
    expect(failing.outputs).toEqual({ fallback: 'fell back: node_timeout' })
    expect(starts(await env.eventsOf(failing.run_id), 'fine')).toHaveLength(0)
    const nodes = (await env.h.call('GET', `/v1/runs/${failing.run_id}/nodes`, { key: env.owner })).body.data
    expect(nodes.map((n: any) => [n.node, n.state, n.error?.code ?? null])).toEqual([
      ['start', 'completed', null], ['call', 'completed', null], ['fine', 'skipped', null], ['fallback', 'completed', null], ['end', 'completed', null],
    ])
    const passing = await env.finished(await async(await env.workflow(g('key=branch2'))))
    expect(passing).toMatchObject({ status: 'completed' })
    expect(passing.outputs).toEqual({ fine: 'fine' })
  })

  test('checked at save: retry, timeout_ms, on_error, and branch without an error edge', async () => {
    const save = (nodes: Node[], edges: [string, string, string?][]) => env.h.call('POST', '/v1/workflows', { key: env.owner, body: { workspace_id: env.ws, name: 'bad', graph: graph(nodes, edges) } })
    const cases: [Node[], [string, string, string?][], string][] = [
      [[start(), http('call', 'key=x', { retry: { max_attempts: 6, backoff_ms: 0 } }), end({})], [['start', 'call'], ['call', 'end']], 'graph.nodes.1.retry.max_attempts'],
      [[start(), http('call', 'key=x', { retry: { max_attempts: 2, backoff_ms: 60_001 } }), end({})], [['start', 'call'], ['call', 'end']], 'graph.nodes.1.retry.backoff_ms'],
      [[start(), { id: 'pause', type: 'wait', config: { seconds: 1 }, timeout_ms: 10 }, end({})], [['start', 'pause'], ['pause', 'end']], 'graph.nodes.1.timeout_ms'],
      [[start(), http('call', 'key=x', { on_error: 'ignore' as never }), end({})], [['start', 'call'], ['call', 'end']], 'graph.nodes.1.on_error'],
      [[start(), http('call', 'key=x', { on_error: 'branch' }), end({})], [['start', 'call'], ['call', 'end']], 'graph.nodes.1.on_error'],
      [[start(), http('call', 'key=x'), end({})], [['start', 'call'], ['call', 'end', 'error']], 'graph.edges.1.source_handle'],
    ]
    for (const [nodes, edges, param] of cases) {
      const res = await save(nodes, edges)
      expect(res.status).toBe(400)
      expect(res.body.error).toMatchObject({ code: 'validation_error', param })
    }
  })
})

describe('parallel branches', () => {
  test('two calls on parallel branches are open at the receiver at the same time, then join', async () => {
    const wf = await env.workflow(graph(
      [start(), http('a', 'key=par&hold=600'), http('b', 'key=par&hold=600'), tpl('join', '{{nodes.a.output.status}}+{{nodes.b.output.status}}'), end({ j: '{{nodes.join.output.text}}' })],
      [['start', 'a'], ['start', 'b'], ['a', 'join'], ['b', 'join'], ['join', 'end']],
    ))
    const run = await env.finished(await async(wf))
    expect(run).toMatchObject({ status: 'completed', outputs: { j: '200+200' } })
    expect(counter('par').peak).toBe(2)
  })

  test('a join after a condition starts once the taken branch ends; the parallel nodes of the branch not taken are all skipped', async () => {
    const cond: Node = { id: 'cond', type: 'condition', config: { cases: [{ id: 'left', when: 'inputs.side = "left"' }] } }
    const wf = await env.workflow(graph(
      [
        start([{ name: 'side', type: 'string' }]), cond,
        http('l1', 'key=left&hold=300'), http('l2', 'key=left&hold=300'),
        tpl('r1', 'r1'), tpl('r2', 'r2'), tpl('rjoin', 'r'),
        tpl('join', 'joined'), end({ j: '{{nodes.join.output.text}}', r: '{{nodes.rjoin.output.text}}' }),
      ],
      [
        ['start', 'cond'], ['cond', 'l1', 'left'], ['cond', 'l2', 'left'], ['cond', 'r1', 'default'], ['cond', 'r2', 'default'],
        ['r1', 'rjoin'], ['r2', 'rjoin'], ['l1', 'join'], ['l2', 'join'], ['rjoin', 'join'], ['join', 'end'],
      ],
    ))
    const run = await env.finished(await async(wf, { side: 'left' }))
    expect(run).toMatchObject({ status: 'completed' })
    expect(run.outputs).toEqual({ j: 'joined' })
    expect(counter('left').peak).toBe(2)
    const events = await env.eventsOf(run.run_id)
    for (const id of ['r1', 'r2', 'rjoin']) expect(starts(events, id)).toHaveLength(0)
    expect(starts(events, 'join')).toHaveLength(1)
  })
})

describe('sub-workflows and iteration', () => {
  const child = () => env.workflow(graph(
    [start([{ name: 'item', type: 'number' }]), http('call', 'key=items&item={{inputs.item}}&hold=50'), end({ got: '{{nodes.call.output.body.item}}', double: '{{inputs.item}}' })],
    [['start', 'call'], ['call', 'end']],
  ))

  test('sub_workflow: a real child run with parent_run_id, in its workflow\'s list; its outputs the node\'s, its usage in the parent\'s', async () => {
    const inner = await env.workflow(graph(
      [start([{ name: 'q', type: 'string' }]), { id: 'ask', type: 'llm', config: { model: 'local-chat', messages: [{ role: 'user', content: '{{inputs.q}}' }] } }, end({ answer: '{{nodes.ask.output.text}}' })],
      [['start', 'ask'], ['ask', 'end']],
    ))
    const outer = await env.workflow(graph(
      [start(), { id: 'sub', type: 'sub_workflow', config: { workflow_id: inner, inputs: { q: 'What is a webhook?' } } }, end({ answer: '{{nodes.sub.output.answer}}' })],
      [['start', 'sub'], ['sub', 'end']],
    ))
    const parent = await env.finished(await async(outer))
    expect(parent.status).toBe('completed')
    const list = await env.h.call('GET', `/v1/workflows/${inner}/runs`, { key: env.owner })
    const kids = list.body.data.filter((r: any) => r.parent_run_id === parent.run_id)
    expect(kids).toHaveLength(1)
    expect(kids[0]).toMatchObject({ status: 'completed', parent_run_id: parent.run_id })
    expect(parent.outputs.answer).toBe(kids[0].outputs.answer)
    expect(kids[0].usage.tokens_in).toBeGreaterThan(0)
    expect(parent.usage).toEqual(kids[0].usage)
  })

  test('iteration: every item once, results in item order, at most `concurrency` children at once', async () => {
    const inner = await child()
    const outer = await env.workflow(graph(
      [
        start([{ name: 'xs', type: 'array' }]),
        { id: 'each', type: 'iteration', config: { workflow_id: inner, items: '{{inputs.xs}}', item_input: 'item', concurrency: 3 } },
        end({ results: '{{nodes.each.output.results}}', failed: '{{nodes.each.output.failed}}' }),
      ],
      [['start', 'each'], ['each', 'end']],
    ))
    const xs = Array.from({ length: 12 }, (_, i) => i * 10)
    const run = await env.finished(await async(outer, { xs }), 30_000)
    expect(run.status).toBe('completed')
    expect(run.outputs.results.map((r: any) => r.double)).toEqual(xs)
    expect(run.outputs.failed).toEqual([])
    const c = counter('items')
    expect(c.items.map(Number).sort((a, b) => a - b)).toEqual(xs)
    expect(c.peak).toBe(3)
  })

  test('iteration on_item_error skip: failed items are null and listed; fail (the default) fails the node', async () => {
    const inner = await env.workflow(graph(
      [start([{ name: 'item', type: 'number' }]), { id: 'check', type: 'code', config: { source: 'function main(vars) { if (vars.inputs.item % 2) throw new Error("odd"); return { even: vars.inputs.item } }' } }, end({ even: '{{nodes.check.output.even}}' })],
      [['start', 'check'], ['check', 'end']],
    ))
    const outer = (onItemError: string) => env.workflow(graph(
      [start([{ name: 'xs', type: 'array' }]), { id: 'each', type: 'iteration', config: { workflow_id: inner, items: '{{inputs.xs}}', item_input: 'item', on_item_error: onItemError } }, end({ out: '{{nodes.each.output}}' })],
      [['start', 'each'], ['each', 'end']],
    ))
    const skipped = await env.finished(await async(await outer('skip'), { xs: [0, 1, 2, 3] }), 30_000)
    expect(skipped).toMatchObject({ status: 'completed', outputs: { out: { results: [{ even: 0 }, null, { even: 2 }, null], failed: [1, 3] } } })
    const failed = await env.finished(await async(await outer('fail'), { xs: [0, 1, 2, 3] }), 30_000)
    expect(failed).toMatchObject({ status: 'failed', error: { code: 'code_error', node: 'each' } })
  })

  test('iteration over more than ITERATION_MAX_ITEMS items fails the node with too_many_items, starting nothing', async () => {
    const inner = await child()
    const outer = await env.workflow(graph(
      [start([{ name: 'xs', type: 'array' }]), { id: 'each', type: 'iteration', config: { workflow_id: inner, items: '{{inputs.xs}}', item_input: 'item' } }, end({})],
      [['start', 'each'], ['each', 'end']],
    ))
    const run = await env.finished(await async(outer, { xs: Array.from({ length: 10_001 }, (_, i) => i) }))
    expect(run).toMatchObject({ status: 'failed', error: { code: 'too_many_items', node: 'each' } })
    const kids = await env.h.deps.db.sql`select count(*)::int as n from runs where parent_run_id = ${run.run_id}`
    expect(kids[0]!.n).toBe(0)
  })

  test('a workflow calling itself is refused at save; two calling each other stop at depth 5 with max_depth_exceeded', async () => {
    const a = await env.workflow(graph([start(), end({})], [['start', 'end']]))
    const self = await env.h.call('PUT', `/v1/workflows/${a}`, {
      key: env.owner,
      body: { name: 'self', graph: graph([start(), { id: 'again', type: 'sub_workflow', config: { workflow_id: a } }, end({})], [['start', 'again'], ['again', 'end']]) },
    })
    expect(self.status).toBe(400)
    expect(self.body.error).toMatchObject({ code: 'validation_error', param: 'graph.nodes.1.config.workflow_id' })
    const b = await env.workflow(graph([start(), { id: 'call_a', type: 'sub_workflow', config: { workflow_id: a } }, end({})], [['start', 'call_a'], ['call_a', 'end']]))
    const loop = await env.h.call('PUT', `/v1/workflows/${a}`, {
      key: env.owner,
      body: { name: 'a', graph: graph([start(), { id: 'call_b', type: 'sub_workflow', config: { workflow_id: b } }, end({})], [['start', 'call_b'], ['call_b', 'end']]) },
    })
    expect(loop.status).toBe(200)
    const run = await env.finished(await async(a), 30_000)
    expect(run).toMatchObject({ status: 'failed', error: { code: 'max_depth_exceeded', node: 'call_b' } })
    const depths = await env.h.deps.db.sql<{ depth: number }[]>`
      with recursive d as (select id, depth from runs where id = ${run.run_id} union all select r.id, r.depth from runs r join d on r.parent_run_id = d.id)
      select depth from d order by depth`
    expect(depths.map((r) => r.depth)).toEqual([0, 1, 2, 3, 4, 5])
  })

  test('cancelling the parent cancels every child still running', async () => {
    const inner = await env.workflow(graph([start([{ name: 'item', type: 'number' }]), { id: 'pause', type: 'wait', config: { seconds: 30 } }, end({})], [['start', 'pause'], ['pause', 'end']]))
    const outer = await env.workflow(graph(
      [start([{ name: 'xs', type: 'array' }]), { id: 'each', type: 'iteration', config: { workflow_id: inner, items: '{{inputs.xs}}', item_input: 'item', concurrency: 4 } }, end({})],
      [['start', 'each'], ['each', 'end']],
    ))
    const parent = await async(outer, { xs: [1, 2, 3, 4, 5, 6] })
    const children = () => env.h.deps.db.sql<{ id: string; status: string }[]>`select id, status from runs where parent_run_id = ${parent}`
    await waitFor(async () => (await children()).length === 4, { what: 'four children to start' })
    expect((await env.h.call('POST', `/v1/runs/${parent}/cancel`, { key: env.owner })).status).toBe(200)
    const after = await children()
    expect(after.map((r) => r.status)).toEqual(['cancelled', 'cancelled', 'cancelled', 'cancelled'])
    for (const kid of after) expect((await env.outboxOf(kid.id)).map((e) => e.type)).toEqual(['workflow.run.cancelled'])
  })
})

describe('human input', () => {
  const approval = (extra: Record<string, unknown> = {}, onError?: 'continue') => env.workflow(graph(
    [
      start([{ name: 'amount', type: 'number' }]),
      {
        id: 'approve',
        type: 'human_input',
        config: { prompt: 'Approve a refund of {{inputs.amount}} EUR?', schema: { type: 'object', required: ['approved'], properties: { approved: { type: 'boolean' }, comment: { type: 'string' } }, additionalProperties: false }, ...extra },
        ...(onError ? { on_error: onError } : {}),
      },
      end({ approved: '{{nodes.approve.output.data.approved}}', by: '{{nodes.approve.output.user_id}}', error: '{{nodes.approve.output.error.code}}' }),
    ],
    [['start', 'approve'], ['approve', 'end']],
  ))

  test('the run waits with no lease, says what for, announces it; bad data is 400, good data resumes it once', async () => {
    const wf = await approval()
    const runId = await async(wf, { amount: 40 })
    const waiting = await waitFor(async () => {
      const run = await env.runOf(runId)
      return run.waiting ? run : null
    }, { what: 'the run to wait for input' })
    expect(waiting).toMatchObject({ status: 'running', waiting: { node: 'approve', prompt: 'Approve a refund of 40 EUR?', expires_at: null } })
    expect(waiting.waiting.schema).toMatchObject({ required: ['approved'] })
    const nodes = await env.h.call('GET', `/v1/runs/${runId}/nodes`, { key: env.owner })
    expect(nodes.status).toBe(200)
    expect(nodes.body.graph.nodes.map((n: any) => n.id)).toEqual(['start', 'approve', 'end'])
    expect(nodes.body.data.map((n: any) => [n.node, n.state])).toEqual([['start', 'completed'], ['approve', 'waiting'], ['end', 'pending']])
    const [row] = await env.h.deps.db.sql<{ lease_owner: string | null }[]>`select lease_owner from runs where id = ${runId}`
    expect(row!.lease_owner).toBeNull()
    expect(await env.outboxOf(runId)).toEqual([{ type: 'workflow.run.waiting', data: { workflow_id: wf, run_id: runId, node: 'approve', prompt: 'Approve a refund of 40 EUR?', expires_at: null } }])

    const input = (body: unknown) => env.h.call('POST', `/v1/runs/${runId}/input`, { key: env.owner, body })
    const bad = await input({ node: 'approve', data: { approved: 'yes' } })
    expect(bad.status).toBe(400)
    expect(bad.body.error).toMatchObject({ code: 'validation_error', param: 'data.approved' })
    const missing = await input({ node: 'approve', data: {} })
    expect(missing.body.error).toMatchObject({ code: 'validation_error', param: 'data.approved' })
    expect((await input({ node: 'nope', data: { approved: true } })).body.error.code).toBe('run_not_waiting')
    const huge = await input({ node: 'approve', data: { approved: true, comment: 'x'.repeat(10 * 1024 * 1024) } })
    expect(huge.status).toBe(413)
    expect(huge.body.error.code).toBe('payload_too_large')
    expect((await env.runOf(runId)).waiting).toMatchObject({ node: 'approve' })

    const ok = await input({ node: 'approve', data: { approved: true, comment: 'fine' } })
    expect(ok.status).toBe(200)
    expect(ok.body).toMatchObject({ run_id: runId, waiting: null })
    const done = await env.finished(runId)
    expect(done).toMatchObject({ status: 'completed', outputs: { approved: true, by: 'runs-owner' } })
    const again = await input({ node: 'approve', data: { approved: false } })
    expect(again.status).toBe(409)
    expect(again.body.error.code).toBe('run_not_waiting')
  })

  test('past timeout_seconds the node fails with input_timeout; with on_error continue the run goes on', async () => {
    const failing = await env.finished(await async(await approval({ timeout_seconds: 1 }), { amount: 1 }))
    expect(failing).toMatchObject({ status: 'failed', error: { code: 'input_timeout', node: 'approve' } })
    const going = await env.finished(await async(await approval({ timeout_seconds: 1 }, 'continue'), { amount: 1 }))
    expect(going).toMatchObject({ status: 'completed', outputs: { error: 'input_timeout' } })
  })

  test('a reader may not answer; a schema that cannot compile is refused at save', async () => {
    const runId = await async(await approval(), { amount: 5 })
    await waitFor(async () => (await env.runOf(runId)).waiting, { what: 'the run to wait' })
    const res = await env.h.call('POST', `/v1/runs/${runId}/input`, { key: env.reader, body: { node: 'approve', data: { approved: true } } })
    expect(res.status).toBe(403)
    const save = await env.h.call('POST', '/v1/workflows', {
      key: env.owner,
      body: { workspace_id: env.ws, name: 'bad schema', graph: graph([start(), { id: 'ask', type: 'human_input', config: { prompt: 'x', schema: { type: 'no-such-type' } } }, end({})], [['start', 'ask'], ['ask', 'end']]) },
    })
    expect(save.status).toBe(400)
    expect(save.body.error.param).toBe('graph.nodes.1.config.schema')
    await env.h.call('POST', `/v1/runs/${runId}/cancel`, { key: env.owner })
  })
})
