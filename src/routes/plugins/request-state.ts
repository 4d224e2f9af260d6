import type { Caller } from '../../domain/access'
import { newId } from '../../lib/ids'
import type { WriteKey } from '../../store/idempotent-writes'

/** What a write will record in the audit trail if it succeeds (audit.ts): kept on the request between its two hooks. */
export interface PendingAudit {
  action: string
  workspaceId: string | null
  params: Record<string, string>
}

/** What the hooks of one request share: kept on the Request, gone with it. */
export interface RequestState {
  id: string
  start: number
  path: string
  /** The raw JSON body as received, for the idempotency fingerprint. */
  raw?: string
  caller?: Caller
  /** Set when this request holds an Idempotency-Key record that must be completed. */
  idem?: { key: string; fingerprint: string; write: WriteKey }
  /** Set when this request is a write the audit trail records if it succeeds (audit.ts). */
  audit?: PendingAudit
  /**
   * The rate limit's answer while it is on its way (auth.ts): the refusal (429, or 503 when Redis
   * cannot be reached), or null. Settled before the route's handler and before any error answer.
   */
  limit?: Promise<Error | null>
}

// A symbol-keyed property on the Request rather than a WeakMap: a WeakMap entry per request is an
// ephemeron the collector must trace, measurable at tens of thousands of requests per second.
const STATE = Symbol('request-state')
type WithState = Request & { [STATE]?: RequestState }

export function initState(request: Request, id: string, path: string): RequestState {
  const state: RequestState = { id, start: performance.now(), path }
  ;(request as WithState)[STATE] = state
  return state
}

export function stateOf(request: Request): RequestState {
  let state = (request as WithState)[STATE]
  if (!state) {
    // Only reachable if a hook runs before onRequest (it should not); answer with a fresh id anyway.
    state = initState(request, newId('req'), pathOf(request.url))
  }
  return state
}

export function pathOf(url: string): string {
  const start = url.indexOf('/', url.indexOf('//') + 2)
  if (start < 0) return '/'
  const q = url.indexOf('?', start)
  return q < 0 ? url.slice(start) : url.slice(start, q)
}

const HOOK_TOKEN_IN_PATH = /(\/v1\/hooks\/[^/]*\/)[^/]+$/

/** A path as logs show it: a hook URL's token (its credential) is replaced by `***`. */
export function loggedPath(path: string): string {
  return path.replace(HOOK_TOKEN_IN_PATH, '$1***')
}
