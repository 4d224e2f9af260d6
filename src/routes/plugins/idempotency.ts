import { Elysia } from 'elysia'
import type { Deps } from '../../deps'
import { sha256Hex } from '../../lib/crypto'
import { AppError } from '../../lib/errors'
import { claimRecord, IDEMPOTENCY_PREFIX, settleRecord, type Refusals } from '../../store/idempotency'
import { findWrite, KeyedWriteExists, type WriteKey } from '../../store/idempotent-writes'
import { keyedAnswer } from '../keyed-answers'
import type { AnswerStep } from './respond'
import { stateOf, type RequestState } from './request-state'

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
 * Everything the Idempotency-Key does to a request, in the order it happens: taken before the handler
 * (`idempotency`, used by auth.ts's `authenticated`), its answer kept at the one exit
 * (`idempotencyAtExit`, respond.ts), and a write that met its own earlier row answered from that row
 * (`answerKeyedWriteExists`, errors.ts). Hook triggers take the key the same way (`beginIdempotency`,
 * triggers.ts), and streamed answers keep theirs (sse.ts).
 */

/** Before the handler of an authenticated route, after the rate limit: takes the key, or answers the replay. */
export function idempotency(deps: Deps) {
  return new Elysia({ name: 'idempotency' }).onBeforeHandle({ as: 'scoped' }, ({ request }) => beginIdempotency(deps, request, stateOf(request)))
}

/** The one exit's step (respond.ts) that keeps the answer for retries, or releases the key. */
export function idempotencyAtExit(deps: Pick<Deps, 'redis' | 'log' | 'config'>): AnswerStep {
  return (state, status, _body, text, headers) => (state.idem ? completeIdempotency(deps, state, status, text, headers) : null)
}

/** For errors.ts: the answer to a request whose write met the row of an earlier execution under its key (`answerExistingWrite`), null for any other error. */
export function answerKeyedWriteExists(deps: Deps) {
  return (request: Request, error: unknown): Promise<Response> | null => (error instanceof KeyedWriteExists ? answerExistingWrite(deps, request) : null)
}

/**
 * The first request with a key executes; the same key while it runs is 409; with another fingerprint
 * 422; after it finished, the stored answer is replayed byte for byte (docs/decisions.md). Records
 * live in Redis, or in the in-process stand-in, which journals them in DATA_DIR so that the 24 h
 * hold across a restart. A record left pending by a process that was killed is answered from the row
 * its write created (`idempotent_writes`), or taken over when the write never committed.
 */
export async function beginIdempotency(deps: Deps, request: Request, state: RequestState): Promise<Response | undefined> {
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
  const scope = state.caller!.keyId
  const keyHash = sha256Hex(key)
  const redisKey = `${IDEMPOTENCY_PREFIX}${scope}:${keyHash}`
  const write: WriteKey = { scope, keyHash, fingerprint, seal: (plain) => deps.secretBox.seal(plain) }
  const record = await claimRecord<Kept>(deps.inFlight, redisKey, fingerprint, REFUSALS, () => answerFromRow(deps, request, state, write))
  if (record === null) {
    state.idem = { key: redisKey, fingerprint, write }
    await failpoint(deps, 'idempotency.before-write')
    return
  }
  return replayed(record, state)
}

/** The Idempotency-Key a write of this request is made under, for the store functions that create its row. */
export function writeKey(request: Request): WriteKey | undefined {
  return stateOf(request).idem?.write
}

function replayed(record: Kept, state: RequestState) {
  return new Response(record.body, {
    status: record.status,
    headers: { ...record.headers, 'x-request-id': state.id, 'idempotent-replayed': 'true' },
  })
}

/** The answer to keep for `write`, rebuilt from the row it created; null when it created none. */
async function answerFromRow(deps: Deps, request: Request, state: RequestState, write: WriteKey): Promise<{ status: number; kept: Kept } | null> {
  const row = await findWrite(deps.db.sql, write.scope, write.keyHash)
  if (!row) return null
  if (row.fingerprint !== write.fingerprint) throw REFUSALS.reused()
  const { status, body } = await keyedAnswer(deps, request, state.id, state.caller!, row)
  return { status, kept: { status, body: JSON.stringify(body), headers: { 'content-type': 'application/json' } } }
}

/**
 * The request executed, but its write met the row an earlier execution under the same key had
 * created (and rolled back: `KeyedWriteExists`), because Redis had lost the record, or a retry took
 * over the key of a process it wrongly thought dead. The answer is rebuilt from that row, kept, and
 * replayed.
 */
async function answerExistingWrite(deps: Deps, request: Request): Promise<Response> {
  const state = stateOf(request)
  const idem = state.idem
  let found: Awaited<ReturnType<typeof answerFromRow>> = null
  try {
    found = idem ? await answerFromRow(deps, request, state, idem.write) : null
    if (!found) throw REFUSALS.inUse()
  } catch (err) {
    // Refused (another body under the key, the row gone): the key is released, not given this answer.
    if (state.idem) await deps.redis.del(state.idem.key).catch(() => {})
    state.idem = undefined
    throw err
  }
  await completeIdempotency(deps, state, found.status, found.kept.body, found.kept.headers)
  return replayed(found.kept, state)
}

/** Stores the final answer for replay, or releases the key when the outcome is not to be kept. */
export async function completeIdempotency(
  deps: Pick<Deps, 'redis' | 'log' | 'config'>,
  state: RequestState,
  status: number,
  body: string,
  headers: Record<string, string>,
) {
  const idem = state.idem!
  state.idem = undefined
  await failpoint(deps, 'idempotency.before-store')
  try {
    const kept: Record<string, string> = {}
    for (const h of REPLAYED_HEADERS) if (headers[h] !== undefined) kept[h] = headers[h]
    await settleRecord<Kept>(deps.redis, idem.key, idem.fingerprint, status, { status, body, headers: kept })
  } catch (err) {
    // The side effect happened; failing the response now would invite a duplicate retry.
    deps.log.error({ request_id: state.id, err }, 'could not store the idempotency record')
  }
}

/**
 * TEST_FAILPOINT (tests only, src/config.ts): the request stops here for good, said in the log, for
 * a crash test to SIGKILL the process at this exact point. Nothing when unset.
 */
function failpoint(deps: Pick<Deps, 'log' | 'config'>, at: NonNullable<Deps['config']['testFailpoint']>): Promise<void> | undefined {
  if (deps.config.testFailpoint !== at) return
  deps.log.warn({ failpoint: at }, `failpoint ${at} reached: holding the request (TEST_FAILPOINT)`)
  return new Promise(() => {})
}
