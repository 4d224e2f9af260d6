/**
 * The storage ceiling of bench/runs.ts: the SQL the service issues for one run, issued directly
 * through postgres.js on the same store (`openEmbedded` on the service's data directory once it has
 * stopped; in server mode the same database through a pool of 10), with no HTTP, no engine, no
 * machine, no executors. The statements are the store functions the service calls (src/store/*), in
 * the order it calls them; per run of a linear workflow start → templates → end (5 nodes: ~11.5
 * statements, counted with postgres.js's `debug` hook on the service's store):
 *
 *   trigger   findWorkflow, findWorkspaceAccess, insertRun
 *   claim     the lease claim of runs (one statement), for a batch
 *   drive     six transitions, one `writeTransition` statement each: node.started of the start node,
 *             then node.completed of each node with node.started of the next; the last also writes
 *             the outbox event
 *   sync only waitForRun's findRun after the insert and at the run's end
 *   fan-out   every 100 ms: BEGIN claimUndispatchedEvents, enabledWebhooksOf, markEventsDispatched COMMIT
 *
 * The snapshots and log events are the engine's (the run machine advanced once at set-up, not timed),
 * so every statement carries the same JSON. Prints one JSON line.
 *
 *   CEILING (JSON): { dataDir, databaseUrl?, workspaceId, userId,
 *                     async: { workflowId, version, templates, runs, warmup, concurrency },
 *                     sync: { workflowId, version, templates, runs, warmup } }
 */
import { start, advance, type Persisted } from '../src/machines/runner'
import { RUN_MACHINE_VERSION, runMachine, type RunContext, type RunEvent } from '../src/machines/workflow-run.machine'
import { newId } from '../src/lib/ids'
import { openEmbedded, openPostgres, type Pool } from '../src/store/db'
import { claimUndispatchedEvents, markEventsDispatched } from '../src/store/events'
import { claim } from '../src/store/leases'
import { runLeases, findRun, insertRun, writeTransition, type RunRow, type RunStatus, type RunUsage } from '../src/store/runs'
import { enabledWebhooksOf } from '../src/store/webhooks'
import { findWorkflow } from '../src/store/workflows'
import { findWorkspaceAccess } from '../src/store/workspaces'
import { machineCpuMs, percentile } from './lib'

interface Shape {
  workflowId: string
  version: number
  templates: number
  runs: number
  warmup: number
  concurrency?: number
}
const cfg = JSON.parse(process.env.CEILING!) as { dataDir: string; databaseUrl?: string; workspaceId: string; userId: string; async: Shape; sync: Shape | null }
const LEASE_MS = 15_000
const owner = `${process.pid}:ceiling`
const usage: RunUsage = { tokens_in: 0, tokens_out: 0, credits: 0 }
const inputs = { name: 'bench' }

interface Step {
  status: RunStatus
  snapshot: Persisted<RunContext>
  log: { type: string; data: Record<string, unknown> }[]
  finished: boolean
}

/** The transitions of a linear run, as the engine makes them, computed once. */
function transitions(templates: number): Step[] {
  const ids = ['start', ...Array.from({ length: templates }, (_, i) => `t${i + 1}`), 'end']
  let persisted = start(runMachine, undefined as never).persisted as Persisted<RunContext>
  const steps: Step[] = []
  const at = new Date().toISOString()
  const push = (events: RunEvent[], log: Step['log']) => {
    for (const event of events) persisted = advance(runMachine, persisted, event, { memo: false })!.persisted as Persisted<RunContext>
    const status = persisted.value as RunStatus
    const finished = status !== 'running'
    const all = [...log]
    if (finished) all.push({ type: 'usage', data: { ...usage } }, { type: 'done', data: { status, outputs: persisted.context.outputs ?? {} } })
    steps.push({ status, snapshot: persisted, log: all, finished })
  }
  const started = (id: string): [RunEvent, Step['log'][number]] => [{ type: 'node.started', node: id, at }, { type: 'node_start', data: { node: id, node_id: id, started_at: at } }]
  const [e0, l0] = started(ids[0]!)
  push([e0], [l0])
  let text = ''
  for (const [i, id] of ids.entries()) {
    const output = i === 0 ? inputs : id === 'end' ? { text } : { text: (text = `Hello ${inputs.name}, step ${i}`) }
    const events: RunEvent[] = [{ type: 'node.completed', node: id, output, durationMs: 0, end: id === 'end' }]
    const log: Step['log'] = [{ type: 'node_end', data: { node: id, node_id: id, duration_ms: 0, output } }]
    const next = ids[i + 1]
    if (next) {
      const [e, l] = started(next)
      events.push(e)
      log.push(l)
    }
    push(events, log)
  }
  return steps
}

// Server mode: the service's pool size (DATABASE_POOL_MAX's default).
const db = cfg.databaseUrl ? openPostgres(cfg.databaseUrl, 10) : await openEmbedded({ dataDir: cfg.dataDir })
const sql: Pool = db.sql

