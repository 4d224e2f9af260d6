import type { Deps } from '../../deps'
import { AppError, invalid } from '../../lib/errors'
import type { ListQuery } from '../../lib/lists'
import { runDefinition, type RunContext } from '../../machines/workflow-run.machine'
import type { WriteKey } from '../../store/idempotent-writes'
import * as runs from '../../store/runs'
import { onlyUserOf, type Caller } from '../access'
import { listScope, loadOwned, loadOwnedWithRole } from '../ownership'
import { storedGraph, validateInputs } from './graph'
import { loadWorkflow } from './service'
import { findWorkflow, getWorkflowVersion, type WorkflowRow } from '../../store/workflows'
import type { Graph } from './types'
import { commitRun, parseRunMessage, published, RUN_TIMER, runChannel } from './transitions'
import { cancelTrees } from './cancel'
import { newRun } from './new-run'
import { schemaErrors } from '../../lib/json-schema'
import { loadRow } from '../../machines/definition'

/** Starts a run of the workflow's current version (role `use`): validated inputs, snapshot `running`. */
export async function createRun(
  deps: Deps,
  caller: Caller,
  workflowId: string,
  body: { inputs?: unknown; user_id?: string },
  requestId: string,
  key?: WriteKey,
): Promise<runs.RunRow> {
  const { row: wf, role } = await loadOwnedWithRole(deps, caller, 'workflow', workflowId, 'use', findWorkflow)
  const only = onlyUserOf(caller, role)
  if (only !== null && body.user_id !== undefined && body.user_id !== only) {
    throw new AppError('forbidden', `below the developer role a key triggers runs as its own user_id (${only}), not ${body.user_id}`, { param: 'user_id' })
  }
  return startRun(deps, wf, { inputs: body.inputs, userId: body.user_id ?? caller.userId, requestId }, key)
}

/**
 * Starts a run of `wf`'s current version with no caller to check (a trigger, a parent run): the
 * inputs validated against its graph (400 naming the input), the row inserted, a worker nudged.
 */
export async function startRun(
  deps: Deps,
  wf: WorkflowRow,
  opts: { inputs: unknown; userId: string | null; requestId: string | null },
  key?: WriteKey,
): Promise<runs.RunRow> {
  const inputs = validateInputs(wf.graph, opts.inputs ?? {})
  const row = await runs.insertRun(deps.db.sql, newRun({
    workflow_id: wf.id,
    workflow_version: wf.version,
    workspace_id: wf.workspace_id,
    user_id: opts.userId,
    inputs,
    request_id: opts.requestId,
  }), key)
  deps.wake.nudge('runs')
  return row
}

/** A run the caller may see (role `read` in its workspace); another workspace's run is 404. */
export function loadRun(deps: Deps, caller: Caller, runId: string, action: 'read' | 'use' = 'read'): Promise<runs.RunRow> {
  return loadOwned(deps, caller, 'run', runId, action, runs.findRun)
}

export async function listRuns(deps: Deps, caller: Caller, workflowId: string, q: ListQuery) {
  await loadWorkflow(deps, caller, workflowId, 'read')
  return runs.listRuns(deps.db.sql, workflowId, q)
}

/** Runs of every workflow the caller can read (GET /v1/runs); `workspaceId` narrows them to one workspace. */
export async function listAllRuns(deps: Deps, caller: Caller, workspaceId: string | undefined, q: ListQuery) {
  return runs.listRunsIn(deps.db.sql, await listScope(deps, caller, workspaceId), q)
}

/**
 * Only a running run can be cancelled (docs/workflows.md, "Cancelling a run"): the run and every run
 * below it, at any depth, are cancelled in one transaction, and their workers abort the nodes in
 * flight (one message on the cancel channel). The rows are locked for the transition, so a worker's
 * next guarded write waits for it and then finds its run cancelled.
 */
