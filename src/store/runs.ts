import { notFound } from '../lib/errors'
import type { ListQuery } from '../lib/lists'
import type { Persisted } from '../machines/runner'
import type { RunContext } from '../machines/workflow-run.machine'
import type { Sql, Tx } from './db'
import { listClauses } from './lists'

export type RunStatus = 'running' | 'completed' | 'failed' | 'cancelled'

export interface RunUsage {
  tokens_in: number
  tokens_out: number
  credits: number
}

export interface RunRow {
  id: string
  workflow_id: string
  workflow_version: number
  workspace_id: string
  user_id: string | null
  status: RunStatus
  inputs: Record<string, unknown>
  outputs: Record<string, unknown> | null
  error: { code: string; message: string; node: string | null } | null
  usage: RunUsage
  snapshot: Persisted<RunContext>
  machine_version: number
  lease_owner: string | null
  lease_until: Date | null
  wake_at: Date | null
  next_seq: number
  request_id: string | null
  created_at: Date
  updated_at: Date
  finished_at: Date | null
  duration_ms: number | null
}

export interface RunEventRow {
  seq: number
  type: string
  data: Record<string, unknown>
  created_at: Date
}

export async function insertRun(
  tx: Tx,
  r: Pick<RunRow, 'id' | 'workflow_id' | 'workflow_version' | 'workspace_id' | 'user_id' | 'inputs' | 'snapshot' | 'machine_version' | 'request_id'>,
): Promise<RunRow> {
  const [row] = await tx<RunRow[]>`
    insert into runs (id, workflow_id, workflow_version, workspace_id, user_id, status, inputs, snapshot, machine_version, request_id)
    values (${r.id}, ${r.workflow_id}, ${r.workflow_version}, ${r.workspace_id}, ${r.user_id}, 'running',
            ${tx.json(r.inputs as never)}, ${tx.json(r.snapshot as never)}, ${r.machine_version}, ${r.request_id})
    returning *`
  return row!
}

export async function findRun(sql: Sql, id: string): Promise<RunRow | null> {
  const [row] = await sql<RunRow[]>`select * from runs where id = ${id}`
  return row ?? null
}

export async function lockRun(tx: Tx, id: string): Promise<RunRow> {
  const [row] = await tx<RunRow[]>`select * from runs where id = ${id} for update`
  if (!row) throw notFound('run', id)
  return row
}

/**
 * Claims up to `limit` running runs whose lease is free or expired and that are not parked on a wait
 * in the future. `skip locked`: workers never wait on each other's claims.
 */
export async function claimRuns(tx: Tx, owner: string, leaseMs: number, limit: number): Promise<string[]> {
  const rows = await tx<{ id: string }[]>`
    select id from runs
    where status = 'running' and (lease_until is null or lease_until < now()) and (wake_at is null or wake_at <= now())
    order by created_at limit ${limit} for update skip locked`
  if (rows.length === 0) return []
  const ids = rows.map((r) => r.id)
  await tx`update runs set lease_owner = ${owner}, lease_until = now() + ${leaseMs}::int * interval '1 millisecond' where id in ${tx(ids)}`
  return ids
}

/** Extends the leases this worker holds; returns the ids it still holds (others were taken over). */
export async function heartbeat(sql: Sql, owner: string, ids: string[], leaseMs: number): Promise<string[]> {
  if (ids.length === 0) return []
  const rows = await sql<{ id: string }[]>`
    update runs set lease_until = now() + ${leaseMs}::int * interval '1 millisecond'
    where id in ${sql(ids)} and lease_owner = ${owner} and status = 'running'
    returning id`
  return rows.map((r) => r.id)
}

export async function releaseRun(tx: Tx | Sql, id: string, owner: string, wakeAt: Date | null): Promise<void> {
  await tx`update runs set lease_owner = null, lease_until = null, wake_at = ${wakeAt} where id = ${id} and lease_owner = ${owner}`
}

/** Every running run this worker holds, released (graceful shutdown). */
export async function releaseRunsOf(sql: Sql, owner: string): Promise<void> {
  await sql`update runs set lease_owner = null, lease_until = null where lease_owner = ${owner} and status = 'running'`
}

export interface RunUpdate {
  status: RunStatus
  snapshot: Persisted<RunContext>
  outputs?: Record<string, unknown> | null
  error?: RunRow['error']
  usage?: RunUsage
  finished?: boolean
}

export async function saveRun(tx: Tx, id: string, u: RunUpdate): Promise<RunRow> {
  const [row] = await tx<RunRow[]>`
    update runs set
      status = ${u.status},
      snapshot = ${tx.json(u.snapshot as never)},
      outputs = ${u.outputs === undefined ? tx`outputs` : tx.json(u.outputs as never)},
      error = ${u.error === undefined ? tx`error` : tx.json(u.error as never)},
      usage = ${u.usage === undefined ? tx`usage` : tx.json(u.usage as never)},
      finished_at = ${u.finished ? tx`now()` : tx`finished_at`},
      duration_ms = ${u.finished ? tx`(extract(epoch from (now() - created_at)) * 1000)::int` : tx`duration_ms`},
      lease_owner = ${u.finished ? null : tx`lease_owner`},
      lease_until = ${u.finished ? null : tx`lease_until`},
      updated_at = now()
    where id = ${id}
    returning *`
  return row!
}

/** Appends events to the run's log with consecutive sequence numbers (the caller holds the row lock). */
export async function appendRunEvents(tx: Tx, runId: string, events: { type: string; data: Record<string, unknown> }[]): Promise<number> {
  if (events.length === 0) return 0
  const [row] = await tx<{ next_seq: number }[]>`
    update runs set next_seq = next_seq + ${events.length} where id = ${runId} returning next_seq`
  const first = row!.next_seq - events.length
  const values = events.map((e, i) => ({ run_id: runId, seq: first + i, type: e.type, data: tx.json(e.data as never) }))
  await tx`insert into run_events ${tx(values, 'run_id', 'seq', 'type', 'data')}`
  return row!.next_seq - 1
}

export async function listRunEvents(sql: Sql, runId: string, afterSeq: number, limit = 1000): Promise<RunEventRow[]> {
  return sql<RunEventRow[]>`
    select seq, type, data, created_at from run_events where run_id = ${runId} and seq > ${afterSeq} order by seq limit ${limit}`
}

export async function listRuns(sql: Sql, workflowId: string, q: ListQuery): Promise<RunRow[]> {
  const c = listClauses(sql, q)
  return sql<RunRow[]>`select * from runs where workflow_id = ${workflowId} ${c.and} order by ${c.orderBy} limit ${c.limit}`
}
