import { AppError } from '../lib/errors'
import type { Pool, Tx } from '../store/db'
import * as store from '../store/credits'
import { changingAccess } from '../store/access-generation'
import { authorize, type Caller } from './access'
import type { WorkspaceAccessRow } from '../store/workspaces'
import type { ModelSpec } from './models/catalog'
import { access } from './ownership'
import { round6 } from '../lib/usage'
import { newId } from '../lib/ids'
import { traceContext, tracingOn } from '../lib/tracing'
import type { AccessCache } from './access-cache'

/**
 * Credits (docs/models.md, "Credits and budgets"): every model call's tokens priced by the model's
 * `pricing` (per 1 000 tokens), charged to the resolved workspace in a ledger, summed per period for
 * budgets.
 */
export function price(model: Pick<ModelSpec, 'pricing'>, tokensIn: number, tokensOut: number): number {
  const p = model.pricing ?? {}
  const credits = (tokensIn / 1000) * (p.input_per_1k ?? 0) + (tokensOut / 1000) * (p.output_per_1k ?? 0)
  // Six decimals: the ledger's precision; rounding here keeps the API's figure and the ledger's equal.
  return round6(credits)
}

/** Credits charged but not yet in the committed total (this process' write-behind: charge-outbox.ts). */
export interface PendingCredits {
  pending(workspaceId: string, at?: Date): number
}

/**
 * A hard limit answers 402 before the provider is called, against the committed total plus what
 * this process holds in its write-behind. Calls already in flight when the limit is reached still
 * finish and are charged, and other processes' held charges (a few milliseconds' worth) are not
 * seen, so a period can end slightly over its budget.
 */
export async function checkBudget(sql: Pool, workspaceId: string, held: PendingCredits, now = new Date()): Promise<void> {
  const budget = await store.budgetState(sql, workspaceId, now)
  if (!budget?.hard_limit) return
  exceeded(workspaceId, budget, held.pending(workspaceId, now))
}

/**
 * Before a model call (docs/models.md, "Credits and budgets"): the caller may `use` the workspace,
 * and a hard-limit budget is not used up, in one query. A refused access (403/404) wins over an
 * exhausted budget (402), as when the two were asked apart.
 */
export async function checkAccessAndBudget(sql: Pool, caller: Caller, workspaceId: string, held: PendingCredits, cache: AccessCache, now = new Date()): Promise<void> {
  const period = store.periodStart(now)
  const row = await cache.get(workspaceId, accessKey(workspaceId, caller.userId, period), () => store.accessAndBudget(sql, workspaceId, caller.userId, now), period)
  authorize(caller, row?.access as WorkspaceAccessRow | null ?? null, 'use', { id: workspaceId })
  const budget = row!.budget
  if (!budget?.hard_limit) return
  exceeded(workspaceId, budget, held.pending(workspaceId, now))
}

/** Where the access cache keeps `accessAndBudget`'s answer (a knowledge search reads and keeps the same). */
export function accessKey(workspaceId: string, userId: string, period: string): string {
  return `${workspaceId} ${userId} ${period}`
}

/** A hard-limit budget read beside something else (a search's one read): 402 when it is used up, this process' held charges counted. */
export function checkBudgetRow(workspaceId: string, budget: { used: string; credits: string; period: string; hard_limit: boolean } | null, held: PendingCredits, now = new Date()): void {
  if (budget?.hard_limit) exceeded(workspaceId, budget, held.pending(workspaceId, now))
}

function exceeded(workspaceId: string, budget: { used: string; credits: string; period: string }, pending: number): void {
  const used = round6(Number(budget.used) + pending)
  if (used >= Number(budget.credits)) {
    throw new AppError('budget_exceeded', `workspace ${workspaceId} used ${used} of its ${Number(budget.credits)} credits this ${budget.period}; raise the budget or wait for the next period`)
  }
}

/**
 * Charges a call inside the caller's transaction (an agent's answer commits with the credits it
 * cost), with the statement the write-behind's batches use (`store.addCharges`, a batch of one): the
 * ledger row, the running total, and every threshold it crosses, decided under the period row's lock,
 * so each threshold's `credit.budget.threshold` event is written once per period, committed with the
 * charge. A model call outside such a transaction is charged through the write-behind instead
 * (charge-outbox.ts). The caller announces the workspace's spend once its transaction is over (`accessCommitted` of `spendId`,
 * store/access-generation.ts): the period's spend changed.
 */
export async function chargeIn(tx: Tx, c: store.Charge, now = new Date()): Promise<{ crossed: number[] }> {
  const { fired } = await store.addCharges(tx, [{ ...c, id: newId('crd'), at: now.getTime() }], [tracingOn ? traceContext() : null])
  return { crossed: fired[0]?.fired_now ?? [] }
}

export interface BudgetInput {
  credits: number
  period: 'month'
  thresholds: number[]
  hard_limit: boolean
}

/** PUT /v1/workspaces/{id}/budget (admin): thresholds are percents of the budget, kept sorted. */
export async function setBudget(sql: Pool, caller: Caller, workspaceId: string, input: BudgetInput): Promise<store.BudgetRow> {
  await access(sql, caller, workspaceId, 'manage')
  const thresholds = [...new Set(input.thresholds)].sort((a, b) => a - b)
  return changingAccess([workspaceId], () => sql.begin((tx) => store.putBudget(tx, { workspace_id: workspaceId, credits: input.credits, period: input.period, thresholds, hard_limit: input.hard_limit })))
}

/** GET /v1/workspaces/{id}/usage: totals by model and by day over [from, to), and the budget's state. */
export async function usage(sql: Pool, caller: Caller, workspaceId: string, from: Date, to: Date, held: { flush(): Promise<void> }, now = new Date()) {
  await access(sql, caller, workspaceId, 'read', true)
  // What this process still holds is written first: a caller reads its own calls' charges.
  await held.flush()
  const rows = await store.usageByDayAndModel(sql, workspaceId, from, to)
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
  const budget = await store.budgetState(sql, workspaceId, now)
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
