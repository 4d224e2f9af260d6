import { Elysia } from 'elysia'
import { newId } from '../../lib/ids'
import { contextOfRequest, contextWith, endAfter, markError, runIn, SpanKind, startSpan, type Span } from '../../lib/tracing'
import { initState, pathOf, stateOf } from './request-state'

const CLIENT_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/

/**
 * Every request's id (the client's `X-Request-Id` when it is a sane one, else a new `req_` id), the
 * request's shared state (src/routes/plugins/request-state.ts) and the `x-request-id` answer header.
 * Registered first: every other hook reads the state it starts.
 */
export function requestId() {
  return new Elysia({ name: 'conventions.request-id' }).onRequest(({ request, set }) => {
    const incoming = request.headers.get('x-request-id')
    const id = incoming && CLIENT_REQUEST_ID.test(incoming) ? incoming : newId('req')
    initState(request, id, pathOf(request.url))
    set.headers['x-request-id'] = id
  })
}

const SPAN = Symbol('request-span')
const READS = new Set(['GET', 'HEAD'])
type WithSpan = Request & { [SPAN]?: Span }

/**
 * The server span of every request (docs/observability.md), registered only when tracing is on:
 * Elysia's `wrap` runs each request's handler inside the span's context (an incoming `traceparent`
 * is its parent), so the spans of what the request does (runs it stores, model calls) are its
 * children. The route template names it once matched; paths themselves are never recorded (an
 * inbound hook's path carries its token). A read (GET, HEAD) starts nothing that would be its child,
 * so its span is recorded without being made the active context: with an active context every await
 * of the request carries it, which cost a GET ~12 % of its throughput (bench/README.md, "Tracing").
 */
export function requestSpan() {
  return new Elysia({ name: 'conventions.request-span' })
    .wrap(((fn: (r: Request) => unknown) => (request: Request) => traceRequest(request, fn)) as never)
    .onTransform({ as: 'global' }, ({ request, route, params }) => {
      const span = (request as WithSpan)[SPAN]
      if (!span) return
      span.updateName(`${request.method} ${route}`)
      span.setAttribute('http.route', route)
      // The workspace a path names (/v1/workspaces/{id}/...); a restricted key's is added at the end.
      const p = params as Record<string, string> | undefined
      const ws = p?.workspace_id ?? (p?.id && route.includes('/v1/workspaces/:id') ? p.id : undefined)
      if (ws) span.setAttribute('workspace_id', ws)
    })
}

function traceRequest(request: Request, fn: (r: Request) => unknown): Promise<unknown> {
  const parent = contextOfRequest(request.headers)
  const span = startSpan(request.method, { 'http.request.method': request.method }, { parent, kind: SpanKind.SERVER })
  ;(request as WithSpan)[SPAN] = span
  // Ended once the answer is made (a failure fails it), as Elysia hands the Response back.
  return endAfter(span, async () => {
    const res = await (READS.has(request.method) ? fn(request) : runIn(contextWith(span, parent), () => fn(request)))
    describeAnswer(span, request, res)
    return res
  })
}

/** What the request answered, on its span: the request id, the status (a 5xx an error), a restricted key's workspace. */
function describeAnswer(span: Span, request: Request, res: unknown) {
  const status = res instanceof Response ? res.status : 200
  const state = stateOf(request)
  span.setAttribute('request_id', state.id)
  span.setAttribute('http.response.status_code', status)
  if (state.caller?.workspaceId) span.setAttribute('workspace_id', state.caller.workspaceId)
  if (status >= 500) markError(span, `answered ${status}`)
}
