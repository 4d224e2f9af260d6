import type { Sql } from '../../store/db'
import { advanceMany } from '../../machines/runner'
import { runMachine, type RunContext, type RunEvent } from '../../machines/workflow-run.machine'
import * as runs from '../../store/runs'
import type { RedisPort } from '../../store/redis'

/** What a run's stream shows (docs/workflows.md, "Runs"): node_start, node_end, message, usage, done. */
export interface LogEvent {
  type: 'node_start' | 'node_end' | 'message' | 'usage' | 'done'
  data: Record<string, unknown>
}

type Snapshot = runs.RunRow['snapshot']

export const runChannel = (runId: string) => `run-events:${runId}`

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

/**
 * The run machine applied to `events` in memory, then to what `more` adds given the context they
 * leave (the nodes they make ready); the same snapshot back when nothing was applied. The machine
 * refusing an event (a result after the run ended) is RunNotRunning.
 */
export function applyEvents(snapshot: Snapshot, events: RunEvent[], more?: (context: RunContext, state: string) => RunEvent[]): Snapshot {
  if (events.length === 0 && !more) return snapshot
  let added = 0
  const step = advanceMany(runMachine, snapshot, events, more && ((context, state) => {
    const list = more(context, state)
    added = list.length
    return list
  }))
  if (!step) throw new RunNotRunning(`the run does not accept ${events.map((e) => e.type).join(', ')} in ${snapshot.value}`)
  return events.length === 0 && added === 0 ? snapshot : (step.persisted as Snapshot)
}

/**
 * Writes one transition of `run` (the row as last read or written) to `next`, with its log events,
 * in one statement (STYLE habit 7: all or nothing): when the run ends, also its outcome, the `usage`
 * and `done` log events and the outbox event (docs/webhooks.md). Answers null when the run changed since
 * `run` was read: it ended (a cancel), another worker took it over (`owner`), or another transition
 * came first. Publish the answer with `published` once it is committed.
 */
export async function persist(sql: Sql, run: runs.RunRow, next: Snapshot, log: LogEvent[], opts: { owner?: string; addUsage?: runs.RunUsage } = {}): Promise<runs.RunRow | null> {
  const usage = opts.addUsage ? addUsage(run.usage, opts.addUsage) : run.usage
  const status = next.value as runs.RunStatus
  const ctx = next.context as RunContext
  const guard = { id: run.id, next_seq: run.next_seq, owner: opts.owner }
  const snapshot = next === run.snapshot ? undefined : next
  if (status === 'running') return runs.writeTransition(sql, guard, { status, snapshot, usage }, log)
  const done: Record<string, unknown> = { status, outputs: ctx.outputs ?? {} }
  if (ctx.error) done.error = ctx.error
  const all = [...log, { type: 'usage', data: { ...usage } }, { type: 'done', data: done }]
  return runs.writeTransition(sql, guard, { status, snapshot, usage, finished: { outputs: ctx.outputs, error: ctx.error } }, all, announcement(run, status, ctx))
}

/** After commit: streams and waiters in any process read on. */
export async function published(redis: RedisPort, row: runs.RunRow): Promise<void> {
  await redis.publish(runChannel(row.id), `${row.next_seq - 1} ${row.status}`).catch(() => {})
}

function addUsage(a: runs.RunUsage, b: runs.RunUsage): runs.RunUsage {
  return { tokens_in: a.tokens_in + b.tokens_in, tokens_out: a.tokens_out + b.tokens_out, credits: Math.round((a.credits + b.credits) * 1e6) / 1e6 }
}

/** The webhook payloads of workflow.run.completed | failed | cancelled (the store adds `duration_ms`). */
function announcement(run: runs.RunRow, status: runs.RunStatus, ctx: RunContext): { type: string; data: Record<string, unknown> } {
  const base = { workflow_id: run.workflow_id, run_id: run.id, status }
  if (status === 'completed') return { type: 'workflow.run.completed', data: { ...base, outputs: ctx.outputs ?? {} } }
  if (status === 'failed') return { type: 'workflow.run.failed', data: { ...base, error: ctx.error } }
  return { type: 'workflow.run.cancelled', data: base }
}
