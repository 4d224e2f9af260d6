import type { Deps } from '../deps'
import { executors } from '../domain/workflows/nodes'
import { inputSpec } from '../domain/workflows/graph'
import { plan } from '../domain/workflows/plan'
import { RunNotRunning, transition, type LogEvent } from '../domain/workflows/transitions'
import { NodeError, type Graph, type GraphNode, type NodeResult } from '../domain/workflows/types'
import { newId } from '../lib/ids'
import type { RunEvent } from '../machines/workflow-run.machine'
import * as runs from '../store/runs'
import { getWorkflowVersion } from '../store/workflows'
import { PollingLoop } from './loop'
import type { TimerHandler } from './timers'

export const RUN_TIMER = 'run'
/** A worker holds a run this long without a heartbeat; heartbeats come every third of it. */
export const RUN_LEASE_MS = 15_000
const MAX_RUNS = 64
const IDLE_POLL_MS = 100
/** LLM deltas are written to the run's log in pieces at most this old, not one row per token. */
const DELTA_FLUSH_MS = 50
export const CANCEL_CHANNEL = 'runs.cancel'

/**
 * Executes runs: claims them from Postgres with leases (`for update skip locked`), heartbeats them,
 * and drives each through its graph. Every node start and end is a transition of the run machine in
 * its own transaction; a worker that dies leaves its runs to whoever claims them once the lease has
 * expired, which resumes from the snapshot (the node in flight runs again). Cancellation arrives by
 * pub/sub and aborts the node in flight.
 */
export class RunWorker extends PollingLoop implements TimerHandler {
  readonly owner = `${process.pid}:${newId('req').slice(4, 14)}`
  private readonly active = new Map<string, AbortController>()
  private readonly graphs = new Map<string, Graph>()
  private heartbeat: ReturnType<typeof setInterval> | null = null
  private unsubscribe: (() => Promise<void>) | null = null

  constructor(private readonly deps: Deps) {
    super('run worker: claiming runs', IDLE_POLL_MS, deps.log)
  }

  override start() {
    super.start()
    this.heartbeat = setInterval(() => void this.beat(), RUN_LEASE_MS / 3)
    this.deps.redis.subscribe(CANCEL_CHANNEL, (id) => this.active.get(id)?.abort(new RunNotRunning('cancelled'))).then((u) => (this.unsubscribe = u))
  }

  override async stop() {
    await super.stop()
    if (this.heartbeat) clearInterval(this.heartbeat)
    for (const ac of this.active.values()) ac.abort(new RunNotRunning('worker stopping'))
    await this.unsubscribe?.()
    // Hand the runs back at once rather than after their lease: a restart (or another worker) resumes
    // them from their snapshots without waiting 15 s.
    await runs.releaseRunsOf(this.deps.db.sql, this.owner).catch((err) => this.deps.log.error({ err }, 'run worker: releasing leases failed'))
  }

  /**
   * Adds nothing to the timer loop's claim size: a run timer only nudges this worker (a parked run is
   * claimable from Postgres once its wake_at passes, timer or not), so it must not widen the claims
   * that the delivery worker's back-pressure sizes.
   */
  capacity() {
    return 0
  }

  /** A wait is over: the run is claimable again (wake_at passed); claim it now. */
  async fire(ids: string[]) {
    await this.deps.timers.schedule(RUN_TIMER, ids.map((id) => ({ id, at: null })))
    this.nudge()
  }

  protected async step(): Promise<boolean> {
    const room = MAX_RUNS - this.active.size
    if (room <= 0) return false
    const ids = await this.deps.db.sql.begin((tx) => runs.claimRuns(tx, this.owner, RUN_LEASE_MS, room))
    for (const id of ids) {
      const ac = new AbortController()
      this.active.set(id, ac)
      void this.drive(id, ac)
        .catch((err) => {
          if (!(err instanceof RunNotRunning)) this.deps.log.error({ err, run_id: id }, 'run worker: driving a run failed')
        })
        .finally(() => this.active.delete(id))
    }
    return ids.length === room
  }

  private async beat() {
    const ids = [...this.active.keys()]
    const held = new Set(await runs.heartbeat(this.deps.db.sql, this.owner, ids, RUN_LEASE_MS).catch(() => ids))
    for (const id of ids) if (!held.has(id)) this.active.get(id)?.abort(new RunNotRunning('lease lost'))
  }

  private async graph(run: runs.RunRow): Promise<Graph> {
    const key = `${run.workflow_id}@${run.workflow_version}`
    let g = this.graphs.get(key)
    if (!g) {
      g = await getWorkflowVersion(this.deps.db.sql, run.workflow_id, run.workflow_version)
      if (this.graphs.size > 1000) this.graphs.clear()
      this.graphs.set(key, g)
    }
    return g
  }

