import type { Logger } from 'pino'
import { sha256Hex } from '../../lib/crypto'
import { AppError } from '../../lib/errors'
import type { RedisPort } from '../../store/redis'
import type { RequestState } from './request-state'

const WRITE_METHODS = new Set(['POST', 'PUT', 'PATCH', 'DELETE'])
const KEY_FORMAT = /^[\x21-\x7e][\x20-\x7e]{0,254}$/
/** The replay window (docs/decisions.md, "Idempotency"). */
export const IDEMPOTENCY_TTL_MS = 24 * 60 * 60 * 1000
/**
 * How long an unfinished record blocks its key. Longer than any request may run (synchronous runs
 * answer 202 after SYNC_RUN_TIMEOUT_MS, 2 min by default), short enough that a process that died
 * mid-request does not lock the key for a day.
 */
const IN_FLIGHT_TTL_MS = 10 * 60 * 1000
/** Every record's key starts so; the in-process Redis stand-in journals these keys (src/boot.ts). */
export const IDEMPOTENCY_PREFIX = 'idem:'
/** Outcomes a retry may change, so they are not kept (docs/decisions.md, "Idempotency"). */
const NOT_STORED = (status: number) => status === 400 || status === 401 || status === 409 || status === 429 || status >= 500
/** Response headers worth replaying (what names the resource made); the rest (request id, rate limit) belong to the new request. */
const REPLAYED_HEADERS = ['content-type', 'location', 'x-conversation-id']

interface Pending {
  s: 'pending'
  f: string
}
interface Done {
  s: 'done'
  f: string
  status: number
  body: string
  headers: Record<string, string>
}

/**
 * The first request with a key executes; the same key while it runs is 409; with another fingerprint
 * 422; after it finished, the stored answer is replayed byte for byte (docs/decisions.md). Records
 * live in Redis, or in the in-process stand-in, which journals them in DATA_DIR so that the 24 h
 * hold across a restart.
 */
export async function beginIdempotency(redis: RedisPort, request: Request, state: RequestState): Promise<Response | undefined> {
  if (!WRITE_METHODS.has(request.method)) return
  const key = request.headers.get('idempotency-key')
  if (key === null) return
  if (!KEY_FORMAT.test(key)) {
    throw new AppError('validation_error', 'Idempotency-Key must be 1-255 printable ASCII characters', {
      param: 'Idempotency-Key',
      details: [{ path: 'headers.idempotency-key', message: 'must be 1-255 printable ASCII characters' }],
    })
  }
  const url = request.url
  const query = url.includes('?') ? url.slice(url.indexOf('?')) : ''
  const fingerprint = sha256Hex(`${request.method}\n${state.path}\n${query}\n${state.raw ?? ''}`)
  // Scope: the key string and the API key that sent it.
  const redisKey = `${IDEMPOTENCY_PREFIX}${state.caller!.keyId}:${sha256Hex(key)}`
  for (let attempt = 0; attempt < 3; attempt++) {
    if (await redis.setIfAbsent(redisKey, JSON.stringify({ s: 'pending', f: fingerprint } satisfies Pending), IN_FLIGHT_TTL_MS)) {
      state.idem = { key: redisKey, fingerprint }
      return
    }
    const raw = await redis.get(redisKey)
    if (raw === null) continue // expired or released between the two calls: try to take it again
    const record = JSON.parse(raw) as Pending | Done
    if (record.f !== fingerprint) {
      throw new AppError('idempotency_key_reused', 'this Idempotency-Key was used with a different method, path, query or body', {
        param: 'Idempotency-Key',
      })
    }
    if (record.s === 'pending') {
      throw new AppError('idempotency_key_in_use', 'a request with this Idempotency-Key is still being processed; retry later', {
        param: 'Idempotency-Key',
      })
    }
    return new Response(record.body, {
      status: record.status,
      headers: { ...record.headers, 'x-request-id': state.id, 'idempotent-replayed': 'true' },
    })
  }
  throw new AppError('idempotency_key_in_use', 'this Idempotency-Key is contended; retry later', { param: 'Idempotency-Key' })
}

/** Stores the final answer for replay, or releases the key when the outcome is not to be kept. */
export async function completeIdempotency(
  redis: RedisPort,
  state: RequestState,
  status: number,
  body: string,
  headers: Record<string, string>,
  log: Logger,
) {
  const idem = state.idem!
  state.idem = undefined
  try {
    if (NOT_STORED(status)) {
      await redis.del(idem.key)
      return
    }
    const kept: Record<string, string> = {}
    for (const h of REPLAYED_HEADERS) if (headers[h] !== undefined) kept[h] = headers[h]
    const record: Done = { s: 'done', f: idem.fingerprint, status, body, headers: kept }
    await redis.set(idem.key, JSON.stringify(record), IDEMPOTENCY_TTL_MS)
  } catch (err) {
    // The side effect happened; failing the response now would invite a duplicate retry.
    log.error({ request_id: state.id, err }, 'could not store the idempotency record')
  }
}
