import { Elysia, t } from 'elysia'
import type { Deps } from '../deps'
import * as triggers from '../domain/workflows/triggers'
import { AppError } from '../lib/errors'
import { parseListQuery, toPage } from '../lib/lists'
import { Described, Envelope, envelope, errors, ListOf, ListQuery } from './common.model'
import { authenticated } from './plugins/auth'
import { beginIdempotency } from './plugins/idempotency'
import { stateOf } from './plugins/request-state'
import {
  CreateTrigger, DeletedTrigger, HookParams, HookStarted, toTrigger, Trigger, triggerList, TriggerParams, UpdateTrigger, WorkflowTriggerParams,
} from './triggers.model'

const tags = ['triggers']

/** The origin and BASE_PATH a request came to: webhook triggers' urls are answered under it. */
const baseOf = (deps: Deps, request: Request) => `${new URL(request.url).origin}${deps.config.basePath}`

export function triggerRoutes(deps: Deps) {
  return new Elysia({ name: 'routes.triggers' })
    .use(authenticated(deps))
    .post('/workflows/:id/triggers', async ({ caller, requestId, params, body, request, set }) => {
      set.status = 201
      return envelope(requestId, toTrigger(await triggers.createTrigger(deps, caller, params.id, body), baseOf(deps, request)))
    }, {
      params: WorkflowTriggerParams,
      body: CreateTrigger,
      parse: 'json',
      response: { 201: Envelope(Trigger, 'The trigger created'), ...errors(403, 404, 409, 422) },
      detail: {
        operationId: 'createTrigger',
        tags,
        summary: 'Add a schedule or webhook trigger to a workflow (developer)',
        description: 'schedule: a run at each tick of `cron` (5 fields) in `timezone`, as user_id schedule:<trigger id>; each tick runs once across every process, and ticks missed while nothing ran are not replayed. webhook: a run per POST to the answered `url`, its inputs rendered from the call; with a secret, calls must be signed. A bad cron or time zone is a 400 naming it. See docs/triggers.md.',
      },
    })
    .get('/workflows/:id/triggers', async ({ caller, requestId, params, query, request }) => {
      const q = parseListQuery(query, triggerList)
      const base = baseOf(deps, request)
      return { request_id: requestId, ...toPage(await triggers.listTriggers(deps, caller, params.id, q), q, (row) => toTrigger(row, base)) }
    }, {
      params: WorkflowTriggerParams,
      query: ListQuery('created_at, updated_at', { type: t.Optional(t.String({ description: 'schedule or webhook; type_in=a,b for both', examples: ['schedule'] })) }),
      response: { 200: ListOf(Trigger, 'A page of the workflow\'s triggers'), ...errors(404) },
      detail: { operationId: 'listTriggers', tags, summary: 'List a workflow\'s triggers (never their secrets)' },
    })
    .get('/triggers/:id', async ({ caller, requestId, params, request }) =>
      envelope(requestId, toTrigger(await triggers.loadTrigger(deps, caller, params.id, 'read'), baseOf(deps, request))), {
      params: TriggerParams,
      response: { 200: Envelope(Trigger, 'The trigger'), ...errors(404) },
      detail: { operationId: 'getTrigger', tags, summary: 'Get a trigger (never its secret)' },
    })
    .patch('/triggers/:id', async ({ caller, requestId, params, body, request }) =>
      envelope(requestId, toTrigger(await triggers.updateTrigger(deps, caller, params.id, body), baseOf(deps, request))), {
      params: TriggerParams,
      body: UpdateTrigger,
      parse: 'json',
      response: { 200: Envelope(Trigger, 'The trigger as changed'), ...errors(403, 404, 409, 422) },
      detail: {
        operationId: 'updateTrigger',
        tags,
        summary: 'Change a trigger\'s cron, time zone, inputs, secret or enabled flag (developer)',
        description: 'A change of cron, time zone or enabled flag computes the next tick again, from now.',
      },
    })
    .delete('/triggers/:id', async ({ caller, requestId, params }) => {
      await triggers.deleteTrigger(deps, caller, params.id)
      return envelope(requestId, { id: params.id, deleted: true as const })
    }, {
      params: TriggerParams,
      response: { 200: Envelope(DeletedTrigger, 'The trigger was deleted'), ...errors(403, 404, 409, 422) },
      detail: { operationId: 'deleteTrigger', tags, summary: 'Delete a trigger (developer); its runs stay' },
    })
}