  private async drive(runId: string, ac: AbortController) {
    const d = { sql: this.deps.db.sql, redis: this.deps.redis }
    let run = await runs.findRun(d.sql, runId)
    if (!run || run.status !== 'running') return
    const graph = await this.graph(run)
    const byId = new Map(graph.nodes.map((n) => [n.id, n]))
    const inFlight = new Map<string, Promise<void>>()
    const save = async (events: RunEvent[], log: LogEvent[], addUsage?: runs.RunUsage) => {
      run = await transition(d, runId, events, log, { owner: this.owner, addUsage })
    }
    for (;;) {
      if (ac.signal.aborted) return
      const progress = run.snapshot.context.progress
      const now = Date.now()
      // Waits that are over complete now; a node left `running` by a dead worker runs again.
      const dueWaits = Object.entries(progress).filter(([, p]) => p.status === 'waiting' && Date.parse(p.until!) <= now).map(([id]) => id)
      for (const id of dueWaits) {
        const node = byId.get(id)!
        await save([{ type: 'node.completed', node: id, output: {}, durationMs: now - Date.parse(progress[id]!.started_at!), end: false }], [endEvent(node, now - Date.parse(progress[id]!.started_at!), {})])
      }
      if (run.status !== 'running') return
      const { ready, skip } = plan(graph, run.snapshot.context.progress)
      if (skip.length > 0) await save(skip.map((node) => ({ type: 'node.skipped' as const, node })), [])
      const resumed = Object.entries(run.snapshot.context.progress).filter(([id, p]) => p.status === 'running' && !inFlight.has(id)).map(([id]) => id)
      for (const id of [...ready, ...resumed]) {
        if (inFlight.has(id)) continue
        const p = this.runNode(run, graph, byId.get(id)!, resumed.includes(id), ac, save)
          .catch((err) => {
            // The run ended (cancelled, failed on another branch, taken over): this node's result is moot.
            if (!(err instanceof RunNotRunning)) this.deps.log.error({ err, run_id: runId, node: id }, 'run worker: a node failed unexpectedly')
            ac.abort(new RunNotRunning('stopped'))
          })
          .finally(() => inFlight.delete(id))
        inFlight.set(id, p)
      }
      if (inFlight.size > 0) {
        await Promise.race(inFlight.values())
        run = (await runs.findRun(d.sql, runId)) ?? run
        if (run.status !== 'running') {
          ac.abort(new RunNotRunning(`run ${run.status}`))
          return
        }
        continue
      }
      // Nothing runs: either parked on waits (release; the timer brings it back) or done.
      const waits = Object.values(run.snapshot.context.progress).filter((p) => p.status === 'waiting').map((p) => Date.parse(p.until!))
      if (waits.length > 0) {
        const wakeAt = new Date(Math.min(...waits))
        await runs.releaseRun(d.sql, runId, this.owner, wakeAt)
        await this.deps.timers.schedule(RUN_TIMER, [{ id: runId, at: wakeAt }])
        return
      }
      if (run.status === 'running') {
        await save([{ type: 'node.failed', node: 'start', code: 'internal', message: 'the run has no node left to execute and reached no end', durationMs: 0 }], [])
      }
      return
    }
  }

  private async runNode(run: runs.RunRow, graph: Graph, node: GraphNode, resumed: boolean, ac: AbortController, save: (e: RunEvent[], l: LogEvent[], u?: runs.RunUsage) => Promise<void>) {
    const started = Date.now()
    const startLog: LogEvent = { type: 'node_start', data: { node: node.name ?? node.id, node_id: node.id, started_at: new Date(started).toISOString() } }
    if (node.type === 'wait') {
      const until = new Date(started + Number(node.config.seconds) * 1000).toISOString()
      await save([{ type: 'node.started', node: node.id, at: new Date(started).toISOString() }, { type: 'node.waiting', node: node.id, until }], [startLog])
      return
    }
    if (!resumed) await save([{ type: 'node.started', node: node.id, at: new Date(started).toISOString() }], [startLog])
    const progress = run.snapshot.context.progress
    // A node on a branch not taken reads as null, and so does an optional input left out: a template
    // at a join may name either.
    const vars = {
      inputs: { ...Object.fromEntries(inputSpec(graph).map((i) => [i.name, null])), ...run.inputs },
      nodes: Object.fromEntries(
        Object.entries(progress)
          .filter(([, p]) => p.status === 'completed' || p.status === 'skipped')
          .map(([id, p]) => [id, { output: p.status === 'completed' ? p.output : null }]),
      ),
    }
    let pending = ''
    let flushAt = 0
    const flush = async () => {
      if (!pending) return
      const delta = pending
      pending = ''
      await save([], [{ type: 'message', data: { node: node.name ?? node.id, node_id: node.id, delta } }]).catch(() => {})
    }
    let result: NodeResult
    try {
      result = await executors[node.type](node, {
        vars,
        signal: ac.signal,
        config: this.deps.config,
        gateway: this.deps.models,
        call: { workspaceId: run.workspace_id, requestId: run.request_id ?? run.id },
        delta: (text: string) => {
          pending += text
          if (Date.now() - flushAt >= DELTA_FLUSH_MS) {
            flushAt = Date.now()
            void flush()
          }
        },
      })
      await flush()
    } catch (err) {
      if (ac.signal.aborted) throw new RunNotRunning('aborted')
      const e = err instanceof NodeError ? err : new NodeError('internal', (err as Error).message)
      await save([{ type: 'node.failed', node: node.id, code: e.code, message: e.message, durationMs: Date.now() - started }], [endEvent(node, Date.now() - started, { error: { code: e.code, message: e.message } })])
      return
    }
    const durationMs = Date.now() - started
    await save(
      [{ type: 'node.completed', node: node.id, output: result.output, handle: result.handle, durationMs, end: node.type === 'end' }],
      [endEvent(node, durationMs, result.output)],
      result.usage,
    )
  }
}

function endEvent(node: GraphNode, durationMs: number, output: unknown): LogEvent {
  return { type: 'node_end', data: { node: node.name ?? node.id, node_id: node.id, duration_ms: durationMs, output: (output ?? {}) as Record<string, unknown> } }
}
