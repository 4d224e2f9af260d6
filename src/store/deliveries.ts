import { notFound } from '../lib/errors'
import { idFloor } from '../lib/ids'
import type { ListQuery } from '../lib/lists'
import { DELIVERY_MACHINE_VERSION, type DeliveryContext, type DeliveryStatus } from '../machines/webhook-delivery.machine'
import type { Persisted } from '../machines/runner'
import type { Sql, Tx } from './db'
import { jsonb } from './db'
import { listClauses } from './lists'
import { traceContext, type TraceCarrier } from '../lib/tracing'

export interface AttemptRecord {
  attempt: number
  at: string
  status_code: number | null
  duration_ms: number
  error: string | null
  response_excerpt: string | null
}

export interface DeliveryRow {
  id: string
  webhook_id: string
  event_id: string
  event_type: string
  data: Record<string, unknown>
  status: DeliveryStatus
  snapshot: Persisted<DeliveryContext>
  machine_version: number
  attempts_count: number
  attempts: AttemptRecord[]
  next_attempt_at: Date | null
  created_at: Date
  updated_at: Date
  /** The trace of the request whose event caused it (docs/observability.md): each attempt's span joins it. */
  trace_context: TraceCarrier | null
}

export type NewDelivery = Pick<DeliveryRow, 'id' | 'webhook_id' | 'event_id' | 'event_type' | 'data' | 'status' | 'snapshot' | 'machine_version'> & {
  next_attempt_at: Date
  /** The event's trace; left out, the active one (a ping made by a request). */
  trace_context?: TraceCarrier | null
}

/**
 * Inserts deliveries, skipping any (event, webhook) pair that already has one: the unique key makes
 * fan-out safe to run twice and from several processes. Returns the rows actually created.
 */
export async function insertDeliveries(tx: Tx, rows: NewDelivery[]): Promise<{ id: string; next_attempt_at: Date }[]> {
  if (rows.length === 0) return []
  const active = traceContext()
  const values = rows.map((r) => {
    const trace = r.trace_context === undefined ? active : r.trace_context
    return { ...r, data: jsonb(tx, r.data), snapshot: jsonb(tx, r.snapshot), trace_context: trace ? jsonb(tx, trace) : null }
  })
  return tx`
    insert into webhook_deliveries ${tx(values, 'id', 'webhook_id', 'event_id', 'event_type', 'data', 'status', 'snapshot', 'machine_version', 'next_attempt_at', 'trace_context')}
    on conflict (event_id, webhook_id) do nothing
    returning id, next_attempt_at`
}

/** A delivery with what sending it needs from its webhook. */
export interface DeliveryWork extends Pick<DeliveryRow, 'id' | 'webhook_id' | 'event_type' | 'data' | 'snapshot' | 'machine_version' | 'attempts_count' | 'next_attempt_at' | 'trace_context'> {
  url: string
  enabled: boolean
  secret_encrypted: string
  previous_secret_encrypted: string | null
  previous_secret_expires_at: Date | null
}

/**
 * Locks the deliveries whose timers fired. `skip locked`: a row locked elsewhere is being advanced by
 * another worker right now, which makes this timer stale. A row a newer version of the service wrote
 * is left to that version (docs/architecture.md, "Versioned snapshots").
 */
export async function lockDeliveriesForWork(tx: Tx, ids: string[]): Promise<DeliveryWork[]> {
  if (ids.length === 0) return []
  return tx<DeliveryWork[]>`
    select d.id, d.webhook_id, d.event_type, d.data, d.snapshot, d.machine_version, d.attempts_count, d.next_attempt_at, d.trace_context,
           w.url, w.enabled, w.secret_encrypted, w.previous_secret_encrypted, w.previous_secret_expires_at
    from webhook_deliveries d join webhooks w on w.id = d.webhook_id
    where d.id in ${tx(ids)} and d.machine_version <= ${DELIVERY_MACHINE_VERSION}
    for update of d skip locked`
}

