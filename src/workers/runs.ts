import type { Deps } from '../deps'
import { searchBases } from '../domain/knowledge/search'
import { executors } from '../domain/workflows/nodes'
import { inputSpec } from '../domain/workflows/graph'
import { plan } from '../domain/workflows/plan'
import { CANCEL_CHANNEL, commitRun, published, RUN_TIMER, RunNotRunning, type LogEvent } from '../domain/workflows/transitions'
import { agentPort } from '../domain/agents/node-port'
import { childPort } from '../domain/workflows/children'
import { cancelTrees } from '../domain/workflows/cancel'
import { renderText } from '../domain/workflows/templates'
import { ERROR_HANDLE, NodeError, type ChildPort, type Graph, type GraphNode, type NodeResult, type Variables } from '../domain/workflows/types'
import { loadRow } from '../machines/definition'
import { runDefinition, type NodeProgress, type RunContext, type RunEvent } from '../machines/workflow-run.machine'
import * as runs from '../store/runs'
import { getWorkflowVersion } from '../store/workflows'
import { LeaseWorker } from './lease-worker'
import { FairGate } from '../lib/fair-gate'
import type { TimerHandler } from '../store/redis/timers'
import { contextFrom, contextWith, failSpan, markError, runIn, startSpan, tracingOn, type Context, type Span } from '../lib/tracing'

export { RUN_TIMER }
/** A worker holds a run this long without a heartbeat; heartbeats come every third of it. */
export const RUN_LEASE_MS = 15_000
const MAX_RUNS = 64
/** LLM deltas are written to the run's log in pieces at most this old, not one row per token. */
const DELTA_FLUSH_MS = 50
/** How often a worker unparks runs whose wake_at passed without a timer firing. */
const SWEEP_MS = 1000

/**
 * Executes runs: claims them from Postgres with leases (`for update skip locked`), heartbeats them,
 * and drives each through its graph. Every node start and end is a transition of the run machine in
 * its own transaction; a worker that dies leaves its runs to whoever claims them once the lease has
 * expired, which resumes from the snapshot (the node in flight runs again). Cancellation arrives by
 * pub/sub and aborts the node in flight.
 */
export class RunWorker extends LeaseWorker<runs.RunRow> implements TimerHandler {
  private readonly graphs = new Map<string, Graph>()
  private swept = 0
  private unsubscribe: (() => Promise<void>) | null = null
  private checking = false
  private recheck = false
  /** The steps of this worker's runs (a transition written, a child started or read, a claim): RUN_STEPS slots, workspaces taking turns. */
  private readonly steps: FairGate

  constructor(private readonly deps: Deps) {
    super(deps.db.sql, { what: 'run worker', table: runs.runLeases, definition: runDefinition, leaseMs: RUN_LEASE_MS, max: MAX_RUNS, perWorkspace: deps.config.perWorkspace.runs, idleMs: deps.config.workerPollMs }, deps.log)
    this.steps = new FairGate(deps.config.runSteps)
  }

  override start() {
    super.start()
    this.deps.redis
      .subscribe(CANCEL_CHANNEL, (id) => {
        this.active.get(id)?.abort(new RunNotRunning('cancelled'))
        void this.abortEnded()
      })
      .then((u) => (this.unsubscribe = u))
      .catch((err) => this.log.warn({ err }, 'run worker: cancels reach this worker only at its next write (pub/sub unavailable)'))
  }

  /**
   * A cancel ended runs (a whole tree: one message names only one of them): the work on those of this
   * worker's runs that are no longer running is aborted, the node in flight with it. Messages that
   * come while a check is under way are answered by one more check.
   */
  private async abortEnded(): Promise<void> {
    if (this.checking) {
      this.recheck = true
      return
    }
    this.checking = true
    try {
      do {
        this.recheck = false
        const ids = [...this.active.keys()]
        for (const id of await runs.endedAmong(this.deps.db.sql, ids)) this.active.get(id)?.abort(new RunNotRunning('cancelled'))
      } while (this.recheck)
    } catch (err) {
      this.log.warn({ err }, 'run worker: could not check which runs a cancel ended (their next write stops them)')
    } finally {
      this.checking = false
    }
  }

