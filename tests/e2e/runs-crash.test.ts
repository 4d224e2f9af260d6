import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Server } from 'bun'
import postgres from 'postgres'
import { generateKey } from '../../src/domain/api-keys'
import { startCluster, type Cluster } from '../helpers/cluster'
import { waitFor } from '../helpers/harness'
import { apiCall, EMBEDDED, killAll, spawnService, type ServiceProcess } from '../helpers/process'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Runs survive their process (docs/api.md, "Runs"): the real service as a subprocess.
 * (a) Embedded: SIGKILLed while an http_request node is in flight, restarted on the same DATA_DIR;
 *     the restarted service ends the dead one's lease (the data directory's lock proves it gone), and
 *     the run resumes from its snapshot at once, runs the node again,
 *     and finishes exactly once (one `done`, one outbox event, one webhook delivery).
 * (b) Server mode: one API process and two worker-only processes on one Postgres and one Redis
 *     share 200 runs; each completes exactly once.
 */

/** src/workers/runs.ts RUN_LEASE_MS: a dead worker's run is claimable this long after its last heartbeat. */
const RUN_LEASE_MS = 15_000
const HOLD_MS = 2000

interface Ev {
  seq: number
  event: string
  data: any
}

const start = { id: 'start', type: 'start', config: {} }
const chainEdges = (ids: string[]) => ids.slice(1).map((id, i) => ({ source: ids[i]!, target: id }))

/** A plain-HTTP loopback server: `/slow` answers after HOLD_MS, `/hook` records webhook deliveries. */
interface Target {
  server: Server<undefined>
  slow: { at: number }[]
  hooks: { json: any; event: string }[]
}

function startTarget(): Target {
  const t: Target = { server: null as never, slow: [], hooks: [] }
  t.server = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    idleTimeout: 0,
    async fetch(req) {
      const path = new URL(req.url).pathname
      if (path === '/slow') {
        t.slow.push({ at: Date.now() })
        // A slow step on purpose (the fake's pace, not a wait in the test): it holds runs mid-node while a worker is killed.
        await Bun.sleep(HOLD_MS)
        return Response.json({ slow: true, n: t.slow.length })
      }
      if (path === '/hook') {
        t.hooks.push({ json: await req.json().catch(() => null), event: req.headers.get('x-service-event') ?? '' })
        return Response.json({ ok: true })
      }
      return new Response('no', { status: 404 })
    },
  })
  return t
}

