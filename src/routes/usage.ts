import { Elysia, t } from 'elysia'
import type { Deps } from '../deps'
import * as credits from '../domain/credits'
import { invalid } from '../lib/errors'
import { iso, parseTime } from '../lib/time'
import { Envelope, envelope, errors, Id, Timestamp } from './common.model'
import { authenticated } from './plugins/auth'

const Totals = { calls: t.Integer(), tokens_in: t.Integer(), tokens_out: t.Integer(), credits: t.Number() }
const Usage = t.Object({
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
const BudgetBody = t.Object(
  {
    credits: t.Number({ minimum: 0.000001, maximum: 1e12, description: 'Credits per period (credits are kept to 6 decimal places: at least 0.000001)' }),
    period: t.Literal('month'),
    thresholds: t.Array(t.Integer({ minimum: 1, maximum: 1000 }), { maxItems: 20, description: 'Percents of the budget; each emits credit.budget.threshold once per period' }),
    hard_limit: t.Boolean({ description: 'true: calls answer 402 budget_exceeded once the budget is used up' }),
  },
  { additionalProperties: false, examples: [{ credits: 100, period: 'month', thresholds: [50, 80, 100], hard_limit: true }] },
)
export const Budget = t.Object({ workspace_id: t.String(), credits: t.Number(), period: t.Literal('month'), thresholds: t.Array(t.Integer()), hard_limit: t.Boolean(), updated_at: Timestamp })

const DAY = 86_400_000

export function usageRoutes(deps: Deps) {
  const sql = deps.db.sql
  return new Elysia({ name: 'routes.usage' })
    .use(authenticated(deps))
    .get('/workspaces/:id/usage', async ({ caller, requestId, params, query }) => {
      const to = query.to === undefined ? new Date(Date.now() + 1) : parseTime(query.to)
      if (!to) throw invalid('to', 'must be an ISO 8601 time')
      const from = query.from === undefined ? new Date(to.getTime() - 30 * DAY) : parseTime(query.from)
      if (!from) throw invalid('from', 'must be an ISO 8601 time')
      if (from >= to) throw invalid('from', 'must be before to')
      return envelope(requestId, await credits.usage(sql, caller, params.id, from, to))
    }, {
      params: t.Object({ id: Id('ws', 'Workspace id') }),
      query: t.Object({
        from: t.Optional(t.String({ description: 'Start (inclusive), ISO 8601; default 30 days before `to`' })),
        to: t.Optional(t.String({ description: 'End (exclusive), ISO 8601; default now' })),
      }, { additionalProperties: false }),
      response: { 200: Envelope(Usage), ...errors(403, 404) },
      detail: { tags: ['usage'], summary: 'Credits and tokens used, by model and by UTC day, with the budget of the current period' },
    })
    .put('/workspaces/:id/budget', async ({ caller, requestId, params, body }) => {
      const row = await credits.setBudget(sql, caller, params.id, body)
      return envelope(requestId, { workspace_id: row.workspace_id, credits: Number(row.credits), period: row.period, thresholds: row.thresholds, hard_limit: row.hard_limit, updated_at: iso(row.updated_at)! })
    }, {
      params: t.Object({ id: Id('ws', 'Workspace id') }),
      body: BudgetBody,
      parse: 'json',
      response: { 200: Envelope(Budget), ...errors(403, 404, 409, 422) },
      detail: { tags: ['usage'], summary: 'Set the workspace\'s credit budget (admin)' },
    })
}