  protected override stopped(why: string) {
    return new RunNotRunning(why)
  }

  protected override async stopping() {
    await this.unsubscribe?.()
  }

  /**
   * Adds nothing to the timer loop's claim size: a run timer only unparks the run and nudges this
   * worker (the sweep unparks it too, timer or not), so it must not widen the claims that the
   * delivery worker's back-pressure sizes.
   */
  capacity() {
    return 0
  }

  /** A wait is over: the run is claimable again (its wake_at cleared); claim it now. */
  async fire(ids: string[]) {
    await runs.unparkDue(this.deps.db.sql, ids)
    await this.deps.timers.schedule(RUN_TIMER, ids.map((id) => ({ id, at: null })))
    this.nudge()
  }

  /**
   * Claims, and about once a second first unparks the runs whose wake_at has passed without their
   * timer (Redis lost it, or it fired in a process that died before unparking them): the timers make
   * waits end on time, this makes them end whatever happens to the timers.
   */
  protected override step(): Promise<boolean> {
    // A step of the worker's own, taking its turn with the runs' steps (the claim decides which runs
    // this process works on; the gate, how their steps share it).
    return this.steps.run(null, async () => {
      if (Date.now() - this.swept >= SWEEP_MS) {
        this.swept = Date.now()
        await runs.unparkDue(this.deps.db.sql)
      }
      return super.step()
    })
  }

  /**
   * With tracing on, each claim's drive is a span of the trace that started the run (the request,
   * or the parent run's node: `trace_context`), its nodes' spans its children (docs/observability.md).
   */
  protected async work(run: runs.RunRow, ac: AbortController) {
    // Present at the gate while held, between its steps too: its share of the steps is kept for it.
    this.steps.enter(run.workspace_id)
    try {
      await this.traced(run, ac)
    } finally {
      this.steps.leave(run.workspace_id)
    }
  }

