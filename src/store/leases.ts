import type { Fragment } from 'postgres'
import type { Sql, Tx } from './db'

/**
 * Leases on machine rows (docs/architecture.md, "Workers and leases"): a worker claims rows in a
 * claimable state whose lease is free or expired, heartbeats them every third of the lease, and
 * gives them back when it stops. One module for every leased table, keyed by the table and its
 * claimable states; what differs (a run parked on a wait is not claimable yet, a document counts
 * its claims) is declared in the table's `LeaseTable`.
 *
 * A row whose `machine_version` is newer than this process's machine is never claimed: it was
 * written by a newer deploy, and this one cannot read its snapshot (docs/architecture.md,
 * "Versioned snapshots").
 */
export interface LeaseTable {
  table: 'runs' | 'documents'
  /** States a worker holds a row in. */
  states: readonly string[]
  /** The newest snapshot version this process can execute. */
  version: number
  /** More conditions a claimable row meets, as `and …`. */
  claimable?: (sql: Sql) => Fragment
  /** More columns a claim sets, as `, col = …`. */
  onClaim?: (sql: Sql) => Fragment
  /** More columns a release sets, as `, col = …`. */
  onRelease?: (sql: Sql) => Fragment
}

const empty = (sql: Sql) => sql``

/**
 * `status in ('a', 'b')` and the version as literals, not parameters: the claimable rows' partial
 * indexes (`where status = 'running'`) serve only a query whose own condition proves their
 * predicate, which a parameter does not once Postgres switches a prepared statement to its generic
 * plan. The states and the version are the code's own constants, checked here.
 */
function claimableStates(sql: Sql, t: LeaseTable) {
  if (!t.states.every((st) => /^[a-z_]+$/.test(st)) || !Number.isInteger(t.version)) throw new Error(`bad lease table ${t.table}`)
  return sql.unsafe(`status in (${t.states.map((st) => `'${st}'`).join(', ')})`)
}
const until = (sql: Sql, leaseMs: number) => sql`now() + ${leaseMs}::int * interval '1 millisecond'`

/**
 * Claims up to `limit` rows, oldest first, in one statement, and answers them. `skip locked`:
 * workers never wait on each other's claims.
 */
export async function claim<Row extends object>(sql: Sql, t: LeaseTable, owner: string, leaseMs: number, limit: number): Promise<Row[]> {
  return sql<Row[]>`
    update ${sql(t.table)} set lease_owner = ${owner}, lease_until = ${until(sql, leaseMs)} ${(t.onClaim ?? empty)(sql)}
    where id in (
      select id from ${sql(t.table)}
      where ${claimableStates(sql, t)} and (lease_until is null or lease_until < now())
        and machine_version <= ${sql.unsafe(String(t.version))} ${(t.claimable ?? empty)(sql)}
      order by created_at limit ${limit} for update skip locked)
    returning *`
}

/** Extends the leases this worker holds; answers the ids it still holds (the others were taken over or settled). */
export async function heartbeat(sql: Sql, t: LeaseTable, owner: string, ids: string[], leaseMs: number): Promise<string[]> {
  if (ids.length === 0) return []
  const rows = await sql<{ id: string }[]>`
    update ${sql(t.table)} set lease_until = ${until(sql, leaseMs)}
    where id in ${sql(ids)} and lease_owner = ${owner} and ${claimableStates(sql, t)}
    returning id`
  return rows.map((r) => r.id)
}

/** Gives one row back (`set`: more columns, as `, col = …`), if this worker still holds it. */
export async function release(sql: Tx | Sql, t: LeaseTable, owner: string, id: string, set?: Fragment): Promise<void> {
  await sql`update ${sql(t.table)} set lease_owner = null, lease_until = null ${set ?? sql``} where id = ${id} and lease_owner = ${owner}`
}

/** Every row this worker holds, given back (a graceful stop): a restart resumes them without waiting for the lease. */
export async function releaseAll(sql: Sql, t: LeaseTable, owner: string): Promise<void> {
  await sql`
    update ${sql(t.table)} set lease_owner = null, lease_until = null ${(t.onRelease ?? empty)(sql)}
    where lease_owner = ${owner} and ${claimableStates(sql, t)}`
}
