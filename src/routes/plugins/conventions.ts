import { Elysia, ValidationError } from 'elysia'
import type { Deps } from '../../deps'
import { recordAudit } from '../../domain/audit'
import { AppError, errorBody, invalid, type ErrorDetail } from '../../lib/errors'
import { newId } from '../../lib/ids'
import { RedisUnavailableError } from '../../store/redis'
import { CONSOLE_CSP } from '../console'
import { DOCS_CSP } from '../docs'
import { authenticateRequest } from './auth'
import { completeIdempotency } from './idempotency'
import { initState, pathOf, stateOf, type RequestState } from './request-state'

const CLIENT_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/
/** `application/json` or a structured `+json` type (RFC 6839), parameters aside. */
const JSON_TYPE = /^application\/([a-z0-9.!#$&^_-]+\+)?json$/i
const MULTIPART_TYPE = /^multipart\/form-data\b/i
/**
 * Bytes that are not UTF-8 are refused, not replaced with U+FFFD; a leading byte order mark is dropped.
 * Reading the bytes and decoding them costs ~4 µs more per 1 KB body than `request.text()` (measured
 * on Requests built in a loop), nothing beside a write's round trip to the database.
 */
const UTF8 = new TextDecoder('utf-8', { fatal: true })
/** The routes that take uploads (the only multipart bodies the API accepts). */
const UPLOAD_PATH = /\/knowledge-bases\/[^/]+\/documents$/

/**
 * The body of a multipart request to an upload route, left unread: the route streams it from
 * `request.body` itself (src/domain/knowledge/upload.ts), so a 50 MiB file is never parsed into
 * memory first.
 */
export const STREAMED_BODY: Readonly<{ streamed: true }> = Object.freeze({ streamed: true })

/**
 * The conventions every route shares, registered once: request ids, security headers, body limits,
 * authentication of /v1, JSON parsing, the error mapping to `{ request_id, error }`, serialisation,
 * idempotency completion, metrics and the access log.
 */
export function conventions(deps: Deps) {
  const { config, log, metrics } = deps
  const apiPrefix = `${config.basePath}/v1/`
  const security: Record<string, string> = {
    'x-content-type-options': 'nosniff',
    'x-frame-options': 'DENY',
    'referrer-policy': 'no-referrer',
    'cache-control': 'no-store',
  }
  if (config.tls) security['strict-transport-security'] = 'max-age=31536000; includeSubDomains'
  // The reference page at /docs loads its own script and styles, from this service only.
  const docsSecurity = { ...security, 'content-security-policy': DOCS_CSP }
  security['content-security-policy'] = "default-src 'none'; frame-ancestors 'none'"
  // The console's page and assets: its own scripts and styles, nothing inline, no other origin.
  const consolePrefix = `${config.basePath}/console`
  const consoleSecurity = { ...security, 'content-security-policy': CONSOLE_CSP }

  /**
   * The one exit of every JSON answer, success or error. Synchronous unless an idempotency record
   * must be completed, so the common path costs no extra promise.
   */
  function finish(
    request: Request,
    set: { headers: Record<string, string | number>; status?: number | string },
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
    const audit = state.audit && status < 400 ? recordAudit(deps, state, status, body) : null
    if (!state.idem && !audit) return respond(request, set, state, route, status, text, headers)
    return (audit ?? Promise.resolve())
      .then(() => state.idem && completeIdempotency(deps.redis, state, status, text, headers, log))
      .then(() => respond(request, set, state, route, status, text, headers))
  }

  function respond(
    request: Request,
    set: { headers: Record<string, string | number>; status?: number | string },
    state: RequestState,
    route: string,
    status: number,
    text: string,
    headers: Record<string, string>,
  ) {
    const seconds = (performance.now() - state.start) / 1000
    metrics.observe(request.method, route, status, seconds)
    if (status >= 500) log.error({ request_id: state.id, method: request.method, path: state.path, status }, 'request failed')
    else deps.access({ request_id: state.id, method: request.method, path: state.path, route, status, ms: Math.round(seconds * 10000) / 10 })
    const response = new Response(text, { status, headers })
    // Everything is in the Response now. Left in `set`, the headers would make Elysia copy it into a
    // second Response, merging them again: a third of /healthz's CPU (bench/README.md).
    set.headers = {}
    set.status = 200
    return response
  }

  return new Elysia({ name: 'conventions' })
    .onRequest(async ({ request, set }) => {
      const incoming = request.headers.get('x-request-id')
      const id = incoming && CLIENT_REQUEST_ID.test(incoming) ? incoming : newId('req')
      const state = initState(request, id, pathOf(request.url))
      Object.assign(
        set.headers,
        state.path.startsWith('/docs') ? docsSecurity : state.path.startsWith(consolePrefix) ? consoleSecurity : security,
      )
      set.headers['x-request-id'] = id
      if (request.method !== 'GET' && request.method !== 'HEAD') {
        const length = Number(request.headers.get('content-length') ?? 0)
        const upload = MULTIPART_TYPE.test(request.headers.get('content-type') ?? '') && UPLOAD_PATH.test(state.path)
        const limit = upload ? config.maxUploadBytes + 65_536 : config.maxJsonBytes
        if (length > limit) throw tooLarge(limit)
      }
      // Postgres text cannot hold U+0000: a query parameter carrying one is the client's error (400
      // naming it), not a failed statement. Only an escape can put it in a URL.
      if (request.url.includes('%00')) refuseNulInQuery(request.url)
      if (state.path.startsWith(apiPrefix)) await authenticateRequest(deps, request, state, set)
    })
    .onParse({ as: 'global' }, async ({ request, contentType }) => {
      // Multipart bodies to an upload route are left for the route to stream (STREAMED_BODY); every
      // other body is JSON labelled as JSON (docs/api.md, request bodies). A form sent elsewhere is
      // refused here: left to Elysia, a route declaring `parse: 'json'` would parse it as JSON.
      if (MULTIPART_TYPE.test(contentType) && UPLOAD_PATH.test(stateOf(request).path)) return STREAMED_BODY
      const bytes = await request.arrayBuffer()
      if (bytes.byteLength > config.maxJsonBytes) throw tooLarge(config.maxJsonBytes)
      let text: string
      try {
        text = UTF8.decode(bytes)
      } catch {
        throw new AppError('invalid_json', 'body is not valid UTF-8')
      }
      stateOf(request).raw = text
      // No body at all (a POST to /archive, /ping, /cancel...): whatever its Content-Type says.
      if (text.trim() === '') return null
      // Elysia's contentType stops at the first ';': the charset is in the header itself.
      refuseNonJsonType(request.headers.get('content-type') ?? '')
      if (nestedTooDeep(text)) throw new AppError('invalid_json', `body is nested deeper than ${MAX_JSON_DEPTH} levels`)
      let body: unknown
      try {
        body = JSON.parse(text)
      } catch (err) {
        throw new AppError('invalid_json', `body is not valid JSON: ${(err as Error).message}`)
      }
      // Only an escape can put U+0000 or half a surrogate pair in a string: check just then.
      if (/\\u(0000|d[89a-f])/i.test(text)) refuseUnstorable(body, '')
      return body
    })
    .onError({ as: 'global' }, ({ code, error, request, set, route }) => {
      let err: AppError
      let down: ReturnType<typeof unreachable>
      if (error instanceof AppError) err = error
      else if (code === 'PARSE') err = error.cause instanceof AppError ? error.cause : new AppError('invalid_json', 'body is not valid JSON')
      else if (code === 'VALIDATION' && (error as ValidationError).type === 'response') {
        // Our own answer failed its schema: a bug of ours, not the client's request.
        log.error({ request_id: stateOf(request).id, err: (error as ValidationError).all.slice(0, 5) }, 'answer failed its response schema')
        err = new AppError('internal_error', 'internal error; quote the request_id when reporting it')
      } else if (code === 'VALIDATION') err = fromValidation(error as ValidationError)
      else if (code === 'NOT_FOUND') err = new AppError('not_found', `no route ${request.method} ${stateOf(request).path}`)
      else if (code === 'INVALID_COOKIE_SIGNATURE' || code === 'INVALID_FILE_TYPE') err = new AppError('validation_error', String((error as Error).message))
      else if ((down = unreachable(error))) {
        // Redis or the database cannot be reached: the client should retry; nothing was lost.
        log.warn({ request_id: stateOf(request).id, err: (error as Error).message }, 'a dependency is unreachable')
        err = new AppError('unavailable', `${down} is unreachable; retry in a few seconds`, { headers: { 'retry-after': '5' } })
      } else {
        log.error({ request_id: stateOf(request).id, err: error }, 'unhandled error')
        err = new AppError('internal_error', 'internal error; quote the request_id when reporting it')
      }
      // No route: refused before routing (authentication, rate limit, size) or no route matched.
      return finish(request, set, err.status, errorBody(stateOf(request).id, err), route || 'unrouted', err.extra.headers)
    })
    .mapResponse({ as: 'global' }, ({ response, request, set, route }) => {
      // Only plain objects are ours to serialise; Responses, static handlers and text pass through.
      if (response === null || typeof response !== 'object' || (Object.getPrototypeOf(response) !== Object.prototype && !Array.isArray(response))) return
      const status = typeof set.status === 'number' ? set.status : 200
      return finish(request, set, status, response, route)
    })
}

/**
 * A body must come as `application/json` (or a `+json` type), with no charset or `charset=utf-8`:
 * JSON between systems is UTF-8 (RFC 8259 section 8.1), and a form or a body without a type is
 * refused rather than guessed at.
 */
function refuseNonJsonType(contentType: string): void {
  if (!contentType) throw new AppError('invalid_json', 'a request body needs Content-Type: application/json')
  const [type = '', ...params] = contentType.split(';')
  if (!JSON_TYPE.test(type.trim())) {
    throw new AppError('invalid_json', `Content-Type ${type.trim()} is not supported here; send application/json`)
  }
  for (const param of params) {
    const [name = '', value = ''] = param.split('=')
    if (name.trim().toLowerCase() !== 'charset') continue
    const charset = value.trim().replace(/^"(.*)"$/, '$1').toLowerCase()
    if (charset !== 'utf-8' && charset !== 'utf8') {
      throw new AppError('invalid_json', `charset ${charset || '(empty)'} is not supported; send application/json in UTF-8`)
    }
  }
}

/**
 * Elysia's validation error serialises the whole value recursively: 5,000 levels cost 0.1 s, 20,000
 * levels 4.5 s, and 100,000 (200 KB) overflow the stack. No body of this API nests anywhere near 256.
 */
const MAX_JSON_DEPTH = 256

function nestedTooDeep(text: string): boolean {
  if (text.length <= MAX_JSON_DEPTH) return false
  let depth = 0
  let inString = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === 92) i++ // backslash: skip the escaped character
      else if (c === 34) inString = false
    } else if (c === 34) inString = true
    else if (c === 123 || c === 91) {
      if (++depth > MAX_JSON_DEPTH) return true
    } else if (c === 125 || c === 93) depth--
  }
  return false
}