  private traced(run: runs.RunRow, ac: AbortController) {
    if (!tracingOn) return this.drive(run, ac, null)
    const parent = contextFrom(run.trace_context)
    const span = startSpan('workflow.run', {
      run_id: run.id,
      workflow_id: run.workflow_id,
      'workflow.version': run.workflow_version,
      workspace_id: run.workspace_id,
      ...(run.parent_run_id ? { parent_run_id: run.parent_run_id } : {}),
      ...(run.request_id ? { request_id: run.request_id } : {}),
    }, { parent })
    const ctx = contextWith(span, parent)
    return runIn(ctx, () => this.drive(run, ac, { span, ctx })).then(
      () => span.end(),
      (err) => {
        if (err instanceof RunNotRunning) span.setAttribute('run.stopped', err.message)
        else failSpan(span, err)
        span.end()
        throw err
      },
    )
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
   * and written only if the row is still as read (`commitRun`'s guard), so parallel branches never
   * race and a cancel or a take-over stops the run at its next write. The nodes a transition makes
   * ready start in the same write: node.completed of one node and node.started of the next are one
   * snapshot, persisted before the next node executes. A write refused because a person's input
   * landed meanwhile (the run still ours) is computed again from the row as it now is.
   */
  private async drive(claimed: runs.RunRow, ac: AbortController, traced: { span: Span; ctx: Context } | null) {
    let run = claimed
    const graph = await this.graph(run)
    const byId = new Map(graph.nodes.map((n) => [n.id, n]))
    const inFlight = new Map<string, Promise<void>>()
    let chain: Promise<unknown> = Promise.resolve()
    const step = <T>(work: () => Promise<T>) => this.steps.run(run.workspace_id, work)
    const children = childPort(this.deps, run, (wait) => this.idling(wait), step)

    const track = (id: string, work: () => Promise<void>) => {
      const p = work()
        .catch((err) => {
          // The run ended (cancelled, failed on another branch, taken over): this node's result is moot.
          if (!(err instanceof RunNotRunning)) this.log.error({ err, run_id: run.id, node: id }, 'run worker: a node failed unexpectedly')
          ac.abort(new RunNotRunning('stopped'))
        })
        .finally(() => {
          // A failed attempt hands its node to the retry, tracked under the same id: leave that one.
          if (inFlight.get(id) === p) inFlight.delete(id)
        })
      inFlight.set(id, p)
    }
    const launch = (id: string) => {
      const node = byId.get(id)!
      if (HELD.has(node.type) || inFlight.has(id)) return
      track(id, () => this.runNode(run, graph, node, ac, transit, children, (attempt, until) => retry(id, attempt, until), traced?.ctx ?? null))
    }
    /** The next attempt of a node after its back-off: started (persisted), then executed. */
    const retry = (id: string, attempt: number, until: number) => {
      track(id, async () => {
        await abortableSleep(until - Date.now(), ac.signal)
        await transit(() => {
          if (run.snapshot.context.progress[id]?.status !== 'retrying') return { events: [], log: [] }
          const at = new Date().toISOString()
          return { events: [{ type: 'node.started', node: id, at, attempt }], log: [startEvent(byId.get(id)!, at, attempt)] }
        })
        if (run.snapshot.context.progress[id]?.status === 'running') {
          await this.runNode(run, graph, byId.get(id)!, ac, transit, children, (a, u) => retry(id, a, u), traced?.ctx ?? null)
        }
      })
    }

    /** One transition: what happened (`head`), then the nodes it settles skipped and those it makes ready started. */
    const transit: Transit = (head) => {
      const p = chain.then(() => step(async () => {
        for (let tries = 0; ; tries++) {
          const h = head()
          const log = [...h.log]
          let started: string[] = []
          const more = h.logOnly ? undefined : (context: RunContext, state: string) => {
            if (state !== 'running') return []
            const f = followOn(graph, run, context.progress, Date.now())
            log.push(...f.log)
            started = f.started
            return f.events
          }
          const saved = await commitRun(this.deps.db.sql, run, h.events, { log, owner: this.owner, addUsage: h.usage }, more)
          if (!saved) {
            const fresh = tries < 5 ? await runs.findRun(this.deps.db.sql, run.id) : null
            if (fresh?.status === 'running' && fresh.lease_owner === this.owner) {
              run = loadRow(runDefinition, fresh)
              continue
            }
            throw new RunNotRunning(`run ${run.id} was cancelled or taken over`)
          }
          if (saved === run) return
          run = saved
          await published(this.deps.redis, run)
          if (run.status !== 'running') {
            if (traced) {
              traced.span.setAttribute('run.status', run.status)
              if (run.status === 'failed') markError(traced.span, run.error?.message ?? 'the run failed')
            }
            ac.abort(new RunNotRunning(`run ${run.status}`))
            if (run.status !== 'completed') await cancelTrees(this.deps, [run.id])
          } else for (const id of started) launch(id)
          return
        }
      }))
      chain = p.catch(() => {})
      return p
    }

    // A node left `running` by a dead worker runs again, one left retrying resumes its back-off; then whatever is ready starts.
    for (const [id, p] of Object.entries(run.snapshot.context.progress)) {
      if (p.status === 'running') launch(id)
      else if (p.status === 'retrying') retry(id, p.attempt ?? 2, Date.parse(p.until!))
    }
    await transit(() => ({ events: [], log: [] })).catch((err) => {
      ac.abort(err)
      throw err
    })
    for (;;) {
      while (inFlight.size > 0) await Promise.race(inFlight.values())
      await chain
      if (ac.signal.aborted || run.status !== 'running') return
      const now = Date.now()
      const waits = Object.entries(run.snapshot.context.progress).filter(([, p]) => p.status === 'waiting')
      if (waits.some(([, p]) => p.until !== undefined && Date.parse(p.until) <= now)) {
        await this.settleWaits(() => run, byId, transit).catch((err) => {
          if (!(err instanceof RunNotRunning)) throw err
        })
        continue
      }
      if (waits.length > 0) {
        // Parked: the lease is let go; the timer (or the sweep once wake_at passes) brings it
        // back, or a person's input does. Refused when the run moved on meanwhile: read it again.
        const times = waits.flatMap(([, p]) => (p.until === undefined ? [] : [Date.parse(p.until)]))
        const wakeAt = times.length > 0 ? new Date(Math.min(...times)) : runs.NEVER
        if (await runs.parkRun(this.deps.db.sql, run.id, this.owner, run.next_seq, wakeAt)) {
          if (wakeAt !== runs.NEVER) await this.deps.timers.schedule(RUN_TIMER, [{ id: run.id, at: wakeAt }])
          return
        }
        const fresh = await runs.findRun(this.deps.db.sql, run.id)
        if (fresh?.status !== 'running' || fresh.lease_owner !== this.owner) return
        run = loadRow(runDefinition, fresh)
        await transit(() => ({ events: [], log: [] }))
        continue
      }
      await transit(() => ({
        events: [{ type: 'node.failed', node: 'start', code: 'internal', message: 'the run has no node left to execute and reached no end', durationMs: 0 }],
        log: [],
      }))
      return
    }
  }

  /** Waits whose time has come: a wait node is done; a human_input node not answered in time fails with input_timeout (then its on_error). */
  private async settleWaits(current: () => runs.RunRow, byId: Map<string, GraphNode>, transit: Transit) {
    const now = Date.now()
    const waiting = (id: string) => current().snapshot.context.progress[id]?.status === 'waiting'
    const due = Object.entries(current().snapshot.context.progress).filter(([, p]) => p.status === 'waiting' && p.until !== undefined && Date.parse(p.until) <= now)
    for (const [id, p] of due) {
      const node = byId.get(id)!
      const durationMs = now - Date.parse(p.started_at!)
      if (node.type === 'human_input') {
        const seconds = node.config.timeout_seconds
        await settleFailure(transit, node, new NodeError('input_timeout', `no input within ${String(seconds)} s`), durationMs, 1, () => waiting(id))
        continue
      }
      await transit(() => (waiting(id) ? {
        events: [{ type: 'node.completed', node: id, output: {}, durationMs, end: false }],
        log: [endEvent(node, durationMs, {}, 1)],
      } : { events: [], log: [] }))
    }
  }

  private async runNode(
    run: runs.RunRow,
    graph: Graph,
    node: GraphNode,
    ac: AbortController,
    transit: Transit,
    children: ChildPort,
    retry: (attempt: number, until: number) => void,
    traceCtx: Context | null,
  ) {
    const started = Date.now()
    const progress = run.snapshot.context.progress
    const attempt = progress[node.id]?.attempt ?? 1
    const vars = varsOf(graph, run.inputs, progress)
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
    // An attempt's own time limit aborts what it does, as a cancel would, and fails it with node_timeout.
    const attemptAc = new AbortController()
    const abortAttempt = () => attemptAc.abort(ac.signal.reason)
    ac.signal.addEventListener('abort', abortAttempt, { once: true })
    let timer: ReturnType<typeof setTimeout> | undefined
    const timedOut = node.timeout_ms === undefined ? null : new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        const err = new NodeError('node_timeout', `no result within timeout_ms (${node.timeout_ms} ms)`)
        attemptAc.abort(err)
        reject(err)
      }, node.timeout_ms)
    })
    const span = traceCtx ? startSpan(`workflow.node ${node.type}`, {
      run_id: run.id,
      node_id: node.id,
      'node.type': node.type,
      'node.attempt': attempt,
      workspace_id: run.workspace_id,
    }, { parent: traceCtx }) : null
    let result: NodeResult
    try {
      const execute = () => executors[node.type](node, {
        vars,
        signal: attemptAc.signal,
        config: this.deps.config,
        gateway: this.deps.models,
        call: { workspaceId: run.workspace_id, requestId: run.request_id ?? run.id },
        knowledge: { search: (ids, input, signal) => searchBases(this.deps, run.workspace_id, ids, input, { workspaceId: run.workspace_id, requestId: run.request_id ?? run.id }, signal) },
        children,
        agents: agentPort(this.deps, run),
        delta: (text: string) => {
          pending += text
          if (Date.now() - flushAt >= DELTA_FLUSH_MS) {
            flushAt = Date.now()
            void flush()
          }
        },
      })
      const work = span ? runIn(contextWith(span, traceCtx!), execute) : execute()
      result = await (timedOut ? Promise.race([work, timedOut]) : work)
      await flush()
    } catch (err) {
      if (ac.signal.aborted) {
        span?.setAttribute('node.outcome', 'aborted')
        throw new RunNotRunning('aborted')
      }
      const timeout = attemptAc.signal.reason instanceof NodeError ? attemptAc.signal.reason : null
      const e = timeout ?? (err instanceof NodeError ? err : new NodeError('internal', (err as Error).message))
      if (span) failSpan(span, e)
      const durationMs = Date.now() - started
      const policy = node.retry
      if (policy && attempt < policy.max_attempts && retryable(e.code)) {
        const until = Date.now() + policy.backoff_ms * 2 ** (attempt - 1)
        await transit(() => ({
          events: [{ type: 'node.retrying', node: node.id, attempt: attempt + 1, until: new Date(until).toISOString(), code: e.code, message: e.message }],
          log: [endEvent(node, durationMs, { error: { code: e.code, message: e.message } }, attempt)],
          usage: e.usage,
        }))
        retry(attempt + 1, until)
        return
      }
      await settleFailure(transit, node, e, durationMs, attempt, () => true)
      return
    } finally {
      clearTimeout(timer)
      ac.signal.removeEventListener('abort', abortAttempt)
      span?.end()
    }
    const durationMs = Date.now() - started
    await transit(() => ({
      events: [{ type: 'node.completed', node: node.id, output: result.output, handle: result.handle, durationMs, end: node.type === 'end' }],
      log: [endEvent(node, durationMs, result.output, attempt)],
      usage: result.usage,
    }))
  }
}

