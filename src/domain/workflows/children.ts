import type { Deps } from '../../deps'
import * as runs from '../../store/runs'
import { findWorkflow, type WorkflowRow } from '../../store/workflows'
import { abortedError } from './nodes/common'
import { validateInputs } from './graph'
import { cancelTrees } from './cancel'
import { newRun } from './new-run'
import { childrenChannel } from './transitions'
import { NodeError, type ChildEnd, type ChildPort, type GraphNode } from './types'

/** How deep runs may start runs: a run at depth 5 may not start another (max_depth_exceeded). */
export const MAX_DEPTH = 5
/** A parent re-reads its children this often even when no end was announced (a lost message). */
const POLL_MS = 1000

/**
 * The child runs of a parent's node (docs/workflows.md, "Sub-workflows and iteration"). The children
 * themselves are the durable state: one row per (parent, node, item), so the node run again after a
 * crash finds the ones it started, reuses the ends of those that ended, waits for the others, and
 * starts only the missing ones. Each item runs exactly once. The parent's worker waits holding its
 * lease but not a place among the runs it works on (`idle`), so children can always be claimed.
 */
export function childPort(
  deps: Deps,
  parent: runs.RunRow,
  idle: <T>(wait: Promise<T>) => Promise<T>,
  /** Runs one database step of the parent's (a child started, the children read again) in its workspace's turn. */
  step: <T>(work: () => Promise<T>) => Promise<T>,
): ChildPort {
  return {
    async run(node, workflowId, inputs, opts, signal) {
      const wf = await childWorkflow(deps, parent, node, workflowId)
      const batch = new ChildBatch({ deps, parent, idle, step }, { node, wf, opts, signal }, inputs)
      const unsubscribe = await deps.redis.subscribe(childrenChannel(parent.id), () => batch.wake()).catch(() => async () => {})
      try {
        return await batch.run()
      } finally {
        await unsubscribe()
      }
    },
  }
}

/** The workflow a node runs as children: one of the run's workspace, not nested deeper than MAX_DEPTH. */
async function childWorkflow(deps: Deps, parent: runs.RunRow, node: GraphNode, workflowId: string): Promise<WorkflowRow> {
  const wf = await findWorkflow(deps.db.sql, workflowId)
  if (!wf || wf.workspace_id !== parent.workspace_id) throw new NodeError('invalid_config', `workflow_id: workflow ${workflowId} not found in the run's workspace`)
  if (parent.depth + 1 > MAX_DEPTH) {
    throw new NodeError('max_depth_exceeded', `runs nest at most ${MAX_DEPTH} deep; run ${parent.id} is at depth ${parent.depth} and its node ${node.id} would start one deeper`)
  }
  return wf
}

type Parent = { deps: Deps; parent: runs.RunRow; idle: <T>(wait: Promise<T>) => Promise<T>; step: <T>(work: () => Promise<T>) => Promise<T> }
type Job = { node: GraphNode; wf: WorkflowRow; opts: { concurrency: number; stopOnFailure: boolean }; signal: AbortSignal }

/** One node's children: each item's end as known so far, those running, and the next item to start. */
class ChildBatch {
  private readonly ends: (ChildEnd | null)[]
  /** Each item's inputs as the workflow takes them; null for an item that does not fit (it ends without a run). */
  private readonly valid: (Record<string, unknown> | null)[]
  private readonly running = new Map<string, number>()
  private started = new Set<number>()
  private next = 0
  private failed: ChildEnd | null = null
  /** Ends the pause between two reads of the children (a child's end announced, or an abort). */
  wake: () => void = () => {}

  constructor(private readonly p: Parent, private readonly job: Job, inputs: Record<string, unknown>[]) {
    this.ends = inputs.map(() => null)
    this.valid = this.check(inputs)
  }

  /** Inputs are checked before anything starts: an item that does not fit fails without a run. */
  private check(inputs: Record<string, unknown>[]): (Record<string, unknown> | null)[] {
    const indexed = this.job.node.type === 'iteration'
    return inputs.map((item, i) => {
      try {
        return validateInputs(this.job.wf.graph, item)
      } catch (err) {
        const message = `${indexed ? `item ${i}: ` : ''}${(err as Error).message}`
        if (this.job.opts.stopOnFailure) throw new NodeError('invalid_input', message)
        this.ends[i] = { run_id: null, status: 'failed', outputs: {}, error: { code: 'invalid_input', message, node: null }, usage: { tokens_in: 0, tokens_out: 0, credits: 0 } }
        return null
      }
    })
  }

