/**
 * The storage ceiling of bench/runs.ts: the SQL the service issues for one run, issued directly
 * through postgres.js on the same store (`openEmbedded` on the service's data directory once it has
 * stopped; in server mode the same database through a pool of 10), with no HTTP, no engine, no
 * machine, no executors. The statements are the store functions the service calls (src/store/*), in
 * the order and transactions it calls them; per run of a linear workflow start → templates → end
 * (counted with postgres.js's `debug` hook on the service's store, ~72.5 for 5 nodes):
 *
 *   trigger   findWorkflow, findWorkspaceAccess, BEGIN insertRun COMMIT
 *   claim     BEGIN claimRuns (select … for update skip locked, lease update) COMMIT, for a batch
 *   drive     findRun; per node: two transitions (node.started, node.completed), each
 *             BEGIN lockRun, saveRun, appendRunEvents (next_seq update, run_events insert) COMMIT,
 *             the last also emit (outbox insert); then findRun
 *   sync only waitForRun's findRun after the insert and after each transition's publish
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
import { claimUndispatchedEvents, emit, markEventsDispatched } from '../src/store/events'
import { appendRunEvents, claimRuns, findRun, insertRun, lockRun, saveRun, type RunRow, type RunStatus, type RunUsage } from '../src/store/runs'
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

/** The ten (or six) transitions of a linear run, as the engine makes them, computed once. */
function transitions(templates: number): Step[] {
  const ids = ['start', ...Array.from({ length: templates }, (_, i) => `t${i + 1}`), 'end']
  let persisted = start(runMachine, undefined as never).persisted as Persisted<RunContext>
  const steps: Step[] = []
  const at = new Date().toISOString()
  const push = (event: RunEvent, log: Step['log']) => {
    persisted = advance(runMachine, persisted, event, { memo: false })!.persisted as Persisted<RunContext>
    const status = persisted.value as RunStatus
    const finished = status !== 'running'
    const all = [...log]
    if (finished) all.push({ type: 'usage', data: { ...usage } }, { type: 'done', data: { status, outputs: persisted.context.outputs ?? {} } })
    steps.push({ status, snapshot: persisted, log: all, finished })
  }
  let text = ''
  for (const [i, id] of ids.entries()) {
    push({ type: 'node.started', node: id, at }, [{ type: 'node_start', data: { node: id, node_id: id, started_at: at } }])
    const output = i === 0 ? inputs : id === 'end' ? { text } : { text: (text = `Hello ${inputs.name}, step ${i}`) }
    push({ type: 'node.completed', node: id, output, durationMs: 0, end: id === 'end' }, [{ type: 'node_end', data: { node: id, node_id: id, duration_ms: 0, output } }])
  }
  return steps
}

// Server mode: the service's pool size (DATABASE_POOL_MAX's default).
const db = cfg.databaseUrl ? openPostgres(cfg.databaseUrl, 10) : await openEmbedded({ dataDir: cfg.dataDir })
const sql: Pool = db.sql

/** A transition as transitions.ts makes it: one transaction, the row locked, snapshot, log, outbox. */
async function transition(id: string, s: Step): Promise<RunRow> {
  return sql.begin(async (tx) => {
    await lockRun(tx, id)
    const saved = await saveRun(tx, id, { status: s.status, snapshot: s.snapshot, usage, ...(s.finished ? { outputs: s.snapshot.context.outputs, error: s.snapshot.context.error, finished: true } : {}) })
    await appendRunEvents(tx, id, s.log)
    if (s.finished) await emit(tx, saved.workspace_id, 'workflow.run.completed', { workflow_id: saved.workflow_id, run_id: id, status: saved.status, duration_ms: saved.duration_ms ?? 0, outputs: saved.outputs ?? {} })
    return saved
  })
}

/** The trigger's reads (loadWorkflow: the workflow, then the caller's access) and its insert. */
async function trigger(shape: Shape): Promise<string> {
  const wf = await findWorkflow(sql, shape.workflowId)
  if (!wf) throw new Error(`workflow ${shape.workflowId} not found in ${cfg.dataDir}`)
  if (!(await findWorkspaceAccess(sql, wf.workspace_id, cfg.userId))) throw new Error('workspace not found')
  const row = await sql.begin((tx) =>
    insertRun(tx, {
      id: newId('run'), workflow_id: wf.id, workflow_version: wf.version, workspace_id: wf.workspace_id, user_id: cfg.userId,
      inputs, snapshot: start(runMachine, undefined as never).persisted as RunRow['snapshot'], machine_version: RUN_MACHINE_VERSION, request_id: newId('req'),
    }),
  )
  return row.id
}

// Claims in batches, as the worker does under load (one claim took ~30 runs at 32 in flight).
const claimed = new Set<string>()
let claiming: Promise<void> | null = null
async function awaitClaim(id: string) {
  while (!claimed.has(id)) {
    claiming ??= sql
      .begin((tx) => claimRuns(tx, owner, LEASE_MS, 64))
      .then((ids) => ids.forEach((i) => claimed.add(i)))
      .finally(() => (claiming = null))
    await claiming
  }
  claimed.delete(id)
}

async function drive(id: string, steps: Step[], afterPublish: () => Promise<unknown>) {
  await findRun(sql, id)
  for (let i = 0; i < steps.length; i += 2) {
    await transition(id, steps[i]!)
    await afterPublish()
    const last = await transition(id, steps[i + 1]!)
    await afterPublish()
    if (i + 2 === steps.length && last.status !== 'completed') throw new Error(`run ${id} ended ${last.status}`)
    await findRun(sql, id)
  }
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
        await awaitClaim(id)
        await drive(id, steps, async () => {})
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

/** One run at a time, with waitForRun's reads (after the insert, after every transition). */
async function syncPhase(shape: Shape, runs: number) {
  const steps = transitions(shape.templates)
  const latencies: number[] = []
  for (let i = 0; i < runs; i++) {
    const began = performance.now()
    const id = await trigger(shape)
    await findRun(sql, id)
    await sql.begin((tx) => claimRuns(tx, owner, LEASE_MS, 64))
    await drive(id, steps, () => findRun(sql, id))
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
