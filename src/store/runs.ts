import { notFound } from '../lib/errors'
import { newId } from '../lib/ids'
import type { Usage } from '../lib/usage'
import type { ListQuery } from '../lib/lists'
import type { Persisted } from '../machines/runner'
import { RUN_MACHINE_VERSION, type RunContext } from '../machines/workflow-run.machine'
import type { Sql, Tx } from './db'
import { jsonb } from './db'
import { insertKeyed, type WriteKey } from './idempotent-writes'
import type { LeaseTable } from './leases'
import { writeRowTransition } from './transitions'
import { inWorkspaces, listClauses, type WorkspaceScope } from './lists'
import { traceJson, type TraceCarrier } from './trace-context'

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
  /** The trace of the request (or parent node) that started it (docs/observability.md): the run's spans are its children. */
  trace_context: TraceCarrier | null
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

/** A run to insert: what it runs, for whom, from which snapshot (src/domain/workflows/new-run.ts builds one). */
export type NewRun = Pick<RunRow, 'id' | 'workflow_id' | 'workflow_version' | 'workspace_id' | 'user_id' | 'inputs' | 'snapshot' | 'machine_version' | 'request_id'>

/** A child run to insert: a new run and where in its parent it was started. */
export type NewChildRun = NewRun & Pick<RunRow, 'parent_run_id' | 'parent_node' | 'item_index' | 'depth'>

