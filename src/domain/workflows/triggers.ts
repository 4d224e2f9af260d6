import { Cron } from 'croner'
import type { Deps } from '../../deps'
import { safeEqual, sha256Hex } from '../../lib/crypto'
import { AppError, invalid } from '../../lib/errors'
import { newId, randomBase62 } from '../../lib/ids'
import type { ListQuery } from '../../lib/lists'
import { serviceSignature, standardSignature } from '../../lib/signing'
import type { Tx } from '../../store/db'
import { recorded, type WriteKey } from '../../store/idempotent-writes'
import { insertRuns, type NewRun, type RunRow } from '../../store/runs'
import * as store from '../../store/triggers'
import { findWorkflow } from '../../store/workflows'
import type { Action, Caller } from '../access'
import { loadOwned } from '../workspaces'
import { validateInputs } from './graph'
import { startRun } from './runs'
import { newRun } from './new-run'
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
 * Headers no input ever reads, even through `{{headers}}` (every header): credentials a sender may
 * attach, this service's API key among them (src/routes/plugins/auth.ts reads it from Authorization).
 */
export const UNMAPPED_HEADERS: readonly string[] = ['authorization', 'proxy-authorization', 'cookie', 'x-api-key']

/**
 * A hook's input template in the workflow renderer's terms: `{{body.x}}` becomes `{{inputs.body.x}}`
 * rendered over `{ inputs: { body, query, headers } }`, so paths, indexes and the typed value of a
 * lone placeholder behave exactly as in workflow templates (src/domain/workflows/templates.ts).
 * `signed`: the trigger has a secret, whose signature covers only the body, so only the body may be read.
 */
function hookTemplate(name: string, template: unknown, signed = false): string {
  if (typeof template !== 'string') throw invalid(`inputs.${name}`, 'must be a template string over {{body.*}}, {{query.*}} or {{headers.*}}')
  const rewritten = template.replace(PLACEHOLDER, (whole, expr: string) => {
    const path = expr.trim()
    const [root, next] = path.split(/[.[\]'"]+/, 2)
    if (!ROOTS.has(root!)) throw invalid(`inputs.${name}`, `${whole}: placeholders read body, query or headers ({{body.order.id}}, {{query.ref}}, {{headers.x-source}})`)
    if (signed && root !== 'body') {
      throw invalid(`inputs.${name}`, `${whole}: a trigger with a secret takes its inputs only from the body, which its signature covers (${root} is not signed)`)
    }
    if (root === 'headers' && next !== undefined && UNMAPPED_HEADERS.includes(next.toLowerCase())) {
      throw invalid(`inputs.${name}`, `${whole}: the ${next} header is never passed to a run (credentials: ${UNMAPPED_HEADERS.join(', ')})`)
    }
    return `{{inputs.${path}}}`
  })
  try {
    compileTemplate(rewritten)
  } catch {
    throw invalid(`inputs.${name}`, `${template} is not a valid template: a placeholder is not a path like {{body.items[0].sku}}`)
  }
  return rewritten
}

function checkHookInputs(inputs: Record<string, unknown>, signed: boolean): Record<string, string> {
  const out: Record<string, string> = {}
  for (const [name, template] of Object.entries(inputs)) {
    hookTemplate(name, template, signed)
    out[name] = template as string
  }
  return out
}

/**
 * The run inputs of one hook call; an input whose template reads nothing is left out (its default
 * applies). A signed trigger's inputs see only the body (a template saved before that rule reads
 * nothing from the query or headers); no input ever sees UNMAPPED_HEADERS.
 */
export function renderHookInputs(templates: Record<string, unknown>, call: HookCall, signed = false): Record<string, unknown> {
  const headers: Record<string, string> = {}
  if (!signed) for (const [k, v] of Object.entries(call.headers)) if (!UNMAPPED_HEADERS.includes(k.toLowerCase())) headers[k.toLowerCase()] = v
  const vars = { inputs: { body: call.body ?? null, query: signed ? {} : call.query, headers }, nodes: {} }
  const out: Record<string, unknown> = {}
  for (const [name, template] of Object.entries(templates)) {
    let compiled: string
    try {
      compiled = hookTemplate(name, template)
    } catch {
      continue
    }
    const value = render(compiled, vars)
    if (value !== undefined) out[name] = value
  }
  return out
}

/** A new hook URL token: 43 base62 characters (256 bits). */
export const newHookToken = () => randomBase62(43)

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
    row = { ...base, cron: input.cron.trim(), timezone, inputs, secret_encrypted: null, hook_token: null, next_run_at: next }
  } else {
    if (input.cron !== undefined) throw invalid('cron', 'only a schedule takes a cron expression')
    if (input.timezone !== undefined) throw invalid('timezone', 'only a schedule takes a time zone')
    if (input.secret !== undefined) checkSecret(input.secret)
    const inputs = checkHookInputs(input.inputs ?? {}, input.secret !== undefined)
    const secret = input.secret === undefined ? null : deps.secretBox.seal(input.secret)
    row = { ...base, cron: null, timezone: null, inputs, secret_encrypted: secret, hook_token: newHookToken(), next_run_at: null }
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
    if (typeof input.secret === 'string') checkSecret(input.secret)
    // The inputs after the change must fit the secret after it: a signed trigger reads only the body.
    const signed = input.secret === undefined ? current.secret_encrypted !== null : input.secret !== null
    if (input.inputs !== undefined || (signed && current.secret_encrypted === null)) patch.inputs = checkHookInputs(input.inputs ?? current.inputs, signed)
    if (input.secret !== undefined) patch.secretEncrypted = input.secret === null ? null : deps.secretBox.seal(input.secret)
  }
  return deps.db.sql.begin(async (tx) => {
    await store.lockTrigger(tx, id)
    return store.updateTrigger(tx, id, patch)
  })
}

