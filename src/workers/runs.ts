import type { Deps } from '../deps'
import { searchBases } from '../domain/knowledge/search'
import { executors } from '../domain/workflows/nodes'
import { inputSpec } from '../domain/workflows/graph'
import { plan } from '../domain/workflows/plan'
import { CANCEL_CHANNEL, commitRun, published, RunNotRunning, type LogEvent } from '../domain/workflows/transitions'
import { NodeError, type Graph, type GraphNode, type NodeResult } from '../domain/workflows/types'
import { runDefinition, type NodeProgress, type RunContext, type RunEvent } from '../machines/workflow-run.machine'
import * as runs from '../store/runs'
import { getWorkflowVersion } from '../store/workflows'
import { LeaseWorker } from './lease-worker'
import type { TimerHandler } from './timers'

export const RUN_TIMER = 'run'
/** A worker holds a run this long without a heartbeat; heartbeats come every third of it. */
export const RUN_LEASE_MS = 15_000
const MAX_RUNS = 64
const IDLE_POLL_MS = 100
/** LLM deltas are written to the run's log in pieces at most this old, not one row per token. */
const DELTA_FLUSH_MS = 50

/**
 * Executes runs: claims them from Postgres with leases (`for update skip locked`), heartbeats them,
 * and drives each through its graph. Every node start and end is a transition of the run machine in
 * its own transaction; a worker that dies leaves its runs to whoever claims them once the lease has
 * expired, which resumes from the snapshot (the node in flight runs again). Cancellation arrives by
 * pub/sub and aborts the node in flight.
 */
export class RunWorker extends LeaseWorker<runs.RunRow> implements TimerHandler {
  private readonly graphs = new Map<string, Graph>()
  private unsubscribe: (() => Promise<void>) | null = null

  constructor(private readonly deps: Deps) {
    super(deps.db.sql, { what: 'run worker', table: runs.runLeases, definition: runDefinition, leaseMs: RUN_LEASE_MS, max: MAX_RUNS, idleMs: IDLE_POLL_MS }, deps.log)
  }

  override start() {
    super.start()
    this.deps.redis
      .subscribe(CANCEL_CHANNEL, (id) => this.active.get(id)?.abort(new RunNotRunning('cancelled')))
      .then((u) => (this.unsubscribe = u))
      .catch((err) => this.log.warn({ err }, 'run worker: cancels reach this worker only at its next write (pub/sub unavailable)'))
  }

  protected override stopped(why: string) {
    return new RunNotRunning(why)
  }

