import { Cron } from 'croner'
import type { Deps } from '../../deps'
import { AppError, invalid } from '../../lib/errors'
import type { Tx } from '../../store/db'
import { insertRuns, type NewRun, type RunRow } from '../../store/runs'
import * as store from '../../store/triggers'
import type { StoredGraph } from '../../store/workflows'
import { validateInputs } from './graph'
import { newRun } from './new-run'

/**
 * Schedule triggers (docs/triggers.md): a cron expression in a time zone, and the rounds of the
 * schedule worker that start a run at each tick.
 */

/** A cron expression and time zone as croner reads them: five fields only (minutes to weekdays). */
export function parseSchedule(cron: string, timezone: string): Cron {
  try {
    new Intl.DateTimeFormat('en', { timeZone: timezone })
  } catch {
    throw invalid('timezone', `"${timezone}" is not an IANA time zone name (like Europe/Berlin or UTC)`)
  }
  const fields = cron.trim().split(/\s+/)
  if (fields.length !== 5) {
    throw invalid('cron', `"${cron}" has ${fields.length} fields; a schedule has exactly 5 (minute hour day-of-month month day-of-week)`)
  }
  let parsed: Cron
  try {
    parsed = new Cron(cron, { timezone, mode: '5-part', paused: true })
  } catch (err) {
    throw invalid('cron', `"${cron}" is not a valid cron expression: ${(err as Error).message.replace(/^CronPattern: /, '')}`)
  }
  // Valid fields can still name a date that never comes (30 February).
  if (parsed.nextRun() === null) throw invalid('cron', `"${cron}" never fires`)
  return parsed
}

/**
 * The first tick strictly after `after`. Ticks missed while nothing ran are not replayed: the worker
 * asks from "now", not from the missed tick. Daylight-saving changes are croner's: a time that does
 * not exist that day (02:30 in Berlin on the last Sunday of March) fires when the gap ends, a time
 * that happens twice (02:30 on the last Sunday of October) fires once.
 */
export function nextTick(cron: string, timezone: string, after: Date): Date | null {
  const key = `${timezone} ${cron}`
  let parsed = schedules.get(key)
  if (!parsed) {
    parsed = parseSchedule(cron, timezone)
    // A bound on what stored schedules can make us keep; clearing is cheaper than an LRU and rare.
    if (schedules.size >= SCHEDULE_CACHE_LIMIT) schedules.clear()
    schedules.set(key, parsed)
  }
  return parsed.nextRun(after)
}

/**
 * Parsed schedules by time zone and cron: parsing (and the time-zone check) cost ~0.3 ms a row, most
 * of a round's time when 250 schedules come due at once (measured: 125 ms of a 190 ms round).
 */
const schedules = new Map<string, Cron>()
const SCHEDULE_CACHE_LIMIT = 10_000


/**
 * One round of the schedule worker (src/workers/schedules.ts), in one transaction: claims up to
 * `limit` due schedules (skipping those another process holds), records each tick, inserts the runs
 * of the ticks recorded now, and moves every schedule to its next tick after now. A crash anywhere
 * rolls all of it back and the tick is claimed again; a tick already recorded starts nothing. A
 * tick whose inputs no longer fit the workflow's graph is recorded without a run, and logged; so is
 * (silently) a tick of an archived workspace.
 * Returns the ticks claimed and the runs started.
 */
export async function fireDueSchedules(deps: Pick<Deps, 'db' | 'log'>, limit: number): Promise<{ claimed: number; started: RunRow['id'][] }> {
  return deps.db.sql.begin(async (tx) => {
    const due = await store.claimDueSchedules(tx, limit)
    if (due.length === 0) return { claimed: 0, started: [] }
    const now = new Date()
    const runs = new Map<string, NewRun>()
    const ticks: store.Tick[] = []
    for (const s of due) {
      let runId: string | null = null
      if (s.workspace_status === 'archived') {
        // Read-only until restored: the tick passes without a run, and is not replayed later.
        ticks.push({ trigger_id: s.id, tick_at: s.next_run_at, run_id: null })
        continue
      }
      try {
        const inputs = validateInputs(s.graph as StoredGraph, s.inputs)
        const run = newRun({ workflow_id: s.workflow_id, workflow_version: s.workflow_version, workspace_id: s.workspace_id, user_id: `schedule:${s.id}`, inputs, request_id: null })
        runId = run.id
        runs.set(s.id, run)
      } catch (err) {
        if (!(err instanceof AppError)) throw err
        deps.log.warn({ trigger_id: s.id, tick_at: s.next_run_at, err: err.message }, 'schedule tick started no run: its inputs no longer fit the workflow')
      }
      ticks.push({ trigger_id: s.id, tick_at: s.next_run_at, run_id: runId })
    }
    // Only a tick recorded now starts its run; one recorded before (the same trigger and time) was run then.
    const recorded = (await store.insertTicks(tx, ticks)).filter((t) => runs.has(t.trigger_id))
    await insertRuns(tx, recorded.map((t) => runs.get(t.trigger_id)!))
    const startedBy = new Map(recorded.map((t) => [t.trigger_id, runs.get(t.trigger_id)!.id]))
    await advanceSchedules(tx, due, startedBy, now)
    return { claimed: due.length, started: [...startedBy.values()] }
  })
}

async function advanceSchedules(tx: Tx, due: store.DueSchedule[], startedBy: Map<string, string>, now: Date) {
  const items = due.map((s) => {
    let next: Date | null = null
    try {
      next = nextTick(s.cron, s.timezone, now)
    } catch {
      // Stored schedules were checked when saved; one that no longer parses (a time zone gone from
      // the runtime's database) stops rather than failing the batch each round.
    }
    return { id: s.id, next_run_at: next, run_id: startedBy.get(s.id) ?? null }
  })
  await store.advanceSchedules(tx, items)
}
