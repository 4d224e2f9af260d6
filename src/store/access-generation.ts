/**
 * What tells the kept answers of `accessAndBudget` (store/credits.ts; domain/access-cache.ts) that
 * they may be out of date: a workspace's row, its members, its budget; its period's spend, under an
 * id of its own (`spendId`), which only answers holding a hard-limit budget depend on; and of a
 * knowledge base's row, kept by searches under the base's id (domain/knowledge/bases.ts announces it).
 *
 * A counter, `generation`, moves on every change seen by this process, and each workspace remembers
 * the generation of its last change: an answer read at generation g stays good while its workspace
 * has not changed after g (nor everything, after a lost subscription).
 *
 * - Every write calls `accessChanged(workspaceId)` before it is sent. The embedded database has one
 *   connection that answers in order, so a read sent after that saw the write: that is all it needs.
 * - In server mode other connections and other processes read and write too, so a write also
 *   announces itself once committed (`changingAccess`): the workspace changes here again, and the
 *   ids are published to every other process (domain/access-cache.ts), where they change too.
 *   A read is kept only if its workspace did not change between its sending and its answer, so a
 *   read that may have missed a commit is never kept.
 */
let generation = 0
/** The generation at which every answer was dropped (a lost subscription, too many workspaces to remember). */
let everything = 0
/** Workspace id → the generation of its last change. */
const changed = new Map<string, number>()
const MAX_REMEMBERED = 10_000

/**
 * The id a workspace's charges announce. Only an answer with a hard-limit budget depends on the
 * spend (the check compares it); any other answer stays kept across the workspace's charge batches,
 * so a busy workspace's calls do not read their access again after every batch.
 */
export function spendId(workspaceId: string): string {
  return `${workspaceId}/spend`
}

export function accessChanged(workspaceId: string): void {
  generation++
  if (changed.size >= MAX_REMEMBERED && !changed.has(workspaceId)) {
    changed.clear()
    everything = generation
  } else changed.set(workspaceId, generation)
}

/** Every kept answer is dropped (the subscription that tells of other processes' changes was lost). */
export function everyAccessChanged(): void {
  generation++
  everything = generation
  changed.clear()
}

export function accessGeneration(): number {
  return generation
}

/**
 * Whether the change announced at `at` is still the last one of `id`: nothing changed it after, and
 * nothing dropped every answer since.
 */
export function lastAccessChange(id: string, at: number): boolean {
  return changed.get(id) === at && everything < at
}

/** Whether an answer about `workspaceId` read at generation `since` may be out of date. */
export function accessChangedSince(workspaceId: string, since: number): boolean {
  return since !== generation && (everything > since || (changed.get(workspaceId) ?? 0) > since)
}

/** The generation of the last change of `id` that this process remembers (0: none). */
export function lastChangeOf(id: string): number {
  return changed.get(id) ?? 0
}

/**
 * Spend ids announced by a batch of charges that this process still holds (charge-outbox.ts): the
 * id's last change before the batch (`before`), the batch's announce when sent (`first`) and its last
 * one (`last`: again once committed, in server mode).
 */
const heldBatches = new Map<string, { before: number; first: number; last: number }>()

/** A batch of charges still held (counted beside the committed spend) announced `id` at `first`, its last change before being `before`. */
export function heldBatchSent(id: string, before: number, first: number): void {
  heldBatches.set(id, { before, first, last: first })
}

/** The batch's charges are no longer held (committed and taken out, or failed and queued again). */
export function heldBatchOver(id: string): void {
  heldBatches.delete(id)
}

/**
 * `!accessChangedSince`, but an answer read before a held batch was sent (and after the change before
 * it) stays good while the batch's announces are `id`'s only changes since: its spend plus the held
 * credits, the batch's among them, is what a read would answer. Not for keeping a read (`keep`): one
 * answered after the batch was sent may already count it.
 */
export function goodSince(id: string, since: number): boolean {
  if (!accessChangedSince(id, since)) return true
  const b = heldBatches.get(id)
  return b !== undefined && changed.get(id) === b.last && everything <= since && since >= b.before && since < b.first
}

type Announcer = (workspaceIds: readonly string[]) => Promise<void>
const announcers = new Set<Announcer>()

/** Server mode: `announce` is told the workspaces of every committed change (the cache publishes them). */
export function onAccessCommitted(announce: Announcer): () => void {
  announcers.add(announce)
  return () => void announcers.delete(announce)
}

/**
 * Runs a write that changes what `accessAndBudget` answers for `workspaceIds` and, once it is over
 * (committed, or failed: announcing a change that did not happen costs a read, no more), announces
 * it: changed here again, and published to the other processes before the caller hears back. With
 * the embedded database nothing is announced: the change before sending is enough.
 */
export async function changingAccess<T>(workspaceIds: readonly string[], write: () => Promise<T>, sent?: Map<string, number>): Promise<T> {
  try {
    return await write()
  } finally {
    await accessCommitted(workspaceIds, sent)
  }
}

/**
 * `changingAccess` for a write that is already over (a batch of charges, a transaction elsewhere).
 * `sent`: ids the write announced itself when it was sent, each with the generation of that announce
 * (`accessChanged`, then `accessGeneration`). Where that announce is still the id's last change, nothing
 * else changed it while the write ran, here or in another process as far as this one has heard: its
 * generation becomes that of this announce, which is then the write's own; the other ids are taken
 * out of `sent`. With the embedded database `sent` is left as it is (nothing is announced again).
 */
export async function accessCommitted(workspaceIds: readonly string[], sent?: Map<string, number>): Promise<void> {
  if (announcers.size === 0 || workspaceIds.length === 0) return
  for (const id of workspaceIds) {
    const at = sent?.get(id)
    const own = at !== undefined && lastAccessChange(id, at)
    accessChanged(id)
    if (own) {
      const b = heldBatches.get(id)
      if (b?.last === at) b.last = generation
      sent!.set(id, generation)
    } else sent?.delete(id)
  }
  for (const announce of announcers) await announce(workspaceIds)
}
