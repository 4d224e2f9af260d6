import { Elysia } from 'elysia'
import type { Caller } from '../../domain/access'
import type { Deps } from '../../deps'
import { AppError } from '../../lib/errors'
import { audit } from './audit'
import { idempotency } from './idempotency'
import { stateOf, type RequestState } from './request-state'

const BEARER = /^Bearer +([A-Za-z0-9._~+\/=-]{1,512})$/i

/**
 * Runs in onRequest for every /v1 path, before parsing and routing: a request without a valid key
 * learns nothing else (not even whether its body parses or its route exists). Then the per-key token
 * bucket, whose state answers in the RateLimit-* headers: sent here and not waited for, so that the
 * round trip to Redis overlaps the body's parsing and validation. Its answer is waited for before
 * the route's handler runs (`rateLimited`, from `authenticated`) and before any error is answered
 * (errors.ts), so a refused request still gets its 429 (or 503) and nothing else, as if it had been
 * waited for here.
 */
export async function authenticateRequest(
  deps: Deps,
  request: Request,
  state: RequestState,
  set: { headers: Record<string, string | number> },
) {
  const header = request.headers.get('authorization')
  const m = header ? BEARER.exec(header) : null
  if (!m) {
    throw new AppError('unauthenticated', header ? 'Authorization must be "Bearer <API key>"' : 'missing Authorization: Bearer <API key>', {
      headers: { 'www-authenticate': 'Bearer realm="api"' },
    })
  }
  state.caller = await deps.apiKeys.authenticate(m[1]!)
  const { perSecond, burst } = deps.config.rateLimit
  state.limit = deps.redis.take(`key:${state.caller.keyId}`, { capacity: burst, refillPerSecond: perSecond }).then(
    (r) => {
      set.headers['ratelimit-limit'] = String(burst)
      set.headers['ratelimit-remaining'] = String(r.remaining)
      set.headers['ratelimit-reset'] = String(Math.ceil(r.resetMs / 1000))
      set.headers['ratelimit-policy'] = `${burst};w=${Math.ceil(burst / perSecond)}`
      if (r.allowed) return null
      const retry = String(Math.max(1, Math.ceil(r.retryAfterMs / 1000)))
      return new AppError('rate_limited', `rate limit of ${perSecond} requests/s (bursts of ${burst}) exceeded for this API key; retry in ${retry} s`, {
        headers: { 'retry-after': retry },
      })
    },
    // Never a rejected promise left unawaited: the failure (Redis unreachable: 503) is its answer.
    (err: unknown) => (err instanceof Error ? err : new Error(String(err))),
  )
}

/**
 * The rate limit's answer, waited for (once): throws the refusal. Before a route's handler, and
 * before an error is answered (errors.ts: a refused request learns nothing else).
 */
export async function rateLimited(state: RequestState): Promise<void> {
  const limit = state.limit
  if (!limit) return
  state.limit = undefined
  const refusal = await limit
  if (refusal) throw refusal
}

/** Authentication and the rate limit of every /v1 request, in onRequest (see authenticateRequest). */
export function authentication(deps: Deps) {
  const apiPrefix = `${deps.config.basePath}/v1/`
  const hookPrefix = `${apiPrefix}hooks/`
  return new Elysia({ name: 'conventions.authentication' }).onRequest(async ({ request, set }) => {
    const state = stateOf(request)
    if (state.path.startsWith(apiPrefix) && !isHookCall(request, state.path, hookPrefix)) await authenticateRequest(deps, request, state, set)
  })
}

/**
 * A call to a webhook trigger (POST /v1/hooks/{trigger_id}/{token}, src/routes/triggers.ts) needs no
 * API key: the URL's token is the credential, and the trigger checks its own signature and rate limit.
 * Only that method and paths of one or two segments (one: the URL before tokens, refused there).
 */
function isHookCall(request: Request, path: string, hookPrefix: string): boolean {
  if (request.method !== 'POST' || !path.startsWith(hookPrefix) || path.length === hookPrefix.length) return false
  const slash = path.indexOf('/', hookPrefix.length)
  return slash < 0 || (slash > hookPrefix.length && slash < path.length - 1 && !path.includes('/', slash + 1))
}

/**
 * Gives /v1 routes their `caller` and `requestId`; before their handler, once the body has been
 * validated, in this order: the rate limit, the Idempotency-Key of a write (idempotency.ts: a replay
 * answers here, and the hooks after it do not run), the audit trail's pending entry (audit.ts).
 * `as('scoped')` hands the hooks of the two plugins on to the route plugin that uses this one.
 */
export function authenticated(deps: Deps) {
  return new Elysia({ name: 'authenticated' })
    .derive({ as: 'scoped' }, ({ request }) => {
      const state = stateOf(request)
      return { caller: state.caller as Caller, requestId: state.id }
    })
    // First: the rate limit sent in onRequest (authenticateRequest) decides before anything is done.
    .onBeforeHandle({ as: 'scoped' }, ({ request }) => rateLimited(stateOf(request)))
    .use(idempotency(deps))
    .use(audit(deps))
    .as('scoped')
}
