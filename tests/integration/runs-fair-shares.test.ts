import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import type { Server } from 'bun'
import { waitFor, workspaceOf } from '../helpers/harness'
import { end, start, startRunsEnv, type Edge, type Node, type RunsEnv } from '../helpers/runs'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Fair shares between workspaces for runs (docs/workflows.md, "Fair shares between workspaces"),
 * end to end in-process with real workers, with small shares (RUNS_PER_WORKSPACE=4,
 * CHILD_RUNS_PER_WORKSPACE=3) and a loopback receiver counting the calls in flight: a workspace's
 * runs and its fan-out's children are held to their shares while another workspace's
 * run goes through; nested fan-outs wider than the share still end.
 */

let env: RunsEnv
let receiver: Server<undefined>
const seen = new Map<string, { n: number; open: number; peak: number }>()
const counter = (key: string) => {
  let c = seen.get(key)
  if (!c) seen.set(key, (c = { n: 0, open: 0, peak: 0 }))
  return c
}
/** Calls of a key held open until released (`release(key)`), so that what is in flight can be counted. */
const gates = new Map<string, { open: Promise<void>; release: () => void }>()
const gate = (key: string) => {
  let g = gates.get(key)
  if (!g) {
    let release: () => void = () => {}
    const open = new Promise<void>((resolve) => (release = resolve))
    gates.set(key, (g = { open, release }))
  }
  return g
}

beforeAll(async () => {
  env = await startRunsEnv({ RUNS_PER_WORKSPACE: '4', CHILD_RUNS_PER_WORKSPACE: '3' })
  receiver = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    idleTimeout: 0,
    async fetch(req) {
      const key = new URL(req.url).searchParams.get('key') ?? 'none'
      const c = counter(key)
      c.n++
      c.open++
      c.peak = Math.max(c.peak, c.open)
      try {
        await gate(key).open
        return Response.json({ key, n: c.n })
      } finally {
        c.open--
      }
    },
  })
}, 120_000)

afterAll(async () => {
  for (const g of gates.values()) g.release()
  await receiver?.stop(true)
  await env?.close()
})

const http = (id: string, key: string): Node => ({ id, type: 'http_request', config: { method: 'GET', url: `http://127.0.0.1:${receiver.port}/call?key=${key}`, timeout_ms: 60_000 } })
const graph = (nodes: Node[], edges: [string, string][]) => ({ nodes, edges: edges.map(([source, target]): Edge => ({ source, target })) })
const async = async (wf: string, inputs: Record<string, unknown> = {}, key?: string) => {
  const res = await env.trigger(wf, inputs, { async: true, key })
  expect(res.status).toBe(202)
  return res.body.run_id as string
}
const calling = (key: string) => graph([start([{ name: 'item', type: 'number' }]), http('call', key), end({})], [['start', 'call'], ['call', 'end']])

describe('fair shares between workspaces: runs', () => {
  test('an iteration of concurrency 10 has at most CHILD_RUNS_PER_WORKSPACE (3) children running, and ends with every item', async () => {
    const inner = await env.workflow(calling('kids'))
    const outer = await env.workflow(graph(
      [start([{ name: 'xs', type: 'array' }]), { id: 'each', type: 'iteration', config: { workflow_id: inner, items: '{{inputs.xs}}', item_input: 'item', concurrency: 10 } }, end({ failed: '{{nodes.each.output.failed}}' })],
      [['start', 'each'], ['each', 'end']],
    ))
    const run = await async(outer, { xs: Array.from({ length: 12 }, (_, i) => i) })
    await waitFor(() => counter('kids').open >= 3, { timeoutMs: 30_000 })
    // The share is full: a while later, still no more than 3 children have called (before: 10).
    const children = async () => (await env.h.call('GET', `/v1/workflows/${inner}/runs?limit=100`, { key: env.owner })).body.data.length
    await waitFor(async () => (await children()) >= 3, { timeoutMs: 30_000 })
    for (let i = 0; i < 5; i++) {
      expect(await children()).toBeLessThanOrEqual(3)
      await env.runOf(run)
    }
    gate('kids').release()
    const done = await env.finished(run, 60_000)
    expect(done).toMatchObject({ status: 'completed', outputs: { failed: [] } })
    expect(counter('kids').n).toBe(12)
    expect(counter('kids').peak).toBe(3)
  }, 120_000)

  test('nested fan-outs wider than the share still end: each node may keep one child running', async () => {
    const leaf = await env.workflow(graph([start([{ name: 'item', type: 'number' }]), end({ got: '{{inputs.item}}' })], [['start', 'end']]))
    const middle = await env.workflow(graph(
      [start([{ name: 'item', type: 'number' }, { name: 'ys', type: 'array' }]), { id: 'each', type: 'iteration', config: { workflow_id: leaf, items: '{{inputs.ys}}', item_input: 'item', concurrency: 4 } }, end({})],
      [['start', 'each'], ['each', 'end']],
    ))
    // Four middles at once fill the share of 3 by themselves; their leaves must still run.
    const top = await env.workflow(graph(
      [start([{ name: 'xs', type: 'array' }, { name: 'ys', type: 'array' }]), { id: 'each', type: 'iteration', config: { workflow_id: middle, items: '{{inputs.xs}}', item_input: 'item', inputs: { ys: '{{inputs.ys}}' }, concurrency: 4 } }, end({ failed: '{{nodes.each.output.failed}}' })],
      [['start', 'each'], ['each', 'end']],
    ))
    const done = await env.finished(await async(top, { xs: [1, 2, 3, 4, 5], ys: [1, 2, 3] }), 90_000)
    expect(done).toMatchObject({ status: 'completed', outputs: { failed: [] } })
  }, 120_000)

  test('a workspace works on at most RUNS_PER_WORKSPACE (4) runs; another workspace\'s run goes through meanwhile', async () => {
    const busy = await env.workflow(calling('top'))
    const runs = await Promise.all(Array.from({ length: 6 }, () => async(busy)))
    await waitFor(() => counter('top').open >= 4, { timeoutMs: 30_000 })
    // Another workspace, another owner: its run completes while two of the first one's six wait on its share.
    const other = await workspaceOf(env.h, env.outsider, 'Other')
    const res = await env.h.call('POST', '/v1/workflows', { key: env.outsider, body: { workspace_id: other, name: 'quick', graph: graph([start(), end({ ok: 'yes' })], [['start', 'end']]) } })
    expect(res.status).toBe(201)
    const quick = await env.trigger(res.body.data.id, {}, { key: env.outsider })
    expect(quick.status).toBe(200)
    expect(quick.body).toMatchObject({ status: 'completed', outputs: { ok: 'yes' } })
    expect(counter('top').open).toBe(4)
    expect(counter('top').n).toBe(4)
    gate('top').release()
    for (const id of runs) expect((await env.finished(id, 60_000)).status).toBe('completed')
    expect(counter('top').peak).toBe(4)
  }, 120_000)
})
