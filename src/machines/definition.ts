import type { AnyStateMachine } from 'xstate'
import type { Persisted } from './runner'

/**
 * What the service knows of each machine beside its XState definition (docs/architecture.md,
 * "Machines"): its name, the version of the snapshots it writes, how to read the snapshots earlier
 * versions wrote, and which states announce which outbox event. Every machine's I/O half (the one
 * transition path, the lease loop) works from this data.
 */
export interface MachineDefinition<TContext = unknown> {
  /** URL and file name: kebab-case, the machine's own id. */
  name: string
  machine: AnyStateMachine
  /**
   * Written beside every persisted snapshot. Bump it when a change would misread a snapshot written
   * before it (a context field renamed, a state split), and add the upgrade from the old version.
   */
  version: number
  /**
   * `upgrades[v]` turns a snapshot of version `v` into one of version `v + 1`; a snapshot is brought
   * to `version` by applying them in turn when it is loaded. One for every version below `version`.
   */
  upgrades: Readonly<Record<number, (snapshot: Persisted<unknown>) => Persisted<unknown>>>
  /** The outbox event each state announces when a transition enters it (docs/webhooks.md, "Events"). */
  announces: Readonly<Partial<Record<string, string>>>
  /** Memoise transitions: only for machines whose contexts repeat (not a run's node outputs). */
  memo: boolean
  _context?: TContext
}

/** A snapshot written by a newer version of the service: this process must not execute it. */
export class NewerSnapshot extends Error {
  override name = 'NewerSnapshot'
  constructor(readonly machine: string, readonly stored: number, readonly known: number) {
    super(`a ${machine} snapshot of version ${stored} was written by a newer version of the service (this one knows up to ${known}); it is left as it is`)
  }
}

/**
 * A stored snapshot as the current machine reads it: upgraded from its version when older, the same
 * object when current. A newer version throws NewerSnapshot (the caller leaves the row alone, logs
 * it, and never writes it). A missing upgrade is a bug of the definition and throws too.
 */
export function loadSnapshot<TContext>(def: MachineDefinition<TContext>, stored: { snapshot: Persisted<TContext>; machine_version: number }): Persisted<TContext> {
  const from = stored.machine_version
  if (from === def.version) return stored.snapshot
  if (from > def.version) throw new NewerSnapshot(def.name, from, def.version)
  let snapshot = stored.snapshot as Persisted<unknown>
  for (let v = from; v < def.version; v++) {
    const upgrade = def.upgrades[v]
    if (!upgrade) throw new Error(`${def.name}: no upgrade from snapshot version ${v} to ${v + 1}`)
    snapshot = upgrade(snapshot)
  }
  return snapshot as Persisted<TContext>
}

/** A row as the current machine reads it (see loadSnapshot): `machine_version` is the current one after. */
export function loadRow<TRow extends { snapshot: Persisted<TContext>; machine_version: number }, TContext>(def: MachineDefinition<TContext>, row: TRow): TRow {
  if (row.machine_version === def.version) return row
  return { ...row, snapshot: loadSnapshot(def, row), machine_version: def.version }
}
