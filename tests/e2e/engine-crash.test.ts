import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Server } from 'bun'
import { generateKey } from '../../src/domain/api-keys'
import { waitFor } from '../helpers/harness'
import { apiCall, EMBEDDED, killAll, spawnService, type ServiceProcess } from '../helpers/process'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The engine's second level survives its process (docs/workflows.md): the real service as an
 * embedded subprocess, SIGKILLed once while three runs are in the middle of their work, then
 * restarted on the same DATA_DIR:
 * - an iteration over 200 items, some children done, some in flight, most not started: every item
 *   gets exactly one child run, and the results come complete and in item order;
 * - a node in its retry back-off: the retry happens once, after the restart;
 * - a run waiting for a person's input (parked, no lease): the input given to the restarted process
 *   resumes it.
 */

/** src/workers/runs.ts RUN_LEASE_MS: the dead worker's runs are claimable this long after its last heartbeat. */
const RUN_LEASE_MS = 15_000
const ITEMS = 200

interface Receiver {
  server: Server<undefined>
  /** Items received, in arrival order (an item in flight at the kill arrives again after the restart). */
  items: number[]
  flaky: number
}

function startReceiver(): Receiver {
  const r: Receiver = { server: null as never, items: [], flaky: 0 }
  r.server = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    idleTimeout: 0,
    async fetch(req) {
      const url = new URL(req.url)
      if (url.pathname === '/item') {
        r.items.push(Number(url.searchParams.get('i')))
        // The receiver's pace (not a wait in the test): items take a little while, so some are in flight at the kill.
        await Bun.sleep(20)
        return Response.json({ i: Number(url.searchParams.get('i')) })
      }
      if (url.pathname === '/flaky') {
        // The first call outlives the node's timeout_ms (the receiver's pace), the second answers.
        if (++r.flaky === 1) await Bun.sleep(2_000)
        return Response.json({ call: r.flaky })
      }
      return new Response('no', { status: 404 })
    },
  })
  return r
}

