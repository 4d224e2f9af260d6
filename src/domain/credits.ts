import { AppError } from '../lib/errors'
import type { Pool, Tx } from '../store/db'
import * as store from '../store/credits'
import type { ModelSpec } from './models/catalog'
import { round6 } from '../lib/usage'
import { newId } from '../lib/ids'
import { traceContext, tracingOn } from '../lib/tracing'

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
