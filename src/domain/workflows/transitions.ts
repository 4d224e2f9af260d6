import type { Sql } from '../../store/db'
import { runDefinition, type NodeProgress, type RunContext, type RunEvent } from '../../machines/workflow-run.machine'
import { commitTransition, transitionOne, type MachineIO } from '../machines'
import { addUsage } from '../../lib/usage'
import * as runs from '../../store/runs'
import type { RedisPort } from '../../store/redis'

/** What a run's stream shows (docs/workflows.md, "Runs"): node_start, node_end, message, usage, done. */
export interface LogEvent {
  type: 'node_start' | 'node_end' | 'message' | 'usage' | 'done'
  data: Record<string, unknown>
}

export const runChannel = (runId: string) => `run-events:${runId}`

/** The durable timers of parked runs (a wait node, a human_input time-out): `run:<run id>`. */
export const RUN_TIMER = 'run'

/** Cancels announced to every process (the run's worker aborts the node in flight). */
export const CANCEL_CHANNEL = 'runs.cancel'

/**
 * What the run channel carries: the last sequence number and the status, so a waiter wakes for the
 * run's end without reading the row at every node.
 */
export function parseRunMessage(message: string): { seq: number; status: string } {
  const [seq, status] = message.split(' ')
  return { seq: Number(seq), status: status ?? 'running' }
}

export class RunNotRunning extends Error {
  override name = 'RunNotRunning'
}

/** What a run's transition writes besides its snapshot: log events, usage to add, and (for a worker) its lease. */
export interface RunExtra {
  log: LogEvent[]
  owner?: string
  addUsage?: runs.RunUsage
  /** A parked run becomes claimable at once (a person's input arrived). */
  wake?: boolean
}

/**
 * The run machine's I/O (src/domain/machines.ts): one statement writes the row, its log events and,
 * when the run ends, its outcome, the `usage` and `done` log events and the outbox event its end
 * announces (docs/webhooks.md). A transition that changes nothing and logs nothing writes nothing.
 */
export const runIO: MachineIO<runs.RunRow, RunContext, RunEvent, RunExtra> = {
  definition: runDefinition,
  refused: (run, events) => new RunNotRunning(`the run does not accept ${events.map((e) => (e as RunEvent).type).join(', ')} in ${run.snapshot.value}`),
  write(sql, run, next, announce, { log, owner, addUsage: added, wake }) {
    if (next === run.snapshot && log.length === 0 && !added && !wake) return Promise.resolve(run)
    const usage = added ? addUsage(run.usage, added) : run.usage
    const status = next.value as runs.RunStatus
    const ctx = next.context
    const guard = { id: run.id, next_seq: run.next_seq, owner }
    const snapshot = next === run.snapshot ? undefined : next
    const waiting = status === 'running' ? waitingOf(ctx) : null
    // Most transitions neither start nor end a wait: compare only when one of the two holds one.
    const changed = (waiting !== null || run.waiting) && JSON.stringify(waiting) !== JSON.stringify(run.waiting ?? null) ? { waiting } : {}
    const asked = snapshot ? inputsAsked(run.snapshot.context, ctx).map((node) => ({ type: 'workflow.run.waiting', data: waitingAnnouncement(run, node, ctx) })) : []
    if (status === 'running') return runs.writeTransition(sql, guard, { status, snapshot, usage, wake, ...changed }, log, asked)
    const done: Record<string, unknown> = { status, outputs: ctx.outputs ?? {} }
    if (ctx.error) done.error = ctx.error
    const all = [...log, { type: 'usage', data: { ...usage } }, { type: 'done', data: done }]
    const outbox = announce ? [{ type: announce, data: announcement(run, status, ctx), ended: true }] : []
    return runs.writeTransition(sql, guard, { status, snapshot, usage, ...changed, finished: { outputs: ctx.outputs, error: ctx.error } }, all, outbox)
  },
}

/**
 * What the run waits on (the run object's `waiting`): the human_input node waiting the longest, or
 * null. Several may wait at once on parallel branches; each takes its input by its node id.
 */
