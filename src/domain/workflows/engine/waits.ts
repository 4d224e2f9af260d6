import type { Deps } from '../../../deps'
import { loadRow } from '../../../machines/definition'
import { runDefinition, type NodeProgress } from '../../../machines/workflow-run.machine'
import * as runs from '../../../store/runs'
import { RUN_TIMER } from '../transitions'
import { NodeError } from '../types'
import { endEvent } from './log'
import { settleFailure } from './on-error'
import { NOTHING, type Drive, type RunHolder } from './types'

/**
 * Waits (a `wait` node, a `human_input` node) hold no worker: a run with nothing but waits left is
 * parked, its lease let go, until its earliest `until` (a `run:<id>` timer, and the sweep of
 * parked runs whatever happens to the timer) or a person's input makes it claimable again.
 */

/** The nodes of the run waiting now. */
export function waitsOf(d: Drive): [string, NodeProgress][] {
  return Object.entries(d.run.snapshot.context.progress).filter(([, p]) => p.status === 'waiting')
}

export const isDue = (now: number) => ([, p]: [string, NodeProgress]) => p.until !== undefined && Date.parse(p.until) <= now

/** Waits whose time has come: a wait node is done; a human_input node not answered in time fails with input_timeout (then its on_error). */
export async function settleWaits(d: Drive): Promise<void> {
  const now = Date.now()
  const waiting = (id: string) => d.run.snapshot.context.progress[id]?.status === 'waiting'
  for (const [id, p] of waitsOf(d).filter(isDue(now))) {
    const node = d.byId.get(id)!
    const durationMs = now - Date.parse(p.started_at!)
    if (node.type === 'human_input') {
      const seconds = node.config.timeout_seconds
      await settleFailure(d.transit, node, new NodeError('input_timeout', `no input within ${String(seconds)} s`), durationMs, 1, () => waiting(id))
      continue
    }
    await d.transit(() => (waiting(id) ? {
      events: [{ type: 'node.completed', node: id, output: {}, durationMs, end: false }],
      log: [endEvent(node, durationMs, {}, 1)],
    } : { events: [], log: [] }))
  }
}

/**
 * Parks the run on `waits` (none due): the lease is let go; the timer (or the sweep once wake_at
 * passes) brings it back, or a person's input does. True when the drive ends here (parked, or the
 * run is no longer this holder's); false when the run moved on meanwhile (its row is read again).
 */
export async function park(deps: Deps, holder: RunHolder, d: Drive, waits: [string, NodeProgress][]): Promise<boolean> {
  const times = waits.flatMap(([, p]) => (p.until === undefined ? [] : [Date.parse(p.until)]))
  const wakeAt = times.length > 0 ? new Date(Math.min(...times)) : runs.NEVER
  if (await runs.parkRun(deps.db.sql, d.run.id, holder.owner, d.run.next_seq, wakeAt)) {
    if (wakeAt !== runs.NEVER) await deps.timers.schedule(RUN_TIMER, [{ id: d.run.id, at: wakeAt }])
    return true
  }
  const fresh = await runs.findRun(deps.db.sql, d.run.id)
  if (fresh?.status !== 'running' || fresh.lease_owner !== holder.owner) return true
  d.run = loadRow(runDefinition, fresh)
  await d.transit(NOTHING)
  return false
}

/** Runs' timers fired: their wait is over, they are claimable again (wake_at cleared) and their timers dropped. */
export async function wakeParked(deps: Deps, ids: string[]): Promise<void> {
  await runs.unparkDue(deps.db.sql, ids)
  await deps.timers.schedule(RUN_TIMER, ids.map((id) => ({ id, at: null })))
}

/** Parked runs whose wake_at has passed without their timer (Redis lost it, or it fired in a process that died before unparking them) made claimable. */
export async function sweepParked(deps: Deps): Promise<void> {
  await runs.unparkDue(deps.db.sql)
}
