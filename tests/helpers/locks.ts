import type { Harness } from './harness'

/**
 * Holds inserts into workspaces until `release` is called: a transaction takes a lock that conflicts
 * with INSERT. On the embedded default that transaction also holds the one connection, so the held
 * request waits for the pool instead; either way it is in flight, past its Idempotency-Key.
 */
export async function holdWorkspaceInserts(h: Harness): Promise<{ release: () => Promise<void> }> {
  let release!: () => void
  const released = new Promise<void>((r) => (release = r))
  let locked!: () => void
  const isLocked = new Promise<void>((r) => (locked = r))
  const holder = h.deps.db.sql.begin(async (tx) => {
    await tx`lock table workspaces in share row exclusive mode`
    locked()
    await released
  })
  await isLocked
  return {
    async release() {
      release()
      await holder
    },
  }
}
