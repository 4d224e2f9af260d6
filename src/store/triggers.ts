import { notFound } from '../lib/errors'
import type { ListQuery } from '../lib/lists'
import type { Sql, Tx } from './db'
import { jsonb } from './db'
import { listClauses } from './lists'

export type TriggerType = 'schedule' | 'webhook'

export interface TriggerRow {
  id: string
  workflow_id: string
  workspace_id: string
  type: TriggerType
  enabled: boolean
  cron: string | null
  timezone: string | null
  inputs: Record<string, unknown>
  secret_encrypted: string | null
  /** Webhooks: the token of its URL (/v1/hooks/<id>/<token>); null for schedules. */
  hook_token: string | null
  next_run_at: Date | null
  last_run_at: Date | null
  last_run_id: string | null
  created_by: string
  created_at: Date
  updated_at: Date
}

export async function insertTrigger(
  tx: Tx,
  t: Pick<TriggerRow, 'id' | 'workflow_id' | 'workspace_id' | 'type' | 'enabled' | 'cron' | 'timezone' | 'inputs' | 'secret_encrypted' | 'hook_token' | 'next_run_at' | 'created_by'>,
): Promise<TriggerRow> {
  const [row] = await tx<TriggerRow[]>`
    insert into triggers (id, workflow_id, workspace_id, type, enabled, cron, timezone, inputs, secret_encrypted, hook_token, next_run_at, created_by)
    values (${t.id}, ${t.workflow_id}, ${t.workspace_id}, ${t.type}, ${t.enabled}, ${t.cron}, ${t.timezone},
            ${jsonb(tx, t.inputs)}, ${t.secret_encrypted}, ${t.hook_token}, ${t.next_run_at}, ${t.created_by})
    returning *`
  return row!
}

export async function findTrigger(sql: Sql, id: string): Promise<TriggerRow | null> {
  const [row] = await sql<TriggerRow[]>`select * from triggers where id = ${id}`
  return row ?? null
}

export async function lockTrigger(tx: Tx, id: string): Promise<TriggerRow> {
  const [row] = await tx<TriggerRow[]>`select * from triggers where id = ${id} for update`
  if (!row) throw notFound('trigger', id)
  return row
}

export async function listTriggers(sql: Sql, workflowId: string, q: ListQuery): Promise<TriggerRow[]> {
  const c = listClauses(sql, q)
  return sql<TriggerRow[]>`
    select * from triggers where workflow_id = ${workflowId} ${c.and}
    order by ${c.orderBy} limit ${c.limit}`
}

export interface TriggerPatch {
  enabled?: boolean
  cron?: string
  timezone?: string
  inputs?: Record<string, unknown>
  /** A new sealed secret; null removes it. */
  secretEncrypted?: string | null
  /** The next tick, recomputed whenever the schedule or its enabled flag changes. */
  nextRunAt?: Date | null
}

export async function updateTrigger(tx: Tx, id: string, p: TriggerPatch): Promise<TriggerRow> {
  const [row] = await tx<TriggerRow[]>`
    update triggers set
      enabled = coalesce(${p.enabled ?? null}::boolean, enabled),
      cron = coalesce(${p.cron ?? null}, cron),
      timezone = coalesce(${p.timezone ?? null}, timezone),
      inputs = coalesce(${p.inputs === undefined ? null : jsonb(tx, p.inputs)}::jsonb, inputs),
      secret_encrypted = case when ${p.secretEncrypted !== undefined} then ${p.secretEncrypted ?? null} else secret_encrypted end,
      next_run_at = case when ${p.nextRunAt !== undefined} then ${p.nextRunAt ?? null}::timestamptz else next_run_at end,
      updated_at = now()
    where id = ${id}
    returning *`
  if (!row) throw notFound('trigger', id)
  return row
}

/** A webhook trigger's new URL token: the old one stops working when this commits. */
export async function rotateHookToken(tx: Tx, id: string, token: string): Promise<TriggerRow> {
  const [row] = await tx<TriggerRow[]>`
    update triggers set hook_token = ${token}, updated_at = now() where id = ${id} and type = 'webhook' returning *`
  if (!row) throw notFound('trigger', id)
  return row
}

