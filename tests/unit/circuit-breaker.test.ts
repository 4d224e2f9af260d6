import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { CircuitBreaker } from '../../src/domain/models/circuit-breaker'

setDefaultTimeout(TEST_TIMEOUT_MS)

/** The breaker on an injected clock: the 30 s cool-down is walked through without waiting for it. */

const COOL_DOWN_MS = 30_000

function breaker() {
  const clock = { now: 1_000_000 }
  return { clock, b: new CircuitBreaker(3, COOL_DOWN_MS, () => clock.now) }
}

describe('CircuitBreaker', () => {
  test('a route is allowed until its third consecutive failure', () => {
    const { b } = breaker()
    expect(b.allows('p/m')).toBe(true)
    b.failed('p/m')
    b.failed('p/m')
    expect(b.allows('p/m')).toBe(true)
    expect(b.openRoutes()).toEqual([])
    b.failed('p/m')
    expect(b.allows('p/m')).toBe(false)
    expect(b.openRoutes()).toEqual(['p/m'])
  })

  test('a success in between resets the count: failures must be consecutive', () => {
    const { b } = breaker()
    b.failed('p/m')
    b.failed('p/m')
    b.succeeded('p/m')
    b.failed('p/m')
    b.failed('p/m')
    expect(b.allows('p/m')).toBe(true)
  })

  test('routes are counted apart', () => {
    const { b } = breaker()
    for (let i = 0; i < 3; i++) b.failed('a/m')
    b.failed('b/m')
    expect(b.allows('a/m')).toBe(false)
    expect(b.allows('b/m')).toBe(true)
    expect(b.allows('c/m')).toBe(true)
    expect(b.openRoutes()).toEqual(['a/m'])
  })

  test('re-admitted once the cool-down is over (not a millisecond before)', () => {
    const { b, clock } = breaker()
    for (let i = 0; i < 3; i++) b.failed('p/m')
    clock.now += COOL_DOWN_MS - 1
    expect(b.allows('p/m')).toBe(false)
    expect(b.openRoutes()).toEqual(['p/m'])
    clock.now += 1
    expect(b.allows('p/m')).toBe(true)
    expect(b.openRoutes()).toEqual([])
  })

  test('a failed trial after the cool-down opens it again for a whole cool-down', () => {
    const { b, clock } = breaker()
    for (let i = 0; i < 3; i++) b.failed('p/m')
    clock.now += COOL_DOWN_MS
    expect(b.allows('p/m')).toBe(true)
    b.failed('p/m')
    expect(b.allows('p/m')).toBe(false)
    clock.now += COOL_DOWN_MS - 1
    expect(b.allows('p/m')).toBe(false)
    clock.now += 1
    expect(b.allows('p/m')).toBe(true)
  })

  test('a successful trial closes it: three new failures are needed to open it again', () => {
    const { b, clock } = breaker()
    for (let i = 0; i < 3; i++) b.failed('p/m')
    clock.now += COOL_DOWN_MS
    b.succeeded('p/m')
    expect(b.allows('p/m')).toBe(true)
    b.failed('p/m')
    b.failed('p/m')
    expect(b.allows('p/m')).toBe(true)
    b.failed('p/m')
    expect(b.allows('p/m')).toBe(false)
  })

  test('the defaults are 3 failures and 30 s on the real clock', () => {
    const b = new CircuitBreaker()
    for (let i = 0; i < 3; i++) b.failed('p/m')
    expect(b.allows('p/m')).toBe(false)
    expect(b.openRoutes()).toEqual(['p/m'])
  })
})
