import { newId } from '../lib/ids'
import type { Sql, Tx } from './db'

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

/**
 * Records a charge and adds it to the period's running total in one statement pair: the upsert takes
 * the period row's lock, so 50 charges landing at once are applied one after another, none lost.
 * Returns the total before and after, and the thresholds already fired.
 */
export async function addCharge(tx: Tx, c: Charge, at: Date): Promise<{ before: number; after: number; fired: number[] }> {
  await tx`
    insert into credit_ledger (id, workspace_id, model, kind, tokens_in, tokens_out, credits, request_id)
    values (${newId('crd')}, ${c.workspace_id}, ${c.model}, ${c.kind}, ${c.tokens_in}, ${c.tokens_out}, ${c.credits}, ${c.request_id})`
  const [row] = await tx<{ used: string; thresholds_fired: number[] }[]>`
    insert into credit_periods (workspace_id, period_start, used) values (${c.workspace_id}, ${periodStart(at)}, ${c.credits})
    on conflict (workspace_id, period_start) do update set used = credit_periods.used + excluded.used
    returning used, thresholds_fired`
  const after = Number(row!.used)
  return { before: after - c.credits, after, fired: row!.thresholds_fired }
}

export async function markThresholdsFired(tx: Tx, workspaceId: string, at: Date, thresholds: number[]): Promise<void> {
  await tx`
    update credit_periods set thresholds_fired = thresholds_fired || ${thresholds}::int[]
    where workspace_id = ${workspaceId} and period_start = ${periodStart(at)}`
}

export async function getBudget(sql: Sql, workspaceId: string): Promise<BudgetRow | null> {
  const [row] = await sql<BudgetRow[]>`select * from workspace_budgets where workspace_id = ${workspaceId}`
  return row ?? null
}

export async function putBudget(tx: Tx, b: Omit<BudgetRow, 'updated_at' | 'credits'> & { credits: number }): Promise<BudgetRow> {
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
