/** The TypeBox schemas of the usage routes (src/routes/usage.ts), named in the OpenAPI document where shared, and the mappers from rows to them. */
import { t } from 'elysia'
import { Timestamp } from './common.model'

export const Totals = { calls: t.Integer(), tokens_in: t.Integer(), tokens_out: t.Integer(), credits: t.Number() }
export const Usage = t.Object({
  workspace_id: t.String(),
  from: Timestamp,
  to: Timestamp,
  total: t.Object(Totals),
  by_model: t.Array(t.Object({ model: t.String(), ...Totals })),
  by_day: t.Array(t.Object({ day: t.String({ description: 'UTC day, YYYY-MM-DD' }), ...Totals, by_model: t.Array(t.Object({ model: t.String(), ...Totals })) })),
  budget: t.Union([
    t.Object({
      credits: t.Number(),
      period: t.Literal('month'),
      period_start: t.String(),
      used: t.Number(),
      remaining: t.Number(),
      thresholds: t.Array(t.Integer()),
      hard_limit: t.Boolean(),
    }),
    t.Null(),
  ]),
})
export const BudgetBody = t.Object(
  {
    credits: t.Number({ minimum: 0.000001, maximum: 1e12, description: 'Credits per period (credits are kept to 6 decimal places: at least 0.000001)' }),
    period: t.Literal('month'),
    thresholds: t.Array(t.Integer({ minimum: 1, maximum: 1000 }), { maxItems: 20, description: 'Percents of the budget; each emits credit.budget.threshold once per period' }),
    hard_limit: t.Boolean({ description: 'true: calls answer 402 budget_exceeded once the budget is used up' }),
  },
  { additionalProperties: false, examples: [{ credits: 100, period: 'month', thresholds: [50, 80, 100], hard_limit: true }] },
)
export const Budget = t.Object({ workspace_id: t.String(), credits: t.Number(), period: t.Literal('month'), thresholds: t.Array(t.Integer()), hard_limit: t.Boolean(), updated_at: Timestamp })