describe('embedded: iteration, retry back-off and human input survive SIGKILL', () => {
  let tmp: string
  let receiver: Receiver
  const rootKey = generateKey()

  beforeAll(() => {
    tmp = mkdtempSync(join(tmpdir(), 'ap-e2e-engine-crash-'))
    receiver = startReceiver()
  })
  afterAll(async () => {
    await killAll()
    await receiver?.server.stop(true)
    if (tmp) rmSync(tmp, { recursive: true, force: true })
  })

  const boot = () =>
    spawnService({
      env: { ...EMBEDDED, DATA_DIR: join(tmp, 'data'), BOOTSTRAP_API_KEY: rootKey, WEBHOOK_ALLOW_HTTP: 'true', WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true', RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000' },
    })

  test('killed mid-iteration, mid-back-off and while waiting for input: each finishes once after the restart', async () => {
    let sp: ServiceProcess = boot()
    await sp.ready(30_000)
    const call = (method: string, path: string, body?: unknown) => apiCall(sp, rootKey, method, path, body)
    const workspace_id = (await call('POST', '/v1/workspaces', { name: 'Engine crash' })).body.data.id
    const save = async (name: string, graph: unknown) => {
      const res = await call('POST', '/v1/workflows', { workspace_id, name, graph })
      expect(res.status).toBe(201)
      return res.body.data.id as string
    }
    const base = `http://127.0.0.1:${receiver.server.port}`
    const item = await save('Item', {
      nodes: [
        { id: 'start', type: 'start', config: { inputs: [{ name: 'i', type: 'number' }] } },
        { id: 'call', type: 'http_request', config: { method: 'GET', url: `${base}/item?i={{inputs.i}}` } },
        { id: 'end', type: 'end', config: { outputs: { i: '{{nodes.call.output.body.i}}' } } },
      ],
      edges: [{ source: 'start', target: 'call' }, { source: 'call', target: 'end' }],
    })
    const each = await save('Each', {
      nodes: [
        { id: 'start', type: 'start', config: { inputs: [{ name: 'xs', type: 'array' }] } },
        { id: 'each', type: 'iteration', config: { workflow_id: item, items: '{{inputs.xs}}', item_input: 'i', concurrency: 16 } },
        { id: 'end', type: 'end', config: { outputs: { results: '{{nodes.each.output.results}}' } } },
      ],
      edges: [{ source: 'start', target: 'each' }, { source: 'each', target: 'end' }],
    })
    const flaky = await save('Flaky', {
      nodes: [
        { id: 'start', type: 'start', config: {} },
        { id: 'call', type: 'http_request', config: { method: 'GET', url: `${base}/flaky` }, timeout_ms: 300, retry: { max_attempts: 3, backoff_ms: 4_000 } },
        { id: 'end', type: 'end', config: { outputs: { call: '{{nodes.call.output.body.call}}' } } },
      ],
      edges: [{ source: 'start', target: 'call' }, { source: 'call', target: 'end' }],
    })
    const approve = await save('Approve', {
      nodes: [
        { id: 'start', type: 'start', config: {} },
        { id: 'ask', type: 'human_input', config: { prompt: 'Ship it?', schema: { type: 'object', required: ['ok'], properties: { ok: { type: 'boolean' } } } } },
        { id: 'end', type: 'end', config: { outputs: { ok: '{{nodes.ask.output.data.ok}}' } } },
      ],
      edges: [{ source: 'start', target: 'ask' }, { source: 'ask', target: 'end' }],
    })

    const xs = Array.from({ length: ITEMS }, (_, i) => i)
    const started = async (wf: string, inputs: Record<string, unknown>) => {
      const res = await call('POST', `/v1/workflows/${wf}/runs?async=true`, { inputs })
      expect(res.status).toBe(202)
      return res.body.run_id as string
    }
    const waitingRun = await started(approve, {})
    const flakyRun = await started(flaky, {})
    const iterationRun = await started(each, { xs })
    const nodeOf = async (runId: string, node: string) => (await call('GET', `/v1/runs/${runId}/nodes`)).body.data.find((n: any) => n.node === node)
    await waitFor(async () => (await nodeOf(waitingRun, 'ask'))?.state === 'waiting', { what: 'the input run to wait' })
    await waitFor(async () => (await nodeOf(flakyRun, 'call'))?.state === 'retrying', { timeoutMs: 10_000, what: 'the flaky node to be in its back-off' })
    await waitFor(() => receiver.items.length >= 40, { timeoutMs: 20_000, what: 'forty items to reach the receiver' })
    sp.proc.kill('SIGKILL')
    await sp.exited
    const killedAt = Date.now()
    const beforeKill = receiver.items.length
    expect(beforeKill).toBeLessThan(ITEMS)
    expect(receiver.flaky).toBe(1)

    sp = boot()
    await sp.ready(30_000)
    // The runs the dead process held are taken up at once: the data directory's lock proved it gone.
    await sp.waitForOutput(/"runs":[1-9]\d*,"documents":0\b.*its runs and documents are taken up now/, 10_000)
    // The waiting run holds no lease: the restarted process takes its input at once.
    const given = await call('POST', `/v1/runs/${waitingRun}/input`, { node: 'ask', data: { ok: true } })
    expect(given.status).toBe(200)
    const finished = (runId: string) =>
      waitFor(async () => {
        const r = (await call('GET', `/v1/runs/${runId}`)).body
        return r.status !== 'running' ? r : null
      }, { timeoutMs: RUN_LEASE_MS + 60_000, intervalMs: 200, what: `run ${runId} to finish after the restart` })
    expect(await finished(waitingRun)).toMatchObject({ status: 'completed', outputs: { ok: true } })

    const flakyDone = await finished(flakyRun)
    expect(flakyDone).toMatchObject({ status: 'completed', outputs: { call: 2 } })
    expect(receiver.flaky).toBe(2)
    const flakyLog = (await call('GET', `/v1/runs/${flakyRun}/events`)).body.data
    expect(flakyLog.filter((e: any) => e.event === 'node_start' && e.data.node_id === 'call').map((e: any) => e.data.attempt)).toEqual([1, 2])

    const iteration = await finished(iterationRun)
    expect(iteration.status).toBe('completed')
    expect(iteration.outputs.results.map((r: any) => r.i)).toEqual(xs)
    // Exactly one child run per item, each completed once.
    const children = (await call('GET', `/v1/workflows/${item}/runs?limit=100`)).body
    let all = children.data
    for (let page = children; page.has_more; ) {
      page = (await call('GET', `/v1/workflows/${item}/runs?limit=100&cursor=${encodeURIComponent(page.next_cursor)}`)).body
      all = all.concat(page.data)
    }
    expect(all).toHaveLength(ITEMS)
    expect(all.every((r: any) => r.parent_run_id === iterationRun && r.status === 'completed')).toBe(true)
    expect(new Set(all.map((r: any) => r.inputs.i)).size).toBe(ITEMS)
    // At the receiver: every item, and again only those in flight at the kill (at most the concurrency).
    expect(new Set(receiver.items).size).toBe(ITEMS)
    expect(receiver.items.length - ITEMS).toBeLessThanOrEqual(16)
    const outbox = (await call('GET', `/v1/runs/${iterationRun}/events`)).body.data.filter((e: any) => e.event === 'done')
    expect(outbox).toHaveLength(1)
    console.log(`engine crash (embedded): ${beforeKill} item calls before the kill, ${receiver.items.length - ITEMS} repeated; iteration done ${Date.now() - killedAt} ms after the kill`)
  }, RUN_LEASE_MS + 120_000)
})