export async function cancelRun(deps: Deps, caller: Caller, runId: string): Promise<runs.RunRow> {
  const { row: found, role } = await loadOwnedWithRole(deps, caller, 'run', runId, 'use', runs.findRun)
  const only = onlyUserOf(caller, role)
  if (only !== null && found.user_id !== only) {
    throw new AppError('forbidden', `below the developer role a key cancels only its own user_id's runs; run ${runId} is ${found.user_id}'s`)
  }
  const notRunning = (status: string) => new AppError('run_not_running', `run ${runId} is ${status}; only a running run can be cancelled`)
  if (found.status !== 'running') throw notRunning(found.status)
  const row = (await cancelTrees(deps, [runId], { root: runId })).find((r) => r.id === runId)
  if (!row) throw notRunning((await runs.findRun(deps.db.sql, runId))?.status ?? 'gone')
  return row
}

/**
 * A person's data for a waiting human_input node (POST /v1/runs/{run_id}/input; role `use`, and
 * below developer only for a run of the key's own user_id): checked against the node's schema (400
 * naming the data's path), then the node completes with `{ data, user_id, submitted_at }` in one
 * guarded write that also makes a parked run claimable at once. 409 run_not_waiting when that node
 * does not wait (any more): answered already, timed out, or the run ended.
 */
export async function submitInput(deps: Deps, caller: Caller, runId: string, body: { node: string; data?: unknown }): Promise<runs.RunRow> {
  const { row: found, role } = await loadOwnedWithRole(deps, caller, 'run', runId, 'use', runs.findRun)
  const only = onlyUserOf(caller, role)
  if (only !== null && found.user_id !== only) {
    throw new AppError('forbidden', `below the developer role a key answers only its own user_id's runs; run ${runId} is ${found.user_id}'s`)
  }
  if (!Object.hasOwn(body, 'data') || body.data === undefined) throw invalid('data', 'is required: the data the node asks for')
  const notWaiting = (why: string) => new AppError('run_not_waiting', `node ${body.node} of run ${runId} ${why}`, { param: 'node' })
  for (let tries = 0; tries < 5; tries++) {
    const run = loadRow(runDefinition, (await runs.findRun(deps.db.sql, runId))!)
    if (run.status !== 'running') throw notWaiting(`does not wait: the run is ${run.status}`)
    const p = run.snapshot.context.progress[body.node]
    if (!p || p.status !== 'waiting' || !p.input) throw notWaiting(p?.status === 'completed' ? 'was answered already' : 'is not waiting for input')
    if (p.until !== undefined && Date.parse(p.until) <= Date.now()) throw notWaiting('is past its time-out (input_timeout)')
    if (p.input.schema) {
      const problems = schemaErrors(p.input.schema, body.data, 'data')
      if (problems.length > 0) {
        const first = problems[0]!
        throw new AppError('validation_error', `${first.path}: ${first.message}`, { param: first.path, details: problems })
      }
    }
    const now = Date.now()
    const output = { data: body.data, user_id: found.user_id, submitted_at: new Date(now).toISOString() }
    const durationMs = now - Date.parse(p.started_at!)
    const node = { type: 'node_end' as const, data: { node: body.node, node_id: body.node, duration_ms: durationMs, output, attempt: 1 } }
    const saved = await commitRun(deps.db.sql, run, [{ type: 'node.completed', node: body.node, output, durationMs, end: false }], { log: [node], wake: true })
    // Null: the run moved on since it was read (its worker wrote meanwhile); read it again.
    if (!saved) continue
    await published(deps.redis, saved)
    await deps.timers.schedule(RUN_TIMER, [{ id: runId, at: null }])
    deps.wake.nudge('runs')
    return saved
  }
  throw new AppError('conflict', `run ${runId} kept changing while the input was being saved; retry`)
}

export type NodeState = 'pending' | 'running' | 'retrying' | 'waiting' | 'completed' | 'failed' | 'skipped' | 'cancelled'

export interface NodeView {
  node: string
  name: string | null
  type: string
  state: NodeState
  attempt: number | null
  started_at: string | null
  duration_ms: number | null
  /** retrying: when the next attempt starts; waiting: when the wait ends or the input times out. */
  until: string | null
  error: { code: string; message: string } | null
}

