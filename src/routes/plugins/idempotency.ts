import type { Logger } from 'pino'
import { sha256Hex } from '../../lib/crypto'
import { AppError } from '../../lib/errors'
import { claimRecord, IDEMPOTENCY_PREFIX, settleRecord, type Refusals } from '../../store/idempotency'
import type { RedisPort } from '../../store/redis'
import type { RequestState } from './request-state'

const WRITE_METHODS = new Set(['POST', 'PUT', 'PATCH', 'DELETE'])
const KEY_FORMAT = /^[\x21-\x7e][\x20-\x7e]{0,254}$/
/** Response headers worth replaying (what names the resource made); the rest (request id, rate limit) belong to the new request. */
const REPLAYED_HEADERS = ['content-type', 'location', 'x-conversation-id']

/** What a finished request keeps for its retries: the answer, byte for byte. */
interface Kept {
  status: number
  body: string
  headers: Record<string, string>
}

const REFUSALS: Refusals = {
  reused: () => new AppError('idempotency_key_reused', 'this Idempotency-Key was used with a different method, path, query or body', { param: 'Idempotency-Key' }),
  inUse: () => new AppError('idempotency_key_in_use', 'a request with this Idempotency-Key is still being processed; retry later', { param: 'Idempotency-Key' }),
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
  const record = await claimRecord<Kept>(redis, redisKey, fingerprint, REFUSALS)
  if (record === null) {
    state.idem = { key: redisKey, fingerprint }
    return
  }
  return new Response(record.body, {
    status: record.status,
    headers: { ...record.headers, 'x-request-id': state.id, 'idempotent-replayed': 'true' },
  })
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
    const kept: Record<string, string> = {}
    for (const h of REPLAYED_HEADERS) if (headers[h] !== undefined) kept[h] = headers[h]
    await settleRecord<Kept>(redis, idem.key, idem.fingerprint, status, { status, body, headers: kept })
  } catch (err) {
    // The side effect happened; failing the response now would invite a duplicate retry.
    log.error({ request_id: state.id, err }, 'could not store the idempotency record')
  }
}
