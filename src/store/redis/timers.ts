import type { WakeUps } from '../../lib/wake-ups'
import type { RedisPort } from './port'

/**
 * Durable time (STYLE habit 5): one Redis sorted set of timers with predictable ids `<kind>:<id>`,
 * claimed atomically (each fires in exactly one process), rebuilt from Postgres at start-up by the
 * owner of each kind. A stale or repeated timer is harmless: the machine ignores events its state
 * does not accept.
 */
export interface TimerHandler {
  /** How many more timers this handler can take now (back-pressure: unclaimed timers wait in Redis). */
  capacity(): number
  /** Must re-arm or cancel every timer it is given (else each fires again after CLAIM_LEASE_MS). */
  fire(ids: string[]): Promise<void>
}

export const timerId = (kind: string, id: string) => `${kind}:${id}`

/** Arms and disarms timers from anywhere (routes, workers); one due now wakes this process' timer loop. */
export class Timers {
  constructor(
    private readonly redis: RedisPort,
    private readonly wake: WakeUps,
  ) {}

  /** `at: null` cancels. Idempotent: the id is predictable, so re-arming only moves the due time. */
  async schedule(kind: string, items: readonly { id: string; at: Date | null }[]): Promise<void> {
    if (items.length === 0) return
    const now = Date.now()
    await Promise.all(
      items.map((t) => (t.at ? this.redis.scheduleTimer(timerId(kind, t.id), t.at.getTime(), kind) : this.redis.cancelTimer(timerId(kind, t.id)))),
    )
    if (items.some((t) => t.at && t.at.getTime() <= now)) this.wake.nudge('timers')
  }
}
