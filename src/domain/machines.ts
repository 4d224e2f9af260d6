import { AppError } from '../lib/errors'
import { loadRow, NewerSnapshot, type MachineDefinition } from '../machines/definition'
import { advanceMany, type Persisted } from '../machines/runner'
import type { Sql } from '../store/db'

/**
 * The one transition path of every persisted machine (docs/architecture.md, "One transition path"):
 * the row as last read (its snapshot upgraded to the current version) → the machine's pure
 * transition → one guarded write of the snapshot, its version, what the machine's table writes with
 * it and the outbox event the new state announces (the machine's `announces`) → the row as written.
 * What differs between machines is only what their row holds: each gives a `write`.
 */
export interface MachineRow<TContext> {
  id: string
  snapshot: Persisted<TContext>
  machine_version: number
}

export interface MachineIO<TRow extends MachineRow<TContext>, TContext, TEvent, TExtra> {
  definition: MachineDefinition<TContext>
  /**
   * Writes `next` over `row` in one statement, with `announce` (the outbox event the transition's
   * new state announces, if any) and the caller's `extra`; null when the row's guard no longer
   * holds. `next` is `row.snapshot` itself when the transition changed nothing.
   */
  write(sql: Sql, row: TRow, next: Persisted<TContext>, announce: string | undefined, extra: TExtra): Promise<TRow | null>
  /** The refusal of `events` in `row`'s state (a result after the end, a second end). */
  refused(row: TRow, events: TEvent[]): Error
}

/**
 * Applies `events` to the row, then what `more` adds given the context they leave, and writes the
 * outcome. Throws `io.refused` when the machine refuses an event; answers null when the guard no
 * longer holds (the row moved on, was taken over or deleted since it was read).
 */
export async function commitTransition<TRow extends MachineRow<TContext>, TContext, TEvent, TExtra>(
  sql: Sql,
  io: MachineIO<TRow, TContext, TEvent, TExtra>,
  stored: TRow,
  events: TEvent[],
  extra: TExtra,
  more?: (context: TContext, state: string) => TEvent[],
): Promise<TRow | null> {
  const row = readable(io.definition, stored)
  const next = transitionOf(io, row, events, more)
  const entered = next.value !== row.snapshot.value ? io.definition.announces[next.value] : undefined
  return io.write(sql, row, next, entered, extra)
}

/**
 * What `commitTransition` would write for `events`, without writing it: the row (upgraded), its next
 * snapshot and the outbox event the state it enters announces. For a statement that writes many
 * rows' transitions at once (a run and every run below it cancelled together); the machine decides
 * each snapshot exactly as for one row. Throws `io.refused` when the machine refuses an event.
 */
export function transitionOne<TRow extends MachineRow<TContext>, TContext, TEvent, TExtra>(
  io: MachineIO<TRow, TContext, TEvent, TExtra>,
  stored: TRow,
  events: TEvent[],
): { row: TRow; next: Persisted<TContext>; announce: string | undefined } {
  const row = readable(io.definition, stored)
  const next = transitionOf(io, row, events)
  return { row, next, announce: next.value !== row.snapshot.value ? io.definition.announces[next.value] : undefined }
}

/** The snapshot after `events` and `more`, or the row's own when nothing was applied; throws when refused. */
function transitionOf<TRow extends MachineRow<TContext>, TContext, TEvent, TExtra>(
  io: MachineIO<TRow, TContext, TEvent, TExtra>,
  row: TRow,
  events: TEvent[],
  more?: (context: TContext, state: string) => TEvent[],
): Persisted<TContext> {
  if (events.length === 0 && !more) return row.snapshot
  let added = 0
  const counted = more && ((context: TContext, state: string) => {
    const list = more(context, state)
    added = list.length
    return list
  })
  const step = advanceMany(io.definition.machine, row.snapshot as never, events as never, counted as never)
  if (!step) throw io.refused(row, events)
  return events.length === 0 && added === 0 ? row.snapshot : (step.persisted as Persisted<TContext>)
}

/**
 * The row upgraded to the current machine version. A snapshot written by a newer deploy (a rolling
 * upgrade in progress) is left alone: the request is answered 503, to be retried once the newer
 * version serves it.
 */
function readable<TRow extends MachineRow<TContext>, TContext>(definition: MachineDefinition<TContext>, row: TRow): TRow {
  try {
    return loadRow(definition, row)
  } catch (err) {
    if (err instanceof NewerSnapshot) throw new AppError('unavailable', `${err.message}: retry once every process of the service runs the newer version`, { headers: { 'Retry-After': '5' } })
    throw err
  }
}