/**
 * A webhook trigger's URL gets a new token; the old URL stops working when this commits. Named by its
 * workflow and its id: a trigger of another workflow is 404, a schedule (no URL) 409.
 */
export async function rotateHookToken(deps: Deps, caller: Caller, workflowId: string, id: string): Promise<store.TriggerRow> {
  const current = await loadTrigger(deps, caller, id, 'build')
  if (current.workflow_id !== workflowId) throw new AppError('not_found', `trigger ${id} not found`)
  if (current.type !== 'webhook') throw new AppError('conflict', `trigger ${id} is a schedule: only a webhook trigger has a URL to rotate`)
  return deps.db.sql.begin(async (tx) => {
    await store.lockTrigger(tx, id)
    return store.rotateHookToken(tx, id, newHookToken())
  })
}

/**
 * A secret `whsec_<base64>` is a Standard Webhooks secret: its key is the decoded bytes (24 to 64 of
 * them, as the specification has it); any other secret keys the HMAC with its UTF-8 bytes.
 */
function checkSecret(secret: string): void {
  if (!secret.startsWith('whsec_')) return
  const b64 = secret.slice(6)
  const bytes = Buffer.from(b64, 'base64')
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(b64) || bytes.length < 24 || bytes.length > 64) {
    throw invalid('secret', 'a secret starting whsec_ is a Standard Webhooks secret: whsec_ then the base64 of 24 to 64 random bytes')
  }
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

/** The shape of a hook URL's token; anything else is refused before any lookup. */
export const HOOK_TOKEN = /^[A-Za-z0-9]{32,128}$/

/**
 * The webhook trigger a URL names, or null when no webhook trigger has this id and token (the same
 * answer for both, compared in constant time). One that is disabled is 409; one of an archived
 * (read-only) workspace 403, as a run started with an API key would be.
 */
export async function findHook(deps: Deps, id: string, token: string): Promise<store.TriggerRow | null> {
  const trigger = await store.findHookTrigger(deps.db.sql, id)
  // Compared even without a trigger, so that an unknown id takes the time a wrong token does.
  const ok = safeEqual(sha256Hex(token), sha256Hex(trigger?.hook_token ?? ''))
  if (!trigger || !ok) return null
  if (!trigger.enabled) throw new AppError('conflict', `trigger ${id} is disabled; PATCH enabled: true to accept calls again`)
  if (trigger.workspace_status === 'archived') throw new AppError('forbidden', `workspace ${trigger.workspace_id} is archived and read-only; restore it first`)
  return trigger
}

/** How far a Standard Webhooks `webhook-timestamp` may be from now, either way (the specification's default). */
export const SIGNATURE_TOLERANCE_S = 5 * 60

/**
 * With a secret, a call is signed one of two ways, each compared in constant time (401 otherwise):
 * Standard Webhooks (`webhook-id`, `webhook-timestamp` within 5 minutes, `webhook-signature`:
 * `v1,<base64 HMAC-SHA256 of id.timestamp.body>`, any one of its space-separated signatures), or
 * X-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>. Returns the call's delivery id, which
 * the replay check keys on: the signed `webhook-id`, else X-GitHub-Delivery or X-Hook-Delivery
 * (null without one); null for a trigger without a secret.
 */
