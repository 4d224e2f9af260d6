import type { Caller } from '../../domain/access'

/** What the hooks of one request share: kept beside the Request, gone with it. */
export interface RequestState {
  id: string
  start: number
  path: string
  /** The raw JSON body as received, for the idempotency fingerprint. */
  raw?: string
  caller?: Caller
  /** Set when this request holds an Idempotency-Key record that must be completed. */
  idem?: { key: string; fingerprint: string }
}

const states = new WeakMap<Request, RequestState>()

export function initState(request: Request, id: string, path: string): RequestState {
  const state: RequestState = { id, start: performance.now(), path }
  states.set(request, state)
  return state
}

export function stateOf(request: Request): RequestState {
  let state = states.get(request)
  if (!state) {
    // Only reachable if a hook runs before onRequest (it should not); answer with a fresh id anyway.
    state = initState(request, `req_${crypto.randomUUID()}`, pathOf(request.url))
  }
  return state
}

export function pathOf(url: string): string {
  const start = url.indexOf('/', url.indexOf('//') + 2)
  if (start < 0) return '/'
  const q = url.indexOf('?', start)
  return q < 0 ? url.slice(start) : url.slice(start, q)
}