export function waitingOf(ctx: RunContext): runs.RunWaiting | null {
  let first: [string, NodeProgress] | null = null
  for (const entry of Object.entries(ctx.progress)) {
    const p = entry[1]
    if (p.status === 'waiting' && p.input && (!first || (p.started_at ?? '') < (first[1].started_at ?? ''))) first = entry
  }
  if (!first) return null
  const [node, p] = first
  return { node, prompt: p.input!.prompt, schema: p.input!.schema, since: p.started_at!, expires_at: p.until ?? null }
}

/** The nodes that started waiting for input in this transition. */
function inputsAsked(before: RunContext, after: RunContext): string[] {
  return Object.entries(after.progress)
    .filter(([id, p]) => p.status === 'waiting' && p.input && !(before.progress[id]?.status === 'waiting' && before.progress[id]?.input))
    .map(([id]) => id)
}

function waitingAnnouncement(run: runs.RunRow, node: string, ctx: RunContext): Record<string, unknown> {
  const p = ctx.progress[node]!
  return { workflow_id: run.workflow_id, run_id: run.id, node, prompt: p.input!.prompt, expires_at: p.until ?? null }
}

/**
 * One transition of `run` (the row as last read or written): `events`, then what `more` adds given
 * the context they leave (the nodes they make ready), written with `extra` in one statement (all or
 * nothing). Answers the row as written (the same row when nothing changed), or null when the run
 * changed since it was read: it ended (a cancel), another worker took it over, or another transition
 * came first. The machine refusing an event is RunNotRunning. Publish the answer with `published`
 * once it is committed.
 */
export function commitRun(sql: Sql, run: runs.RunRow, events: RunEvent[], extra: RunExtra, more?: (context: RunContext, state: string) => RunEvent[]): Promise<runs.RunRow | null> {
  return commitTransition(sql, runIO, run, events, extra, more)
}

/**
 * Runs ended together by one event (`cancel.requested`: a run and every run below it), each as
 * `commitRun` would end it alone: its snapshot decided by the machine, the `usage` and `done` log
 * events and the outbox event of its end, but all of them in one statement (`runs.writeEnds`).
 * `rows` are locked by the caller's transaction; answers those written. Publish each with `published`
 * once committed.
 */
export function commitRunEnds(sql: Sql, rows: runs.RunRow[], event: RunEvent): Promise<runs.RunRow[]> {
  const ends = rows.map((stored): runs.RunEnd => {
    const { row, next, announce } = transitionOne(runIO, stored, [event])
    const status = next.value as runs.RunStatus
    if (status === 'running') throw new Error(`${event.type} does not end run ${row.id}`)
    const ctx = next.context
    const done: Record<string, unknown> = { status, outputs: ctx.outputs ?? {} }
    if (ctx.error) done.error = ctx.error
    return {
      id: row.id,
      next_seq: row.next_seq,
      status,
      snapshot: next,
      outputs: ctx.outputs,
      error: ctx.error,
      log: [{ type: 'usage', data: { ...row.usage } }, { type: 'done', data: done }],
      outbox: announce ? { type: announce, data: announcement(row, status, ctx) } : null,
    }
  })
  return runs.writeEnds(sql, ends)
}

/** Where a run's children announce their ends (the parent's node waiting for them reads on). */
export const childrenChannel = (parentId: string) => `run-children:${parentId}`

/** After commit: streams and waiters in any process read on; a child's end wakes its parent's node. */
export async function published(redis: RedisPort, row: runs.RunRow): Promise<void> {
  await redis.publish(runChannel(row.id), `${row.next_seq - 1} ${row.status}`).catch(() => {})
  if (row.parent_run_id && row.status !== 'running') await redis.publish(childrenChannel(row.parent_run_id), row.id).catch(() => {})
}

/** The webhook payload of the run's end (the store adds `duration_ms`). */
function announcement(run: runs.RunRow, status: runs.RunStatus, ctx: RunContext): Record<string, unknown> {
  const base = { workflow_id: run.workflow_id, run_id: run.id, status }
  if (status === 'completed') return { ...base, outputs: ctx.outputs ?? {} }
  if (status === 'failed') return { ...base, error: ctx.error }
  return base
}