describe('embedded: a run survives SIGKILL mid-node', () => {
  let tmp: string
  let target: Target
  const rootKey = generateKey()

  beforeAll(() => {
    tmp = mkdtempSync(join(tmpdir(), 'ap-e2e-runs-crash-'))
    target = startTarget()
  })
  afterAll(async () => {
    await killAll()
    await target?.server.stop(true)
    if (tmp) rmSync(tmp, { recursive: true, force: true })
  })

  const boot = () =>
    spawnService({
      env: {
        ...EMBEDDED,
        DATA_DIR: join(tmp, 'data'),
        BOOTSTRAP_API_KEY: rootKey,
        WEBHOOK_ALLOW_HTTP: 'true',
        WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
        RATE_LIMIT_BURST: '100000',
        RATE_LIMIT_PER_SECOND: '100000',
      },
    })

  test('killed during an http_request node: resumed after restart, the node runs again, done once, one outbox event', async () => {
    let sp: ServiceProcess = boot()
    await sp.ready(30_000)
    const ws = await apiCall(sp, rootKey, 'POST', '/v1/workspaces', { name: 'Crash runs' })
    expect(ws.status).toBe(201)
    const workspace_id = ws.body.data.id
    const hook = await apiCall(sp, rootKey, 'POST', '/v1/webhooks', { url: `http://127.0.0.1:${target.server.port}/hook`, events: ['workflow.run.completed'], secret: `crash-${generateKey()}`, workspace_id })
    expect(hook.status).toBe(201)
    const graph = {
      nodes: [
        start,
        { id: 'slow', type: 'http_request', config: { method: 'GET', url: `http://127.0.0.1:${target.server.port}/slow`, timeout_ms: 10_000 } },
        { id: 'after', type: 'template', config: { template: 'after {{nodes.slow.output.body.n}}' } },
        { id: 'end', type: 'end', config: { outputs: { text: '{{nodes.after.output.text}}' } } },
      ],
      edges: chainEdges(['start', 'slow', 'after', 'end']),
    }
    const wf = await apiCall(sp, rootKey, 'POST', '/v1/workflows', { workspace_id, name: 'Slow', graph })
    expect(wf.status).toBe(201)
    const quick = await apiCall(sp, rootKey, 'POST', '/v1/workflows', {
      workspace_id,
      name: 'Quick',
      graph: { nodes: [start, { id: 'end', type: 'end', config: { outputs: {} } }], edges: chainEdges(['start', 'end']) },
    })
    expect(quick.status).toBe(201)

    const trig = await apiCall(sp, rootKey, 'POST', `/v1/workflows/${wf.body.data.id}/runs?async=true`, { inputs: {} })
    expect(trig.status).toBe(202)
    const runId = trig.body.run_id as string
    const events = async (s: ServiceProcess): Promise<Ev[]> => (await apiCall(s, rootKey, 'GET', `/v1/runs/${runId}/events`)).body.data
    await waitFor(async () => target.slow.length === 1 && (await events(sp)).some((e) => e.event === 'node_start' && e.data.node_id === 'slow'), {
      timeoutMs: 10_000,
      what: 'the http node to start and reach the receiver',
    })
    sp.proc.kill('SIGKILL')
    await sp.exited
    const killedAt = Date.now()
    expect(target.hooks.length).toBe(0)

    sp = boot()
    await sp.ready(30_000)
    const restartedIn = Date.now() - killedAt
    expect((await apiCall(sp, rootKey, 'GET', `/v1/runs/${runId}`)).body.status).toBe('running')
    await sp.waitForOutput(/"runs":1,"documents":0\b.*its runs and documents are taken up now/, 10_000)
    const run = await waitFor(
      async () => {
        const r = (await apiCall(sp, rootKey, 'GET', `/v1/runs/${runId}`)).body
        return r.status !== 'running' ? r : null
      },
      { timeoutMs: RUN_LEASE_MS + HOLD_MS + 10_000, intervalMs: 100, what: 'the run to finish after the restart' },
    )
    const completedIn = Date.now() - killedAt
    expect(run).toMatchObject({ status: 'completed', outputs: { text: 'after 2' } })
    // The node in flight ran again.
    expect(target.slow.length).toBe(2)
    const log = await events(sp)
    expect(log.map((e) => e.seq)).toEqual(log.map((_, i) => i + 1))
    expect(log.filter((e) => e.event === 'done').length).toBe(1)
    expect(log.at(-1)).toMatchObject({ event: 'done', data: { status: 'completed' } })
    for (const node of ['start', 'slow', 'after', 'end']) expect(log.filter((e) => e.event === 'node_end' && e.data.node_id === node).length).toBe(1)

    // One outbox event, hence one delivery. A later run's delivery arriving first-in-first-out shows
    // the outbox has been drained past this run: a duplicate would have arrived by then.
    await waitFor(() => target.hooks.some((h) => h.json?.data?.run_id === runId), { timeoutMs: 15_000, what: "the run's webhook delivery" })
    const next = await apiCall(sp, rootKey, 'POST', `/v1/workflows/${quick.body.data.id}/runs`, { inputs: {} })
    expect(next.body.status).toBe('completed')
    await waitFor(() => target.hooks.some((h) => h.json?.data?.run_id === next.body.run_id), { timeoutMs: 15_000, what: 'the next delivery' })
    const mine = target.hooks.filter((h) => h.json?.data?.run_id === runId)
    expect(mine.length).toBe(1)
    expect(mine[0]!.event).toBe('workflow.run.completed')
    expect(mine[0]!.json.data).toEqual({ workflow_id: wf.body.data.id, run_id: runId, status: 'completed', duration_ms: run.duration_ms, outputs: { text: 'after 2' } })
    const deliveries = await apiCall(sp, rootKey, 'GET', `/v1/webhooks/${hook.body.data.id}/deliveries?limit=100`)
    expect(deliveries.status).toBe(200)
    expect(deliveries.body.data.filter((d: any) => d.data?.run_id === runId).length).toBe(1)
    console.log(`runs crash (embedded): restarted in ${restartedIn} ms, run completed ${completedIn} ms after the kill`)
  }, RUN_LEASE_MS + HOLD_MS + 40_000)
})

const databaseUrl = process.env.DATABASE_URL
const redisUrl = process.env.REDIS_URL
const RUNS = 200

