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
      const wf = await findWorkflow(deps.db.sql, workflowId)
      if (!wf || wf.workspace_id !== parent.workspace_id) throw new NodeError('invalid_config', `workflow_id: workflow ${workflowId} not found in the run's workspace`)
      if (parent.depth + 1 > MAX_DEPTH) {
        throw new NodeError('max_depth_exceeded', `runs nest at most ${MAX_DEPTH} deep; run ${parent.id} is at depth ${parent.depth} and its node ${node.id} would start one deeper`)
      }
      const indexed = node.type === 'iteration'
      const ends: (ChildEnd | null)[] = inputs.map(() => null)
      // Inputs are checked before anything starts: an item that does not fit fails without a run.
      const valid: (Record<string, unknown> | null)[] = inputs.map((item, i) => {
        try {
          return validateInputs(wf.graph, item)
        } catch (err) {
          const message = `${indexed ? `item ${i}: ` : ''}${(err as Error).message}`
          if (opts.stopOnFailure) throw new NodeError('invalid_input', message)
          ends[i] = { run_id: null, status: 'failed', outputs: {}, error: { code: 'invalid_input', message, node: null }, usage: { tokens_in: 0, tokens_out: 0, credits: 0 } }
          return null
        }
      })
      const running = new Map<string, number>()
      const settle = (rows: runs.ChildRow[]): ChildEnd | null => {
        let failed: ChildEnd | null = null
        for (const r of rows) {
          const i = r.item_index ?? 0
          if (r.status === 'running') {
            running.set(r.id, i)
            continue
          }
          running.delete(r.id)
          ends[i] = { run_id: r.id, status: r.status, outputs: r.outputs ?? {}, error: r.error, usage: r.usage }
          if (r.status !== 'completed') failed ??= ends[i]
        }
        return failed
      }

      let wake: () => void = () => {}
      const unsubscribe = await deps.redis.subscribe(childrenChannel(parent.id), () => wake()).catch(() => async () => {})
      try {
        const found = await runs.childRuns(deps.db.sql, parent.id, node.id)
        const started = new Set(found.map((r) => r.item_index ?? 0))
        let failed = settle(found)
        let next = 0
        for (;;) {
          if (signal.aborted) throw abortedError()
          if (failed && opts.stopOnFailure) {
            await cancelTrees(deps, [...running.keys()])
            return ends
          }
          let added = false
          const limit = running.size < opts.concurrency && next < inputs.length ? await step(() => childLimit(deps, parent.workspace_id, running.size, opts.concurrency)) : 0
          while (running.size < limit && next < inputs.length) {
            if (signal.aborted) throw abortedError()
            const i = next++
            if (started.has(i) || !valid[i]) continue
            const child = await step(() => startChild(deps, parent, node, wf, valid[i]!, indexed ? i : null))
            // The parent is no longer running (a cancel committed): no child is started after it.
            if (!child) throw abortedError()
            started.add(i)
            // Already ended: started by an earlier attempt of this node whose worker died just after.
            if (child.status !== 'running') failed ??= settle([child])
            else running.set(child.id, i)
            added = true
          }
          if (added) deps.wake.nudge('runs')
          if (running.size === 0 && next >= inputs.length) return ends
          await idle(
            new Promise<void>((resolve) => {
              const t = setTimeout(resolve, POLL_MS)
              const done = () => {
                clearTimeout(t)
                signal.removeEventListener('abort', done)
                resolve()
              }
              wake = done
              signal.addEventListener('abort', done, { once: true })
            }),
          )
          failed = settle(await step(() => runs.childRuns(deps.db.sql, parent.id, node.id, [...running.keys()]))) ?? failed
        }
      } finally {
        await unsubscribe()
      }
    },
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
