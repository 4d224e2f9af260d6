import type { Deps } from '../deps'
import { driveRun } from '../domain/workflows/engine/drive'
import type { RunHolder } from '../domain/workflows/engine/types'
import { sweepParked, wakeParked } from '../domain/workflows/engine/waits'
import { CANCEL_CHANNEL, RUN_TIMER, RunNotRunning } from '../domain/workflows/transitions'
import { runDefinition } from '../machines/workflow-run.machine'
import * as runs from '../store/runs'
import { LeaseWorker } from './lease-worker'
import { FairGate } from '../lib/fair-gate'
import type { TimerHandler } from '../store/redis/timers'

export { RUN_TIMER }
/** A worker holds a run this long without a heartbeat; heartbeats come every third of it. */
export const RUN_LEASE_MS = 15_000
const MAX_RUNS = 64
/** How often a worker unparks runs whose wake_at passed without a timer firing. */
const SWEEP_MS = 1000

/**
 * Executes runs: claims them from Postgres with leases (`for update skip locked`), heartbeats them,
 * and hands each to the workflow engine (src/domain/workflows/engine/), which drives it through its
 * graph. A worker that dies leaves its runs to whoever claims them once the lease has expired, which
 * resumes from the snapshot (the node in flight runs again). Cancellation arrives by pub/sub and
 * aborts the node in flight.
 */
export class RunWorker extends LeaseWorker<runs.RunRow> implements TimerHandler {
  private swept = 0
  private unsubscribe: (() => Promise<void>) | null = null
  private checking = false
  private recheck = false
  /** The steps of this worker's runs (a transition written, a child started or read, a claim): RUN_STEPS slots, workspaces taking turns. */
  private readonly steps: FairGate
  /** What the engine needs of this worker for the runs it holds. */
  private readonly holder: RunHolder

  constructor(private readonly deps: Deps) {
    super(deps.db.sql, { what: 'run worker', table: runs.runLeases, definition: runDefinition, leaseMs: RUN_LEASE_MS, max: MAX_RUNS, perWorkspace: deps.config.perWorkspace.runs, idleMs: deps.config.workerPollMs }, deps.log)
    this.steps = new FairGate(deps.config.runSteps)
    this.holder = { owner: this.owner, steps: this.steps, idling: (wait) => this.idling(wait), graphs: new Map() }
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
    await wakeParked(this.deps, ids)
    this.nudge()
  }

  /**
   * Claims, and about once a second first unparks the runs whose wake_at has passed without their
   * timer: the timers make waits end on time, this makes them end whatever happens to the timers.
   */
  protected override step(): Promise<boolean> {
    // A step of the worker's own, taking its turn with the runs' steps (the claim decides which runs
    // this process works on; the gate, how their steps share it).
    return this.steps.run(null, async () => {
      if (Date.now() - this.swept >= SWEEP_MS) {
        this.swept = Date.now()
        await sweepParked(this.deps)
      }
      return super.step()
    })
  }

  protected async work(run: runs.RunRow, ac: AbortController) {
    // Present at the gate while held, between its steps too: its share of the steps is kept for it.
    this.steps.enter(run.workspace_id)
    try {
      await driveRun(this.deps, this.holder, run, ac)
    } finally {
      this.steps.leave(run.workspace_id)
    }
  }

  protected failed(run: runs.RunRow, err: unknown) {
    if (!(err instanceof RunNotRunning)) this.log.error({ err, run_id: run.id }, 'run worker: driving a run failed')
  }
}
