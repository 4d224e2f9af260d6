import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { commitRun } from '../../src/domain/workflows/transitions'
import { newId } from '../../src/lib/ids'
import { advance, advanceMany, start, type Persisted } from '../../src/machines/runner'
import { RUN_MACHINE_VERSION, runMachine, type RunContext, type RunEvent } from '../../src/machines/workflow-run.machine'
import type { Database } from '../../src/store/db'
import { claim, endLeftLeases, release } from '../../src/store/leases'
import { findRun, insertRun, parkRun, runLeases, unparkDue, writeTransition, type RunRow } from '../../src/store/runs'
import { insertWorkflow } from '../../src/store/workflows'
import { insertWorkspace } from '../../src/store/workspaces'
import { freshDatabase } from '../helpers/db'
import { waitFor } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The run store's one-statement transitions (src/store/runs.ts writeTransition) on a real database:
 * a write applies only while its guard holds, and then all of it (row, log rows, outbox event) or
 * nothing. And the machine step they carry (advanceMany).
 */

let db: Database
let workspaceId: string
let workflowId: string
const owner = 'test-owner'
const at = '2026-11-22T12:00:00.000Z'

beforeAll(async () => {
  db = await freshDatabase()
  workspaceId = newId('ws')
  await db.sql.begin((tx) => insertWorkspace(tx, { id: workspaceId, name: 'runs', description: '', type: 'team', join_policy: 'open', owner_id: 'alice' }))
  workflowId = newId('wf')
  await db.sql.begin((tx) =>
    insertWorkflow(tx, { id: workflowId, workspace_id: workspaceId, name: 'wf', description: '', graph: { nodes: [], edges: [] }, created_by: 'alice' }),
  )
})
afterAll(() => db?.close())

const claimRuns = (sql: Database['sql'], who: string, leaseMs: number, limit: number) => claim<RunRow>(sql, runLeases, who, leaseMs, limit)
const applyEvents = (snapshot: Persisted<RunContext>, events: RunEvent[]) => advanceMany(runMachine, snapshot, events)!.persisted as Persisted<RunContext>

const initial = () => start(runMachine, undefined as never).persisted as Persisted<RunContext>

async function newRun(): Promise<RunRow> {
  return insertRun(db.sql, {
    id: newId('run'), workflow_id: workflowId, workflow_version: 1, workspace_id: workspaceId, user_id: 'alice',
    inputs: {}, snapshot: initial() as RunRow['snapshot'], machine_version: RUN_MACHINE_VERSION, request_id: null,
  })
}

/** A new run, claimed by `owner` (the only claimable run: the others are finished or leased). */
async function claimedRun(): Promise<RunRow> {
  const run = await newRun()
  const rows = await claimRuns(db.sql, owner, 60_000, 100)
  const mine = rows.find((r) => r.id === run.id)
  expect(mine).toBeDefined()
  return mine!
}

const logOf = async (id: string) => (await db.sql<{ seq: number; type: string; data: any }[]>`select seq, type, data from run_events where run_id = ${id} order by seq`).map((r) => ({ ...r }))
const outboxOf = async (id: string) => (await db.sql<{ type: string; data: any }[]>`select type, data from events where data->>'run_id' = ${id}`).map((r) => ({ ...r }))
const zero = { tokens_in: 0, tokens_out: 0, credits: 0 }
const started = (node: string): RunEvent => ({ type: 'node.started', node, at })

describe('claiming runs (src/store/leases.ts with runLeases)', () => {
  test('answers the claimed rows, leased to the owner; a leased run or one parked until later is not claimed again', async () => {
    const run = await claimedRun()
    expect(run.lease_owner).toBe(owner)
    expect(run.lease_until!.getTime()).toBeGreaterThan(Date.now() + 50_000)
    expect(run.snapshot).toEqual(initial())
    expect((await claimRuns(db.sql, 'other', 60_000, 100)).map((r) => r.id)).not.toContain(run.id)
    expect(await parkRun(db.sql, run.id, owner, run.next_seq + 1, new Date(Date.now() + 60_000))).toBe(false)
    expect(await parkRun(db.sql, run.id, owner, run.next_seq, new Date(Date.now() + 60_000))).toBe(true)
    expect((await claimRuns(db.sql, 'other', 60_000, 100)).map((r) => r.id)).not.toContain(run.id)
    await release(db.sql, runLeases, 'not-the-owner', run.id, db.sql`, wake_at = null`)
    expect((await findRun(db.sql, run.id))!.wake_at).not.toBeNull()
    await db.sql`update runs set wake_at = now() - interval '1 second' where id = ${run.id}`
    // Due, but still parked until unparked (its timer or the sweep): the claim reads only unparked runs.
    expect((await claimRuns(db.sql, 'other', 60_000, 100)).map((r) => r.id)).not.toContain(run.id)
    expect(await unparkDue(db.sql)).toBeGreaterThanOrEqual(1)
    expect((await claimRuns(db.sql, 'other', 60_000, 100)).map((r) => r.id)).toContain(run.id)
  })
})