export function checkSignature(deps: Deps, trigger: store.TriggerRow, call: HookCall, now = Date.now()): string | null {
  if (trigger.secret_encrypted === null) return null
  const h = call.headers
  const secret = deps.secretBox.open(trigger.secret_encrypted)
  if (h['webhook-signature'] !== undefined) {
    const id = h['webhook-id']
    const ts = h['webhook-timestamp']
    if (!id || !ts) throw new AppError('unauthenticated', 'webhook-signature needs webhook-id and webhook-timestamp (Standard Webhooks)')
    if (!/^\d{1,12}$/.test(ts) || Math.abs(now / 1000 - Number(ts)) > SIGNATURE_TOLERANCE_S) {
      throw new AppError('unauthenticated', `webhook-timestamp must be the sending time in Unix seconds, within ${SIGNATURE_TOLERANCE_S / 60} minutes of now`)
    }
    const expected = standardSignature([secret], id, Number(ts), call.raw).slice(3)
    const sent = h['webhook-signature'].split(' ').filter((s) => s.startsWith('v1,')).map((s) => s.slice(3))
    // Every candidate is compared, so the time taken says nothing about which one matched.
    let match = false
    for (const s of sent) match = safeEqual(s, expected) || match
    if (!match) throw new AppError('unauthenticated', 'webhook-signature does not match webhook-id, webhook-timestamp and the body')
    return id
  }
  const sent = h['x-signature-256']
  if (sent === undefined) {
    throw new AppError('unauthenticated', 'this trigger needs a signature: X-Signature-256: sha256=<hex HMAC-SHA256 of the body under its secret>, or Standard Webhooks headers (webhook-id, webhook-timestamp, webhook-signature)')
  }
  const expected = serviceSignature(secret, call.raw)
  if (!safeEqual(sent.trim().toLowerCase(), expected)) throw new AppError('unauthenticated', 'X-Signature-256 does not match the body')
  return h['x-github-delivery'] || h['x-hook-delivery'] || null
}

/** How long a signed call's delivery id is remembered: the same id again within it is a replay. */
export const DELIVERY_TTL_MS = 24 * 3600_000
const deliveryKey = (triggerId: string, deliveryId: string) => `hook-delivery:${triggerId}:${sha256Hex(deliveryId)}`

/**
 * Claims a signed call's delivery id for 24 hours, per trigger. Null when it is new; otherwise the
 * run the first call started (an empty string while that call is still starting it).
 */
export async function claimDelivery(deps: Deps, triggerId: string, deliveryId: string): Promise<string | null> {
  if (deliveryId.length > 256) throw invalid('delivery_id', 'a delivery id (webhook-id, X-GitHub-Delivery, X-Hook-Delivery) has at most 256 characters')
  const key = deliveryKey(triggerId, deliveryId)
  // Claimed for 10 minutes until the run starts (a process that dies meanwhile does not block the id for a day).
  if (await deps.redis.setIfAbsent(key, '', 10 * 60_000)) return null
  return (await deps.redis.get(key)) ?? ''
}

/** The call's run started: a replay answers it. Or it failed before starting one: the sender may retry. */
export async function settleDelivery(deps: Deps, triggerId: string, deliveryId: string, runId: string | null): Promise<void> {
  const key = deliveryKey(triggerId, deliveryId)
  if (runId === null) await deps.redis.del(key)
  else await deps.redis.set(key, runId, DELIVERY_TTL_MS)
}

/** Starts the hook's run: inputs rendered from the call and validated against the workflow (400 naming the input). */
export async function runHook(deps: Deps, trigger: store.TriggerRow, call: HookCall, requestId: string, key?: WriteKey): Promise<RunRow> {
  const wf = await findWorkflow(deps.db.sql, trigger.workflow_id)
  if (!wf) throw new AppError('not_found', `webhook trigger ${trigger.id} not found`)
  const inputs = renderHookInputs(trigger.inputs, call, trigger.secret_encrypted !== null)
  const run = await startRun(deps, wf, { inputs, userId: `webhook:${trigger.id}`, requestId }, key)
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
        const inputs = validateInputs(s.graph as Graph, s.inputs)
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

