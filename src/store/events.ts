import { idFloor, newId } from '../lib/ids'
import type { Fragment } from 'postgres'
import type { Sql, Tx } from './db'
import { jsonb } from './db'
import { traceJson, type TraceCarrier } from './trace-context'

export interface EventRow {
  id: string
  workspace_id: string | null
  type: string
  data: Record<string, unknown>
  created_at: Date
  dispatched_at: Date | null
  /** The trace of what caused the event (docs/observability.md): its deliveries' attempts join it. */
  trace_context: TraceCarrier | null
}

/**
 * The outbox: writes the event in the caller's transaction, so it commits (and is later delivered)
 * exactly when the change it describes commits. Nothing is lost if the process dies after commit.
 * `created_at` is the time of the insert, not of the transaction's start (now()): events written
 * under a lock (budget thresholds) are then ordered as the lock ordered them.
 */
export async function emit(tx: Tx | Sql, workspaceId: string | null, type: string, data: Record<string, unknown>): Promise<EventRow> {
  const [row] = await tx<EventRow[]>`
    insert into events (id, workspace_id, type, data, created_at, trace_context)
    values (${newId('evt')}, ${workspaceId}, ${type}, ${jsonb(tx, data)}, clock_timestamp(), ${traceJson(tx)})
    returning *`
  return row!
}

/**
 * The row emit() writes, as a data-modifying CTE `o` of a statement whose CTE `u` returns the row
 * the event announces (its `workspace_id`): the event commits with that row's change, in one round
 * trip. `extra` is SQL over `u` merged into `data` (what only the update knows, e.g. a duration).
 */
export function outboxCte(sql: Sql, type: string, data: Record<string, unknown>, extra: Fragment = sql`'{}'::jsonb`, name = 'o'): Fragment {
  return sql`, ${sql(name)} as (
    insert into events (id, workspace_id, type, data, created_at, trace_context)
    select ${newId('evt')}, u.workspace_id, ${type}, ${jsonb(sql, data)}::jsonb || ${extra}, clock_timestamp(), ${traceJson(sql)}::jsonb
    from u)`
}

/** Undispatched events, oldest first; `for update skip locked` lets several workers share the outbox. */
export async function claimUndispatchedEvents(tx: Tx, limit: number): Promise<EventRow[]> {
  return tx<EventRow[]>`
    select * from events where dispatched_at is null
    order by created_at, id limit ${limit} for update skip locked`
}

export async function markEventsDispatched(tx: Tx, ids: string[]): Promise<void> {
  if (ids.length === 0) return
  await tx`update events set dispatched_at = now() where id in ${tx(ids)}`
}

/** Retention: dispatched outbox rows created before `before` (deliveries keep a copy of the data); by time-ordered id. */
export async function deleteDispatchedEvents(sql: Sql, before: Date, limit: number): Promise<number> {
  const rows = await sql`
    delete from events where id in (
      select id from events where id < ${idFloor('evt', before.getTime())} and dispatched_at is not null limit ${limit})
    returning id`
  return rows.length
}
