import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import type { Server } from 'bun'
import { newId } from '../../src/lib/ids'
import { start as startStep } from '../../src/machines/runner'
import { RUN_MACHINE_VERSION, runMachine } from '../../src/machines/workflow-run.machine'
import { insertChildRun, type RunRow } from '../../src/store/runs'
import { waitFor } from '../helpers/harness'
import { chain, end, start, startRunsEnv, wait, type Node, type RunsEnv } from '../helpers/runs'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Cancelling a run that fanned out (docs/workflows.md, "Cancelling a run"): the run and every run
 * below it, at any depth, end `cancelled` in the cancel's own transaction, no child is created after
 * it, and the node each descendant had in flight is aborted (the loopback server sees its request
 * cut). And after a cancel no node of a run still shows itself waiting or retrying.
 */

let env: RunsEnv
/** Holds every request until its client goes away; counts both. */
let holder: Server<undefined>
const held = { received: 0, aborted: 0 }

beforeAll(async () => {
  // 16 leaves in flight at once, each a run without children: above a workspace's default share of
  // working runs (RUNS_PER_WORKSPACE, 8), which this test is not about.
  env = await startRunsEnv({ RUNS_PER_WORKSPACE: '64' })
  holder = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    idleTimeout: 0,
    async fetch(req) {
      held.received++
      await new Promise<void>((resolve) => {
        if (req.signal.aborted) return resolve()
        req.signal.addEventListener('abort', () => resolve(), { once: true })
      })
      held.aborted++
      return new Response('too late')
    },
  })
}, 60_000)

afterAll(async () => {
  holder?.stop(true)
  await env?.close()
})

const sql = () => env.h.deps.db.sql

interface TreeRow {
  id: string
  status: string
  depth: number
  created_at: Date
  /** Nodes of its snapshot that are still running, waiting or retrying. */
  unfinished: number
  done: number
  announced: number
}

/** The run and every run below it, with how each one's end was recorded. */
function tree(rootId: string): Promise<TreeRow[]> {
  return sql()<TreeRow[]>`
    with recursive d as (select id from runs where id = ${rootId} union all select r.id from runs r join d on r.parent_run_id = d.id)
    select r.id, r.status, r.depth, r.created_at,
      (select count(*)::int from jsonb_each(r.snapshot->'context'->'progress') p where p.value->>'status' in ('running', 'waiting', 'retrying')) as unfinished,
      (select count(*)::int from run_events e where e.run_id = r.id and e.type = 'done' and e.data->>'status' = 'cancelled') as done,
      (select count(*)::int from events o where o.type = 'workflow.run.cancelled' and o.data->>'run_id' = r.id) as announced
    from runs r join d using (id) order by r.depth, r.id`
}

