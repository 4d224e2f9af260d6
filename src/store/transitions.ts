import type { Fragment } from 'postgres'
import type { Sql } from './db'
import { outboxCte } from './events'

/**
 * One transition of a machine row, written in one statement (docs/architecture.md, "One transition
 * path"): the row's columns and snapshot with the current `machine_version`, applied only where the
 * guard still holds, plus any rows the table's machine writes with it (`with`: CTEs over `u`, the
 * updated row), plus the outbox event the new state announces, all or nothing. Answers the row as
 * written, or null when the guard no longer held (the row moved on, settled, or was taken over).
 */
export interface RowTransition {
  table: 'runs' | 'documents'
  /** `col = …, col = …` (the snapshot among them when it changed). */
  set: Fragment
  /** The condition the row must still meet, over the table's columns. */
  guard: Fragment
  /** The snapshot's version, when the snapshot is among `set` (else the stored one stays with its version). */
  version?: number
  /** More CTEs over `u`, each as `, name as (…)`. */
  with?: Fragment
  /** The outbox events, each one's `data` merged with its `extra` (SQL over `u`: what only the update knows). */
  outbox?: { type: string; data: Record<string, unknown>; extra?: Fragment }[]
}

export async function writeRowTransition<Row extends object>(sql: Sql, t: RowTransition): Promise<Row | null> {
  const update = sql`update ${sql(t.table)} set ${t.set}, machine_version = ${t.version ?? sql`machine_version`}, updated_at = now() where ${t.guard} returning *`
  const events = (t.outbox ?? []).reduce((all, o, i) => sql`${all} ${outboxCte(sql, o.type, o.data, o.extra, `o${i}`)}`, sql``)
  const [row] = await sql<Row[]>`with u as (${update}) ${t.with ?? sql``} ${events} select * from u`
  return row ?? null
}
