import { Elysia } from 'elysia'
import type { Deps } from '../../deps'
import { loggedPath, stateOf, type RequestState } from './request-state'

type Set = { headers: Record<string, string | number>; status?: number | string }

export interface Responder {
  finish(request: Request, set: Set, status: number, body: unknown, route: string, extraHeaders?: Record<string, string>): Response | Promise<Response>
}

/**
 * What a concern does to an answer on its way out, before it is sent (the audit record of a write:
 * audit.ts; the Idempotency-Key's record: idempotency.ts): a promise the answer waits for, or null
 * when it has nothing to do for this answer.
 */
export type AnswerStep = (state: RequestState, status: number, body: unknown, text: string, headers: Record<string, string>) => Promise<void> | null

/**
 * The one exit of every JSON answer, success or error (the errors plugin calls it too): serialised
 * once into the Response with every header, the `steps` run one after the other when they have
 * something to do, then the metrics and the access log. Synchronous on the common path, so it costs
 * no extra promise (bench/README.md, the HTTP stack).
 */
export function responder(deps: Deps, steps: readonly AnswerStep[]): Responder {
  const { log, metrics } = deps
  /** Synchronous unless a step has something to do, so the common path costs no extra promise. */
  function finish(
    request: Request,
    set: Set,
    status: number,
    body: unknown,
    route: string,
    extraHeaders?: Record<string, string>,
  ): Response | Promise<Response> {
    const state = stateOf(request)
    const text = JSON.stringify(body)
    // set.headers belongs to this request alone; it becomes the response's headers as it is.
    const headers = set.headers as Record<string, string>
    headers['content-type'] = 'application/json'
    if (extraHeaders) Object.assign(headers, extraHeaders)
    let pending: Promise<void> | null = null
    for (const step of steps) pending = pending ? pending.then(() => step(state, status, body, text, headers) ?? undefined) : step(state, status, body, text, headers)
    if (!pending) return respond(request, set, state, route, status, text, headers)
    return pending.then(() => respond(request, set, state, route, status, text, headers))
  }

  function respond(
    request: Request,
    set: Set,
    state: RequestState,
    route: string,
    status: number,
    text: string,
    headers: Record<string, string>,
  ) {
    const seconds = (performance.now() - state.start) / 1000
    metrics.observe(request.method, route, status, seconds)
    if (status >= 500) log.error({ request_id: state.id, method: request.method, path: loggedPath(state.path), status }, 'request failed')
    else deps.access({ request_id: state.id, method: request.method, path: loggedPath(state.path), route, status, ms: Math.round(seconds * 10000) / 10 })
    const response = new Response(text, { status, headers })
    // Everything is in the Response now. Left in `set`, the headers would make Elysia copy it into a
    // second Response, merging them again: a third of /healthz's CPU (bench/README.md).
    set.headers = {}
    set.status = 200
    return response
  }

  return { finish }
}

/** Plain objects and arrays a route returns, serialised through the one exit; Responses, static files and text pass through. */
export function respond(r: Responder) {
  return new Elysia({ name: 'conventions.respond' }).mapResponse({ as: 'global' }, ({ response, request, set, route }) => {
    if (response === null || typeof response !== 'object' || (Object.getPrototypeOf(response) !== Object.prototype && !Array.isArray(response))) return
    const status = typeof set.status === 'number' ? set.status : 200
    return r.finish(request, set, status, response, route)
  })
}