describe('endLeftLeases (an embedded start after a crash)', () => {
  test('ends the running leases of running runs, so that they are claimable at once; a finished run is left as it is', async () => {
    const held = await claimedRun()
    const done = await claimedRun()
    await db.sql`update runs set status = 'completed' where id = ${done.id}`
    expect((await claimRuns(db.sql, 'restarted', 60_000, 100)).map((r) => r.id)).not.toContain(held.id)
    const [{ n }] = (await db.sql<{ n: number }[]>`select count(*)::int as n from runs where status = 'running' and lease_until > now()`) as unknown as [{ n: number }]
    expect(n).toBeGreaterThanOrEqual(1)
    expect(await endLeftLeases(db.sql, runLeases)).toBe(n)
    // Its owner kept (it names who held it), its lease over: the next claim takes it.
    const row = (await findRun(db.sql, held.id))!
    expect(row.lease_owner).toBe(owner)
    expect(row.lease_until!.getTime()).toBeLessThanOrEqual(Date.now())
    expect((await findRun(db.sql, done.id))!.lease_until!.getTime()).toBeGreaterThan(Date.now() + 50_000)
    expect(await endLeftLeases(db.sql, runLeases)).toBe(0)
    expect((await claimRuns(db.sql, 'restarted', 60_000, 100)).map((r) => r.id)).toContain(held.id)
  })
})

