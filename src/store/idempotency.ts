import { AppError } from '../lib/errors'
import type { RedisPort } from './redis'

/**
 * Idempotency records (docs/decisions.md, "Idempotency"), shared by REST writes with an
 * Idempotency-Key and MCP tool calls that create something (keyed by JSON-RPC id). A record is
 * `pending` while its first execution runs, then `done` with what a retry gets again. They live in
 * Redis, or in the in-process stand-in, which journals the keys under IDEMPOTENCY_PREFIX in DATA_DIR
 * so that the 24 h hold across a restart.
 */

/** The replay window. */
const IDEMPOTENCY_TTL_MS = 24 * 60 * 60 * 1000
/**
 * How long an unfinished record blocks its key. Longer than any request may run (synchronous runs
 * answer 202 after SYNC_RUN_TIMEOUT_MS, 2 min by default), short enough that a process that died
 * mid-request does not lock the key for a day.
 */
const IN_FLIGHT_TTL_MS = 10 * 60 * 1000
/** Every record's key starts so; the in-process Redis stand-in journals these keys (src/boot.ts). */
export const IDEMPOTENCY_PREFIX = 'idem:'

/** Outcomes a retry may change, so they are not kept: bad input, conflicts, rate limits, outages. */
export const keptStatus = (status: number) => !(status === 400 || status === 401 || status === 409 || status === 429 || status >= 500)

interface Pending {
  s: 'pending'
  /** The fingerprint of what was asked: the same key with anything else is refused. */
  f: string
}
/** A finished record: its fingerprint and what it keeps (`T`'s fields beside `s` and `f`). */
type Done<T> = { s: 'done'; f: string } & T

/** How a refusal reads for this kind of key (the Idempotency-Key header, a JSON-RPC id). */
export interface Refusals {
  reused(): AppError
  inUse(): AppError
}

/**
 * Takes `key` for a first execution (answers null: execute, then `settleRecord`), or answers the
 * finished record's kept fields. The same key with another fingerprint is `reused`; one still
 * executing is `inUse`.
 */
export async function claimRecord<T extends object>(redis: RedisPort, key: string, fingerprint: string, refuse: Refusals): Promise<T | null> {
  for (let attempt = 0; attempt < 3; attempt++) {
    if (await redis.setIfAbsent(key, JSON.stringify({ s: 'pending', f: fingerprint } satisfies Pending), IN_FLIGHT_TTL_MS)) return null
    const raw = await redis.get(key)
    if (raw === null) continue // expired or released between the two calls: try to take it again
    const record = JSON.parse(raw) as Pending | Done<T>
    if (record.f !== fingerprint) throw refuse.reused()
    if (record.s === 'pending') throw refuse.inUse()
    const { s: _, f: __, ...kept } = record
    return kept as unknown as T
  }
  throw refuse.inUse()
}

/** The execution ended: its outcome is kept for retries, or the key released when `status` is not one to keep. */
export async function settleRecord<T extends object>(redis: RedisPort, key: string, fingerprint: string, status: number, kept: T): Promise<void> {
  if (!keptStatus(status)) await redis.del(key)
  else await redis.set(key, JSON.stringify({ s: 'done', f: fingerprint, ...kept }), IDEMPOTENCY_TTL_MS)
}
