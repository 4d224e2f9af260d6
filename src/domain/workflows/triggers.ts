import { Cron } from 'croner'
import type { Deps } from '../../deps'
import { safeEqual } from '../../lib/crypto'
import { AppError, invalid } from '../../lib/errors'
import { newId } from '../../lib/ids'
import type { ListQuery } from '../../lib/lists'
import { serviceSignature } from '../../lib/signing'
import { start } from '../../machines/runner'
import { RUN_MACHINE_VERSION, runMachine } from '../../machines/workflow-run.machine'
import type { Tx } from '../../store/db'
import { recorded, type WriteKey } from '../../store/idempotent-writes'
import { insertRuns, type RunRow } from '../../store/runs'
import * as store from '../../store/triggers'
import { findWorkflow } from '../../store/workflows'
import type { Action, Caller } from '../access'
import { loadOwned } from '../workspaces'
import { validateInputs } from './graph'
import { startRun } from './runs'
import { loadWorkflow } from './service'
import { compileTemplate, render } from './templates'
import type { Graph } from './types'

/**
 * Triggers (docs/triggers.md): schedules that start a run at each cron tick, and inbound webhooks
 * that start one per call, with inputs mapped from the call's body, query and headers.
 */

export interface TriggerInput {
  type: store.TriggerType
  cron?: string
  timezone?: string
  inputs?: Record<string, unknown>
  secret?: string
  enabled?: boolean
}

export type TriggerChange = Omit<TriggerInput, 'type' | 'secret'> & { secret?: string | null }

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

const ROOTS = new Set(['body', 'query', 'headers'])
const PLACEHOLDER = /\{\{([^{}]*)\}\}/g

/**
 * A hook's input template in the workflow renderer's terms: `{{body.x}}` becomes `{{inputs.body.x}}`
 * rendered over `{ inputs: { body, query, headers } }`, so paths, indexes and the typed value of a
 * lone placeholder behave exactly as in workflow templates (src/domain/workflows/templates.ts).
 */
