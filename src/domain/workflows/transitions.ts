import type { Pool, Tx } from '../../store/db'
import { emit } from '../../store/events'
import { advance } from '../../machines/runner'
import { runMachine, type RunContext, type RunEvent } from '../../machines/workflow-run.machine'
import * as runs from '../../store/runs'
import type { RedisPort } from '../../store/redis'

/** What a run's stream shows (spec 4.3): node_start, node_end, message, usage, done. */
export interface LogEvent {
  type: 'node_start' | 'node_end' | 'message' | 'usage' | 'done'
  data: Record<string, unknown>
}

export const runChannel = (runId: string) => `run-events:${runId}`

export class RunNotRunning extends Error {
  override name = 'RunNotRunning'
}

/**
 * One transition = one transaction (STYLE habit 7): lock the run, apply the machine events, save the
 * snapshot, append the log events, and when the run ends write its outcome and the outbox event.
 * `owner`: the worker's lease must still be held (a taken-over run is not the old worker's to change).
 * After commit the new sequence number is published so streams in any process read on.
 */
export async function transition(
  d: { sql: Pool; redis: RedisPort },
  runId: string,
  events: RunEvent[],
  log: LogEvent[],
  opts: { owner?: string; addUsage?: runs.RunUsage } = {},
): Promise<runs.RunRow> {
  const row = await d.sql.begin(async (tx) => {
    const run = await runs.lockRun(tx, runId)
    if (run.status !== 'running') throw new RunNotRunning(`run ${runId} is ${run.status}`)
    if (opts.owner && run.lease_owner !== opts.owner) throw new RunNotRunning(`run ${runId} was taken over by another worker`)
    let persisted = run.snapshot
    for (const e of events) {
      const step = advance(runMachine, persisted, e, { memo: false })
      if (!step) throw new RunNotRunning(`run ${runId} does not accept ${e.type} in ${persisted.value}`)
      persisted = step.persisted as typeof persisted
    }
    const usage = opts.addUsage ? addUsage(run.usage, opts.addUsage) : run.usage
    const status = persisted.value as runs.RunStatus
    const finished = status !== 'running'
    const ctx = persisted.context as RunContext
    const all = [...log]
    if (finished) all.push(...finishLog(status, ctx, usage))
    const saved = await runs.saveRun(tx, runId, {
      status,
      snapshot: persisted,
      usage,
      ...(finished ? { outputs: ctx.outputs, error: ctx.error, finished: true } : {}),
    })
    await runs.appendRunEvents(tx, runId, all)
    if (finished) await announce(tx, saved)
    return saved
  })
  await d.redis.publish(runChannel(runId), String(row.next_seq - 1)).catch(() => {})
  return row
}

function addUsage(a: runs.RunUsage, b: runs.RunUsage): runs.RunUsage {
  return { tokens_in: a.tokens_in + b.tokens_in, tokens_out: a.tokens_out + b.tokens_out, credits: Math.round((a.credits + b.credits) * 1e6) / 1e6 }
}

function finishLog(status: runs.RunStatus, ctx: RunContext, usage: runs.RunUsage): LogEvent[] {
  const done: Record<string, unknown> = { status, outputs: ctx.outputs ?? {} }
  if (ctx.error) done.error = ctx.error
  return [{ type: 'usage', data: { ...usage } }, { type: 'done', data: done }]
}

/** CONTRACT 9's payloads of workflow.run.completed | failed | cancelled, through the outbox. */
async function announce(tx: Tx, run: runs.RunRow) {
  const base = { workflow_id: run.workflow_id, run_id: run.id, status: run.status, duration_ms: run.duration_ms ?? 0 }
  if (run.status === 'completed') await emit(tx, run.workspace_id, 'workflow.run.completed', { ...base, outputs: run.outputs ?? {} })
  else if (run.status === 'failed') await emit(tx, run.workspace_id, 'workflow.run.failed', { ...base, error: run.error })
  else await emit(tx, run.workspace_id, 'workflow.run.cancelled', base)
}
