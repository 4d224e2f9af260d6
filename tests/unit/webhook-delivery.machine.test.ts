import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { loadConfig } from '../../src/config'
import { advanceDelivery, leaseMs, newDelivery, nextAttemptAt } from '../../src/domain/deliveries'
import { advance, start, type Persisted, type Step } from '../../src/machines/runner'
import {
  DELIVERY_MACHINE_VERSION,
  MAX_RETRY_AFTER_MS,
  deliveryMachine,
  deliveryStatus,
  type DeliveryContext,
  type DeliveryEffect,
  type DeliveryEvent,
  type DeliveryState,
} from '../../src/machines/webhook-delivery.machine'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The delivery machine through the pure runner (xstate's transition-test style): no actor, no clock.
 * Every step taken here also checks that its persisted snapshot survives a JSON round trip and that
 * advancing the round-tripped snapshot gives exactly what advancing the original gives.
 */
type DeliveryStep = Step<DeliveryContext, DeliveryEffect>
type Snapshot = Persisted<DeliveryContext>

const DELAYS = [100, 200, 300, 400, 500]
const LEASE = 21_000

const roundTrip = <T>(value: T): T => JSON.parse(JSON.stringify(value)) as T

function begin(opts: { delays?: number[]; manual?: boolean } = {}): DeliveryStep {
  const s = start<typeof deliveryMachine, DeliveryEffect>(deliveryMachine, {
    delays: opts.delays ?? DELAYS,
    leaseMs: LEASE,
    manual: opts.manual ?? false,
  })
  expect(roundTrip(s.persisted)).toEqual(s.persisted)
  return s
}

/** advance(), checked against the same advance of the JSON round-tripped snapshot. */
function step(snapshot: Snapshot, event: DeliveryEvent): DeliveryStep | null {
  const original = advance<typeof deliveryMachine, DeliveryEffect>(deliveryMachine, snapshot, event)
  const restored = advance<typeof deliveryMachine, DeliveryEffect>(deliveryMachine, roundTrip(snapshot), roundTrip(event))
  expect(restored).toEqual(original)
  if (original) expect(roundTrip(original.persisted)).toEqual(original.persisted)
  return original
}

/** step() that must be accepted. */
function must(snapshot: Snapshot, event: DeliveryEvent): DeliveryStep {
  const next = step(snapshot, event)
  if (!next) throw new Error(`${snapshot.value} (attempt ${snapshot.context.attempt}) refused ${JSON.stringify(event)}`)
  return next
}

const fired: DeliveryEvent = { type: 'timer.fired' }
const succeeded: DeliveryEvent = { type: 'attempt.succeeded', statusCode: 200 }
const retryable: DeliveryEvent = { type: 'attempt.failed', retryable: true }
const permanent: DeliveryEvent = { type: 'attempt.failed', retryable: false }
const abandoned: DeliveryEvent = { type: 'attempt.abandoned' }
const redeliver: DeliveryEvent = { type: 'redelivery.requested' }
const ALL_EVENTS: DeliveryEvent[] = [
  fired,
  succeeded,
  retryable,
  permanent,
  { type: 'attempt.failed', retryable: true, retryAfterMs: 5_000 },
  { type: 'attempt.failed', retryable: true, retryAfterMs: MAX_RETRY_AFTER_MS * 2 },
  abandoned,
  redeliver,
]

/** The snapshot in `state` at `attempt` (reached by real transitions from the start). */
function reach(state: DeliveryState, attempt: number, opts: { delays?: number[]; manual?: boolean } = {}): Snapshot {
  let s = begin(opts).persisted
  if (state === 'pending') return s
  for (let n = 1; n <= attempt; n++) {
    s = must(s, fired).persisted
    if (n === attempt) break
    s = must(s, retryable).persisted
  }
  if (state === 'sending') return s
  if (state === 'retrying') return must(s, retryable).persisted
  if (state === 'succeeded') return must(s, succeeded).persisted
  return must(s, permanent).persisted
}

describe('start', () => {
  test('a new delivery is pending at attempt 0 and asks for a timer due at once', () => {
    const s = begin({ manual: false })
    expect(s.state).toBe('pending')
    expect(s.persisted).toEqual({ value: 'pending', context: { attempt: 0, delays: DELAYS, leaseMs: LEASE, manual: false } })
    expect(s.effects).toEqual([{ type: 'timer.schedule', delayMs: 0 }])
  })

  test('manual is carried from the input', () => {
    expect(begin({ manual: true }).persisted.context.manual).toBe(true)
  })
})

describe('the full path with 5 delays', () => {
  test('6 attempts, then failed; timers: 0, then the lease on each sending and the configured delay on each retry, cancelled on settle', () => {
    let s = begin()
    const states: string[] = [s.state]
    const effects: DeliveryEffect[] = [...s.effects]
    for (let n = 1; n <= 6; n++) {
      s = must(s.persisted, fired)
      expect(s.state).toBe('sending')
      expect(s.persisted.context.attempt).toBe(n)
      expect(s.effects).toEqual([{ type: 'timer.schedule', delayMs: LEASE }])
      states.push(s.state)
      effects.push(...s.effects)
      s = must(s.persisted, retryable)
      expect(s.persisted.context.attempt).toBe(n)
      states.push(s.state)
      effects.push(...s.effects)
    }
    expect(s.state).toBe('failed')
    expect(states).toEqual([
      'pending',
      ...['sending', 'retrying', 'sending', 'retrying', 'sending', 'retrying', 'sending', 'retrying', 'sending', 'retrying'],
      'sending',
      'failed',
    ])
    expect(effects).toEqual([
      { type: 'timer.schedule', delayMs: 0 },
      ...DELAYS.flatMap((d): DeliveryEffect[] => [
        { type: 'timer.schedule', delayMs: LEASE },
        { type: 'timer.schedule', delayMs: d },
      ]),
      { type: 'timer.schedule', delayMs: LEASE },
      { type: 'timer.cancel' },
    ])
    // Failed is settled: nothing but a redelivery moves it.
    for (const e of ALL_EVENTS.filter((e) => e !== redeliver)) expect(step(s.persisted, e)).toBeNull()
  })

  test.each([1, 2, 3, 4, 5, 6])('success on attempt %i → succeeded with the timer cancelled', (attempt) => {
    const s = must(reach('sending', attempt), succeeded)
    expect(s.state).toBe('succeeded')
    expect(s.persisted.context.attempt).toBe(attempt)
    expect(s.effects).toEqual([{ type: 'timer.cancel' }])
  })

  test.each([1, 2, 3, 4, 5, 6])('a permanent failure on attempt %i → failed at once, timer cancelled', (attempt) => {
    const s = must(reach('sending', attempt), permanent)
    expect(s.state).toBe('failed')
    expect(s.persisted.context.attempt).toBe(attempt)
    expect(s.effects).toEqual([{ type: 'timer.cancel' }])
  })

  test('a permanent failure with a Retry-After still fails at once', () => {
    const s = must(reach('sending', 1), { type: 'attempt.failed', retryable: false, retryAfterMs: 60_000 })
    expect(s.state).toBe('failed')
    expect(s.effects).toEqual([{ type: 'timer.cancel' }])
  })

  test('with no delays configured the first failure is the last', () => {
    const s = must(reach('sending', 1, { delays: [] }), retryable)
    expect(s.state).toBe('failed')
    expect(s.effects).toEqual([{ type: 'timer.cancel' }])
  })
})

describe('Retry-After', () => {
  test.each([
    // [attempt, retryAfterMs, scheduled delay]
    [1, undefined, 100],
    [1, 0, 100],
    [1, 50, 100],
    [1, 100, 100],
    [1, 101, 101],
    [1, 7_000, 7_000],
    [3, 299, 300],
    [3, 301, 301],
    [5, 60_000, 60_000],
    [1, MAX_RETRY_AFTER_MS, MAX_RETRY_AFTER_MS],
    [1, MAX_RETRY_AFTER_MS + 1, MAX_RETRY_AFTER_MS],
    [2, MAX_RETRY_AFTER_MS * 10, MAX_RETRY_AFTER_MS],
  ] as const)('attempt %i failing with retryAfterMs %p schedules %p ms', (attempt, retryAfterMs, delayMs) => {
    const s = must(reach('sending', attempt), { type: 'attempt.failed', retryable: true, retryAfterMs })
    expect(s.state).toBe('retrying')
    expect(s.effects).toEqual([{ type: 'timer.schedule', delayMs }])
  })

  test('the cap is a day', () => {
    expect(MAX_RETRY_AFTER_MS).toBe(86_400_000)
  })

  test('a Retry-After on the last attempt does not buy another one', () => {
    const s = must(reach('sending', 6), { type: 'attempt.failed', retryable: true, retryAfterMs: 5_000 })
    expect(s.state).toBe('failed')
    expect(s.effects).toEqual([{ type: 'timer.cancel' }])
  })
})

describe('attempt.abandoned', () => {
  test.each([1, 2, 3, 4, 5])('on attempt %i → retrying after the planned delay', (attempt) => {
    const s = must(reach('sending', attempt), abandoned)
    expect(s.state).toBe('retrying')
    expect(s.persisted.context.attempt).toBe(attempt)
    expect(s.effects).toEqual([{ type: 'timer.schedule', delayMs: DELAYS[attempt - 1]! }])
  })

  test('on the last attempt → failed', () => {
    const s = must(reach('sending', 6), abandoned)
    expect(s.state).toBe('failed')
    expect(s.effects).toEqual([{ type: 'timer.cancel' }])
  })
})

describe('redelivery.requested', () => {
  test.each([
    ['succeeded', 1, false],
    ['succeeded', 4, false],
    ['failed', 1, false],
    ['failed', 6, false],
    ['failed', 3, true],
  ] as const)('from %s (attempt %i, manual %p) → pending, attempt 0, manual, due at once', (state, attempt, manual) => {
    const from = reach(state, attempt, { manual })
    expect(from.value).toBe(state)
    const s = must(from, redeliver)
    expect(s.state).toBe('pending')
    expect(s.persisted).toEqual({ value: 'pending', context: { attempt: 0, delays: DELAYS, leaseMs: LEASE, manual: true } })
    expect(s.effects).toEqual([{ type: 'timer.schedule', delayMs: 0 }])
  })

  test('a redelivery gets the full retry schedule again', () => {
    let s = must(reach('failed', 6), redeliver)
    for (let n = 1; n <= 6; n++) {
      s = must(s.persisted, fired)
      expect(s.persisted.context.attempt).toBe(n)
      s = must(s.persisted, retryable)
      expect(s.state).toBe(n < 6 ? 'retrying' : 'failed')
    }
  })

  test.each([
    ['pending', 0],
    ['sending', 1],
    ['sending', 6],
    ['retrying', 1],
    ['retrying', 5],
  ] as const)('is refused in %s (attempt %i): advance returns null', (state, attempt) => {
    expect(step(reach(state, attempt), redeliver)).toBeNull()
  })
})

describe('events a state does not accept return null', () => {
  const name = (e: DeliveryEvent) => (e.type === 'attempt.failed' ? `${e.type}(${e.retryable ? 'retryable' : 'permanent'}${e.retryAfterMs ? `, ${e.retryAfterMs}` : ''})` : e.type)
  const accepted: Record<DeliveryState, DeliveryEvent['type'][]> = {
    pending: ['timer.fired'],
    sending: ['attempt.succeeded', 'attempt.failed', 'attempt.abandoned'],
    retrying: ['timer.fired'],
    succeeded: ['redelivery.requested'],
    failed: ['redelivery.requested'],
  }
  const cases: [DeliveryState, number, string, boolean, DeliveryEvent][] = []
  for (const [state, attempt] of [['pending', 0], ['sending', 1], ['sending', 3], ['retrying', 2], ['succeeded', 1], ['failed', 6]] as const) {
    for (const e of ALL_EVENTS) cases.push([state, attempt, name(e), accepted[state].includes(e.type), e])
  }

  test.each(cases)('%s (attempt %i) + %s → accepted %p', (state, attempt, _name, ok, event) => {
    const from = reach(state, attempt)
    const s = step(from, event)
    if (ok) expect(s).not.toBeNull()
    else expect(s).toBeNull()
  })
})

describe('persisted snapshots', () => {
  /** Every snapshot reachable from both starts, by every event (the context is finite: attempts stop at 6). */
  function reachable(): Snapshot[] {
    const seen = new Map<string, Snapshot>()
    const queue = [begin({ manual: false }).persisted, begin({ manual: true }).persisted]
    while (queue.length) {
      const s = queue.shift()!
      const key = JSON.stringify(s)
      if (seen.has(key)) continue
      seen.set(key, s)
      for (const e of ALL_EVENTS) {
        const next = advance<typeof deliveryMachine, DeliveryEffect>(deliveryMachine, s, e)
        if (next) queue.push(next.persisted)
      }
    }
    return [...seen.values()]
  }
  const all = reachable()

  test('the reachable set covers every state and every attempt', () => {
    const states = new Set(all.map((s) => s.value))
    expect([...states].sort()).toEqual(['failed', 'pending', 'retrying', 'sending', 'succeeded'])
    expect(Math.max(...all.map((s) => s.context.attempt))).toBe(6)
    expect(all.length).toBeGreaterThan(30)
  })

  test.each(all.map((s) => [s.value, s.context.attempt, s.context.manual, s] as const))(
    '%s (attempt %i, manual %p) survives a JSON round trip and advances identically after it',
    (_v, _a, _m, snapshot) => {
      const copy = roundTrip(snapshot)
      expect(copy).toEqual(snapshot)
      expect(Object.keys(copy).sort()).toEqual(['context', 'value'])
      for (const e of ALL_EVENTS) {
        expect(advance<typeof deliveryMachine, DeliveryEffect>(deliveryMachine, copy, e)).toEqual(
          advance<typeof deliveryMachine, DeliveryEffect>(deliveryMachine, snapshot, e),
        )
      }
    },
  )
})

describe('deliveryStatus', () => {
  const ctx = (attempt: number): DeliveryContext => ({ attempt, delays: DELAYS, leaseMs: LEASE, manual: false })
  test.each([
    ['pending', 0, 'pending'],
    ['sending', 1, 'pending'],
    ['sending', 2, 'retrying'],
    ['sending', 6, 'retrying'],
    ['retrying', 1, 'retrying'],
    ['retrying', 5, 'retrying'],
    ['succeeded', 1, 'succeeded'],
    ['succeeded', 3, 'succeeded'],
    ['failed', 1, 'failed'],
    ['failed', 6, 'failed'],
  ] as const)('%s at attempt %i → %s', (state, attempt, status) => {
    expect(deliveryStatus(state, ctx(attempt))).toBe(status)
  })
})

describe('domain helpers', () => {
  const config = loadConfig({ WEBHOOK_RETRY_DELAYS_MS: '10,20,30' })
  const fields = { webhook_id: 'whk_1', workspace_id: 'ws_1', event_id: 'evt_1', event_type: 'agent.created', data: { id: 'agt_1' } }

  test.each([
    [{}, 21_000],
    [{ WEBHOOK_TIMEOUT_MS: '500' }, 2_000],
    [{ WEBHOOK_TIMEOUT_MS: '1' }, 1_002],
  ] as const)('leaseMs(%j) = %i (twice the time-out plus a second)', (env, lease) => {
    expect(leaseMs(loadConfig(env))).toBe(lease)
  })

  test.each([
    // [effects, current, expected offset from now (null: no attempt planned; 'current': unchanged)]
    [[], null, null],
    [[], 'current', 'current'],
    [[{ type: 'timer.schedule', delayMs: 0 }], null, 0],
    [[{ type: 'timer.schedule', delayMs: 250 }], 'current', 250],
    [[{ type: 'timer.cancel' }], 'current', null],
    [[{ type: 'timer.schedule', delayMs: 5 }, { type: 'timer.cancel' }], null, null],
    [[{ type: 'timer.cancel' }, { type: 'timer.schedule', delayMs: 7 }], 'current', 7],
  ] as const)('nextAttemptAt(%j, %p) → %p', (effects, current, expected) => {
    const now = 1_700_000_000_000
    const currentDate = current === 'current' ? new Date(42) : null
    const got = nextAttemptAt(effects as unknown as DeliveryEffect[], currentDate, now)
    if (expected === null) expect(got).toBeNull()
    else if (expected === 'current') expect(got).toBe(currentDate)
    else expect(got).toEqual(new Date(now + expected))
  })

  test.each([false, true])('newDelivery (manual %p) is pending, due now, with the configured delays and lease', (manual) => {
    const now = 1_700_000_000_000
    const d = newDelivery(config, fields, { manual, now })
    expect(d.id).toMatch(/^dlv_/)
    expect(d).toMatchObject({ ...fields, status: 'pending', machine_version: DELIVERY_MACHINE_VERSION })
    expect(d.snapshot).toEqual({ value: 'pending', context: { attempt: 0, delays: [10, 20, 30], leaseMs: 21_000, manual } })
    expect(d.next_attempt_at).toEqual(new Date(now))
    expect(roundTrip(d.snapshot)).toEqual(d.snapshot)
    expect(newDelivery(config, fields, { manual, now }).id).not.toBe(d.id)
  })

  test('advanceDelivery: attempts_count grows only on entering sending, next_attempt_at follows the effects', () => {
    let now = 1_700_000_000_000
    const created = newDelivery(config, fields, { manual: false, now })
    let row = { id: created.id, snapshot: created.snapshot, machine_version: created.machine_version, attempts_count: 0, next_attempt_at: created.next_attempt_at as Date | null }
    const trace: [string, string, string, number, number | null][] = []
    const apply = (event: DeliveryEvent) => {
      now += 1_000
      const r = advanceDelivery(row, event, now)
      if (!r) throw new Error(`${row.snapshot.value} refused ${event.type}`)
      expect(r.update.id).toBe(row.id)
      expect(r.update.attempt).toBeNull()
      expect(r.update.snapshot).toEqual(r.step.persisted)
      expect(roundTrip(r.update.snapshot)).toEqual(r.update.snapshot)
      row = { id: row.id, snapshot: r.update.snapshot, machine_version: r.update.machine_version, attempts_count: r.update.attempts_count, next_attempt_at: r.update.next_attempt_at }
      trace.push([event.type, r.step.state, r.update.status, r.update.attempts_count, r.update.next_attempt_at ? r.update.next_attempt_at.getTime() - now : null])
    }
    for (let n = 1; n <= 4; n++) {
      apply(fired)
      apply(retryable)
    }
    apply(redeliver)
    apply(fired)
    apply(succeeded)
    apply(redeliver)
    apply(fired)
    apply(abandoned)
    apply(fired)
    apply(permanent)
    expect(trace).toEqual([
      ['timer.fired', 'sending', 'pending', 1, 21_000],
      ['attempt.failed', 'retrying', 'retrying', 1, 10],
      ['timer.fired', 'sending', 'retrying', 2, 21_000],
      ['attempt.failed', 'retrying', 'retrying', 2, 20],
      ['timer.fired', 'sending', 'retrying', 3, 21_000],
      ['attempt.failed', 'retrying', 'retrying', 3, 30],
      ['timer.fired', 'sending', 'retrying', 4, 21_000],
      ['attempt.failed', 'failed', 'failed', 4, null],
      ['redelivery.requested', 'pending', 'pending', 4, 0],
      ['timer.fired', 'sending', 'pending', 5, 21_000],
      ['attempt.succeeded', 'succeeded', 'succeeded', 5, null],
      ['redelivery.requested', 'pending', 'pending', 5, 0],
      ['timer.fired', 'sending', 'pending', 6, 21_000],
      ['attempt.abandoned', 'retrying', 'retrying', 6, 10],
      ['timer.fired', 'sending', 'retrying', 7, 21_000],
      ['attempt.failed', 'failed', 'failed', 7, null],
    ])
  })

  test.each([
    ['pending', 0, succeeded],
    ['retrying', 1, succeeded],
    ['retrying', 1, redeliver],
    ['sending', 1, fired],
    ['succeeded', 1, fired],
    ['failed', 1, retryable],
  ] as const)('advanceDelivery refuses an event %s (attempt %i) does not accept: null', (state, attempt, event) => {
    const snapshot = reach(state, attempt, { delays: [10, 20, 30] })
    expect(advanceDelivery({ id: 'dlv_x', snapshot, machine_version: 1, attempts_count: attempt, next_attempt_at: new Date(1) }, event, Date.now())).toBeNull()
  })
})