/** Nodes the engine holds instead of executing: a wait (a durable timer), a human_input (a person's data). */
const HELD = new Set(['wait', 'human_input'])

/** Failures that another attempt cannot change: the node's own configuration, its inputs, the engine's limits. */
const FINAL_CODES = new Set(['invalid_config', 'invalid_input', 'template_error', 'expression_error', 'max_depth_exceeded', 'too_many_items', 'input_timeout', 'ssrf_refused', 'budget_exceeded', 'model_not_found', 'agent_not_found'])
const retryable = (code: string) => !FINAL_CODES.has(code)

/** A node's last attempt failed: by its on_error, the run fails, goes on with the error as the output, or takes the error edges. */
function settleFailure(transit: Transit, node: GraphNode, e: NodeError, durationMs: number, attempt: number, still: () => boolean): Promise<void> {
  const error = { code: e.code, message: e.message }
  const onError = node.on_error ?? 'fail'
  if (onError === 'fail') {
    return transit(() => (still() ? {
      events: [{ type: 'node.failed', node: node.id, code: e.code, message: e.message, durationMs }],
      log: [endEvent(node, durationMs, { error }, attempt)],
      usage: e.usage,
    } : { events: [], log: [] }))
  }
  const output = { error }
  return transit(() => (!still() ? { events: [], log: [] } : {
    events: [{ type: 'node.completed', node: node.id, output, handle: onError === 'branch' ? ERROR_HANDLE : undefined, durationMs, end: false }],
    log: [endEvent(node, durationMs, output, attempt)],
    usage: e.usage,
  }))
}