/** The trigger's one statement (autocommitted: nothing else is written with it but the record of its Idempotency-Key). */
export async function insertRun(
  sql: Sql,
  r: NewRun,
  key?: WriteKey,
): Promise<RunRow> {
  const [row] = await insertKeyed(sql, key, 'run', sql<RunRow[]>`
    insert into runs (id, workflow_id, workflow_version, workspace_id, user_id, status, inputs, snapshot, machine_version, request_id, trace_context)
    values (${r.id}, ${r.workflow_id}, ${r.workflow_version}, ${r.workspace_id}, ${r.user_id}, 'running',
            ${jsonb(sql, r.inputs)}, ${jsonb(sql, r.snapshot)}, ${r.machine_version}, ${r.request_id}, ${traceJson(sql)})
    returning *`)
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
 * are not parked (`wake_at` set: on a wait, a retry's back-off held elsewhere, or a person's input).
 * `wake_at is null` as a literal condition: the claim's partial index holds only such runs, so the
 * runs parked, however many, cost the claim nothing; `unparkDue` clears `wake_at` once it passes.
 */
export const runLeases: LeaseTable = {
  table: 'runs',
  states: ['running'],
  version: RUN_MACHINE_VERSION,
  claimable: (sql) => sql`and wake_at is null`,
  // A parent whose children run waits on them: it takes no place in its workspace's share.
  working: (sql) => sql`and not exists (select 1 from runs c where c.parent_run_id = runs.id and c.status = 'running')`,
}

/** Parked runs whose time has come (all, or those of `ids`) made claimable again; answers how many. */
export async function unparkDue(sql: Sql, ids?: string[]): Promise<number> {
  const rows = await sql`
    update runs set wake_at = null
    where status = 'running' and wake_at is not null and wake_at <= now() ${ids ? sql`and id in ${sql(ids)}` : sql``}
    returning id`
  return rows.length
}

/** A run that waits on nothing the clock brings (only a person's input): parked until it is given. */
export const NEVER = new Date('9999-12-31T00:00:00.000Z')

/**
 * A run parked on its waits: given back, not claimable before `wakeAt`. Only if it is unchanged
 * since `nextSeq` was read: false when something else wrote it meanwhile (a person's input), and the
 * worker reads it again instead of parking it past what it now can do.
 */
export async function parkRun(sql: Tx | Sql, id: string, owner: string, nextSeq: number, wakeAt: Date): Promise<boolean> {
  const rows = await sql`
    update runs set lease_owner = null, lease_until = null, wake_at = ${wakeAt}
    where id = ${id} and lease_owner = ${owner} and next_seq = ${nextSeq} and status = 'running'
    returning id`
  return rows.length === 1
}

/**
 * A new run started by a node of `parent_run_id`; the one already started for that node and item when
 * there is one; null when the parent is no longer running and had not started it. The parent's row
 * is read `for share` in the same statement: a cancel holding it (`lockRunningTree`) makes this wait
 * and then find the parent cancelled, and a cancel that comes second waits for this child to be
 * committed and cancels it with the others. So no child is created once a cancel has committed.
 */
export async function insertChildRun(
  sql: Sql,
  r: NewChildRun,
): Promise<RunRow | null> {
  const [row] = await sql<RunRow[]>`
    with parent as (select id from runs where id = ${r.parent_run_id} and status = 'running' for share)
    insert into runs (id, workflow_id, workflow_version, workspace_id, user_id, status, inputs, snapshot, machine_version, request_id,
                      parent_run_id, parent_node, item_index, depth, trace_context)
    select ${r.id}::text, ${r.workflow_id}::text, ${r.workflow_version}::int, ${r.workspace_id}::text, ${r.user_id}::text, 'running',
           ${jsonb(sql, r.inputs)}::jsonb, ${jsonb(sql, r.snapshot)}::jsonb, ${r.machine_version}::int, ${r.request_id}::text,
           parent.id, ${r.parent_node}::text, ${r.item_index}::int, ${r.depth}::int, ${traceJson(sql)}::jsonb
    from parent
    on conflict (parent_run_id, parent_node, coalesce(item_index, -1)) where parent_run_id is not null do nothing
    returning *`
  if (row) return row
  const [existing] = await sql<RunRow[]>`
    select * from runs where parent_run_id = ${r.parent_run_id} and parent_node = ${r.parent_node} and coalesce(item_index, -1) = ${r.item_index ?? -1}`
  return existing ?? null
}

/** Child runs of a workspace running and not parked (claimable or held): what CHILD_RUNS_PER_WORKSPACE bounds. */
export async function countRunningChildren(sql: Sql, workspaceId: string): Promise<number> {
  const [row] = await sql<{ n: number }[]>`
    select count(*)::int as n from runs where workspace_id = ${workspaceId} and parent_run_id is not null and status = 'running' and wake_at is null`
  return row!.n
}

/** What a parent waits for of its children: how each ended, or that it still runs. */
export type ChildRow = Pick<RunRow, 'id' | 'item_index' | 'status' | 'outputs' | 'error' | 'usage'>

/** The children a node of `parentId` started (all of them, or those of `ids`). */
export function childRuns(sql: Sql, parentId: string, node: string, ids?: string[]): Promise<ChildRow[]> {
  return sql<ChildRow[]>`
    select id, item_index, status, outputs, error, usage from runs
    where parent_run_id = ${parentId} and parent_node = ${node} ${ids ? sql`and id in ${sql(ids)}` : sql``}`
}

/**
 * The running runs among `ids` and below them (children, theirs, … through runs that ended too),
 * locked for update in id order, so that two cancels of overlapping trees never deadlock. While the
 * caller's transaction lasts none of them starts a child (`insertChildRun` shares the parent's lock)
 * and no worker writes them. A child committed while this waited for a lock is not among them: call
 * again until the set stops growing (docs/workflows.md, "Cancelling a run").
 */
export function lockRunningTree(tx: Sql, ids: string[]): Promise<RunRow[]> {
  return tx<RunRow[]>`
    with recursive d (id) as (
      select id from runs where id in ${tx(ids)}
      union all
      select r.id from runs r join d on r.parent_run_id = d.id)
    select * from runs where id in (select id from d) and status = 'running' order by id for update`
}

/** Those of `ids` that are no longer running (a worker aborts their work). */
export async function endedAmong(sql: Sql, ids: string[]): Promise<string[]> {
  if (ids.length === 0) return []
  const rows = await sql<{ id: string }[]>`select id from runs where id in ${sql(ids)} and status <> 'running'`
  return rows.map((r) => r.id)
}

/** A run's end as computed by its machine, for `writeEnds`. */
export interface RunEnd {
  id: string
  /** The row's `next_seq` as read: the row is written only if it is still so. */
  next_seq: number
  status: Exclude<RunStatus, 'running'>
  snapshot: Persisted<RunContext>
  outputs: Record<string, unknown> | null
  error: RunRow['error']
  log: { type: string; data: Record<string, unknown> }[]
  /** The outbox event the end announces (its `data` gains the run's `duration_ms`). */
  outbox: { type: string; data: Record<string, unknown> } | null
}

/**
 * Many runs' ends in one statement (a run and every run below it cancelled): each row as
 * `writeTransition` writes a run's end (snapshot, outcome, lease let go), its log rows numbered on
 * from its `next_seq`, its outbox event; only rows still running and unchanged since read. Answers
 * the rows as written.
 */
export async function writeEnds(sql: Sql, ends: RunEnd[]): Promise<RunRow[]> {
  if (ends.length === 0) return []
  const rows = ends.map((e) => ({ ...e, event_id: e.outbox ? newId('evt') : null }))
  return sql<RunRow[]>`
    with x as (
      select * from jsonb_to_recordset(${jsonb(sql, rows)})
        as x(id text, next_seq integer, status text, snapshot jsonb, outputs jsonb, error jsonb, log jsonb, outbox jsonb, event_id text)),
    u as (
      update runs r set
        status = x.status, snapshot = x.snapshot, machine_version = ${RUN_MACHINE_VERSION}, waiting = null,
        outputs = x.outputs, error = x.error, finished_at = now(),
        duration_ms = (extract(epoch from (now() - r.created_at)) * 1000)::int,
        lease_owner = null, lease_until = null, next_seq = r.next_seq + jsonb_array_length(x.log), updated_at = now()
      from x where r.id = x.id and r.status = 'running' and r.next_seq = x.next_seq
      returning r.*),
    e as (
      insert into run_events (run_id, seq, type, data)
      select u.id, u.next_seq - jsonb_array_length(x.log) + l.ord::int - 1, l.e->>'type', l.e->'data'
      from u join x on x.id = u.id cross join lateral jsonb_array_elements(x.log) with ordinality as l(e, ord)),
    o as (
      insert into events (id, workspace_id, type, data, created_at, trace_context)
      select x.event_id, u.workspace_id, x.outbox->>'type', (x.outbox->'data') || jsonb_build_object('duration_ms', u.duration_ms),
             clock_timestamp(), ${traceJson(sql)}::jsonb
      from u join x on x.id = u.id where x.outbox is not null)
    select * from u`
}

export interface RunWrite {
  status: RunStatus
  /** What the run waits on now, when that changed (null: nothing any more). */
  waiting?: RunWaiting | null
  /** Claimable at once (a person's input arrived for a parked run). */
  wake?: boolean
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
 * rows with consecutive sequence numbers, and the outbox events it announces (its end, whose `data`
 * gains the run's `duration_ms`; a node starting to wait for input), all or nothing. Applies only if the guard still holds;
 * answers null otherwise (the run ended, was taken over, or moved on since it was read).
 */
export async function writeTransition(
  sql: Sql,
  guard: RunGuard,
  w: RunWrite,
  log: { type: string; data: Record<string, unknown> }[],
  outbox: { type: string; data: Record<string, unknown>; ended?: boolean }[] = [],
): Promise<RunRow | null> {
  const f = w.finished
  const set = sql`
      status = ${w.status},
      waiting = ${w.waiting === undefined ? sql`waiting` : w.waiting === null ? null : jsonb(sql, w.waiting)},
      wake_at = ${w.wake ? null : sql`wake_at`},
      snapshot = ${w.snapshot ? jsonb(sql, w.snapshot) : sql`snapshot`},
      usage = ${jsonb(sql, w.usage)},
      outputs = ${f ? jsonb(sql, f.outputs) : sql`outputs`},
      error = ${f ? jsonb(sql, f.error) : sql`error`},
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
      from u, jsonb_array_elements(${jsonb(sql, log)}) with ordinality as x(e, ord))`
  return writeRowTransition<RunRow>(sql, {
    table: 'runs',
    set,
    guard: guarded,
    version: w.snapshot ? RUN_MACHINE_VERSION : undefined,
    with: events,
    outbox: outbox.map((o) => ({ type: o.type, data: o.data, extra: o.ended ? sql`jsonb_build_object('duration_ms', u.duration_ms)` : undefined })),
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
  rows: NewRun[],
): Promise<void> {
  if (rows.length === 0) return
  await tx`
    insert into runs (id, workflow_id, workflow_version, workspace_id, user_id, status, inputs, snapshot, machine_version, request_id)
    select id, workflow_id, workflow_version, workspace_id, user_id, 'running', inputs, snapshot, machine_version, request_id
    from jsonb_to_recordset(${jsonb(tx, rows)}) as r(id text, workflow_id text, workflow_version integer, workspace_id text,
      user_id text, inputs jsonb, snapshot jsonb, machine_version integer, request_id text)`
}
