import type { Deps } from '../deps'
import { round6 } from '../lib/usage'
import { changingAccess } from '../store/access-generation'
import * as store from '../store/credits'
import type { WorkspaceAccessRow } from '../store/workspaces'
import { authorize, type Caller } from './access'
import { accessKey, checkBudgetRow } from './credits'
import { access } from './ownership'

/**
 * A workspace's credits as its members meet them (docs/models.md, "Credits and budgets"): the check
 * before a model call, the budget an admin sets, the usage a reader reads. Apart from credits.ts,
 * which the model gateway (part of Deps) imports, so that these can take Deps.
 */

/**
 * Before a model call (docs/models.md, "Credits and budgets"): the caller may `use` the workspace,
 * and a hard-limit budget is not used up, in one query. A refused access (403/404) wins over an
 * exhausted budget (402), as when the two were asked apart.
 */
export async function checkAccessAndBudget(deps: Pick<Deps, 'db' | 'models'>, caller: Caller, workspaceId: string, now = new Date()): Promise<void> {
  const period = store.periodStart(now)
  const row = await deps.models.access.get(workspaceId, accessKey(workspaceId, caller.userId, period), () => store.accessAndBudget(deps.db.sql, workspaceId, caller.userId, now), period)
  authorize(caller, row?.access as WorkspaceAccessRow | null ?? null, 'use', { id: workspaceId })
  checkBudgetRow(workspaceId, row!.budget, deps.models.charges, now)
}

export interface BudgetInput {
  credits: number
  period: 'month'
  thresholds: number[]
  hard_limit: boolean
}

/** PUT /v1/workspaces/{id}/budget (admin): thresholds are percents of the budget, kept sorted. */
export async function setBudget(deps: Pick<Deps, 'db'>, caller: Caller, workspaceId: string, input: BudgetInput): Promise<store.BudgetRow> {
  await access(deps, caller, workspaceId, 'manage')
  const thresholds = [...new Set(input.thresholds)].sort((a, b) => a - b)
  return changingAccess([workspaceId], () => deps.db.sql.begin((tx) => store.putBudget(tx, { workspace_id: workspaceId, credits: input.credits, period: input.period, thresholds, hard_limit: input.hard_limit })))
}

/** GET /v1/workspaces/{id}/usage: totals by model and by day over [from, to), and the budget's state. */
export async function usage(deps: Pick<Deps, 'db' | 'models'>, caller: Caller, workspaceId: string, from: Date, to: Date, now = new Date()) {
  await access(deps, caller, workspaceId, 'read', true)
  // What this process still holds is written first: a caller reads its own calls' charges.
  await deps.models.charges.flush()
  const rows = await store.usageByDayAndModel(deps.db.sql, workspaceId, from, to)
  const sum = (list: store.UsageRow[]) => ({
    calls: list.reduce((n, r) => n + r.calls, 0),
    tokens_in: list.reduce((n, r) => n + r.tokens_in, 0),
    tokens_out: list.reduce((n, r) => n + r.tokens_out, 0),
    credits: round6(list.reduce((n, r) => n + Number(r.credits), 0)),
  })
  const group = (by: (r: store.UsageRow) => string) => {
    const groups = new Map<string, store.UsageRow[]>()
    for (const r of rows) groups.set(by(r), [...(groups.get(by(r)) ?? []), r])
    return [...groups]
  }
  const budget = await store.budgetState(deps.db.sql, workspaceId, now)
  const used = Number(budget?.used ?? 0)
  return {
    workspace_id: workspaceId,
    from: from.toISOString(),
    to: to.toISOString(),
    total: sum(rows),
    by_model: group((r) => r.model).map(([model, list]) => ({ model, ...sum(list) })),
    by_day: group((r) => r.day).map(([day, list]) => ({ day, ...sum(list), by_model: list.map((r) => ({ model: r.model, ...sum([r]) })) })),
    budget: budget && {
      credits: Number(budget.credits),
      period: budget.period,
      period_start: store.periodStart(now),
      used: round6(used),
      remaining: round6(Math.max(0, Number(budget.credits) - used)),
      thresholds: budget.thresholds,
      hard_limit: budget.hard_limit,
    },
  }
}
