/**
 * What Redis does for this service, and nothing more: idempotency records, delayed timers, rate
 * limits and pub/sub across processes. Two adapters implement it (ioredis, in-process); one contract
 * test suite runs against both.
 */
export interface TokenBucket {
  /** Tokens the bucket holds when full (the burst). */
  capacity: number
  /** Tokens added per second. */
  refillPerSecond: number
}

export interface TakeResult {
  allowed: boolean
  /** Whole tokens left after this take. */
  remaining: number
  /** Milliseconds until one token is available again (0 when allowed). */
  retryAfterMs: number
  /** Milliseconds until the bucket is full again. */
  resetMs: number
}

export interface DueTimer {
  id: string
  payload: string
  dueAt: number
}

export type Unsubscribe = () => Promise<void>

/**
 * Redis could not be reached (refused, reset, or no answer within the command time-out). Requests
 * that need it answer 503 `unavailable` with Retry-After (src/routes/plugins/errors.ts); Redis
 * itself answering with an error is a bug of ours and stays what it is.
 */
export class RedisUnavailableError extends Error {
  constructor(override readonly cause: unknown) {
    super(`Redis is unreachable: ${(cause as Error)?.message ?? String(cause)}`)
    this.name = 'RedisUnavailableError'
  }
}

export interface RedisPort {
  readonly kind: 'redis' | 'memory'
  /** `SET key value NX PX ttl`: true when this call created the key. */
  setIfAbsent(key: string, value: string, ttlMs: number): Promise<boolean>
  get(key: string): Promise<string | null>
  /** `SET key value PX ttl`. */
  set(key: string, value: string, ttlMs: number): Promise<void>
  del(key: string): Promise<void>
  /** Deletes `key` only while its value is `value` (compare and delete, atomically): true when it did. */
  delIfValue(key: string, value: string): Promise<boolean>
  /** Remaining time to live in ms; -2 when the key is missing, -1 when it has none. */
  pttl(key: string): Promise<number>
  /** Takes one token from the bucket at `key`, atomically. */
  take(key: string, bucket: TokenBucket): Promise<TakeResult>
  /** Schedules (or reschedules) the timer with this predictable id; idempotent. */
  scheduleTimer(id: string, dueAt: number, payload: string): Promise<void>
  cancelTimer(id: string): Promise<void>
  /**
   * Atomically claims up to `limit` timers due at `now`, earliest first: each fires in exactly one
   * caller. Without `leaseMs` they are removed; with it they are pushed to `now + leaseMs` instead, so
   * one whose claimer dies before re-arming or cancelling it fires again (at-least-once).
   */
  claimDueTimers(now: number, limit: number, leaseMs?: number): Promise<DueTimer[]>
  publish(channel: string, message: string): Promise<void>
  /**
   * `onReset`, for a subscriber that must know when messages may have been missed: called with true
   * when the subscription's connection is lost (messages published meanwhile are never delivered),
   * with false once it is back and subscribed again. The in-process adapter never loses one.
   */
  subscribe(channel: string, handler: (message: string) => void, onReset?: (lost: boolean) => void): Promise<Unsubscribe>
  ping(): Promise<void>
  close(): Promise<void>
}
