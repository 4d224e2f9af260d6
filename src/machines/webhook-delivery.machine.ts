import { assign, emit, setup } from 'xstate'
import type { MachineDefinition } from './definition'

/**
 * One webhook delivery (docs/webhooks.md, "Outcomes and retries"): pending → sending → succeeded | retrying
 * → sending … → failed. Pure: time and HTTP leave it as emitted effects that the runner carries out after
 * the snapshot is committed. Durable time is a Redis timer with the predictable id `delivery:<id>`; the
 * machine never uses `after`, whose timers are not re-armed when a snapshot is restored.
 *
 * `succeeded` and `failed` are settled, not final: a redelivery (docs/decisions.md, "Webhooks") starts a
 * new round of attempts under the same delivery id, with the full retry schedule again.
 */
export const DELIVERY_MACHINE_VERSION = 1

export interface DeliveryContext {
  /** Attempts made in the current round (a redelivery starts a new round). */
  attempt: number
  /** Waits before retries 1..n, in ms (WEBHOOK_RETRY_DELAYS_MS when the delivery was created). */
  delays: number[]
  /** How long an attempt may stay in `sending` before it counts as abandoned (its worker died). */
  leaseMs: number
  /** The round was asked for by a person (ping, redelivery): it is sent even to a disabled webhook. */
  manual: boolean
}

export interface DeliveryInput {
  delays: number[]
  leaseMs: number
  manual: boolean
}

export type DeliveryEvent =
  | { type: 'timer.fired' }
  | { type: 'attempt.succeeded'; statusCode: number }
  | { type: 'attempt.failed'; retryable: boolean; retryAfterMs?: number }
  | { type: 'attempt.abandoned' }
  | { type: 'redelivery.requested' }

export type DeliveryEffect = { type: 'timer.schedule'; delayMs: number } | { type: 'timer.cancel' }

/** A receiver's Retry-After is honoured up to a day; beyond that the endpoint is as good as gone. */
export const MAX_RETRY_AFTER_MS = 86_400_000

export const deliveryMachine = setup({
  types: {} as { context: DeliveryContext; events: DeliveryEvent; emitted: DeliveryEffect; input: DeliveryInput },
  guards: {
    isPermanent: ({ event }) => event.type === 'attempt.failed' && !event.retryable,
    canRetry: ({ context }) => context.attempt <= context.delays.length,
  },
  actions: {
    scheduleNow: emit({ type: 'timer.schedule', delayMs: 0 } as const),
    countAttempt: assign({ attempt: ({ context }) => context.attempt + 1 }),
    scheduleLease: emit(({ context }) => ({ type: 'timer.schedule' as const, delayMs: context.leaseMs })),
    scheduleRetry: emit(({ context, event }) => {
      const planned = context.delays[context.attempt - 1] ?? 0
      const asked = event.type === 'attempt.failed' ? Math.min(event.retryAfterMs ?? 0, MAX_RETRY_AFTER_MS) : 0
      return { type: 'timer.schedule' as const, delayMs: Math.max(planned, asked) }
    }),
    cancelTimer: emit({ type: 'timer.cancel' } as const),
    startRound: assign({ attempt: 0, manual: true }),
  },
}).createMachine({
  id: 'webhook-delivery',
  description: 'One webhook delivery: signed POSTs to the receiver, retried on 5xx, 3xx, 429, time-out and network errors.',
  context: ({ input }) => ({ attempt: 0, delays: input.delays, leaseMs: input.leaseMs, manual: input.manual }),
  initial: 'pending',
  states: {
    pending: {
      description: 'Created by the fan-out worker, a ping or a redelivery; its timer is due at once.',
      entry: 'scheduleNow',
      on: { 'timer.fired': 'sending' },
    },
    sending: {
      description: 'An attempt is in flight (time-out WEBHOOK_TIMEOUT_MS); a lease timer catches a worker that died mid-attempt.',
      entry: ['countAttempt', 'scheduleLease'],
      on: {
        'attempt.succeeded': { target: 'succeeded', description: '2xx' },
        'attempt.failed': [
          { guard: 'isPermanent', target: 'failed', description: '4xx other than 429: no retry' },
          { guard: 'canRetry', target: 'retrying', actions: 'scheduleRetry', description: '5xx, 3xx, 429, time-out or network error' },
          { target: 'failed', description: 'the last retry failed too' },
        ],
        'attempt.abandoned': [
          { guard: 'canRetry', target: 'retrying', actions: 'scheduleRetry', description: 'the worker died mid-attempt' },
          { target: 'failed' },
        ],
      },
    },
    retrying: {
      description: 'Waits for its timer: WEBHOOK_RETRY_DELAYS_MS[attempt - 1] (30 s, 1 min, 5 min, 30 min, 2 h), or longer when Retry-After asks.',
      on: { 'timer.fired': 'sending' },
    },
    succeeded: {
      description: 'The receiver answered 2xx.',
      tags: ['settled'],
      entry: 'cancelTimer',
      on: { 'redelivery.requested': { target: 'pending', actions: 'startRound' } },
    },
    failed: {
      description: 'A 4xx, or every retry failed; kept 7 days, can be redelivered.',
      tags: ['settled'],
      entry: 'cancelTimer',
      on: { 'redelivery.requested': { target: 'pending', actions: 'startRound' } },
    },
  },
})

export type DeliveryState = 'pending' | 'sending' | 'retrying' | 'succeeded' | 'failed'
export type DeliveryStatus = 'pending' | 'retrying' | 'succeeded' | 'failed'

/** The API status of a machine state: an attempt in flight is `pending` the first time, `retrying` after. */
export function deliveryStatus(state: DeliveryState, context: DeliveryContext): DeliveryStatus {
  if (state === 'sending') return context.attempt > 1 ? 'retrying' : 'pending'
  return state
}

/**
 * The delivery machine as the service runs it: snapshots of version 1 (the first). It announces
 * nothing: a delivery is the announcement's own transport.
 */
export const deliveryDefinition: MachineDefinition<DeliveryContext> = {
  name: 'webhook-delivery',
  machine: deliveryMachine,
  version: DELIVERY_MACHINE_VERSION,
  upgrades: {},
  announces: {},
  memo: true,
}
