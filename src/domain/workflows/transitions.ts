import type { Sql } from '../../store/db'
import { runDefinition, type RunContext, type RunEvent } from '../../machines/workflow-run.machine'
import { commitTransition, type MachineIO } from '../machines'
import { addUsage } from '../../lib/usage'
import * as runs from '../../store/runs'
import type { RedisPort } from '../../store/redis'

/** What a run's stream shows (docs/workflows.md, "Runs"): node_start, node_end, message, usage, done. */
export interface LogEvent {
  type: 'node_start' | 'node_end' | 'message' | 'usage' | 'done'
  data: Record<string, unknown>
}

export const runChannel = (runId: string) => `run-events:${runId}`

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
}

/**
 * The run machine's I/O (src/domain/machines.ts): one statement writes the row, its log events and,
 * when the run ends, its outcome, the `usage` and `done` log events and the outbox event its end
 * announces (docs/webhooks.md). A transition that changes nothing and logs nothing writes nothing.
 */
export const runIO: MachineIO<runs.RunRow, RunContext, RunEvent, RunExtra> = {
  definition: runDefinition,
  refused: (run, events) => new RunNotRunning(`the run does not accept ${events.map((e) => (e as RunEvent).type).join(', ')} in ${run.snapshot.value}`),
  write(sql, run, next, announce, { log, owner, addUsage: added }) {
    if (next === run.snapshot && log.length === 0 && !added) return Promise.resolve(run)
    const usage = added ? addUsage(run.usage, added) : run.usage
    const status = next.value as runs.RunStatus
    const ctx = next.context
    const guard = { id: run.id, next_seq: run.next_seq, owner }
    const snapshot = next === run.snapshot ? undefined : next
    if (status === 'running') return runs.writeTransition(sql, guard, { status, snapshot, usage }, log)
    const done: Record<string, unknown> = { status, outputs: ctx.outputs ?? {} }
    if (ctx.error) done.error = ctx.error
    const all = [...log, { type: 'usage', data: { ...usage } }, { type: 'done', data: done }]
    const outbox = announce ? { type: announce, data: announcement(run, status, ctx) } : undefined
    return runs.writeTransition(sql, guard, { status, snapshot, usage, finished: { outputs: ctx.outputs, error: ctx.error } }, all, outbox)
  },
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

/** After commit: streams and waiters in any process read on. */
export async function published(redis: RedisPort, row: runs.RunRow): Promise<void> {
  await redis.publish(runChannel(row.id), `${row.next_seq - 1} ${row.status}`).catch(() => {})
}

/** The webhook payload of the run's end (the store adds `duration_ms`). */
function announcement(run: runs.RunRow, status: runs.RunStatus, ctx: RunContext): Record<string, unknown> {
  const base = { workflow_id: run.workflow_id, run_id: run.id, status }
  if (status === 'completed') return { ...base, outputs: ctx.outputs ?? {} }
  if (status === 'failed') return { ...base, error: ctx.error }
  return base
}
