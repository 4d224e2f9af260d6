import { notFound } from '../lib/errors'
import type { Usage } from '../lib/usage'
import type { ListQuery } from '../lib/lists'
import type { Persisted } from '../machines/runner'
import { RUN_MACHINE_VERSION, type RunContext } from '../machines/workflow-run.machine'
import type { Sql, Tx } from './db'
import { release, type LeaseTable } from './leases'
import { writeRowTransition } from './transitions'
import { inWorkspaces, listClauses, type WorkspaceScope } from './lists'

export type RunStatus = 'running' | 'completed' | 'failed' | 'cancelled'

/** A run's usage: tokens and credits (src/lib/usage.ts). */
export type RunUsage = Usage

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
  /** The run whose sub_workflow or iteration node started this one (docs/workflows.md). */
  parent_run_id: string | null
  parent_node: string | null
  item_index: number | null
  depth: number
  /** What a run parked on a human_input node waits on. */
  waiting: RunWaiting | null
}

export interface RunWaiting {
  node: string
  prompt: string
  schema: Record<string, unknown> | null
  since: string
  expires_at: string | null
}

export interface RunEventRow {
  seq: number
  type: string
  data: Record<string, unknown>
  created_at: Date
}

/** The trigger's one statement (autocommitted: nothing else is written with it). */
export async function insertRun(
  sql: Sql,
  r: Pick<RunRow, 'id' | 'workflow_id' | 'workflow_version' | 'workspace_id' | 'user_id' | 'inputs' | 'snapshot' | 'machine_version' | 'request_id'>,
): Promise<RunRow> {
  const [row] = await sql<RunRow[]>`
    insert into runs (id, workflow_id, workflow_version, workspace_id, user_id, status, inputs, snapshot, machine_version, request_id)
    values (${r.id}, ${r.workflow_id}, ${r.workflow_version}, ${r.workspace_id}, ${r.user_id}, 'running',
            ${sql.json(r.inputs as never)}, ${sql.json(r.snapshot as never)}, ${r.machine_version}, ${r.request_id})
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
 * Runs a worker holds (src/store/leases.ts): `running` ones whose lease is free or expired and that
 * are not parked on a wait in the future.
 */
export const runLeases: LeaseTable = {
  table: 'runs',
  states: ['running'],
  version: RUN_MACHINE_VERSION,
  claimable: (sql) => sql`and (wake_at is null or wake_at <= now())`,
}

/** A run parked on its waits: given back, not claimable before `wakeAt`. */
export function parkRun(sql: Tx | Sql, id: string, owner: string, wakeAt: Date): Promise<void> {
  return release(sql, runLeases, owner, id, sql`, wake_at = ${wakeAt}`)
}

export interface RunWrite {
  status: RunStatus
  /** Left out when the transition only appends to the log (LLM deltas): the stored one stays. */
  snapshot?: Persisted<RunContext>
  usage: RunUsage
  /** The run ended: outputs, error, finished_at and duration_ms are written and the lease let go. */
  finished?: { outputs: Record<string, unknown> | null; error: RunRow['error'] }
}

/** Which row a transition applies to: still running, unchanged since `next_seq` was read, and (for a worker) its lease. */
export interface RunGuard {
  id: string
  next_seq: number
  owner?: string
}

/**
 * A transition of a run in one statement: the row (snapshot, usage, outcome, `next_seq`), its log
 * rows with consecutive sequence numbers, and when given the outbox event of its end (the event's
 * `data` gains the run's `duration_ms`), all or nothing. Applies only if the guard still holds;
 * answers null otherwise (the run ended, was taken over, or moved on since it was read).
 */
export async function writeTransition(
  sql: Sql,
  guard: RunGuard,
  w: RunWrite,
  log: { type: string; data: Record<string, unknown> }[],
  outbox?: { type: string; data: Record<string, unknown> },
): Promise<RunRow | null> {
  const f = w.finished
  const set = sql`
      status = ${w.status},
      snapshot = ${w.snapshot ? sql.json(w.snapshot as never) : sql`snapshot`},
      usage = ${sql.json(w.usage as never)},
      outputs = ${f ? sql.json(f.outputs as never) : sql`outputs`},
      error = ${f ? sql.json(f.error as never) : sql`error`},
      finished_at = ${f ? sql`now()` : sql`finished_at`},
      duration_ms = ${f ? sql`(extract(epoch from (now() - created_at)) * 1000)::int` : sql`duration_ms`},
      lease_owner = ${f ? null : sql`lease_owner`},
      lease_until = ${f ? null : sql`lease_until`},
      next_seq = next_seq + ${log.length}`
  const guarded = sql`id = ${guard.id} and status = 'running' and next_seq = ${guard.next_seq}
      ${guard.owner === undefined ? sql`` : sql`and lease_owner = ${guard.owner}`}`
  // The log rows, numbered on from the row's `next_seq` as it was before this statement.
  const events = sql`, e as (
      insert into run_events (run_id, seq, type, data)
      select u.id, u.next_seq - ${log.length} + x.ord::int - 1, x.e->>'type', x.e->'data'
      from u, jsonb_array_elements(${sql.json(log as never)}) with ordinality as x(e, ord))`
  return writeRowTransition<RunRow>(sql, {
    table: 'runs',
    set,
    guard: guarded,
    version: w.snapshot ? RUN_MACHINE_VERSION : undefined,
    with: events,
    outbox: outbox && { ...outbox, extra: sql`jsonb_build_object('duration_ms', u.duration_ms)` },
  })
}

export async function listRunEvents(sql: Sql, runId: string, afterSeq: number, limit = 1000): Promise<RunEventRow[]> {
  return sql<RunEventRow[]>`
    select seq, type, data, created_at from run_events where run_id = ${runId} and seq > ${afterSeq} order by seq limit ${limit}`
}

export async function listRuns(sql: Sql, workflowId: string, q: ListQuery): Promise<RunRow[]> {
  const c = listClauses(sql, q)
  return sql<RunRow[]>`select * from runs where workflow_id = ${workflowId} ${c.and} order by ${c.orderBy} limit ${c.limit}`
}

/** Runs of every workflow of the workspaces in scope (GET /v1/runs); served by runs_workspace_idx. */
export async function listRunsIn(sql: Sql, scope: WorkspaceScope, q: ListQuery): Promise<RunRow[]> {
  const c = listClauses(sql, q)
  return sql<RunRow[]>`select * from runs where ${inWorkspaces(sql, scope)} ${c.and} order by ${c.orderBy} limit ${c.limit}`
}

/**
 * Several runs in one statement, inside the caller's transaction: the schedule worker inserts a
 * batch of ticks' runs together with the ticks themselves, so a crash leaves both or neither.
 */
export async function insertRuns(
  tx: Tx,
  rows: Pick<RunRow, 'id' | 'workflow_id' | 'workflow_version' | 'workspace_id' | 'user_id' | 'inputs' | 'snapshot' | 'machine_version' | 'request_id'>[],
): Promise<void> {
  if (rows.length === 0) return
  await tx`
    insert into runs (id, workflow_id, workflow_version, workspace_id, user_id, status, inputs, snapshot, machine_version, request_id)
    select id, workflow_id, workflow_version, workspace_id, user_id, 'running', inputs, snapshot, machine_version, request_id
    from jsonb_to_recordset(${tx.json(rows as never)}) as r(id text, workflow_id text, workflow_version integer, workspace_id text,
      user_id text, inputs jsonb, snapshot jsonb, machine_version integer, request_id text)`
}