function abortableSleep(ms: number, signal: AbortSignal): Promise<void> {
  if (ms <= 0) return Promise.resolve()
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => {
      signal.removeEventListener('abort', stop)
      resolve()
    }, ms)
    const stop = () => {
      clearTimeout(t)
      reject(new RunNotRunning('aborted'))
    }
    if (signal.aborted) return stop()
    signal.addEventListener('abort', stop, { once: true })
  })
}

/**
 * What templates see: the run's inputs and the outputs of the nodes settled so far. A node on a
 * branch not taken reads as null, and so does an optional input left out: a template at a join may
 * name either.
 */
function varsOf(graph: Graph, inputs: Record<string, unknown>, progress: Record<string, NodeProgress>): Variables {
  return {
    inputs: { ...Object.fromEntries(inputSpec(graph).map((i) => [i.name, null])), ...inputs },
    nodes: Object.fromEntries(
      Object.entries(progress)
        .filter(([, p]) => p.status === 'completed' || p.status === 'skipped')
        .map(([id, p]) => [id, { output: p.status === 'completed' ? p.output : null }]),
    ),
  }
}

/** `logOnly`: appends to the log (LLM deltas) without looking for nodes to start. */
type Transit = (head: () => { events: RunEvent[]; log: LogEvent[]; usage?: runs.RunUsage; logOnly?: boolean }) => Promise<void>