/** Postgres text and jsonb cannot hold U+0000 or lone surrogates: a 400 naming the field, not a 500. */
function refuseUnstorable(value: unknown, path: string): void {
  if (typeof value === 'string') {
    if (value.includes('\u0000') || !value.isWellFormed()) throw invalid(path || 'body', 'must not contain U+0000 or unpaired surrogates')
  } else if (value && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) {
      refuseUnstorable(k, path)
      refuseUnstorable(v, path ? `${path}.${k}` : k)
    }
  }
}

/** postgres.js's codes for a connection that failed or went away (its errors carry no class to test). */
const CONNECTION_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH', 'CONNECTION_CLOSED', 'CONNECTION_ENDED', 'CONNECTION_DESTROYED', 'CONNECT_TIMEOUT'])

/**
 * Which dependency an error says is unreachable, if any: Redis (RedisUnavailableError), or the
 * database: a failed or lost connection, or a server shutting down or refusing connections (SQLSTATE
 * class 08, 57P01-57P03).
 */
function unreachable(error: unknown): 'Redis' | 'the database' | null {
  if (error instanceof RedisUnavailableError) return 'Redis'
  const code = (error as { code?: unknown })?.code
  if (typeof code !== 'string') return null
  if (CONNECTION_CODES.has(code) || code.startsWith('08') || /^57P0[1-3]$/.test(code)) return 'the database'
  return null
}

function refuseNulInQuery(url: string): void {
  for (const [name, value] of new URL(url).searchParams) {
    if (name.includes('\u0000') || value.includes('\u0000')) throw invalid(`query.${name.replaceAll('\u0000', '')}`, 'must not contain U+0000')
  }
}

function tooLarge(limit: number) {
  return new AppError('payload_too_large', `request body is larger than ${limit} bytes`)
}

/** TypeBox failures become `validation_error` with every failing path (docs/decisions.md, "HTTP conventions"). */
function fromValidation(error: ValidationError): AppError {
  const where = error.type === 'body' ? '' : `${error.type}.`
  const details: ErrorDetail[] = []
  const seen = new Set<string>()
  for (const e of error.all.slice(0, 20)) {
    const path = (where + String((e as { path?: string }).path ?? '').replace(/^\//, '').replaceAll('/', '.')).replace(/\.$/, '') || 'body'
    if (seen.has(path)) continue
    seen.add(path)
    details.push({ path, message: (e as { summary?: string }).summary ?? e.message })
  }
  if (details.length === 0) details.push({ path: error.type || 'body', message: 'is invalid' })
  const first = details[0]!
  return new AppError('validation_error', `${first.path}: ${first.message}`, { param: first.path, details })
}