  protected override async stopping() {
    await this.unsubscribe?.()
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

  protected work(run: runs.RunRow, ac: AbortController) {
    return this.drive(run, ac)
  }

  protected failed(run: runs.RunRow, err: unknown) {
    if (!(err instanceof RunNotRunning)) this.log.error({ err, run_id: run.id }, 'run worker: driving a run failed')
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

  /**
   * Drives a claimed run to its end, or until it parks on waits. The worker holds the run's row as
   * its last transition returned it; transitions are serialised per run, each computed from that row
   * and written only if the row is still as read (`persist`'s guard), so parallel branches never
   * race and a cancel or a take-over stops the run at its next write. The nodes a transition makes
   * ready start in the same write: node.completed of one node and node.started of the next are one
   * snapshot, persisted before the next node executes.
   */
  private async drive(claimed: runs.RunRow, ac: AbortController) {
    let run = claimed
    const graph = await this.graph(run)
    const byId = new Map(graph.nodes.map((n) => [n.id, n]))
    const inFlight = new Map<string, Promise<void>>()
    let chain: Promise<unknown> = Promise.resolve()

    const launch = (id: string) => {
      const node = byId.get(id)!
      if (node.type === 'wait' || inFlight.has(id)) return
      const p = this.runNode(run, graph, node, ac, transit)
        .catch((err) => {
          // The run ended (cancelled, failed on another branch, taken over): this node's result is moot.
          if (!(err instanceof RunNotRunning)) this.log.error({ err, run_id: run.id, node: id }, 'run worker: a node failed unexpectedly')
          ac.abort(new RunNotRunning('stopped'))
        })
        .finally(() => inFlight.delete(id))
      inFlight.set(id, p)
    }

    /** One transition: what happened (`head`), then the nodes it settles skipped and those it makes ready started. */
    const transit: Transit = (head) => {
      const p = chain.then(async () => {
        const h = head()
        const log = [...h.log]
        let started: string[] = []
        const more = h.logOnly ? undefined : (context: RunContext, state: string) => {
          if (state !== 'running') return []
          const f = followOn(graph, context.progress, Date.now())
          log.push(...f.log)
          started = f.started
          return f.events
        }
        const saved = await commitRun(this.deps.db.sql, run, h.events, { log, owner: this.owner, addUsage: h.usage }, more)
        if (!saved) throw new RunNotRunning(`run ${run.id} was cancelled or taken over`)
        if (saved === run) return
        run = saved
        await published(this.deps.redis, run)
        if (run.status !== 'running') ac.abort(new RunNotRunning(`run ${run.status}`))
        else for (const id of started) launch(id)
      })
      chain = p.catch(() => {})
      return p
    }

    // A node left `running` by a dead worker runs again; then whatever is ready starts.
    for (const [id, p] of Object.entries(run.snapshot.context.progress)) if (p.status === 'running') launch(id)
    await transit(() => ({ events: [], log: [] })).catch((err) => {
      ac.abort(err)
      throw err
    })
    for (;;) {
      while (inFlight.size > 0) await Promise.race(inFlight.values())
      await chain
      if (ac.signal.aborted || run.status !== 'running') return
      const progress = run.snapshot.context.progress
      const waits = Object.entries(progress).filter(([, p]) => p.status === 'waiting')
      const now = Date.now()
      const due = waits.filter(([, p]) => Date.parse(p.until!) <= now)
      if (due.length > 0) {
        await transit(() => ({
          events: due.map(([id, p]) => ({ type: 'node.completed' as const, node: id, output: {}, durationMs: now - Date.parse(p.started_at!), end: false })),
          log: due.map(([id, p]) => endEvent(byId.get(id)!, now - Date.parse(p.started_at!), {})),
        }))
        continue
      }
      if (waits.length > 0) {
        // Parked: the lease is let go; the timer (or the claim query once wake_at passes) brings it back.
        const wakeAt = new Date(Math.min(...waits.map(([, p]) => Date.parse(p.until!))))
        await runs.parkRun(this.deps.db.sql, run.id, this.owner, wakeAt)
        await this.deps.timers.schedule(RUN_TIMER, [{ id: run.id, at: wakeAt }])
        return
      }
      await transit(() => ({
        events: [{ type: 'node.failed', node: 'start', code: 'internal', message: 'the run has no node left to execute and reached no end', durationMs: 0 }],
        log: [],
      }))
      return
    }
  }

  private async runNode(run: runs.RunRow, graph: Graph, node: GraphNode, ac: AbortController, transit: Transit) {
    const started = Date.now()
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
      await transit(() => ({ events: [], log: [{ type: 'message', data: { node: node.name ?? node.id, node_id: node.id, delta } }], logOnly: true })).catch((err) => {
        // The run ended under the node (a cancel whose pub/sub message was lost, a take-over): stop it now.
        if (err instanceof RunNotRunning) ac.abort(err)
      })
    }
    let result: NodeResult
    try {
      result = await executors[node.type](node, {
        vars,
        signal: ac.signal,
        config: this.deps.config,
        gateway: this.deps.models,
        call: { workspaceId: run.workspace_id, requestId: run.request_id ?? run.id },
        knowledge: { search: (ids, input, signal) => searchBases(this.deps, run.workspace_id, ids, input, { workspaceId: run.workspace_id, requestId: run.request_id ?? run.id }, signal) },
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
      const durationMs = Date.now() - started
      await transit(() => ({
        events: [{ type: 'node.failed', node: node.id, code: e.code, message: e.message, durationMs }],
        log: [endEvent(node, durationMs, { error: { code: e.code, message: e.message } })],
      }))
      return
    }
    const durationMs = Date.now() - started
    await transit(() => ({
      events: [{ type: 'node.completed', node: node.id, output: result.output, handle: result.handle, durationMs, end: node.type === 'end' }],
      log: [endEvent(node, durationMs, result.output)],
      usage: result.usage,
    }))
  }
}

/** `logOnly`: appends to the log (LLM deltas) without looking for nodes to start. */
type Transit = (head: () => { events: RunEvent[]; log: LogEvent[]; usage?: runs.RunUsage; logOnly?: boolean }) => Promise<void>

/**
 * What follows a transition in the same write: nodes on branches not taken are skipped, and the
 * nodes now ready start (a `wait` node starts waiting: it holds no worker, only its `until`).
 */
function followOn(graph: Graph, progress: Record<string, NodeProgress>, now: number): { events: RunEvent[]; log: LogEvent[]; started: string[] } {
  const { ready, skip } = plan(graph, progress)
  const events: RunEvent[] = skip.map((node) => ({ type: 'node.skipped' as const, node }))
  const log: LogEvent[] = []
  const at = new Date(now).toISOString()
  for (const id of ready) {
    const node = graph.nodes.find((n) => n.id === id)!
    events.push({ type: 'node.started', node: id, at })
    if (node.type === 'wait') events.push({ type: 'node.waiting', node: id, until: new Date(now + Number(node.config.seconds) * 1000).toISOString() })
    log.push({ type: 'node_start', data: { node: node.name ?? node.id, node_id: node.id, started_at: at } })
  }
  return { events, log, started: ready }
}

function endEvent(node: GraphNode, durationMs: number, output: unknown): LogEvent {
  return { type: 'node_end', data: { node: node.name ?? node.id, node_id: node.id, duration_ms: durationMs, output: (output ?? {}) as Record<string, unknown> } }
}