/**
 * POST /v1/hooks/{trigger_id}: no API key (src/routes/plugins/auth.ts lets this one path through).
 * Registered outside the /v1 group, so the API-key hooks of the other routes (caller, audit) never
 * run here; the order is: the trigger, its rate limit, its signature, the Idempotency-Key, the run.
 */
export function hookRoutes(deps: Deps) {
  return new Elysia({ name: 'routes.hooks', prefix: `${deps.config.basePath}/v1` })
    .post('/hooks/:trigger_id', async ({ params, body, request, set }) => {
      const state = stateOf(request)
      const trigger = await triggers.findHook(deps, params.trigger_id)
      await takeToken(deps, trigger.id, set)
      const call: triggers.HookCall = {
        body: body ?? null,
        raw: state.raw ?? '',
        query: Object.fromEntries(new URL(request.url).searchParams),
        headers: Object.fromEntries(request.headers),
      }
      triggers.checkSignature(deps, trigger, call)
      // Idempotency records are scoped by who sends them: for a hook, the trigger.
      state.caller = { keyId: `hook:${trigger.id}`, userId: `webhook:${trigger.id}`, isRoot: false, workspaceId: trigger.workspace_id, roleLimit: 'readonly', issuedBy: null }
      const replay = await beginIdempotency(deps.redis, request, state)
      if (replay) return replay
      const run = await triggers.runHook(deps, trigger, call, state.id)
      set.status = 202
      return { request_id: state.id, run_id: run.id, status: 'running' as const }
    }, {
      params: HookParams,
      response: { 202: Described(HookStarted, 'A run started: its id'), ...errors(404, 409, 422) },
      detail: {
        operationId: 'fireHook',
        tags,
        summary: 'Call a webhook trigger: starts a run of its workflow (no API key)',
        description: 'The body (JSON, or none), the query and the headers (names lower-case) fill the trigger\'s input templates. With a secret, X-Signature-256: sha256=<hex HMAC-SHA256 of the raw body under the secret> is required (401 otherwise). Idempotency-Key replays the first answer; calls are rate-limited per trigger (429 with Retry-After). Inputs that fail the workflow\'s checks are a 400 naming the input; a disabled trigger is 409.',
        // No API key is needed; one sent is ignored.
        security: [{}, { bearer: [] }],
      },
    })
}

/** The token bucket of the API keys (RATE_LIMIT_PER_SECOND, RATE_LIMIT_BURST), one per trigger. */
async function takeToken(deps: Deps, triggerId: string, set: { headers: Record<string, string | number> }) {
  const { perSecond, burst } = deps.config.rateLimit
  const r = await deps.redis.take(`hook:${triggerId}`, { capacity: burst, refillPerSecond: perSecond })
  set.headers['ratelimit-limit'] = String(burst)
  set.headers['ratelimit-remaining'] = String(r.remaining)
  set.headers['ratelimit-reset'] = String(Math.ceil(r.resetMs / 1000))
  if (!r.allowed) {
    const retry = String(Math.max(1, Math.ceil(r.retryAfterMs / 1000)))
    throw new AppError('rate_limited', `rate limit of ${perSecond} calls/s (bursts of ${burst}) exceeded for trigger ${triggerId}; retry in ${retry} s`, {
      headers: { 'retry-after': retry },
    })
  }
}
