import type { Config } from '../config'
import { newId } from '../lib/ids'
import { advance, start, type Step } from '../machines/runner'
import {
  DELIVERY_MACHINE_VERSION,
  deliveryDefinition,
  deliveryMachine,
  deliveryStatus,
  type DeliveryContext,
  type DeliveryEffect,
  type DeliveryEvent,
  type DeliveryState,
} from '../machines/webhook-delivery.machine'
import type { DeliveryUpdate, NewDelivery } from '../store/deliveries'
import type { Persisted } from '../machines/runner'
import { loadSnapshot } from '../machines/definition'

export type DeliveryStep = Step<DeliveryContext, DeliveryEffect>

/** The kind of a delivery's timer: `delivery:<id>` fires its next attempt. */
export const DELIVERY_TIMER = 'delivery'

/**
 * How long an attempt may sit in `sending` before another worker counts it as abandoned: twice the
 * receiver time-out plus a second, so a live worker always reports first.
 */
export function leaseMs(config: Config): number {
  return config.webhookTimeoutMs * 2 + 1000
}

/** When the delivery next needs a worker, after these effects (none: unchanged). */
export function nextAttemptAt(effects: readonly DeliveryEffect[], current: Date | null, now: number): Date | null {
  let next = current
  for (const e of effects) next = e.type === 'timer.cancel' ? null : new Date(now + e.delayMs)
  return next
}

/** A new delivery in its initial state (`pending`, due at once). */
export function newDelivery(
  config: Config,
  fields: Pick<NewDelivery, 'webhook_id' | 'event_id' | 'event_type' | 'data'>,
  opts: { manual: boolean; now: number },
): NewDelivery {
  const step = start<typeof deliveryMachine, DeliveryEffect>(deliveryMachine, {
    delays: config.webhookRetryDelaysMs,
    leaseMs: leaseMs(config),
    manual: opts.manual,
  })
  return {
    id: newId('dlv'),
    ...fields,
    status: deliveryStatus(step.state as DeliveryState, step.persisted.context),
    snapshot: step.persisted,
    machine_version: DELIVERY_MACHINE_VERSION,
    next_attempt_at: nextAttemptAt(step.effects, null, opts.now) ?? new Date(opts.now),
  }
}

/**
 * Applies an event to a stored delivery (its snapshot upgraded to the current machine version, as
 * every machine's rows are: src/machines/definition.ts); null when its state does not accept it, or
 * when a newer version of the service wrote it (this process leaves it to that version). The worker
 * saves the updates of a batch in one statement (src/workers/webhook-deliveries.ts).
 */
export function advanceDelivery(
  row: { id: string; snapshot: Persisted<DeliveryContext>; machine_version: number; attempts_count: number; next_attempt_at?: Date | null },
  event: DeliveryEvent,
  now: number,
): { step: DeliveryStep; update: DeliveryUpdate } | null {
  if (row.machine_version > deliveryDefinition.version) return null
  const snapshot = loadSnapshot(deliveryDefinition, row)
  const step = advance<typeof deliveryMachine, DeliveryEffect>(deliveryMachine, snapshot, event)
  if (!step) return null
  const counted = step.persisted.context.attempt > snapshot.context.attempt && step.state === 'sending'
  return {
    step,
    update: {
      id: row.id,
      status: deliveryStatus(step.state as DeliveryState, step.persisted.context),
      snapshot: step.persisted,
      machine_version: deliveryDefinition.version,
      attempts_count: row.attempts_count + (counted ? 1 : 0),
      attempt: null,
      next_attempt_at: nextAttemptAt(step.effects, row.next_attempt_at ?? null, now),
    },
  }
}