/** Which of these ids no longer exist (deleted with their webhook, or by retention). */
export async function missingDeliveries(tx: Tx, ids: string[]): Promise<string[]> {
  if (ids.length === 0) return []
  const rows = await tx<{ id: string }[]>`select id from webhook_deliveries where id in ${tx(ids)}`
  const present = new Set(rows.map((r) => r.id))
  return ids.filter((id) => !present.has(id))
}

export async function lockDeliveries(tx: Tx, ids: string[]): Promise<Pick<DeliveryRow, 'id' | 'webhook_id' | 'snapshot' | 'machine_version' | 'attempts_count'>[]> {
  if (ids.length === 0) return []
  return tx`select id, webhook_id, snapshot, machine_version, attempts_count from webhook_deliveries where id in ${tx(ids)} for update`
}

export interface DeliveryUpdate {
  id: string
  status: DeliveryStatus
  snapshot: Persisted<DeliveryContext>
  machine_version: number
  attempts_count: number
  /** Appended to the attempts log when set. */
  attempt: AttemptRecord | null
  next_attempt_at: Date | null
}

/** Saves many transitions in one statement (one round trip per batch, not per delivery). */
export async function saveDeliveries(tx: Tx, updates: DeliveryUpdate[]): Promise<void> {
  if (updates.length === 0) return
  const values = updates.map((u) => [
    u.id,
    u.status,
    JSON.stringify(u.snapshot),
    u.machine_version,
    u.attempts_count,
    u.attempt ? JSON.stringify(u.attempt) : null,
    u.next_attempt_at ? u.next_attempt_at.toISOString() : null,
  ])
  await tx`
    update webhook_deliveries d set
      status = v.status,
      snapshot = v.snapshot::jsonb,
      machine_version = v.machine_version::int,
      attempts_count = v.attempts_count::int,
      attempts = case when v.attempt is null then d.attempts else d.attempts || jsonb_build_array(v.attempt::jsonb) end,
      next_attempt_at = v.next_attempt_at::timestamptz,
      updated_at = now()
    from (values ${tx(values as never)}) as v (id, status, snapshot, machine_version, attempts_count, attempt, next_attempt_at)
    where d.id = v.id`
}

export async function getDelivery(sql: Sql, webhookId: string, id: string): Promise<DeliveryRow> {
  const [row] = await sql<DeliveryRow[]>`select * from webhook_deliveries where id = ${id} and webhook_id = ${webhookId}`
  if (!row) throw notFound('delivery', id)
  return row
}

export async function lockDelivery(tx: Tx, webhookId: string, id: string): Promise<DeliveryRow> {
  const [row] = await tx<DeliveryRow[]>`select * from webhook_deliveries where id = ${id} and webhook_id = ${webhookId} for update`
  if (!row) throw notFound('delivery', id)
  return row
}

export async function listDeliveries(sql: Sql, webhookId: string, q: ListQuery): Promise<DeliveryRow[]> {
  const c = listClauses(sql, q)
  return sql<DeliveryRow[]>`
    select * from webhook_deliveries where webhook_id = ${webhookId} ${c.and}
    order by ${c.orderBy} limit ${c.limit}`
}

/** Every delivery that still needs a worker, with when: the source the Redis timers are rebuilt from. */
export async function listDueDeliveries(sql: Sql, opts: { overdueBefore?: Date; limit: number; afterId?: string }): Promise<{ id: string; next_attempt_at: Date }[]> {
  return sql`
    select id, next_attempt_at from webhook_deliveries
    where next_attempt_at is not null
      ${opts.overdueBefore ? sql`and next_attempt_at < ${opts.overdueBefore}` : sql``}
      ${opts.afterId ? sql`and id > ${opts.afterId}` : sql``}
    order by id limit ${opts.limit}`
}

/**
 * Retention (7 days: docs/webhooks.md, "How it runs"): settled deliveries created before `before`. Ids are
 * time-ordered, so the primary key finds them without an index of their own.
 */
export async function deleteSettledDeliveries(sql: Sql, before: Date, limit: number): Promise<number> {
  const rows = await sql`
    delete from webhook_deliveries where id in (
      select id from webhook_deliveries where id < ${idFloor('dlv', before.getTime())} and next_attempt_at is null limit ${limit})
    returning id`
  return rows.length
}
