import { newId } from '../lib/ids'
import type { Sql, Tx } from './db'
import { accessChanged, accessGeneration, spendId } from './access-generation'
import type { TraceCarrier } from './trace-context'
import type { Role } from './workspaces'

export interface BudgetRow {
  workspace_id: string
  credits: string
  period: 'month'
  thresholds: number[]
  hard_limit: boolean
  updated_at: Date
}

export interface Charge {
  workspace_id: string
  model: string
  kind: 'chat' | 'embedding' | 'rerank'
  tokens_in: number
  tokens_out: number
  credits: number
  request_id: string | null
}

/** The first day of the period (UTC month) that `at` falls in, as YYYY-MM-DD. */
export function periodStart(at: Date): string {
  return `${at.getUTCFullYear()}-${String(at.getUTCMonth() + 1).padStart(2, '0')}-01`
}

/** Most thresholds a budget has (the API's limit): one event id ready for each. */
const MAX_THRESHOLDS = 20

/** A charge as the write-behind keeps it (src/domain/charge-outbox.ts): its ledger id and its time are fixed when the call is answered. */
export interface JournaledCharge extends Charge {
  /** The ledger row's id (`crd_`): inserting it twice inserts it once, so a replay never charges twice. */
  id: string
  /** When the call was answered (ms since the epoch): the row's created_at and the period it counts in. */
  at: number
}

/**
 * Many charges in one statement, idempotent by ledger id: the ledger rows not already there (a
 * charge whose workspace was deleted meanwhile is dropped, as its rows would have been); each
 * period's running total raised by the sum of the rows inserted, under the period row's lock; the
 * thresholds the new total reaches and that have not fired in the period, marked fired; and their
 * `credit.budget.threshold` events, each with the total as it stood after the charge that crossed
 * its line (a running sum over the batch in answer order), as a charge at a time would report it.
 * A batch replayed after a crash inserts no row again, so it raises no total and fires nothing.
 * Returns the workspaces whose thresholds fired, and each period's committed total after the batch
 * (`spent`), with the generation at which the batch announced its workspace's spend
 * (store/access-generation.ts).
 */