export async function deleteTrigger(tx: Tx, id: string): Promise<void> {
  await tx`delete from triggers where id = ${id}`
}

/** The webhook trigger a call names, with whether its workspace is archived (read-only). */
export async function findHookTrigger(sql: Sql, id: string): Promise<(TriggerRow & { workspace_status: 'active' | 'archived' }) | null> {
  const [row] = await sql<(TriggerRow & { workspace_status: 'active' | 'archived' })[]>`
    select t.*, ws.status as workspace_status from triggers t join workspaces ws on ws.id = t.workspace_id
    where t.id = ${id} and t.type = 'webhook'`
  return row ?? null
}

/** A webhook trigger's call started a run: what the trigger object shows as its last run. */
export async function recordHookRun(sql: Sql, id: string, runId: string): Promise<void> {
  await sql`update triggers set last_run_at = now(), last_run_id = ${runId} where id = ${id}`
}

/** A due schedule as the worker claims it, with what starting its run needs from the workflow. */
export interface DueSchedule {
  id: string
  workflow_id: string
  workspace_id: string
  cron: string
  timezone: string
  inputs: Record<string, unknown>
  next_run_at: Date
  workflow_version: number
  graph: unknown
  /** An archived workspace is read-only: its schedules tick without starting runs. */
  workspace_status: 'active' | 'archived'
}

/**
 * Locks up to `limit` due schedules, skipping those another process holds: two workers never claim
 * the same trigger, and neither waits for the other. Oldest tick first (triggers_due_idx).
 */
export function claimDueSchedules(tx: Tx, limit: number): Promise<DueSchedule[]> {
  return tx<DueSchedule[]>`
    select t.id, t.workflow_id, t.workspace_id, t.cron, t.timezone, t.inputs, t.next_run_at,
           w.version as workflow_version, w.graph, ws.status as workspace_status
    from triggers t join workflows w on w.id = t.workflow_id join workspaces ws on ws.id = t.workspace_id
    where t.type = 'schedule' and t.enabled and t.next_run_at <= now()
    order by t.next_run_at
    limit ${limit}
    for update of t skip locked`
}

export interface Tick {
  trigger_id: string
  tick_at: Date
  run_id: string | null
}

/**
 * Records ticks; a tick already recorded (the same trigger and time) is left alone. Returns the ones
 * inserted now: only those may start their run.
 */
export async function insertTicks(tx: Tx, ticks: Tick[]): Promise<Tick[]> {
  if (ticks.length === 0) return []
  const rows = ticks.map((t) => ({ trigger_id: t.trigger_id, tick_at: t.tick_at.toISOString(), run_id: t.run_id }))
  return tx<Tick[]>`
    insert into trigger_ticks (trigger_id, tick_at, run_id)
    select trigger_id, tick_at, run_id from jsonb_to_recordset(${jsonb(tx, rows)}) as r(trigger_id text, tick_at timestamptz, run_id text)
    on conflict do nothing
    returning trigger_id, tick_at, run_id`
}

/** After the ticks: each schedule's next tick, and the run its tick started (if it started one). */
export async function advanceSchedules(tx: Tx, items: { id: string; next_run_at: Date | null; run_id: string | null }[]): Promise<void> {
  if (items.length === 0) return
  const rows = items.map((i) => ({ id: i.id, next_run_at: i.next_run_at?.toISOString() ?? null, run_id: i.run_id }))
  await tx`
    update triggers t set
      next_run_at = r.next_run_at,
      last_run_at = case when r.run_id is null then t.last_run_at else now() end,
      last_run_id = coalesce(r.run_id, t.last_run_id)
    from jsonb_to_recordset(${jsonb(tx, rows)}) as r(id text, next_run_at timestamptz, run_id text)
    where t.id = r.id`
}

/** When the earliest enabled schedule is due (triggers_due_idx: the first entry of a partial index). */
export async function nextScheduleAt(sql: Sql): Promise<Date | null> {
  const [row] = await sql<{ at: Date | null }[]>`select min(next_run_at) as at from triggers where type = 'schedule' and enabled`
  return row?.at ?? null
}
