/**
 * Usage and credits arithmetic, in one place (docs/models.md, "Credits and budgets"): credits carry
 * six decimals, the ledger's precision, so the API's figures and the ledger's sums stay equal.
 */
export interface Usage {
  tokens_in: number
  tokens_out: number
  credits: number
}

/** Rounded to six decimals (credits, and the scores shown beside them). */
export const round6 = (n: number): number => Math.round(n * 1e6) / 1e6

/** The sum of two usages, its credits rounded as the ledger rounds them. */
export function addUsage(a: Usage, b: Usage): Usage {
  return { tokens_in: a.tokens_in + b.tokens_in, tokens_out: a.tokens_out + b.tokens_out, credits: round6(a.credits + b.credits) }
}

export const ZERO_USAGE: Readonly<Usage> = Object.freeze({ tokens_in: 0, tokens_out: 0, credits: 0 })