if (!databaseUrl || !redisUrl) {
  describe('server mode: runs shared by several worker processes', () => {
    test.skip('skipped: DATABASE_URL and REDIS_URL are unset (CI sets both)', () => {})
  })
} else {
  describe('server mode: one API process and two worker processes share 200 runs', () => {
    let cluster: Cluster
    let rootKey: string
    let db: postgres.Sql
    let api: ServiceProcess
    let w1: ServiceProcess
    let w2: ServiceProcess

    beforeAll(async () => {
      cluster = await startCluster({ name: 'runs' })
      ;({ api, db, rootKey } = cluster)
      ;[w1, w2] = cluster.workers as [ServiceProcess, ServiceProcess]
    }, 90_000)

    afterAll(async () => {
      await killAll()
      await cluster?.close()
    })

    test('200 async runs: each completes exactly once, with one outbox event each', async () => {
      const ws = await apiCall(api, rootKey, 'POST', '/v1/workspaces', { name: 'Many runs' })
      expect(ws.status).toBe(201)
      const wf = await apiCall(api, rootKey, 'POST', '/v1/workflows', {
        workspace_id: ws.body.data.id,
        name: 'Three nodes',
        graph: {
          nodes: [
            { id: 'start', type: 'start', config: { inputs: [{ name: 'i', type: 'number', required: true }] } },
            { id: 'say', type: 'template', config: { template: 'run {{inputs.i}}' } },
            { id: 'end', type: 'end', config: { outputs: { text: '{{nodes.say.output.text}}' } } },
          ],
          edges: chainEdges(['start', 'say', 'end']),
        },
      })
      expect(wf.status).toBe(201)
      const workflowId = wf.body.data.id as string

      // Who holds leases, sampled while the runs execute (the owner is `<pid>:<random>`; leases are
      // cleared when a run ends, so there is no history to read afterwards).
      /** pid → the runs seen leased by it */
      const owners = new Map<string, Set<string>>()
      let sampling = true
      const sampler = (async () => {
        while (sampling) {
          const rows = await db<{ id: string; lease_owner: string }[]>`select id, lease_owner from runs where workflow_id = ${workflowId} and lease_owner is not null`
          for (const r of rows) {
            const pid = r.lease_owner.split(':')[0]!
            owners.set(pid, (owners.get(pid) ?? new Set()).add(r.id))
          }
          // The sampling period, not a wait for anything.
          await Bun.sleep(2)
        }
      })()

      const t0 = Date.now()
      const ids: string[] = []
      // 20 clients at a time.
      for (let batch = 0; batch < RUNS; batch += 20) {
        const answers = await Promise.all(
          Array.from({ length: 20 }, (_, k) => apiCall(api, rootKey, 'POST', `/v1/workflows/${workflowId}/runs?async=true`, { inputs: { i: batch + k } })),
        )
        for (const a of answers) {
          expect(a.status).toBe(202)
          ids.push(a.body.run_id)
        }
      }
      await waitFor(
        async () => {
          const [row] = await db<{ n: number }[]>`select count(*)::int as n from runs where workflow_id = ${workflowId} and status <> 'running'`
          return row!.n === RUNS
        },
        { timeoutMs: 60_000, intervalMs: 100, what: `the ${RUNS} runs to finish` },
      )
      const elapsed = Date.now() - t0
      sampling = false
      await sampler

      const runs = await db<{ id: string; status: string; outputs: any; inputs: any }[]>`select id, status, outputs, inputs from runs where workflow_id = ${workflowId}`
      expect(runs.length).toBe(RUNS)
      expect(new Set(runs.map((r) => r.id))).toEqual(new Set(ids))
      for (const r of runs) {
        expect(r.status).toBe('completed')
        expect(r.outputs).toEqual({ text: `run ${r.inputs.i}` })
      }
      const [dones] = await db<{ runs: number; events: number }[]>`
        select count(distinct run_id)::int as runs, count(*)::int as events from run_events
        where type = 'done' and run_id in (select id from runs where workflow_id = ${workflowId})`
      expect(dones).toEqual({ runs: RUNS, events: RUNS })
      const dup = await db`
        select run_id, data->>'node_id' as node, count(*)::int as n from run_events
        where type in ('node_end', 'node_start') and run_id in (select id from runs where workflow_id = ${workflowId})
        group by run_id, type, data->>'node_id' having count(*) > 1`
      expect([...dup]).toEqual([])
      const [ends] = await db<{ n: number }[]>`
        select count(*)::int as n from run_events where type = 'node_end' and run_id in (select id from runs where workflow_id = ${workflowId})`
      expect(ends!.n).toBe(RUNS * 3)
      // Every run's log: consecutive sequence numbers from 1.
      const gaps = await db`
        select run_id from run_events where run_id in (select id from runs where workflow_id = ${workflowId})
        group by run_id having min(seq) <> 1 or max(seq) <> count(*)`
      expect([...gaps]).toEqual([])
      const [outbox] = await db<{ total: number; runs: number }[]>`
        select count(*)::int as total, count(distinct data->>'run_id')::int as runs from events
        where type = 'workflow.run.completed' and data->>'workflow_id' = ${workflowId}`
      expect(outbox).toEqual({ total: RUNS, runs: RUNS })
      const [others] = await db<{ n: number }[]>`
        select count(*)::int as n from events where type in ('workflow.run.failed', 'workflow.run.cancelled') and data->>'workflow_id' = ${workflowId}`
      expect(others!.n).toBe(0)

      const workerPids = [w1.proc.pid, w2.proc.pid].map(String)
      console.log(`runs workers: ${RUNS} runs in ${elapsed} ms; runs seen leased per pid: ${[...owners].map(([pid, runs]) => `${pid}: ${runs.size}`).join(', ')} (api ${api.proc.pid}, workers ${workerPids.join(', ')})`)
      // The worker-only processes took runs (the API process runs workers too, and takes some). Which
      // process wins each claim is timing; that one of them took none is possible in principle, that
      // both did is not required for the invariants above.
      expect(workerPids.some((pid) => owners.has(pid))).toBe(true)
      expect(w1.proc.exitCode).toBeNull()
      expect(w2.proc.exitCode).toBeNull()
    }, 90_000)
  })
}
