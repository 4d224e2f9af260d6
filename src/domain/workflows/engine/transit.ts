import type { Deps } from '../../../deps'
import { markError, tracingOn } from '../../../lib/tracing'
import { loadRow } from '../../../machines/definition'
import { runDefinition, type RunContext, type RunEvent } from '../../../machines/workflow-run.machine'
import * as runs from '../../../store/runs'
import { cancelTrees } from '../cancel'
import { commitRun, published, RunNotRunning } from '../transitions'
import { followOn } from './follow-on'
import type { Drive, Head, RunHolder, Transit } from './types'

/** How many times a write refused because the row changed (a person's input landed) is computed again before the run counts as lost. */
const REREADS = 5

/**
 * The run's transitions, serialised: each is computed from the row as the one before left it and
 * written only if the row is still as read (`commitRun`'s guard), so parallel branches never race
 * and a cancel or a take-over stops the run at its next write. The nodes a transition makes ready
 * start in the same write: node.completed of one node and node.started of the next are one
 * snapshot, persisted before the next node executes. `written` settles once those queued so far are.
 * `launch` starts a node the write made ready.
 */
export function transitions(deps: Deps, holder: RunHolder, d: Drive, launch: (id: string) => void): { transit: Transit; written: () => Promise<unknown> } {
  let chain: Promise<unknown> = Promise.resolve()
  const transit: Transit = (head) => {
    const p = chain.then(() => holder.steps.run(d.run.workspace_id, () => commit(deps, holder, d, head, launch)))
    chain = p.catch(() => {})
    return p
  }
  return { transit, written: () => chain }
}

/**
 * One transition: what happened (`head`), then the nodes it settles skipped and those it makes
 * ready started. A write refused because a person's input landed meanwhile (the run still this
 * holder's) is computed again from the row as it now is.
 */
async function commit(deps: Deps, holder: RunHolder, d: Drive, head: () => Head, launch: (id: string) => void): Promise<void> {
  for (let tries = 0; ; tries++) {
    const h = head()
    const log = [...h.log]
    let started: string[] = []
    const more = h.logOnly ? undefined : (context: RunContext, state: string): RunEvent[] => {
      if (state !== 'running') return []
      const f = followOn(d.graph, d.run, context.progress, Date.now())
      log.push(...f.log)
      started = f.started
      return f.events
    }
    const saved = await commitRun(deps.db.sql, d.run, h.events, { log, owner: holder.owner, addUsage: h.usage }, more)
    if (!saved) {
      const fresh = tries < REREADS ? await runs.findRun(deps.db.sql, d.run.id) : null
      if (fresh?.status === 'running' && fresh.lease_owner === holder.owner) {
        d.run = loadRow(runDefinition, fresh)
        continue
      }
      throw new RunNotRunning(`run ${d.run.id} was cancelled or taken over`)
    }
    if (saved === d.run) return
    d.run = saved
    await published(deps.redis, saved)
    if (saved.status === 'running') for (const id of started) launch(id)
    else await ended(deps, d, saved)
    return
  }
}

/** The run ended (completed or failed): its nodes still in flight stop, and the child runs still running below a failed run are cancelled. */
async function ended(deps: Deps, d: Drive, run: runs.RunRow): Promise<void> {
  if (tracingOn) {
    d.span.setAttribute('run.status', run.status)
    if (run.status === 'failed') markError(d.span, run.error?.message ?? 'the run failed')
  }
  d.ac.abort(new RunNotRunning(`run ${run.status}`))
  if (run.status !== 'completed') await cancelTrees(deps, [run.id])
}
