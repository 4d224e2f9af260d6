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
  /**
   * What more a held row meets to count against its workspace's cap (`and …`; every held row when
   * absent): a run waiting on its children holds its lease but works on nothing, and counting it
   * would leave its children unclaimable once parents fill the cap.
   */
  working?: (sql: Sql) => Fragment
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
/**
 * The rows a claim of `limit` tries to lock, in their turn: a few more than it takes, for those
 * another claim locks at the same instant (skipped). A bounded list is what lets the planner lock
 * them one by one through the primary key instead of hashing the whole table to find them.
 */
const candidates = (limit: number) => limit * 2 + 8
const until = (sql: Sql, leaseMs: number) => sql`now() + ${leaseMs}::int * interval '1 millisecond'`

/**
 * Claims up to `limit` rows in one statement, and answers them; fairly between workspaces, each held
 * to `cap` rows at once. `skip locked`: workers never wait on each other's claims.
 *
 * Fair: the workspaces with claimable rows are found by skipping through the claim index one
 * workspace at a time (`ws`), each one's oldest rows are read from it (at most `limit`, and no more
 * than its cap leaves), and the rows are taken in the order of what their workspace would then hold:
 * the rows it holds already plus the row's rank among its own (`held + rank`), the oldest first
 * among equals. A workspace holding nothing goes before one holding ten, whatever it has waiting;
 * two that wait alike take turns. The cost grows with the number of workspaces waiting and the rows
 * taken, not with how many rows wait (10 000 in one workspace: tests/integration/fair-claims.test.ts).
 *
 * Capped: what a workspace holds is counted in the database (unexpired leases), so the cap holds
 * across every process. Two processes claiming at the same instant each count before either
 * commits: a workspace may then exceed its cap by what the other claims took at that instant, once,
 * until those rows end (docs/workflows.md, "Fair shares between workspaces").
 */
export async function claim<Row extends object>(sql: Sql, t: LeaseTable, owner: string, leaseMs: number, limit: number, cap = 1_000_000): Promise<Row[]> {
  return claimStatement<Row>(sql, t, owner, leaseMs, limit, cap)
}

/** The statement of `claim`, not sent yet (a test explains it). */
export function claimStatement<Row extends object>(sql: Sql, t: LeaseTable, owner: string, leaseMs: number, limit: number, cap: number) {
  const table = sql(t.table)
  const more = (t.claimable ?? empty)(sql)
  const version = sql.unsafe(String(t.version))
  const free = sql`${claimableStates(sql, t)} and (lease_until is null or lease_until < now()) and machine_version <= ${version} ${more}`
  return sql<Row[]>`
    with recursive ws (workspace_id) as (
      (select workspace_id from ${table} where ${free} order by workspace_id limit 1)
      union all
      select (select workspace_id from ${table} where ${free} and workspace_id > ws.workspace_id order by workspace_id limit 1)
      from ws where ws.workspace_id is not null
    ), waiting as (
      select c.id, c.created_at, h.held + row_number() over (partition by c.workspace_id order by c.created_at) as turn
      from ws
      cross join lateral (
        select count(*) as held
        from ${table} where workspace_id = ws.workspace_id and ${claimableStates(sql, t)} and lease_owner is not null and lease_until > now() ${(t.working ?? empty)(sql)}
      ) h
      cross join lateral (
        select id, workspace_id, created_at from ${table} where workspace_id = ws.workspace_id and ${free}
        order by created_at limit greatest(0, least(${limit}::bigint, ${cap}::bigint - h.held))
      ) c
      where ws.workspace_id is not null
    ), next as (
      select id, turn, created_at from waiting order by turn, created_at limit ${candidates(limit)}
    )
    update ${table} set lease_owner = ${owner}, lease_until = ${until(sql, leaseMs)} ${(t.onClaim ?? empty)(sql)}
    where id in (
      select r.id from next w join ${table} r on r.id = w.id
      where ${free}
      order by w.turn, w.created_at limit ${limit} for update of r skip locked)
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

/**
 * Ends every lease still running on `t` (sets it to have run out), answering how many: for an embedded
 * start, whose data directory's lock proves that the process that held them is gone (a crash), so its
 * rows are claimable at once instead of when their leases would have run out. Never in server mode,
 * where other live processes hold leases.
 */
export async function endLeftLeases(sql: Sql, t: LeaseTable): Promise<number> {
  const rows = await sql`
    update ${sql(t.table)} set lease_until = now() - interval '1 millisecond'
    where lease_owner is not null and lease_until >= now() and ${claimableStates(sql, t)}
    returning 1`
  return rows.length
}