/** What a node neither done nor skipped is once its run was cancelled (snapshots written before the machine said so included). */
const UNFINISHED = new Set(['running', 'waiting', 'retrying'])

/**
 * Each node of the run's graph (the version it runs) with its state now (GET /v1/runs/{run_id}/nodes):
 * what the console draws, and what a client polls to follow a run node by node without the stream.
 * In a cancelled run every node that had not ended (pending, running, retrying, waiting) is
 * `cancelled`, and nothing shows an `until`.
 */
export async function runNodes(deps: Deps, run: runs.RunRow): Promise<{ graph: Graph; nodes: NodeView[] }> {
  const graph = storedGraph(await getWorkflowVersion(deps.db.sql, run.workflow_id, run.workflow_version))
  const progress = loadRow(runDefinition, run).snapshot.context.progress
  const cancelled = run.status === 'cancelled'
  const nodes = graph.nodes.map((n): NodeView => {
    const p = progress[n.id]
    const state: NodeState = !p
      ? (run.status === 'running' ? 'pending' : cancelled ? 'cancelled' : 'skipped')
      : cancelled && UNFINISHED.has(p.status) ? 'cancelled' : p.status
    return {
      node: n.id,
      name: n.name ?? null,
      type: n.type,
      state,
      attempt: p && p.status !== 'skipped' ? (p.attempt ?? 1) : null,
      started_at: p?.started_at ?? null,
      duration_ms: p?.duration_ms ?? null,
      until: p && (state === 'retrying' || state === 'waiting') ? (p.until ?? null) : null,
      error: p?.error ?? null,
    }
  })
  return { graph, nodes }
}

/** The run's stored events after `afterSeq` (the run as loaded by loadRun). */
export function runEvents(deps: Deps, runId: string, afterSeq: number): Promise<runs.RunEventRow[]> {
  return runs.listRunEvents(deps.db.sql, runId, afterSeq)
}

/**
 * Waits until the run is no longer running, or `timeoutMs` passes; answers the latest row either
 * way. Woken by the run's pub/sub channel (any process), with a slow poll as a safety net.
 */
export async function waitForRun(deps: Deps, runId: string, timeoutMs: number): Promise<runs.RunRow> {
  const deadline = Date.now() + timeoutMs
  let wake: () => void = () => {}
  // Woken only by the run's end: a transition's message carries the status.
  const unsubscribe = await deps.redis.subscribe(runChannel(runId), (message) => {
    if (parseRunMessage(message).status !== 'running') wake()
  })
  try {
    for (;;) {
      const row = (await runs.findRun(deps.db.sql, runId))!
      const left = deadline - Date.now()
      if (row.status !== 'running' || left <= 0) return row
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, Math.min(left, 1000))
        wake = () => {
          clearTimeout(t)
          resolve()
        }
      })
    }
  } finally {
    await unsubscribe()
  }
}

/**
 * The run's stored events after `afterSeq`, then live ones as they are appended (by any process),
 * until `done` or `signal` aborts.
 */
export async function* followRun(deps: Deps, runId: string, afterSeq: number, signal: AbortSignal): AsyncGenerator<runs.RunEventRow> {
  let wake: () => void = () => {}
  let notified = false
  const unsubscribe = await deps.redis.subscribe(runChannel(runId), () => {
    notified = true
    wake()
  })
  try {
    let last = afterSeq
    for (;;) {
      notified = false
      const events = await runs.listRunEvents(deps.db.sql, runId, last)
      for (const e of events) {
        last = e.seq
        yield e
        if (e.type === 'done') return
      }
      if (events.length > 0) continue
      const run = await runs.findRun(deps.db.sql, runId)
      if (!run || (run.status !== 'running' && run.next_seq - 1 <= last)) return
      if (signal.aborted) return
      if (!notified) {
        await new Promise<void>((resolve) => {
          const t = setTimeout(resolve, 1000)
          wake = () => {
            clearTimeout(t)
            resolve()
          }
          signal.addEventListener('abort', () => wake(), { once: true })
        })
      }
    }
  } finally {
    await unsubscribe()
  }
}

export type { RunContext }