  /** Starts the items as their concurrency allows and waits for their ends: every item's, or until the first failure with stopOnFailure. */
  async run(): Promise<(ChildEnd | null)[]> {
    const { deps, parent, step } = this.p
    const { node, opts, signal } = this.job
    const found = await runs.childRuns(deps.db.sql, parent.id, node.id)
    this.started = new Set(found.map((r) => r.item_index ?? 0))
    this.failed = this.settle(found)
    for (;;) {
      if (signal.aborted) throw abortedError()
      if (this.failed && opts.stopOnFailure) {
        await cancelTrees(deps, [...this.running.keys()])
        return this.ends
      }
      if (await this.startMore()) deps.wake.nudge('runs')
      if (this.running.size === 0 && this.next >= this.valid.length) return this.ends
      await this.p.idle(this.pause())
      this.failed = this.settle(await step(() => runs.childRuns(deps.db.sql, parent.id, node.id, [...this.running.keys()]))) ?? this.failed
    }
  }

  /** Starts items not started yet, as many as the node's and its workspace's shares allow; answers whether any started. */
  private async startMore(): Promise<boolean> {
    const { deps, parent, step } = this.p
    const { node, wf, opts, signal } = this.job
    const total = this.valid.length
    let added = false
    const limit = this.running.size < opts.concurrency && this.next < total ? await step(() => childLimit(deps, parent.workspace_id, this.running.size, opts.concurrency)) : 0
    while (this.running.size < limit && this.next < total) {
      if (signal.aborted) throw abortedError()
      const i = this.next++
      if (this.started.has(i) || !this.valid[i]) continue
      const child = await step(() => startChild(deps, parent, node, wf, this.valid[i]!, node.type === 'iteration' ? i : null))
      // The parent is no longer running (a cancel committed): no child is started after it.
      if (!child) throw abortedError()
      this.started.add(i)
      // Already ended: started by an earlier attempt of this node whose worker died just after.
      if (child.status !== 'running') this.failed ??= this.settle([child])
      else this.running.set(child.id, i)
      added = true
    }
    return added
  }

  /** Until a child's end is announced, the node's work is aborted, or POLL_MS pass (a lost message). */
  private pause(): Promise<void> {
    const signal = this.job.signal
    return new Promise<void>((resolve) => {
      const t = setTimeout(resolve, POLL_MS)
      const done = () => {
        clearTimeout(t)
        signal.removeEventListener('abort', done)
        resolve()
      }
      this.wake = done
      signal.addEventListener('abort', done, { once: true })
    })
  }

  /** Children read: those still running kept, the others' ends recorded; answers the first that did not complete. */
  private settle(rows: runs.ChildRow[]): ChildEnd | null {
    let failed: ChildEnd | null = null
    for (const r of rows) {
      const i = r.item_index ?? 0
      if (r.status === 'running') {
        this.running.set(r.id, i)
        continue
      }
      this.running.delete(r.id)
      this.ends[i] = { run_id: r.id, status: r.status, outputs: r.outputs ?? {}, error: r.error, usage: r.usage }
      if (r.status !== 'completed') failed ??= this.ends[i]
    }
    return failed
  }
}

/**
 * How many children a node may have running, from the `running` it has: its concurrency, within
 * what its workspace's child runs leave of CHILD_RUNS_PER_WORKSPACE (docs/workflows.md, "Fair shares
 * between workspaces"), so that a fan-out of ten thousand items never puts more than that many runs
 * before another workspace's. A node with none running may always start one: nested fan-outs whose
 * parents fill the share still end.
 */
async function childLimit(deps: Deps, workspaceId: string, running: number, concurrency: number): Promise<number> {
  const free = deps.config.perWorkspace.childRuns - (await runs.countRunningChildren(deps.db.sql, workspaceId))
  return Math.min(concurrency, running + Math.max(free, running === 0 ? 1 : 0))
}

function startChild(deps: Deps, parent: runs.RunRow, node: GraphNode, wf: WorkflowRow, inputs: Record<string, unknown>, index: number | null) {
  return runs.insertChildRun(deps.db.sql, {
    ...newRun({ workflow_id: wf.id, workflow_version: wf.version, workspace_id: wf.workspace_id, user_id: parent.user_id, inputs, request_id: parent.request_id }),
    parent_run_id: parent.id,
    parent_node: node.id,
    item_index: index,
    depth: parent.depth + 1,
  })
}