describe('cancelling a fan-out', () => {
  test('20×20 items four deep: every descendant cancelled with the run, none created after, every request in flight aborted', async () => {
    const item = { name: 'item', type: 'number' }
    const leaf = await env.workflow(chain(
      start([item]),
      { id: 'call', type: 'http_request', config: { method: 'GET', url: `http://127.0.0.1:${holder.port}/hold?item={{inputs.item}}`, timeout_ms: 60_000 } },
      end({}),
    ))
    const wrap = await env.workflow(chain(start([item]), { id: 'sub', type: 'sub_workflow', config: { workflow_id: leaf, inputs: { item: '{{inputs.item}}' } } }, end({})))
    // on_item_error skip: an item that ends frees its place for the next one, which is what kept
    // children coming while a slow cancel went through the tree one run at a time.
    const fanOut = (workflowId: string, more: Record<string, string> = {}): Node => ({
      id: 'each',
      type: 'iteration',
      config: { workflow_id: workflowId, items: '{{inputs.xs}}', item_input: 'item', inputs: more, concurrency: 4, on_item_error: 'skip' },
    })
    const mid = await env.workflow(chain(start([item, { name: 'xs', type: 'array' }]), fanOut(wrap), end({})))
    const root = await env.workflow(chain(start([{ name: 'xs', type: 'array' }]), fanOut(mid, { xs: '{{inputs.xs}}' }), end({})))

    const xs = Array.from({ length: 20 }, (_, i) => i)
    const rootId = (await env.trigger(root, { xs }, { async: true })).body.run_id as string
    // 4 mid runs × 4 items each: 16 leaves, each holding a request at the loopback server.
    await waitFor(() => held.received >= 16, { timeoutMs: 60_000, what: '16 requests held by the leaves' })

    const cancel = await env.h.call('POST', `/v1/runs/${rootId}/cancel`, { key: env.owner })
    expect(cancel.status).toBe(200)
    expect(cancel.body).toMatchObject({ run_id: rootId, status: 'cancelled' })
    const answeredAt = (await sql()<{ t: Date }[]>`select clock_timestamp() as t`)[0]!.t

    // Answered after the whole tree ended: nothing below the run is still running, at any depth.
    const atAnswer = await tree(rootId)
    expect([...new Set(atAnswer.map((r) => r.depth))]).toEqual([0, 1, 2, 3])
    expect(atAnswer.filter((r) => r.status !== 'cancelled')).toEqual([])

    // Every node in flight is aborted: the server sees each request it holds cut by its client.
    await waitFor(() => held.aborted === held.received, { timeoutMs: 30_000, what: `every held request aborted (${held.aborted} of ${held.received})` })
    await waitFor(() => env.workers.runs.busy === 0, { timeoutMs: 30_000, what: 'the run worker to let go of every run of the tree' })

    const after = await tree(rootId)
    // No child was created after the cancel: the same runs, none younger than its answer.
    expect(after.map((r) => r.id)).toEqual(atAnswer.map((r) => r.id))
    expect(after.filter((r) => r.created_at > answeredAt)).toEqual([])
    for (const r of after) {
      // Each ended once, as a cancel ends a run: its done event, its outbox event, no node left going.
      expect({ id: r.id, status: r.status, done: r.done, announced: r.announced, unfinished: r.unfinished }).toEqual({ id: r.id, status: 'cancelled', done: 1, announced: 1, unfinished: 0 })
    }
    const leaves = after.filter((r) => r.depth === 3)
    expect(leaves.length).toBeGreaterThanOrEqual(16)
    // The leaves whose request was in flight show their http node cancelled.
    const callCancelled = await sql()<{ n: number }[]>`
      select count(*)::int as n from runs where id in ${sql()(leaves.map((r) => r.id))} and snapshot->'context'->'progress'->'call'->>'status' = 'cancelled'`
    expect(callCancelled[0]!.n).toBeGreaterThanOrEqual(16)

    // A mid run's worker that had not heard of the cancel yet (its message late or lost) starts its
    // next item as its iteration node does: the insert itself refuses, since its parent is cancelled.
    const m = (await sql()<RunRow[]>`select * from runs where id = ${after.find((r) => r.depth === 1)!.id}`)[0]!
    const next = { id: newId('run'), workflow_id: wrap, workflow_version: 1, workspace_id: m.workspace_id, user_id: m.user_id, inputs: { item: 19 },
      snapshot: startStep(runMachine, undefined as never).persisted as RunRow['snapshot'], machine_version: RUN_MACHINE_VERSION, request_id: m.request_id,
      parent_run_id: m.id, parent_node: 'each', item_index: 19, depth: 2 }
    expect(await insertChildRun(sql(), next)).toBeNull()
    expect((await sql()`select id from runs where id = ${next.id}`).length).toBe(0)
  }, 180_000)
})

describe('node states after a cancel', () => {
  test('a waiting wait node, a retrying node and a node not yet started all end cancelled, with no until', async () => {
    const wf = await env.workflow({
      nodes: [
        start(),
        wait('pause', 600),
        // Nothing listens on port 1: every attempt fails at once, and the next is a minute away.
        { id: 'flaky', type: 'http_request', config: { method: 'GET', url: 'http://127.0.0.1:1/' }, retry: { max_attempts: 5, backoff_ms: 60_000 } },
        end({}),
      ],
      edges: [
        { source: 'start', target: 'pause' },
        { source: 'start', target: 'flaky' },
        { source: 'pause', target: 'end' },
        { source: 'flaky', target: 'end' },
      ],
    })
    const runId = (await env.trigger(wf, {}, { async: true })).body.run_id as string
    const nodes = async () => {
      const res = await env.h.call('GET', `/v1/runs/${runId}/nodes`, { key: env.owner })
      expect(res.status).toBe(200)
      return Object.fromEntries((res.body.data as { node: string; state: string; until: string | null }[]).map((n) => [n.node, n]))
    }
    await waitFor(async () => {
      const n = await nodes()
      return n.pause!.state === 'waiting' && n.flaky!.state === 'retrying'
    }, { timeoutMs: 30_000, what: 'pause waiting and flaky retrying' })
    const before = await nodes()
    expect(Date.parse(before.pause!.until!)).toBeGreaterThan(Date.now())
    expect(Date.parse(before.flaky!.until!)).toBeGreaterThan(Date.now())

    const cancel = await env.h.call('POST', `/v1/runs/${runId}/cancel`, { key: env.owner })
    expect(cancel.status).toBe(200)
    const afterCancel = await nodes()
    expect(Object.fromEntries(Object.values(afterCancel).map((n) => [n.node, [n.state, n.until]]))).toEqual({
      start: ['completed', null],
      pause: ['cancelled', null],
      flaky: ['cancelled', null],
      end: ['cancelled', null],
    })
    // The last attempt's failure stays visible on the node that was retrying.
    expect((await nodes()).flaky).toMatchObject({ attempt: 2, error: { code: expect.any(String) } })
  }, 60_000)
})
