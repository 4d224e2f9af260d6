import type { Logger } from 'pino'
import type { Config } from '../config'
import { newDelivery } from '../domain/deliveries'
import type { Pool } from '../store/db'
import { insertDeliveries, type NewDelivery } from '../store/deliveries'
import { claimUndispatchedEvents, markEventsDispatched } from '../store/events'
import { enabledWebhooksOf } from '../store/webhooks'
import { PollingLoop } from './loop'
import type { Timers } from '../store/redis/timers'
import { DELIVERY_TIMER } from '../domain/deliveries'

const BATCH = 500

/**
 * Fan-out: committed outbox events become one delivery per enabled webhook of the event's workspace
 * that subscribes to its type. Events are claimed with `for update skip locked` (workers share the
 * outbox without waiting on each other) and (event_id, webhook_id) is unique, so a crash between
 * insert and commit, or two workers, never make two deliveries of one event to one webhook.
 */
export class FanOut extends PollingLoop {
  constructor(private readonly d: { sql: Pool; config: Config; timers: Timers; log: Logger }) {
    super('fan-out: dispatching outbox events', d.config.workerPollMs, d.log)
  }

  /** A full batch means more may be waiting: go again at once. */
  protected async step() {
    return (await this.tick()) >= BATCH
  }

  /** Dispatches one batch of events; returns how many events it took. */
  async tick(): Promise<number> {
    const now = Date.now()
    let taken = 0
    const created = await this.d.sql.begin(async (tx) => {
      const events = await claimUndispatchedEvents(tx, BATCH)
      taken = events.length
      if (events.length === 0) return []
      const workspaces = [...new Set(events.flatMap((e) => (e.workspace_id && e.type !== 'webhook.test' ? [e.workspace_id] : [])))]
      const hooks = await enabledWebhooksOf(tx, workspaces)
      const rows: NewDelivery[] = []
      for (const e of events) {
        // webhook.test goes only to the pinged webhook, which the ping itself delivers to.
        if (!e.workspace_id || e.type === 'webhook.test') continue
        for (const h of hooks) {
          if (h.workspace_id !== e.workspace_id || !h.events.includes(e.type)) continue
          rows.push({ ...newDelivery(this.d.config, { webhook_id: h.id, event_id: e.id, event_type: e.type, data: e.data }, { manual: false, now }), trace_context: e.trace_context })
        }
      }
      const inserted = await insertDeliveries(tx, rows)
      await markEventsDispatched(tx, events.map((e) => e.id))
      return inserted
    })
    await this.d.timers.schedule(DELIVERY_TIMER, created.map((c) => ({ id: c.id, at: c.next_attempt_at })))
    return taken
  }
}