/**
 * What follows a transition in the same write: nodes on branches not taken are skipped, and the
 * nodes now ready start (a `wait` node starts waiting: it holds no worker, only its `until`; a
 * `human_input` node starts waiting for its data, its prompt rendered now).
 */
function followOn(graph: Graph, run: runs.RunRow, progress: Record<string, NodeProgress>, now: number): { events: RunEvent[]; log: LogEvent[]; started: string[] } {
  const { ready, skip } = plan(graph, progress)
  const events: RunEvent[] = skip.map((node) => ({ type: 'node.skipped' as const, node }))
  const log: LogEvent[] = []
  const at = new Date(now).toISOString()
  for (const id of ready) {
    const node = graph.nodes.find((n) => n.id === id)!
    events.push({ type: 'node.started', node: id, at })
    if (node.type === 'wait') events.push({ type: 'node.waiting', node: id, until: new Date(now + Number(node.config.seconds) * 1000).toISOString() })
    if (node.type === 'human_input') events.push(askInput(graph, run, progress, node, now))
    log.push(startEvent(node, at, 1))
  }
  return { events, log, started: ready }
}

function askInput(graph: Graph, run: runs.RunRow, progress: Record<string, NodeProgress>, node: GraphNode, now: number): RunEvent {
  let prompt: string
  try {
    prompt = renderText(node.config.prompt as string, varsOf(graph, run.inputs, progress))
  } catch (err) {
    prompt = `${node.config.prompt as string} (not rendered: ${(err as Error).message})`
  }
  const seconds = node.config.timeout_seconds as number | undefined
  return {
    type: 'node.waiting',
    node: node.id,
    input: { prompt, schema: (node.config.schema as Record<string, unknown> | undefined) ?? null },
    ...(seconds !== undefined ? { until: new Date(now + seconds * 1000).toISOString() } : {}),
  }
}

function startEvent(node: GraphNode, at: string, attempt: number): LogEvent {
  return { type: 'node_start', data: { node: node.name ?? node.id, node_id: node.id, started_at: at, attempt } }
}

function endEvent(node: GraphNode, durationMs: number, output: unknown, attempt: number): LogEvent {
  return { type: 'node_end', data: { node: node.name ?? node.id, node_id: node.id, duration_ms: durationMs, output: (output ?? {}) as Record<string, unknown>, attempt } }
}
