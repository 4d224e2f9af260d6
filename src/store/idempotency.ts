import { randomBytes } from 'node:crypto'
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
 * How long an unfinished record blocks its key at most. Longer than any request may run (synchronous
 * runs answer 202 after SYNC_RUN_TIMEOUT_MS, 2 min by default). A record whose process died is not
 * waited out: it names its owner, whose heartbeat says whether it still runs (`InFlightOwner`).
 */
const IN_FLIGHT_TTL_MS = 10 * 60 * 1000
/**
 * A process that holds records says it is alive every BEAT_MS, in a key that lasts ALIVE_TTL_MS: a
 * retry finds the owner of a record gone at most ALIVE_TTL_MS after it was killed (three missed
 * beats: a stall of the event loop of a few seconds does not declare a live process dead, and if
 * it did, the write's own record in PostgreSQL still keeps a second execution from creating anything).
 */
const BEAT_MS = 2_000
const ALIVE_TTL_MS = 6_000
const ALIVE_PREFIX = 'idem-alive:'
/** Every record's key starts so; the in-process Redis stand-in journals these keys (src/boot.ts). */
export const IDEMPOTENCY_PREFIX = 'idem:'

/** Outcomes a retry may change, so they are not kept: bad input, conflicts, rate limits, outages. */
export const keptStatus = (status: number) => !(status === 400 || status === 401 || status === 409 || status === 429 || status >= 500)

interface Pending {
  s: 'pending'
  /** The fingerprint of what was asked: the same key with anything else is refused. */
  f: string
  /** The process executing it (`InFlightOwner.id`); absent in records written before owners were named. */
  o?: string
}
/** A finished record: its fingerprint and what it keeps (`T`'s fields beside `s` and `f`). */
type Done<T> = { s: 'done'; f: string } & T

/** How a refusal reads for this kind of key (the Idempotency-Key header, a JSON-RPC id). */
export interface Refusals {
  reused(): AppError
  inUse(): AppError
}

/**
 * This process as the owner of the records it executes: a random id, named in each of its pending
 * records, and a heartbeat key in Redis (`idem-alive:<id>`, renewed every BEAT_MS) that exists while
 * it runs. A process killed mid-request stops beating, so a retry learns within ALIVE_TTL_MS that
 * the record it finds will never be completed. The in-process stand-in keeps no heartbeat across a
 * restart (it journals only the records), so there a record of the previous process is dead at once.
 */
export class InFlightOwner {
  readonly id = randomBytes(12).toString('base64url')
  private beat: ReturnType<typeof setInterval> | null = null
  private first: Promise<void> | null = null

  constructor(readonly redis: RedisPort) {}

  /** Starts the heartbeat, once: its first beat is written before any record names this owner. */
  ready(): Promise<void> {
    if (this.first) return this.first
    const first = this.redis.set(ALIVE_PREFIX + this.id, '1', ALIVE_TTL_MS)
    this.first = first.then(
      () => {
        this.beat ??= setInterval(() => this.redis.set(ALIVE_PREFIX + this.id, '1', ALIVE_TTL_MS).catch(() => {}), BEAT_MS)
        this.beat.unref?.()
      },
      (err) => {
        this.first = null // Redis unreachable: the request fails (503); the next one tries again
        throw err
      },
    )
    return this.first
  }

  async alive(owner: string): Promise<boolean> {
    return owner === this.id || (await this.redis.get(ALIVE_PREFIX + owner)) !== null
  }

  /** Stops beating (the process shuts down, its requests answered): the key lapses on its own. */
  stop() {
    if (this.beat) clearInterval(this.beat)
    this.beat = null
  }
}

/**
 * Takes `key` for a first execution (answers null: execute, then `settleRecord`), or answers the
 * finished record's kept fields. The same key with another fingerprint is `reused`; one still
 * executing is `inUse`. A pending record whose owner is dead (killed mid-request) is `recover`ed:
 * what its execution committed, if anything, is committed now, and `recover` answers from it (kept
 * for later retries) or answers null when nothing was written, and the key is taken over. Without
 * `recover`, such a record blocks the key until IN_FLIGHT_TTL_MS.
 */
export async function claimRecord<T extends object>(
  owner: InFlightOwner,
  key: string,
  fingerprint: string,
  refuse: Refusals,
  recover?: () => Promise<{ status: number; kept: T } | null>,
): Promise<T | null> {
  const { redis } = owner
  await owner.ready()
  for (let attempt = 0; attempt < 3; attempt++) {
    if (await redis.setIfAbsent(key, JSON.stringify({ s: 'pending', f: fingerprint, o: owner.id } satisfies Pending), IN_FLIGHT_TTL_MS)) return null
    const raw = await redis.get(key)
    if (raw === null) continue // expired or released between the two calls: try to take it again
    const record = JSON.parse(raw) as Pending | Done<T>
    if (record.f !== fingerprint) throw refuse.reused()
    if (record.s === 'pending') {
      if (!recover || !record.o || (await owner.alive(record.o))) throw refuse.inUse()
      const found = await recover()
      if (found) {
        await settleRecord(redis, key, fingerprint, found.status, found.kept)
        return found.kept
      }
      // Nothing was written under the key: it is free, unless another retry took it over meanwhile.
      await redis.delIfValue(key, raw)
      continue
    }
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
