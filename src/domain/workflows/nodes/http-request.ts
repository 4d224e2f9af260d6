import { pinnedFetch, resolveDestination, UnsafeUrlError, urlPolicy, type Destination, type UrlPolicy } from '../../../lib/net-guard'
import { scrubUrl, shownUrl } from '../../../lib/redact-url'
import { renderDeep, renderText } from '../templates'
import { NodeError, type Executor, type Variables } from '../types'
import { abortedError, invalidConfig } from './common'
import { injectTrace, SpanKind, tracingOn, withSpan } from '../../../lib/tracing'

export const USER_AGENT = 'agent-platform-api-workflows/0.1.0'
const METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD']
const DEFAULT_TIMEOUT_MS = 10_000
const MAX_TIMEOUT_MS = 60_000
/** The response body is kept in the run's state and events. */
export const MAX_RESPONSE_BYTES = 1024 * 1024

/**
 * An HTTP call under the webhook SSRF rules (docs/webhooks.md, "Registering"; WEBHOOK_ALLOW_HTTP and
 * WEBHOOK_ALLOW_PRIVATE_NETWORKS): the host is resolved and every address checked when the node runs,
 * and the connection is pinned to the checked address (src/lib/net-guard.ts, as for webhook
 * deliveries). Redirects are not followed: a 3xx is the answer, with its `location` header, since
 * following one would reach a host that was never checked.
 *
 * An answer of any status is the node's output `{ status, headers, body }`: a 404 or a 500 is data the
 * graph can branch on (a condition over `nodes.<id>.output.status`), not a failure of the node. The
 * node fails on what leaves no answer: a refused URL (`ssrf_refused`), a network error or a body over
 * 1 MB (`http_error`), the time-out (`http_timeout`, the whole call: lookup, connect, body).
 */
export const httpRequest: Executor = async (node, ctx) => {
  const cfg = node.config
  const method = cfg.method ?? 'GET'
  if (typeof method !== 'string' || !METHODS.includes(method)) throw invalidConfig(`config.method must be one of ${METHODS.join(', ')}`)
  if (typeof cfg.url !== 'string') throw invalidConfig('config.url must be a template string')
  const timeoutMs = cfg.timeout_ms ?? DEFAULT_TIMEOUT_MS
  if (typeof timeoutMs !== 'number' || !Number.isInteger(timeoutMs) || timeoutMs < 1 || timeoutMs > MAX_TIMEOUT_MS) {
    throw invalidConfig(`config.timeout_ms must be an integer from 1 to ${MAX_TIMEOUT_MS}`)
  }
  const raw = renderText(cfg.url, ctx.vars).trim()
  const headers = new Headers({ 'user-agent': USER_AGENT })
  if (cfg.headers !== undefined) {
    if (typeof cfg.headers !== 'object' || cfg.headers === null || Array.isArray(cfg.headers)) throw invalidConfig('config.headers must be an object of templates')
    for (const [name, value] of Object.entries(cfg.headers)) {
      if (typeof value !== 'string') throw invalidConfig(`config.headers.${name} must be a template string`)
      try {
        headers.set(name, renderText(value, ctx.vars))
      } catch (err) {
        throw invalidConfig(`config.headers.${name}: ${(err as Error).message}`)
      }
    }
  }
  const body = requestBody(cfg.body, method, headers, ctx.vars)

  const policy = urlPolicy(ctx.config)
  return { output: await sendHttp({ method, raw, headers, body, timeoutMs, policy, signal: ctx.signal }) }
}

export interface HttpCall {
  method: string
  /** The URL as written (messages name only its scheme, host and port: src/lib/redact-url.ts). */
  raw: string
  headers: Headers
  body?: string
  timeoutMs: number
  policy: UrlPolicy
  /** The caller's own abort (run cancelled, client gone): answers `abortedError()`. */
  signal: AbortSignal
}

/**
 * The call itself, shared with agents' `http` tools: the URL checked, resolved and pinned, no
 * redirect followed, the answer read up to MAX_RESPONSE_BYTES. Failures are NodeErrors with the codes
 * above.
 */
