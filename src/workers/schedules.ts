import type { Deps } from '../deps'
import { fireDueSchedules } from '../domain/workflows/schedules'
import { nextScheduleAt } from '../store/triggers'
import { PollingLoop } from './loop'

/**
 * How often an idle process looks for due schedules, and how far ahead it looks: a tick due sooner
 * than the next look arms a timer for its exact time, so a burst starts on time rather than up to
 * 250 ms late. One indexed read per idle look (triggers_due_idx), four looks a second per process.
 */
const IDLE_POLL_MS = 250
/**
 * Schedules claimed per transaction: each round costs four statements whatever its size, so larger
 * rounds are cheaper per tick. 1 000 ticks due in one process (a busy 2-core machine): rounds of 100
 * took 1 180 ms, of 250 425 ms once parsed crons were cached. Across two processes (bench/schedules.ts)
 * rounds of 500 let each take half of a 1 000-tick burst in one transaction: the last tick visible
 * 0.3-0.8 s after the due second, against 1.4-2.3 s in rounds of 250, where a process' second round
 * waited behind the runs of its first.
 */
const BATCH = 500

/**
 * Fires due schedule triggers (docs/triggers.md): each round is one transaction of
 * fireDueSchedules (claim, record ticks, insert runs, advance), then the run worker is nudged.
 * Any number of processes may run it; the tick's primary key makes each tick run once.
 */
export class ScheduleWorker extends PollingLoop {
  private timer: ReturnType<typeof setTimeout> | null = null

  constructor(private readonly deps: Deps) {
    super('schedule worker', IDLE_POLL_MS, deps.log)
  }

  protected async step(): Promise<boolean> {
    // Most looks find nothing due: one plain read then, no transaction on the embedded database's
    // one connection four times a second.
    const at = await nextScheduleAt(this.deps.db.sql)
    if (at === null) return false
    if (at.getTime() > Date.now()) return this.arm(at), false
    const { claimed, started } = await fireDueSchedules(this.deps, BATCH)
    if (started.length > 0) this.deps.wake.nudge('runs')
    if (claimed === BATCH) return true
    const next = await nextScheduleAt(this.deps.db.sql)
    if (next) this.arm(next)
    return false
  }

  /** A tick due before the next look: wake at its time (a nudge while a round runs is harmless). */
  private arm(at: Date) {
    const wait = at.getTime() - Date.now()
    if (wait <= 0 || wait >= IDLE_POLL_MS) return
    if (this.timer) clearTimeout(this.timer)
    this.timer = setTimeout(() => {
      this.timer = null
      this.nudge()
    }, wait)
  }

  override async stop() {
    if (this.timer) clearTimeout(this.timer)
    this.timer = null
    await super.stop()
  }
}