describe('writeTransition', () => {
  test('writes the snapshot and appends the log rows with consecutive sequence numbers', async () => {
    const run = await claimedRun()
    const next = applyEvents(run.snapshot, [started('start')])
    const a = await writeTransition(db.sql, { id: run.id, next_seq: run.next_seq, owner }, { status: 'running', snapshot: next, usage: zero }, [
      { type: 'node_start', data: { node_id: 'start' } },
    ])
    expect(a!.next_seq).toBe(2)
    expect(a!.snapshot).toEqual(next)
    // A log-only write keeps the stored snapshot.
    const b = await writeTransition(db.sql, { id: run.id, next_seq: a!.next_seq, owner }, { status: 'running', usage: { tokens_in: 3, tokens_out: 4, credits: 0.5 } }, [
      { type: 'message', data: { delta: 'a' } },
      { type: 'message', data: { delta: 'b' } },
    ])
    expect(b!.next_seq).toBe(4)
    expect(b!.snapshot).toEqual(next)
    expect(b!.usage).toEqual({ tokens_in: 3, tokens_out: 4, credits: 0.5 })
    expect(await logOf(run.id)).toEqual([
      { seq: 1, type: 'node_start', data: { node_id: 'start' } },
      { seq: 2, type: 'message', data: { delta: 'a' } },
      { seq: 3, type: 'message', data: { delta: 'b' } },
    ])
  })

  test.each([
    ['a stale next_seq (another transition came first)', (r: RunRow) => ({ id: r.id, next_seq: r.next_seq - 1, owner })],
    ['another lease owner (the run was taken over)', (r: RunRow) => ({ id: r.id, next_seq: r.next_seq, owner: 'someone-else' })],
  ])('%s: matches nothing, writes nothing', async (_, guard) => {
    const run = await claimedRun()
    const first = await writeTransition(db.sql, { id: run.id, next_seq: run.next_seq, owner }, { status: 'running', snapshot: applyEvents(run.snapshot, [started('start')]), usage: zero }, [
      { type: 'node_start', data: {} },
    ])
    const done = applyEvents(first!.snapshot, [{ type: 'node.completed', node: 'start', output: {}, durationMs: 1, end: true }])
    const answer = await writeTransition(db.sql, guard(first!), { status: 'completed', snapshot: done, usage: zero, finished: { outputs: {}, error: null } }, [
      { type: 'done', data: {} },
    ], [{ type: 'workflow.run.completed', data: { run_id: run.id }, ended: true }])
    expect(answer).toBeNull()
    const row = await findRun(db.sql, run.id)
    expect({ status: row!.status, next_seq: row!.next_seq, snapshot: row!.snapshot, finished_at: row!.finished_at }).toEqual({
      status: 'running', next_seq: 2, snapshot: first!.snapshot, finished_at: null,
    })
    expect((await logOf(run.id)).map((e) => e.type)).toEqual(['node_start'])
    expect(await outboxOf(run.id)).toEqual([])
  })

  test("the run's end: outcome, lease let go, usage and done logged, one outbox event with duration_ms; then nothing more applies", async () => {
    const run = await claimedRun()
    await db.sql`update runs set created_at = now() - interval '2 seconds' where id = ${run.id}`
    const events: RunEvent[] = [started('start'), { type: 'node.completed', node: 'start', output: { text: 'hi' }, durationMs: 1, end: true }]
    const saved = await commitRun(db.sql, run, events, { log: [{ type: 'node_end', data: { node_id: 'start' } }], owner, addUsage: { tokens_in: 1, tokens_out: 2, credits: 0.25 } })
    expect(saved).toMatchObject({ status: 'completed', outputs: { text: 'hi' }, error: null, lease_owner: null, lease_until: null, next_seq: 4 })
    expect(saved!.finished_at).toBeInstanceOf(Date)
    expect(saved!.duration_ms).toBeGreaterThanOrEqual(2000)
    expect(await logOf(run.id)).toEqual([
      { seq: 1, type: 'node_end', data: { node_id: 'start' } },
      { seq: 2, type: 'usage', data: { tokens_in: 1, tokens_out: 2, credits: 0.25 } },
      { seq: 3, type: 'done', data: { status: 'completed', outputs: { text: 'hi' } } },
    ])
    expect(await outboxOf(run.id)).toEqual([
      { type: 'workflow.run.completed', data: { workflow_id: workflowId, run_id: run.id, status: 'completed', duration_ms: saved!.duration_ms, outputs: { text: 'hi' } } },
    ])
    // A cancel (no owner) of the finished run, even with its current next_seq, matches nothing.
    expect(await writeTransition(db.sql, { id: saved!.id, next_seq: saved!.next_seq }, { status: 'cancelled', usage: zero, finished: { outputs: null, error: null } }, [])).toBeNull()
    expect(await outboxOf(run.id)).toHaveLength(1)
  })

  test('a cancel under the row lock makes a write the worker prepared before it match nothing', async () => {
    const run = await claimedRun()
    const cancelled = await db.sql.begin(async (tx) => {
      const [locked] = await tx<RunRow[]>`select * from runs where id = ${run.id} for update`
      // The worker's guarded write waits for the lock, then sees the cancelled row.
      const racing = commitRun(db.sql, run, [started('start')], { log: [{ type: 'node_start', data: {} }], owner })
      // Server mode: until the worker's write is waiting on the row lock (pg_locks). Embedded, the one
      // connection is the transaction's, so the write queues behind it whatever the order.
      if (process.env.DATABASE_URL) await waitFor(async () => (await tx`select 1 from pg_locks where not granted and locktype in ('tuple', 'transactionid')`).length > 0, { what: 'the worker\'s write waiting on the row lock' })
      const saved = await commitRun(tx, locked!, [{ type: 'cancel.requested' }], { log: [] })
      return { saved, racing }
    })
    expect(cancelled.saved!.status).toBe('cancelled')
    expect(await cancelled.racing).toBeNull()
    expect((await logOf(run.id)).map((e) => e.type)).toEqual(['usage', 'done'])
    expect((await outboxOf(run.id)).map((e) => [e.type, e.data.status])).toEqual([['workflow.run.cancelled', 'cancelled']])
  })
})

describe('advanceMany', () => {
  test('the same snapshot as advancing event by event; `more` sees the context those events left', () => {
    const events: RunEvent[] = [started('start'), { type: 'node.completed', node: 'start', output: { a: 1 }, durationMs: 1, end: false }]
    let oneByOne = initial()
    for (const e of events) oneByOne = advance(runMachine, oneByOne, e, { memo: false })!.persisted as Persisted<RunContext>
    let seen: unknown = null
    const step = advanceMany(runMachine, initial(), events, (context, state) => {
      seen = { state, start: context.progress.start?.status }
      return [started('next')]
    })
    expect(seen).toEqual({ state: 'running', start: 'completed' })
    const expected = advance(runMachine, oneByOne, started('next'), { memo: false })!.persisted
    expect(step!.persisted).toEqual(expected)
    expect(Object.isFrozen(step!.persisted.context)).toBe(true)
  })

  test('null when the state refuses an event, including one `more` adds', () => {
    const ended = advanceMany(runMachine, initial(), [{ type: 'cancel.requested' }])!.persisted as Persisted<RunContext>
    expect(ended.value).toBe('cancelled')
    expect(advanceMany(runMachine, ended, [started('start')])).toBeNull()
    expect(advanceMany(runMachine, initial(), [{ type: 'cancel.requested' }], () => [started('late')])).toBeNull()
  })
})