/** A transition as transitions.ts makes it: one guarded statement; the last with the outbox event. */
async function transition(run: RunRow, s: Step): Promise<RunRow> {
  const outbox = s.finished ? [{ type: 'workflow.run.completed', data: { workflow_id: run.workflow_id, run_id: run.id, status: s.status, outputs: s.snapshot.context.outputs ?? {} }, ended: true }] : []
  const write = { status: s.status, snapshot: s.snapshot, usage, ...(s.finished ? { finished: { outputs: s.snapshot.context.outputs, error: s.snapshot.context.error } } : {}) }
  const saved = await writeTransition(sql, { id: run.id, next_seq: run.next_seq, owner }, write, s.log, outbox)
  if (!saved) throw new Error(`run ${run.id}: the guarded transition matched nothing`)
  return saved
}

/** The trigger's reads (loadWorkflow: the workflow, then the caller's access) and its insert. */
async function trigger(shape: Shape): Promise<string> {
  const wf = await findWorkflow(sql, shape.workflowId)
  if (!wf) throw new Error(`workflow ${shape.workflowId} not found in ${cfg.dataDir}`)
  if (!(await findWorkspaceAccess(sql, wf.workspace_id, cfg.userId))) throw new Error('workspace not found')
  const row = await insertRun(sql, {
    id: newId('run'), workflow_id: wf.id, workflow_version: wf.version, workspace_id: wf.workspace_id, user_id: cfg.userId,
    inputs, snapshot: start(runMachine, undefined as never).persisted as RunRow['snapshot'], machine_version: RUN_MACHINE_VERSION, request_id: newId('req'),
  })
  return row.id
}

// Claims in batches, as the worker does under load (one claim took ~30 runs at 32 in flight).
const claimed = new Map<string, RunRow>()
let claiming: Promise<void> | null = null
async function awaitClaim(id: string): Promise<RunRow> {
  while (!claimed.has(id)) {
    claiming ??= claim<RunRow>(sql, runLeases, owner, LEASE_MS, 64)
      .then((rows) => rows.forEach((r) => claimed.set(r.id, r)))
      .finally(() => (claiming = null))
    await claiming
  }
  const row = claimed.get(id)!
  claimed.delete(id)
  return row
}

async function drive(claimedRow: RunRow, steps: Step[]) {
  let run = claimedRow
  for (const step of steps) run = await transition(run, step)
  if (run.status !== 'completed') throw new Error(`run ${run.id} ended ${run.status}`)
}

// The outbox fan-out polls every 100 ms in the service; its statements here too (no webhooks).
let fanOut = true
const fanOutLoop = (async () => {
  while (fanOut) {
    await sql.begin(async (tx) => {
      const events = await claimUndispatchedEvents(tx, 500)
      if (events.length === 0) return
      await enabledWebhooksOf(tx, [cfg.workspaceId])
      await markEventsDispatched(tx, events.map((e) => e.id))
    })
    await Bun.sleep(100)
  }
})()

const round3 = (n: number) => Math.round(n * 1000) / 1000
function stats(xs: number[]) {
  const v = Float64Array.from(xs).sort()
  return { n: v.length, p50: round3(percentile(v, 50)), p90: round3(percentile(v, 90)), p99: round3(percentile(v, 99)), max: round3(v[v.length - 1]!) }
}

/** `runs` async runs, `concurrency` in flight: runs/s from the first trigger to the last commit. */
async function asyncPhase(shape: Shape, runs: number) {
  const steps = transitions(shape.templates)
  const latencies: number[] = []
  let next = 0
  const t0 = performance.now()
  const cpu0 = process.cpuUsage()
  const m0 = machineCpuMs()
  await Promise.all(
    Array.from({ length: shape.concurrency ?? 32 }, async () => {
      while (next++ < runs) {
        const began = performance.now()
        const id = await trigger(shape)
        await drive(await awaitClaim(id), steps)
        latencies.push(performance.now() - began)
      }
    }),
  )
  const wallMs = performance.now() - t0
  const cpu = process.cpuUsage(cpu0)
  const busy = machineCpuMs().busy - m0.busy
  const cpuMs = (cpu.user + cpu.system) / 1000
  return {
    runs, seconds: round3(wallMs / 1000), runs_per_s: Math.round((runs * 1000) / wallMs), latency_ms: stats(latencies),
    cpu_us_per_run: Math.round((cpuMs * 1000) / runs), other_cores: Math.round((100 * Math.max(0, busy - cpuMs)) / wallMs) / 100,
  }
}

/** One run at a time, with waitForRun's reads (after the insert, and at the run's end). */
async function syncPhase(shape: Shape, runs: number) {
  const steps = transitions(shape.templates)
  const latencies: number[] = []
  for (let i = 0; i < runs; i++) {
    const began = performance.now()
    const id = await trigger(shape)
    await findRun(sql, id)
    await drive(await awaitClaim(id), steps)
    await findRun(sql, id)
    latencies.push(performance.now() - began)
  }
  return { runs, latency_ms: stats(latencies) }
}

try {
  if (cfg.async.warmup > 0) await asyncPhase(cfg.async, cfg.async.warmup)
  const asyncResult = await asyncPhase(cfg.async, cfg.async.runs)
  let syncResult = null
  if (cfg.sync) {
    if (cfg.sync.warmup > 0) await syncPhase(cfg.sync, cfg.sync.warmup)
    syncResult = await syncPhase(cfg.sync, cfg.sync.runs)
  }
  fanOut = false
  await fanOutLoop
  process.stdout.write(`${JSON.stringify({ async: asyncResult, sync: syncResult })}\n`)
} finally {
  await db.close()
}
