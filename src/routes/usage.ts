import { Elysia, t } from 'elysia'
import type { Deps } from '../deps'
import * as budgets from '../domain/budgets'
import { invalid } from '../lib/errors'
import { iso, parseTime } from '../lib/time'
import { Envelope, envelope, errors, Id } from './common.model'
import { authenticated } from './plugins/auth'
import { Usage, BudgetBody, Budget } from './usage.model'

const DAY = 86_400_000

export function usageRoutes(deps: Deps) {
  return new Elysia({ name: 'routes.usage' })
    .use(authenticated(deps))
    .get('/workspaces/:id/usage', async ({ caller, requestId, params, query }) => {
      const to = query.to === undefined ? new Date(Date.now() + 1) : parseTime(query.to)
      if (!to) throw invalid('to', 'must be an ISO 8601 time')
      const from = query.from === undefined ? new Date(to.getTime() - 30 * DAY) : parseTime(query.from)
      if (!from) throw invalid('from', 'must be an ISO 8601 time')
      if (from >= to) throw invalid('from', 'must be before to')
      return envelope(requestId, await budgets.usage(deps, caller, params.id, from, to))
    }, {
      params: t.Object({ id: Id('ws', 'Workspace id') }),
      query: t.Object({
        from: t.Optional(t.String({ description: 'Start (inclusive), ISO 8601; default 30 days before `to`' })),
        to: t.Optional(t.String({ description: 'End (exclusive), ISO 8601; default now' })),
      }, { additionalProperties: false }),
      response: { 200: Envelope(Usage, 'The workspace\'s usage and budget'), ...errors(403, 404) },
      detail: { operationId: 'getUsage', tags: ['usage'], summary: 'Credits and tokens used, by model and by UTC day, with the budget of the current period' },
    })
    .put('/workspaces/:id/budget', async ({ caller, requestId, params, body }) => {
      const row = await budgets.setBudget(deps, caller, params.id, body)
      return envelope(requestId, { workspace_id: row.workspace_id, credits: Number(row.credits), period: row.period, thresholds: row.thresholds, hard_limit: row.hard_limit, updated_at: iso(row.updated_at)! })
    }, {
      params: t.Object({ id: Id('ws', 'Workspace id') }),
      body: BudgetBody,
      parse: 'json',
      response: { 200: Envelope(Budget, 'The budget as set'), ...errors(403, 404, 409, 422) },
      detail: { operationId: 'setBudget', tags: ['usage'], summary: 'Set the workspace\'s credit budget (admin)' },
    })
}
