import type { Deps } from '../../deps'
import { AppError, invalid } from '../../lib/errors'
import { newId, randomBase62 } from '../../lib/ids'
import type { ListQuery } from '../../lib/lists'
import { recorded, type WriteKey } from '../../store/idempotent-writes'
import * as store from '../../store/triggers'
import { findWorkflow } from '../../store/workflows'
import type { Action, Caller } from '../access'
import { loadOwned } from '../ownership'
import { validateInputs } from './graph'
import { checkHookInputs } from './hook-inputs'
import { nextTick, parseSchedule } from './schedules'
import { loadWorkflow } from './service'

/**
 * Triggers (docs/triggers.md): schedules that start a run at each cron tick (schedules.ts), and
 * inbound webhooks that start one per call (hooks.ts), with inputs mapped from the call's body,
 * query and headers (hook-inputs.ts). This file: creating, changing and deleting them.
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

/** A new hook URL token: 43 base62 characters (256 bits). */
export const newHookToken = () => randomBase62(43)

/** A trigger the caller may take `action` on; one it may not see answers 404 for the trigger itself. */
export function loadTrigger(deps: Deps, caller: Caller, id: string, action: Action): Promise<store.TriggerRow> {
  return loadOwned(deps, caller, 'trigger', id, action, store.findTrigger)
}

export async function createTrigger(deps: Deps, caller: Caller, workflowId: string, input: TriggerInput, key?: WriteKey): Promise<store.TriggerRow> {
  const wf = await loadWorkflow(deps, caller, workflowId, 'build')
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
  await loadWorkflow(deps, caller, workflowId, 'read')
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