function hookTemplate(name: string, template: unknown): string {
  if (typeof template !== 'string') throw invalid(`inputs.${name}`, 'must be a template string over {{body.*}}, {{query.*}} or {{headers.*}}')
  const rewritten = template.replace(PLACEHOLDER, (whole, expr: string) => {
    const root = expr.trim().split(/[.[]/, 1)[0]!
    if (!ROOTS.has(root)) throw invalid(`inputs.${name}`, `${whole}: placeholders read body, query or headers ({{body.order.id}}, {{query.ref}}, {{headers.x-source}})`)
    return `{{inputs.${expr.trim()}}}`
  })
  try {
    compileTemplate(rewritten)
  } catch {
    throw invalid(`inputs.${name}`, `${template} is not a valid template: a placeholder is not a path like {{body.items[0].sku}}`)
  }
  return rewritten
}

function checkHookInputs(inputs: Record<string, unknown>): Record<string, string> {
  const out: Record<string, string> = {}
  for (const [name, template] of Object.entries(inputs)) {
    hookTemplate(name, template)
    out[name] = template as string
  }
  return out
}

/** The run inputs of one hook call; an input whose template reads nothing is left out (its default applies). */
export function renderHookInputs(templates: Record<string, unknown>, call: HookCall): Record<string, unknown> {
  const vars = { inputs: { body: call.body ?? null, query: call.query, headers: call.headers }, nodes: {} }
  const out: Record<string, unknown> = {}
  for (const [name, template] of Object.entries(templates)) {
    const value = render(hookTemplate(name, template), vars)
    if (value !== undefined) out[name] = value
  }
  return out
}

/** A trigger the caller may take `action` on; one it may not see answers 404 for the trigger itself. */
export function loadTrigger(deps: Deps, caller: Caller, id: string, action: Action): Promise<store.TriggerRow> {
  return loadOwned(deps.db.sql, caller, 'trigger', id, action, store.findTrigger)
}

export async function createTrigger(deps: Deps, caller: Caller, workflowId: string, input: TriggerInput, key?: WriteKey): Promise<store.TriggerRow> {
  const wf = await loadWorkflow(deps.db.sql, caller, workflowId, 'build')
  const base = { id: newId('trg'), workflow_id: wf.id, workspace_id: wf.workspace_id, type: input.type, enabled: input.enabled ?? true, created_by: caller.userId }
  let row: Parameters<typeof store.insertTrigger>[1]
  if (input.type === 'schedule') {
    if (input.cron === undefined) throw invalid('cron', 'a schedule needs a cron expression of 5 fields')
    if (input.secret !== undefined) throw invalid('secret', 'only a webhook trigger takes a secret')
    const timezone = input.timezone ?? 'UTC'
    parseSchedule(input.cron, timezone)
    const inputs = validateInputs(wf.graph, input.inputs ?? {})
    const next = base.enabled ? nextTick(input.cron, timezone, new Date()) : null
    row = { ...base, cron: input.cron.trim(), timezone, inputs, secret_encrypted: null, next_run_at: next }
  } else {
    if (input.cron !== undefined) throw invalid('cron', 'only a schedule takes a cron expression')
    if (input.timezone !== undefined) throw invalid('timezone', 'only a schedule takes a time zone')
    const inputs = checkHookInputs(input.inputs ?? {})
    const secret = input.secret === undefined ? null : deps.secretBox.seal(input.secret)
    row = { ...base, cron: null, timezone: null, inputs, secret_encrypted: secret, next_run_at: null }
  }
  return deps.db.sql.begin(async (tx) => recorded(tx, key, 'trigger', await store.insertTrigger(tx, row)))
}

export async function listTriggers(deps: Deps, caller: Caller, workflowId: string, q: ListQuery) {
  await loadWorkflow(deps.db.sql, caller, workflowId, 'read')
  return store.listTriggers(deps.db.sql, workflowId, q)
}

/** A change of cron, time zone or enabled flag computes the next tick again, from now. */
export async function updateTrigger(deps: Deps, caller: Caller, id: string, input: TriggerChange): Promise<store.TriggerRow> {
  const current = await loadTrigger(deps, caller, id, 'build')
  const patch: store.TriggerPatch = { enabled: input.enabled }
  if (current.type === 'schedule') {
    if (input.secret !== undefined) throw invalid('secret', 'only a webhook trigger takes a secret')
    const cron = input.cron ?? current.cron!
    const timezone = input.timezone ?? current.timezone!
    parseSchedule(cron, timezone)
    if (input.cron !== undefined) patch.cron = cron.trim()
    if (input.timezone !== undefined) patch.timezone = timezone
    if (input.inputs !== undefined) {
      const wf = (await findWorkflow(deps.db.sql, current.workflow_id))!
      patch.inputs = validateInputs(wf.graph, input.inputs)
    }
    if (input.cron !== undefined || input.timezone !== undefined || input.enabled !== undefined) {
      patch.nextRunAt = (input.enabled ?? current.enabled) ? nextTick(cron, timezone, new Date()) : null
    }
  } else {
    if (input.cron !== undefined) throw invalid('cron', 'only a schedule takes a cron expression')
    if (input.timezone !== undefined) throw invalid('timezone', 'only a schedule takes a time zone')
    if (input.inputs !== undefined) patch.inputs = checkHookInputs(input.inputs)
    if (input.secret !== undefined) patch.secretEncrypted = input.secret === null ? null : deps.secretBox.seal(input.secret)
  }
  return deps.db.sql.begin(async (tx) => {
    await store.lockTrigger(tx, id)
    return store.updateTrigger(tx, id, patch)
  })
}

export async function deleteTrigger(deps: Deps, caller: Caller, id: string): Promise<void> {
  await loadTrigger(deps, caller, id, 'build')
  await deps.db.sql.begin((tx) => store.deleteTrigger(tx, id))
}

/** What a hook call brings: the parsed JSON body (null without one), the query, the headers lower-cased. */
export interface HookCall {
  body: unknown
  raw: string
  query: Record<string, string>
  headers: Record<string, string>
}

/**
 * The webhook trigger a call names: a missing one, or a schedule's id, is 404; a disabled one 409; one
 * of an archived (read-only) workspace 403, as a run started with an API key would be.
 */
export async function findHook(deps: Deps, id: string): Promise<store.TriggerRow> {
  const trigger = await store.findHookTrigger(deps.db.sql, id)
  if (!trigger) throw new AppError('not_found', `webhook trigger ${id} not found`)
  if (!trigger.enabled) throw new AppError('conflict', `trigger ${id} is disabled; PATCH enabled: true to accept calls again`)
  if (trigger.workspace_status === 'archived') throw new AppError('forbidden', `workspace ${trigger.workspace_id} is archived and read-only; restore it first`)
  return trigger
}

/** With a secret, X-Signature-256 must be `sha256=<hex HMAC-SHA256 of the raw body>`, compared in constant time. */
export function checkSignature(deps: Deps, trigger: store.TriggerRow, call: HookCall): void {
  if (trigger.secret_encrypted === null) return
  const sent = call.headers['x-signature-256']
  if (sent === undefined) throw new AppError('unauthenticated', 'this trigger needs X-Signature-256: sha256=<hex HMAC-SHA256 of the body under its secret>')
  const expected = serviceSignature(deps.secretBox.open(trigger.secret_encrypted), call.raw)
  if (!safeEqual(sent.trim().toLowerCase(), expected)) throw new AppError('unauthenticated', 'X-Signature-256 does not match the body')
}

/** Starts the hook's run: inputs rendered from the call and validated against the workflow (400 naming the input). */
export async function runHook(deps: Deps, trigger: store.TriggerRow, call: HookCall, requestId: string, key?: WriteKey): Promise<RunRow> {
  const wf = await findWorkflow(deps.db.sql, trigger.workflow_id)
  if (!wf) throw new AppError('not_found', `webhook trigger ${trigger.id} not found`)
  const run = await startRun(deps, wf, { inputs: renderHookInputs(trigger.inputs, call), userId: `webhook:${trigger.id}`, requestId }, key)
  await store.recordHookRun(deps.db.sql, trigger.id, run.id)
  return run
}

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
    // Every run starts from the same initial snapshot: made once per round, not once per run.
    const snapshot = start(runMachine, undefined as never).persisted as RunRow['snapshot']
    const runs = new Map<string, Parameters<typeof insertRuns>[1][number]>()
    const ticks: store.Tick[] = []
    for (const s of due) {
      let runId: string | null = null
      if (s.workspace_status === 'archived') {
        // Read-only until restored: the tick passes without a run, and is not replayed later.
        ticks.push({ trigger_id: s.id, tick_at: s.next_run_at, run_id: null })
        continue
      }
      try {
        const inputs = validateInputs(s.graph as Graph, s.inputs)
        runId = newId('run')
        runs.set(s.id, newRunRow(runId, s, inputs, snapshot))
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

function newRunRow(id: string, s: store.DueSchedule, inputs: Record<string, unknown>, snapshot: RunRow['snapshot']): Parameters<typeof insertRuns>[1][number] {
  return {
    id,
    workflow_id: s.workflow_id,
    workflow_version: s.workflow_version,
    workspace_id: s.workspace_id,
    user_id: `schedule:${s.id}`,
    inputs,
    snapshot,
    machine_version: RUN_MACHINE_VERSION,
    request_id: null,
  }
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