export async function addCharges(sql: Sql, charges: readonly JournaledCharge[], traces: readonly (TraceCarrier | null)[] = [], genericPlan = false): Promise<{ fired: { workspace_id: string; fired_now: number[] }[]; spent: SpentTotal[] }> {
  if (charges.length === 0) return { fired: [], spent: [] }
  const { gws, gperiods, gtraces, announced } = periodGroups(charges, traces)
  const evtIds = Array.from({ length: gws.length * MAX_THRESHOLDS }, () => newId('evt'))
  const statement = (tx: Sql) => tx<{ workspace_id: string; period: string; used: string; fired_now: number[] }[]>`
    with input as (
      select i.*, date_trunc('month', i.created_at at time zone 'UTC')::date as period_start
      from unnest(${charges.map((c) => c.id)}::text[], ${charges.map((c) => c.workspace_id)}::text[], ${charges.map((c) => c.model)}::text[],
        ${charges.map((c) => c.kind)}::text[], ${charges.map((c) => c.tokens_in)}::int[], ${charges.map((c) => c.tokens_out)}::int[],
        ${charges.map((c) => String(c.credits))}::numeric[], ${charges.map((c) => c.request_id)}::text[], ${charges.map((c) => new Date(c.at).toISOString())}::timestamptz[])
        with ordinality as i(id, workspace_id, model, kind, tokens_in, tokens_out, credits, request_id, created_at, ord)
      where exists (select 1 from workspaces w where w.id = i.workspace_id)
    ), ledger as (
      insert into credit_ledger (id, workspace_id, model, kind, tokens_in, tokens_out, credits, request_id, created_at)
      select id, workspace_id, model, kind, tokens_in, tokens_out, credits, request_id, created_at from input
      on conflict (id) do nothing
      returning id
    ), runs as (
      select i.workspace_id, i.period_start, sum(i.credits) over (partition by i.workspace_id, i.period_start order by i.ord) as run
      from input i join ledger l on l.id = i.id
    ), sums as (
      select workspace_id, period_start, max(run) as credits from runs group by 1, 2
    ), total as (
      insert into credit_periods as p (workspace_id, period_start, used, thresholds_fired, fired_now)
      select s.workspace_id, s.period_start, s.credits, v.crossed, v.crossed
      from sums s, lateral (
        select array(
          select t from workspace_budgets b, unnest(b.thresholds) t
          where b.workspace_id = s.workspace_id and s.credits >= t / 100.0 * b.credits order by t) as crossed
      ) v
      on conflict (workspace_id, period_start) do update set
        used = p.used + excluded.used,
        thresholds_fired = p.thresholds_fired || array(
          select t from workspace_budgets b, unnest(b.thresholds) t
          where b.workspace_id = p.workspace_id and t <> all (p.thresholds_fired) and p.used + excluded.used >= t / 100.0 * b.credits order by t),
        fired_now = array(
          select t from workspace_budgets b, unnest(b.thresholds) t
          where b.workspace_id = p.workspace_id and t <> all (p.thresholds_fired) and p.used + excluded.used >= t / 100.0 * b.credits order by t)
      returning p.workspace_id, p.period_start, p.used, p.fired_now
    ), groups as (
      select * from unnest(${gws}::text[], ${gperiods}::date[], ${gtraces}::text[]) with ordinality as g(workspace_id, period_start, trace, n)
    ), fired as (
      insert into events (id, workspace_id, type, data, created_at, trace_context)
      select (${evtIds}::text[])[((g.n - 1) * ${MAX_THRESHOLDS} + f.n)::int], total.workspace_id, 'credit.budget.threshold', jsonb_build_object(
          'workspace_id', total.workspace_id, 'threshold_percent', f.t,
          'used_credits', (select min(total.used - s.credits + r.run) from runs r
            where r.workspace_id = total.workspace_id and r.period_start = total.period_start and total.used - s.credits + r.run >= f.t / 100.0 * b.credits)::float8,
          'budget_credits', b.credits::float8, 'period', b.period, 'period_start', to_char(total.period_start, 'YYYY-MM-DD')),
        clock_timestamp(), g.trace::jsonb
      from total
      join sums s on s.workspace_id = total.workspace_id and s.period_start = total.period_start
      join groups g on g.workspace_id = total.workspace_id and g.period_start = total.period_start
      cross join unnest(total.fired_now) with ordinality f(t, n)
      join workspace_budgets b on b.workspace_id = total.workspace_id
    )
    select workspace_id, to_char(period_start, 'YYYY-MM-DD') as period, used::text as used, fired_now from total`
  // `genericPlan`: the statement's generic plan, in a transaction of its own. Planned for each
  // batch's values, it cost PostgreSQL more to plan than to run: 1 085 µs of backend CPU a batch,
  // against 555 with the generic plan and the transaction (bench/README.md, "The charge batches'
  // plan"). Set for the transaction only, so it also holds behind a transaction-mode pooler.
  const rows = genericPlan && !('savepoint' in sql)
    ? ((await sql.begin((tx) => [tx`select set_config('plan_cache_mode', 'force_generic_plan', true)`, statement(tx)]))[1] as Awaited<ReturnType<typeof statement>>)
    : await statement(sql)
  return {
    fired: rows.filter((r) => r.fired_now.length > 0).map((r) => ({ workspace_id: r.workspace_id, fired_now: r.fired_now })),
    spent: rows.map((r) => ({ workspace_id: r.workspace_id, period: r.period, used: r.used, generation: announced.get(r.workspace_id)! })),
  }
}

/**
 * The (workspace, period) pairs of a batch in order of first appearance, each with the trace of its
 * last traced charge, and each workspace's spend announced once (`announced`: workspace → the
 * generation of its announce, the last one for a batch over two periods).
 */
function periodGroups(charges: readonly JournaledCharge[], traces: readonly (TraceCarrier | null)[]) {
  const groups = new Map<string, number>()
  const announced = new Map<string, number>()
  const gws: string[] = []
  const gperiods: string[] = []
  const gtraces: (string | null)[] = []
  for (const [i, c] of charges.entries()) {
    const period = periodStart(new Date(c.at))
    const key = `${c.workspace_id} ${period}`
    let g = groups.get(key)
    if (g === undefined) {
      accessChanged(spendId(c.workspace_id))
      announced.set(c.workspace_id, accessGeneration())
      groups.set(key, (g = gws.length))
      gws.push(c.workspace_id)
      gperiods.push(period)
      gtraces.push(null)
    }
    const trace = traces[i]
    if (trace) gtraces[g] = JSON.stringify(trace)
  }
  return { gws, gperiods, gtraces, announced }
}

/**
 * A period's committed total right after a batch of charges (`used` as the access-and-budget read
 * answers it), and the generation at which the batch announced the workspace's spend.
 */
export interface SpentTotal {
  workspace_id: string
  /** YYYY-MM-DD, as `periodStart`. */
  period: string
  used: string
  generation: number
}

