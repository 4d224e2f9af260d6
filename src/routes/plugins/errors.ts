import { Elysia, ValidationError } from 'elysia'
import type { Logger } from 'pino'
import { AppError, errorBody, type ErrorDetail } from '../../lib/errors'
import { RedisUnavailableError } from '../../store/redis'
import { stateOf } from './request-state'
import { rateLimited } from './auth'
import type { Responder } from './respond'

/**
 * Every failure answered as `{ request_id, error: { code, message, param?, details? } }` (docs/api.md,
 * "Errors"), through the one exit (src/routes/plugins/respond.ts): our AppErrors as they are, a body
 * that does not parse, TypeBox's validation failures with every failing path, an unknown route, a
 * dependency that cannot be reached (503 with Retry-After), and anything else as a 500 that names
 * only the request id (the details go to the log).
 */
/**
 * `recover` answers an error that is not a failure (idempotency.ts: a write under an Idempotency-Key
 * made before, whose answer is replayed), or null.
 */
export function errors(log: Logger, respond: Responder, recover: (request: Request, error: unknown) => Promise<Response> | null) {
  /** Redis or the database unreachable (503), else a bug of ours (500, details logged). */
  const failure = (request: Request, error: unknown): AppError => {
    const down = unreachable(error)
    if (down) {
      // Redis or the database cannot be reached: the client should retry; nothing was lost.
      log.warn({ request_id: stateOf(request).id, err: (error as Error).message }, 'a dependency is unreachable')
      return new AppError('unavailable', `${down} is unreachable; retry in a few seconds`, { headers: { 'retry-after': '5' } })
    }
    log.error({ request_id: stateOf(request).id, err: error }, 'unhandled error')
    return new AppError('internal_error', 'internal error; quote the request_id when reporting it')
  }
  return new Elysia({ name: 'conventions.errors' }).onError({ as: 'global' }, async ({ code, error, request, set, route }) => {
    // A refusal of the rate limit still on its way (auth.ts) is the answer, whatever failed after it was sent.
    let refused: unknown = null
    if (stateOf(request).limit) {
      try {
        await rateLimited(stateOf(request))
      } catch (refusal) {
        refused = refusal
      }
    }
    const recovered = refused === null ? recover(request, error) : null
    if (recovered) {
      // Not a failure (the write under this Idempotency-Key was made before: its answer is replayed),
      // or, if that fails, the failure is the answer, as any refusal.
      try {
        return await recovered
      } catch (e) {
        refused = e
      }
    }
    let err: AppError
    if (refused !== null) err = refused instanceof AppError ? refused : failure(request, refused)
    else if (error instanceof AppError) err = error
    else if (code === 'PARSE') err = error.cause instanceof AppError ? error.cause : new AppError('invalid_json', 'body is not valid JSON')
    else if (code === 'VALIDATION' && (error as ValidationError).type === 'response') {
      // Our own answer failed its schema: a bug of ours, not the client's request.
      log.error({ request_id: stateOf(request).id, err: (error as ValidationError).all.slice(0, 5) }, 'answer failed its response schema')
      err = new AppError('internal_error', 'internal error; quote the request_id when reporting it')
    } else if (code === 'VALIDATION') err = fromValidation(error as ValidationError)
    else if (code === 'NOT_FOUND') err = new AppError('not_found', `no route ${request.method} ${stateOf(request).path}`)
    else if (code === 'INVALID_COOKIE_SIGNATURE' || code === 'INVALID_FILE_TYPE') err = new AppError('validation_error', String((error as Error).message))
    else err = failure(request, error)
    // No route: refused before routing (authentication, rate limit, size) or no route matched.
    return respond.finish(request, set, err.status, errorBody(stateOf(request).id, err), route || 'unrouted', err.extra.headers)
  })
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