export async function sendHttp(call: HttpCall): Promise<{ status: number; headers: Record<string, string>; body: unknown }> {
  const { method, raw, headers, timeoutMs, policy } = call
  const timeout = AbortSignal.timeout(timeoutMs)
  const signal = AbortSignal.any([call.signal, timeout])
  const failed = (err: unknown): NodeError => {
    if (call.signal.aborted) return abortedError()
    if (timeout.aborted) return new NodeError('http_timeout', `${method} ${shownUrl(raw)} got no complete answer within ${timeoutMs} ms`)
    if (err instanceof NodeError) return err
    const e = err as Error & { code?: string }
    return new NodeError('http_error', scrubUrl(`${method} ${shownUrl(raw)} failed: ${e?.code ?? e?.name ?? 'error'}${e?.message ? ` (${e.message})` : ''}`, raw).slice(0, 500))
  }

  let dest: Destination
  try {
    dest = await resolveDestination(raw, policy, signal)
  } catch (err) {
    if (signal.aborted) throw failed(err)
    if (!(err instanceof UnsafeUrlError)) throw err
    // A name that does not resolve is not a refusal: it may resolve on another attempt.
    if (err.transient) throw new NodeError('http_error', `url ${shownUrl(raw)}: ${err.message}`)
    throw new NodeError('ssrf_refused', `url ${shownUrl(raw)} ${err.message}`)
  }
  if (tracingOn) return withSpan(`HTTP ${method}`, () => ({ 'http.request.method': method, 'server.address': dest.url.hostname }), async (span) => {
    // The span is the receiver's parent; the URL's path and query (which may hold a token) are not recorded.
    injectTrace(headers)
    const answer = await fetchCapped(dest, call, signal, failed)
    span.setAttribute('http.response.status_code', answer.status)
    return answer
  }, { kind: SpanKind.CLIENT })
  return fetchCapped(dest, call, signal, failed)
}

async function fetchCapped(dest: Destination, call: HttpCall, signal: AbortSignal, failed: (err: unknown) => NodeError) {
  const { method, headers, body } = call
  try {
    const res = await pinnedFetch(dest, { method, headers, body, signal })
    const text = await readCapped(res)
    return { status: res.status, headers: Object.fromEntries(res.headers), body: parseBody(text, res.headers.get('content-type')) }
  } catch (err) {
    throw failed(err)
  }
}

/**
 * A string body (a template that rendered to text) is sent as it is; anything else (an object or
 * array of templates, or a lone placeholder holding one) as JSON with `content-type: application/json`
 * unless the headers name another type.
 */
function requestBody(config: unknown, method: string, headers: Headers, vars: Variables): string | undefined {
  if (config === undefined || config === null) return undefined
  if (method === 'GET' || method === 'HEAD') throw invalidConfig(`a ${method} request takes no body`)
  const rendered = renderDeep(config, vars)
  if (typeof rendered === 'string') return rendered
  if (!headers.has('content-type')) headers.set('content-type', 'application/json')
  return JSON.stringify(rendered ?? null)
}

/** The body as text, at most MAX_RESPONSE_BYTES; beyond that the download is cut and the node fails. */
async function readCapped(res: Response): Promise<string> {
  if (!res.body) return ''
  const declared = Number(res.headers.get('content-length'))
  if (declared > MAX_RESPONSE_BYTES) {
    void res.body.cancel().catch(() => {})
    throw new NodeError('http_error', `the response body is ${declared} bytes; at most ${MAX_RESPONSE_BYTES} are read`)
  }
  const reader = res.body.getReader()
  const chunks: Uint8Array[] = []
  let size = 0
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    size += value.byteLength
    if (size > MAX_RESPONSE_BYTES) {
      void reader.cancel().catch(() => {})
      throw new NodeError('http_error', `the response body exceeds ${MAX_RESPONSE_BYTES} bytes`)
    }
    chunks.push(value)
  }
  return new TextDecoder().decode(Buffer.concat(chunks))
}

/** JSON when the answer says so (`application/json`, `application/problem+json`...) and parses; else text. */
function parseBody(text: string, contentType: string | null): unknown {
  const type = contentType?.split(';')[0]?.trim().toLowerCase() ?? ''
  if (!(type === 'application/json' || type.endsWith('+json')) || text === '') return text
  try {
    return JSON.parse(text)
  } catch {
    return text
  }
}
