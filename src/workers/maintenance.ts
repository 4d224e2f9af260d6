import type { Logger } from 'pino'
import type { Pool } from '../store/db'
import { deleteSettledDeliveries, listDueDeliveries } from '../store/deliveries'
import { deleteDispatchedEvents } from '../store/events'
import { deleteExpiredWrites } from '../store/idempotent-writes'
import type { RedisPort } from '../store/redis'
import type { Timers } from '../store/redis/timers'
import { DELIVERY_TIMER } from '../domain/deliveries'

/** Deliveries (and the outbox rows behind them) are kept 7 days (docs/webhooks.md, "How it runs"). */
export const RETENTION_MS = 7 * 86_400_000
const PAGE = 1000

/**
 * Re-arms every delivery timer from Postgres, the source of truth: at start-up (the in-process Redis
 * forgets everything with the process) and, for overdue ones only, every `SWEEP_MS`: a backstop for
 * timers Redis itself lost (a Redis restarted without persistence). A worker that dies after claiming
 * a timer does not need it: claimed timers come back on their own (CLAIM_LEASE_MS).
 */
export async function rebuildDeliveryTimers(sql: Pool, timers: Timers, overdueBefore?: Date): Promise<number> {
  let afterId: string | undefined
  let total = 0
  for (;;) {
    const rows = await listDueDeliveries(sql, { overdueBefore, limit: PAGE, afterId })
    if (rows.length === 0) return total
    await timers.schedule(DELIVERY_TIMER, rows.map((r) => ({ id: r.id, at: r.next_attempt_at })))
    total += rows.length
    afterId = rows[rows.length - 1]!.id
    if (rows.length < PAGE) return total
  }
}

/** Deletes settled deliveries and dispatched events older than the retention, a page at a time. */
export async function applyRetention(sql: Pool, now = Date.now()): Promise<{ deliveries: number; events: number }> {
  const before = new Date(now - RETENTION_MS)
  let deliveries = 0
  let events = 0
  for (let n = PAGE; n === PAGE; deliveries += n) n = await deleteSettledDeliveries(sql, before, PAGE)
  for (let n = PAGE; n === PAGE; events += n) n = await deleteDispatchedEvents(sql, before, PAGE)
  return { deliveries, events }
}

const SWEEP_MS = 30_000
const RETENTION_EVERY_MS = 3_600_000

/** The periodic chores of webhook delivery: the overdue-timer sweep and retention (one process at a time). */
export function startMaintenance(d: { sql: Pool; redis: RedisPort; timers: Timers; log: Logger }): () => void {
  const sweep = setInterval(() => {
    rebuildDeliveryTimers(d.sql, d.timers, new Date(Date.now() - SWEEP_MS)).then(
      (n) => n > 0 && d.log.info({ count: n }, 'timer sweep: re-armed overdue delivery timers'),
      (err) => d.log.error({ err }, 'timer sweep failed'),
    )
  }, SWEEP_MS)
  const retain = async () => {
    try {
      if (!(await d.redis.setIfAbsent('lock:retention', String(process.pid), RETENTION_EVERY_MS / 2))) return
      const removed = await applyRetention(d.sql)
      if (removed.deliveries + removed.events > 0) d.log.info(removed, 'retention: deleted deliveries and events older than 7 days')
      // The records of keyed writes (src/store/idempotent-writes.ts) live as long as their stored answers: 24 h.
      let writes = 0
      for (let n = PAGE; n === PAGE; writes += n) n = await deleteExpiredWrites(d.sql, PAGE)
      if (writes > 0) d.log.info({ writes }, 'retention: deleted Idempotency-Key records older than 24 h')
    } catch (err) {
      d.log.error({ err }, 'retention failed')
    }
  }
  const retention = setInterval(retain, RETENTION_EVERY_MS)
  const first = setTimeout(retain, 60_000)
  for (const t of [sweep, retention, first]) t.unref?.()
  return () => {
    clearInterval(sweep)
    clearInterval(retention)
    clearTimeout(first)
  }
}
