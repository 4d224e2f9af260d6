import type { Deps } from '../../deps'
import * as runs from '../../store/runs'
import { CANCEL_CHANNEL, childrenChannel, commitRunEnds, RUN_TIMER, runChannel } from './transitions'

/**
 * How many times one cancel locks its tree at most. Each pass finds the children committed while the
 * one before waited for its locks, one level deeper at most, and runs nest at most 5 deep: the set
 * stops growing within 7 passes; the bound only guards against a mistake.
 */
const MAX_PASSES = 10
/** A cancel and a statement locking several runs in another order (the sweep of parked runs) may deadlock; PostgreSQL aborts one of them. */
const DEADLOCK_RETRIES = 3

/**
 * Cancels the running runs among `ids` and every running run below them, at any depth, in one
 * transaction of a few set-based statements (docs/workflows.md, "Cancelling a run"):
 *
 * 1. the tree's running runs are locked (`lockRunningTree`), again until the set stops growing: once
 *    it does, none of them can start a child (a child's insert shares its parent's lock) and every
 *    child started before is among them;
 * 2. each is moved to `cancelled` by the run machine (`cancel.requested`: its nodes running, waiting
 *    or retrying become `cancelled`), with its `usage` and `done` log events and its
 *    `workflow.run.cancelled` outbox event, all in one statement (`commitRunEnds`).
 *
 * Then, after the commit: one message on the cancel channel, on which every run worker aborts the
 * work of those of its runs that ended (the node in flight: an HTTP call, an LLM stream, a code run, a
 * wait for children), the runs' streams and waiters woken, the parked runs' timers dropped.
 * `root`: the run a caller cancels; nothing is cancelled unless it is still running. Answers the runs
 * cancelled.
 */
export async function cancelTrees(deps: Deps, ids: string[], opts: { root?: string } = {}): Promise<runs.RunRow[]> {
  if (ids.length === 0) return []
  let ended: runs.RunRow[] = []
  for (let attempt = 1; ; attempt++) {
    try {
      ended = await deps.db.sql.begin(async (tx) => {
        const locked = new Map<string, runs.RunRow>()
        for (let pass = 0; pass < MAX_PASSES; pass++) {
          const before = locked.size
          for (const r of await runs.lockRunningTree(tx, ids)) locked.set(r.id, r)
          if (opts.root !== undefined && !locked.has(opts.root)) return []
          if (locked.size === before) break
        }
        return commitRunEnds(tx, [...locked.values()], { type: 'cancel.requested' })
      })
      break
    } catch (err) {
      if ((err as { code?: string }).code !== '40P01' || attempt >= DEADLOCK_RETRIES) throw err
    }
  }
  if (ended.length > 0) await announce(deps, ended)
  return ended
}

/** Runs ended by a cancel, made known: workers abort their work, streams and waiters read on, timers go. */
async function announce(deps: Deps, ended: runs.RunRow[]): Promise<void> {
  const ids = new Set(ended.map((r) => r.id))
  await Promise.all([
    // One message for the whole tree: each worker asks which of its runs ended (RunWorker).
    deps.redis.publish(CANCEL_CHANNEL, ended[0]!.id).catch(() => {}),
    ...ended.map((r) => deps.redis.publish(runChannel(r.id), `${r.next_seq - 1} ${r.status}`).catch(() => {})),
    // A parent still running waits on its children's ends (an iteration stopping at its first failed
    // item); a parent cancelled with them waits for nothing any more.
    ...ended.filter((r) => r.parent_run_id && !ids.has(r.parent_run_id)).map((r) => deps.redis.publish(childrenChannel(r.parent_run_id!), r.id).catch(() => {})),
  ])
  const parked = ended.filter((r) => r.wake_at !== null)
  if (parked.length > 0) await deps.timers.schedule(RUN_TIMER, parked.map((r) => ({ id: r.id, at: null }))).catch(() => {})
  deps.wake.nudge('events')
}