export async function putBudget(tx: Tx, b: Omit<BudgetRow, 'updated_at' | 'credits'> & { credits: number }): Promise<BudgetRow> {
  accessChanged(b.workspace_id)
  const [row] = await tx<BudgetRow[]>`
    insert into workspace_budgets (workspace_id, credits, period, thresholds, hard_limit)
    values (${b.workspace_id}, ${b.credits}, ${b.period}, ${b.thresholds}, ${b.hard_limit})
    on conflict (workspace_id) do update set credits = excluded.credits, period = excluded.period,
      thresholds = excluded.thresholds, hard_limit = excluded.hard_limit, updated_at = now()
    returning *`
  return row!
}

/** The budget with the credits used in the period that `at` falls in, in one query (null: no budget). */
export async function budgetState(sql: Sql, workspaceId: string, at: Date): Promise<(BudgetRow & { used: string }) | null> {
  const [row] = await sql<(BudgetRow & { used: string })[]>`
    select b.*, coalesce(p.used, 0)::text as used
    from workspace_budgets b
    left join credit_periods p on p.workspace_id = b.workspace_id and p.period_start = ${periodStart(at)}
    where b.workspace_id = ${workspaceId}`
  return row ?? null
}

/** What deciding access needs of a workspace (`authorize`), and its budget with the period's credits used (null: none). */
export interface AccessAndBudget {
  access: { id: string; owner_id: string; status: 'active' | 'archived'; role: Role | null }
  budget: (Pick<BudgetRow, 'credits' | 'period' | 'hard_limit'> & { used: string }) | null
}

/** The columns an access-and-budget read selects, from the workspace `w` and the joins of `accessBudgetJoins`. */
export interface AccessBudgetColumns {
  ws_owner_id: string
  ws_status: 'active' | 'archived'
  ws_role: Role | null
  budget_credits: string | null
  budget_period: 'month' | null
  budget_hard_limit: boolean | null
  budget_used: string
}

/**
 * The select list and joins of an access-and-budget read, for a statement whose workspace is `w`:
 * the caller's membership, the budget and the credits used in the period starting `period`
 * (YYYY-MM-DD). Shared by the read before a model call and the one before a knowledge search.
 */
export const accessBudgetColumns = (sql: Sql) =>
  sql`w.owner_id as ws_owner_id, w.status as ws_status, m.role as ws_role, b.credits::text as budget_credits,
      b.period as budget_period, b.hard_limit as budget_hard_limit, coalesce(p.used, 0)::text as budget_used`
export const accessBudgetJoins = (sql: Sql, userId: string, period: string) =>
  sql`left join workspace_members m on m.workspace_id = w.id and m.user_id = ${userId}
      left join workspace_budgets b on b.workspace_id = w.id
      left join credit_periods p on p.workspace_id = w.id and p.period_start = ${period}`

export function accessAndBudgetOf(workspaceId: string, row: AccessBudgetColumns): AccessAndBudget {
  return {
    access: { id: workspaceId, owner_id: row.ws_owner_id, status: row.ws_status, role: row.ws_role },
    budget: row.budget_credits === null ? null : { credits: row.budget_credits, period: row.budget_period!, hard_limit: row.budget_hard_limit!, used: row.budget_used },
  }
}

/**
 * The hot read before a model call, in one query: the workspace, the caller's role in it, and its
 * budget with the credits used in the period that `at` falls in (null budget: none). Only the
 * columns that deciding access needs (`authorize`); null when the workspace does not exist.
 */
export async function accessAndBudget(sql: Sql, workspaceId: string, userId: string, at: Date): Promise<AccessAndBudget | null> {
  const [row] = await sql<(AccessBudgetColumns & { id: string })[]>`
    select w.id, ${accessBudgetColumns(sql)}
    from workspaces w
    ${accessBudgetJoins(sql, userId, periodStart(at))}
    where w.id = ${workspaceId}`
  return row ? accessAndBudgetOf(row.id, row) : null
}

export interface UsageRow {
  day: string
  model: string
  calls: number
  tokens_in: number
  tokens_out: number
  credits: string
}

/** Totals by UTC day and model between `from` (inclusive) and `to` (exclusive). */
export async function usageByDayAndModel(sql: Sql, workspaceId: string, from: Date, to: Date): Promise<UsageRow[]> {
  return sql<UsageRow[]>`
    select to_char(created_at at time zone 'UTC', 'YYYY-MM-DD') as day, model,
           count(*)::int as calls, sum(tokens_in)::int as tokens_in, sum(tokens_out)::int as tokens_out,
           sum(credits)::text as credits
    from credit_ledger
    where workspace_id = ${workspaceId} and created_at >= ${from} and created_at < ${to}
    group by 1, 2 order by 1, 2`
}
