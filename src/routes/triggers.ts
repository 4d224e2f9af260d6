import { Elysia, t } from 'elysia'
import type { Deps } from '../deps'
import type { HookCall } from '../domain/workflows/hook-inputs'
import * as hooks from '../domain/workflows/hooks'
import * as triggers from '../domain/workflows/triggers'
import { AppError } from '../lib/errors'
import { parseListQuery, toPage } from '../lib/lists'
import { Described, Envelope, envelope, errors, ListOf, ListQuery } from './common.model'
import { authenticated } from './plugins/auth'
import { beginIdempotency, writeKey } from './plugins/idempotency'
import { stateOf } from './plugins/request-state'
import {
  CreateTrigger, DeletedTrigger, HookParams, HookReplayed, HookStarted, RotateTriggerParams, toTrigger, Trigger, triggerList, TriggerParams, UpdateTrigger, WorkflowTriggerParams,
} from './triggers.model'

const tags = ['triggers']

/** The origin and BASE_PATH a request came to: webhook triggers' urls are answered under it. */
const baseOf = (deps: Deps, request: Request) => `${new URL(request.url).origin}${deps.config.basePath}`

export function triggerRoutes(deps: Deps) {
  return new Elysia({ name: 'routes.triggers' })
    .use(authenticated(deps))
    .post('/workflows/:id/triggers', async ({ caller, requestId, params, body, request, set }) => {
      set.status = 201
      return envelope(requestId, toTrigger(await triggers.createTrigger(deps, caller, params.id, body, writeKey(request)), baseOf(deps, request)))
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
    .post('/workflows/:id/triggers/:trigger_id/rotate', async ({ caller, requestId, params, request }) =>
      envelope(requestId, toTrigger(await triggers.rotateHookToken(deps, caller, params.id, params.trigger_id), baseOf(deps, request))), {
      params: RotateTriggerParams,
      response: { 200: Envelope(Trigger, 'The trigger with its new URL; the old one no longer works'), ...errors(403, 404, 409, 422) },
      detail: {
        tags,
        summary: 'Give a webhook trigger\'s URL a new token (developer)',
        description: 'Answers the trigger with its new url; the old url stops working at once (404). A schedule has no url: 409. See docs/triggers.md.',
        operationId: 'rotateTriggerToken',
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
 * POST /v1/hooks/{trigger_id}/{token}: no API key (src/routes/plugins/auth.ts lets these paths through).
 * Registered outside the /v1 group, so the API-key hooks of the other routes (caller, audit) never
 * run here. The order is: the caller's address is not refused for wrong tokens (Redis only), the
 * token's shape, the trigger and its token (the one database read), its rate limit, its signature,
 * the replay of a signed delivery, the Idempotency-Key, the run.
 */
export function hookRoutes(deps: Deps) {
  return new Elysia({ name: 'routes.hooks', prefix: `${deps.config.basePath}/v1` })
    .post('/hooks/:trigger_id/:token', async ({ params, body, request, set, server }) => {
      const state = stateOf(request)
      const address = server?.requestIP(request)?.address ?? 'unknown'
      await refusedAddress(deps, address)
      const trigger = hooks.HOOK_TOKEN.test(params.token) ? await hooks.findHook(deps, params.trigger_id, params.token) : null
      if (!trigger) {
        await wrongToken(deps, address)
        throw new AppError('not_found', 'no webhook trigger has this URL; GET /v1/triggers/{id} answers its url (rotating the token changes it)')
      }
      await takeToken(deps, trigger.id, set)
      const call: HookCall = {
        body: body ?? null,
        raw: state.raw ?? '',
        query: Object.fromEntries(new URL(request.url).searchParams),
        headers: Object.fromEntries(request.headers),
      }
      const deliveryId = hooks.checkSignature(deps, trigger, call)
      if (deliveryId !== null) {
        const first = await hooks.claimDelivery(deps, trigger.id, deliveryId)
        if (first !== null) return { request_id: state.id, run_id: first || null, status: 'replayed' as const }
      }
      let runId: string | null = null
      try {
        // Idempotency records are scoped by who sends them: for a hook, the trigger.
        state.caller = { keyId: `hook:${trigger.id}`, userId: `webhook:${trigger.id}`, isRoot: false, workspaceId: trigger.workspace_id, roleLimit: 'readonly', issuedBy: null }
        const replay = await beginIdempotency(deps, request, state)
        if (replay) return replay as never
        const run = await hooks.runHook(deps, trigger, call, state.id, state.idem?.write)
        runId = run.id
        set.status = 202
        // Typed as the 200 answer because Elysia types a plain return against it; the 202 schema still checks it.
        return { request_id: state.id, run_id: run.id, status: 'running' } as unknown as typeof HookReplayed.static
      } finally {
        if (deliveryId !== null) await hooks.settleDelivery(deps, trigger.id, deliveryId, runId)
      }
    }, {
      params: HookParams,
      response: { 200: Described(HookReplayed, 'A replayed delivery: nothing started; the first run\'s id'), 202: Described(HookStarted, 'A run started: its id'), ...errors(401, 403, 404, 409, 422) },
      detail: {
        operationId: 'fireHook',
        tags,
        summary: 'Call a webhook trigger: starts a run of its workflow (no API key; the URL\'s token is the credential)',
        description: 'The trigger\'s url (its id and a token of its own) is the credential. The body (JSON, or none), the query and the headers (names lower-case; never Authorization, Proxy-Authorization, Cookie or X-Api-Key) fill the trigger\'s input templates; a trigger with a secret reads only the body. With a secret the call is signed: Standard Webhooks (webhook-id, webhook-timestamp within 5 minutes, webhook-signature) or X-Signature-256: sha256=<hex HMAC-SHA256 of the raw body under the secret> (401 otherwise); a delivery id (webhook-id, X-GitHub-Delivery, X-Hook-Delivery) seen in the last 24 hours is a replay: 200 with status "replayed", and nothing starts. Idempotency-Key replays the first answer; calls are rate-limited per trigger (429 with Retry-After), and an address that sends 20 wrong URLs within a minute is refused (429) for a minute. Inputs that fail the workflow\'s checks are a 400 naming the input; a disabled trigger is 409.',
        // No API key is needed; one sent is ignored.
        security: [{}, { bearer: [] }],
      },
    })
    // The URL before hook tokens: refused without a lookup, and counted as a wrong token.
    .post('/hooks/:trigger_id', async ({ request, server }) => {
      const address = server?.requestIP(request)?.address ?? 'unknown'
      await refusedAddress(deps, address)
      await wrongToken(deps, address)
      throw new AppError('not_found', 'a hook URL is /v1/hooks/{trigger_id}/{token}: GET /v1/triggers/{id} answers the trigger\'s url')
    }, {
      params: t.Object({ trigger_id: t.String() }),
      // Not an operation of the API: left out of the OpenAPI document (docs/triggers.md says why it answers).
      detail: { hide: true },
    })
}

/**
 * Wrong hook URLs per client address: 20 in a burst, refilled at one every 3 s. An address that runs
 * out is refused for WRONG_TOKEN_BLOCK_MS before any lookup (one Redis read a call, no database), so
 * a flood of guessed tokens costs the database at most 20 reads a minute per address.
 */
const WRONG_TOKENS = { capacity: 20, refillPerSecond: 1 / 3 }
const WRONG_TOKEN_BLOCK_MS = 60_000

async function refusedAddress(deps: Deps, address: string): Promise<void> {
  const ms = await deps.redis.pttl(`hook-refused:${address}`)
  if (ms === -2) return
  const retry = String(Math.max(1, Math.ceil((ms < 0 ? WRONG_TOKEN_BLOCK_MS : ms) / 1000)))
  throw new AppError('rate_limited', `too many calls to unknown hook URLs from this address; retry in ${retry} s`, { headers: { 'retry-after': retry } })
}

async function wrongToken(deps: Deps, address: string): Promise<void> {
  const r = await deps.redis.take(`hook-wrong:${address}`, WRONG_TOKENS)
  if (r.allowed) return
  await deps.redis.set(`hook-refused:${address}`, '1', WRONG_TOKEN_BLOCK_MS)
  const retry = String(WRONG_TOKEN_BLOCK_MS / 1000)
  throw new AppError('rate_limited', `too many calls to unknown hook URLs from this address; retry in ${retry} s`, { headers: { 'retry-after': retry } })
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
