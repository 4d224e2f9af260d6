import type { Deps } from '../deps'
import { fireDueSchedules } from '../domain/workflows/triggers'
import { PollingLoop } from './loop'

/**
 * How often an idle process looks for due schedules. Cron has minute resolution, so 250 ms keeps a
 * tick's lateness well under a second at a cost of four indexed queries a second per process
 * (triggers_due_idx: an empty partial-index range scan).
 */
const IDLE_POLL_MS = 250
/**
 * Schedules claimed per transaction: each round costs four statements whatever its size, so larger
 * rounds are cheaper per tick (1 000 due ticks in one process, measured on a busy 2-core machine:
 * rounds of 100 took 1 180 ms, of 250 425 ms once parsed crons were cached); small enough that a burst
 * (1 000 in bench/schedules.ts) is split between processes, each claiming what the other has not
 * locked (skip locked).
 */
const BATCH = 250

/**
 * Fires due schedule triggers (docs/triggers.md): each round is one transaction of
 * fireDueSchedules (claim, record ticks, insert runs, advance), then the run worker is nudged.
 * Any number of processes may run it; the tick's primary key makes each tick run once.
 */
export class ScheduleWorker extends PollingLoop {
  constructor(private readonly deps: Deps) {
    super('schedule worker', IDLE_POLL_MS, deps.log)
  }

  protected async step(): Promise<boolean> {
    const { claimed, started } = await fireDueSchedules(this.deps, BATCH)
    if (started.length > 0) this.deps.runs.nudge()
    return claimed === BATCH
  }
}
