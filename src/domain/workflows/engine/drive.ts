import type { Deps } from '../../../deps'
import { activeContext, contextFrom, tracingOn, withSpan, type Context, type Span } from '../../../lib/tracing'
import type { RunRow } from '../../../store/runs'
import { getWorkflowVersion } from '../../../store/workflows'
import { childPort } from '../children'
import { storedGraph } from '../graph'
import { RunNotRunning } from '../transitions'
import type { ChildPort, Graph, GraphNode } from '../types'
import { runAttempt } from './attempt'
import { HELD } from './follow-on'
import { startEvent } from './log'
import { abortableSleep } from './retries'
import { transitions } from './transit'
import { NOTHING, type Drive, type RunHolder, type Transit } from './types'
import { isDue, park, settleWaits, waitsOf } from './waits'

/**
 * Drives a claimed run to its end, or until it parks on waits (docs/workflows.md, "Runs"). With
 * tracing on, the drive is a span of the trace that started the run (the request, or the parent
 * run's node: `trace_context`), its nodes' spans its children (docs/observability.md); a run stopped
 * under its holder (cancelled, taken over) is no failure of that span. Throws RunNotRunning then.
 */
export async function driveRun(deps: Deps, holder: RunHolder, run: RunRow, ac: AbortController): Promise<void> {
  const stopped = await withSpan('workflow.run', () => ({
    run_id: run.id,
    workflow_id: run.workflow_id,
    'workflow.version': run.workflow_version,
    workspace_id: run.workspace_id,
    ...(run.parent_run_id ? { parent_run_id: run.parent_run_id } : {}),
    ...(run.request_id ? { request_id: run.request_id } : {}),
  }), async (span) => {
    try {
      await drive(deps, holder, run, ac, span)
      return null
    } catch (err) {
      if (!(err instanceof RunNotRunning)) throw err
      span.setAttribute('run.stopped', err.message)
      return err
    }
  }, tracingOn ? { parent: contextFrom(run.trace_context) } : {})
  if (stopped) throw stopped
}

/**
 * The loop over the plan: the nodes in flight run (each start and end a transition, src/domain/workflows/engine/transit.ts)
 * until none is left; then waits whose time has come are settled, or the run parks on the others,
 * or, with nothing left to execute and no end reached, it fails.
 */
async function drive(deps: Deps, holder: RunHolder, claimed: RunRow, ac: AbortController, span: Span): Promise<void> {
  // The context in which the run's span is the active one: its nodes' spans start in it.
  const ctx = activeContext()
  const d = new RunDrive(deps, holder, claimed, await graphOf(deps, holder, claimed), ac, span, ctx)
  d.resume()
  await d.transit(NOTHING).catch((err) => {
    ac.abort(err)
    throw err
  })
  for (;;) {
    while (d.inFlight.size > 0) await Promise.race(d.inFlight.values())
    await d.written()
    if (ac.signal.aborted || d.run.status !== 'running') return
    const waits = waitsOf(d)
    if (waits.some(isDue(Date.now()))) {
      await settleWaits(d).catch((err) => {
        if (!(err instanceof RunNotRunning)) throw err
      })
      continue
    }
    if (waits.length > 0) {
      if (await park(deps, holder, d, waits)) return
      continue
    }
    await d.transit(() => ({
      events: [{ type: 'node.failed', node: 'start', code: 'internal', message: 'the run has no node left to execute and reached no end', durationMs: 0 }],
      log: [],
    }))
    return
  }
}

/** The graph of the version the run runs, kept by its holder. */
async function graphOf(deps: Deps, holder: RunHolder, run: RunRow): Promise<Graph> {
  const key = `${run.workflow_id}@${run.workflow_version}`
  let g = holder.graphs.get(key)
  if (!g) {
    g = storedGraph(await getWorkflowVersion(deps.db.sql, run.workflow_id, run.workflow_version))
    if (holder.graphs.size > 1000) holder.graphs.clear()
    holder.graphs.set(key, g)
  }
  return g
}

/** A run being driven: its row as last written, its graph, and its nodes in flight, each tracked by its id. */
class RunDrive implements Drive {
  run: RunRow
  readonly byId: Map<string, GraphNode>
  readonly inFlight = new Map<string, Promise<void>>()
  readonly children: ChildPort
  readonly transit: Transit
  /** Settles once the transitions queued so far are written. */
  readonly written: () => Promise<unknown>

  constructor(
    private readonly deps: Deps,
    holder: RunHolder,
    claimed: RunRow,
    readonly graph: Graph,
    readonly ac: AbortController,
    readonly span: Span,
    readonly ctx: Context,
  ) {
    this.run = claimed
    this.byId = new Map(graph.nodes.map((n) => [n.id, n]))
    const step = <T>(work: () => Promise<T>) => holder.steps.run(claimed.workspace_id, work)
    this.children = childPort(deps, claimed, (wait) => holder.idling(wait), step)
    const t = transitions(deps, holder, this, (id) => this.launch(id))
    this.transit = t.transit
    this.written = t.written
  }

  /** A node left `running` by a dead worker runs again, one left retrying resumes its back-off. */
  resume() {
    for (const [id, p] of Object.entries(this.run.snapshot.context.progress)) {
      if (p.status === 'running') this.launch(id)
      else if (p.status === 'retrying') this.retry(id, p.attempt ?? 2, Date.parse(p.until!))
    }
  }

  /** A node made ready (its node.started written) executes, unless the engine holds it (a wait) or it runs already. */
  launch(id: string) {
    const node = this.byId.get(id)!
    if (HELD.has(node.type) || this.inFlight.has(id)) return
    this.track(id, () => runAttempt(this.deps, this, node))
  }

  retry(id: string, attempt: number, until: number) {
    this.track(id, async () => {
      await abortableSleep(until - Date.now(), this.ac.signal)
      await this.transit(() => {
        if (this.run.snapshot.context.progress[id]?.status !== 'retrying') return { events: [], log: [] }
        const at = new Date().toISOString()
        return { events: [{ type: 'node.started', node: id, at, attempt }], log: [startEvent(this.byId.get(id)!, at, attempt)] }
      })
      if (this.run.snapshot.context.progress[id]?.status === 'running') await runAttempt(this.deps, this, this.byId.get(id)!)
    })
  }

  private track(id: string, work: () => Promise<void>) {
    const p = work()
      .catch((err) => {
        // The run ended (cancelled, failed on another branch, taken over): this node's result is moot.
        if (!(err instanceof RunNotRunning)) this.deps.log.error({ err, run_id: this.run.id, node: id }, 'run worker: a node failed unexpectedly')
        this.ac.abort(new RunNotRunning('stopped'))
      })
      .finally(() => {
        // A failed attempt hands its node to the retry, tracked under the same id: leave that one.
        if (this.inFlight.get(id) === p) this.inFlight.delete(id)
      })
    this.inFlight.set(id, p)
  }
}
