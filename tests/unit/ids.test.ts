import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { idFloor, newId } from '../../src/lib/ids'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Ids (src/lib/ids.ts): the millisecond, then 80 bits drawn from the CSPRNG for every id. Ids made
 * within one millisecond must not be derivable from one another (a `req_` id is in every answer).
 */
const CROCKFORD = '0123456789abcdefghjkmnpqrstvwxyz'
const randomPart = (id: string) => id.slice(id.indexOf('_') + 11)
const asBigInt = (part: string) => [...part].reduce((n, c) => n * 32n + BigInt(CROCKFORD.indexOf(c)), 0n)

/** Ids made in one millisecond, grouped by it: whole groups only (the first and last may be cut). */
function sameMillisecondRuns(n: number): string[][] {
  const ids = Array.from({ length: n }, () => newId('req'))
  const groups = new Map<string, string[]>()
  for (const id of ids) {
    const ms = id.slice(4, 14)
    const g = groups.get(ms)
    if (g) g.push(id)
    else groups.set(ms, [id])
  }
  return [...groups.values()].slice(1, -1).filter((g) => g.length >= 2)
}

describe('newId', () => {
  test('shape: prefix, 10 characters of time, 16 random; sorted by millisecond', () => {
    const before = idFloor('run', Date.now())
    const id = newId('run')
    expect(id).toMatch(/^run_[0-9a-hjkmnp-tv-z]{26}$/)
    expect(id >= before).toBe(true)
    expect(id < idFloor('run', Date.now() + 2)).toBe(true)
  })

  test('ids of one millisecond are not neighbours: no increment, the random parts differ from the first character', () => {
    const runs = sameMillisecondRuns(20_000)
    const pairs = runs.flatMap((g) => g.slice(1).map((id, i) => [g[i]!, id] as const))
    expect(pairs.length).toBeGreaterThan(1000)
    let adjacent = 0
    let samePrefix = 0
    for (const [a, b] of pairs) {
      const d = asBigInt(randomPart(b)) - asBigInt(randomPart(a))
      if (d >= -1_000_000n && d <= 1_000_000n) adjacent++
      if (randomPart(a).slice(0, 8) === randomPart(b).slice(0, 8)) samePrefix++
    }
    // With 80 fresh bits, two ids within 10^6 of each other: probability 2·10^6/2^80 a pair.
    expect(adjacent).toBe(0)
    expect(samePrefix).toBe(0)
  })

  test('ids of one millisecond are in no order (half the consecutive pairs descend)', () => {
    const pairs = sameMillisecondRuns(20_000).flatMap((g) => g.slice(1).map((id, i) => [g[i]!, id] as const))
    const descending = pairs.filter(([a, b]) => b < a).length / pairs.length
    expect(descending).toBeGreaterThan(0.4)
    expect(descending).toBeLessThan(0.6)
  })

  test('every character of the random part is uniform (chi-square over 32 values)', () => {
    const counts = Array.from({ length: 16 }, () => new Array<number>(32).fill(0))
    const n = 32_000
    for (let i = 0; i < n; i++) {
      const part = randomPart(newId('trg'))
      for (let p = 0; p < 16; p++) counts[p]![CROCKFORD.indexOf(part[p]!)]!++
    }
    const expected = n / 32
    for (const c of counts) {
      const chi2 = c.reduce((s, k) => s + (k - expected) ** 2 / expected, 0)
      // 31 degrees of freedom: above 80 has probability 2·10^-6.
      expect(chi2).toBeLessThan(80)
    }
  })

  test('no repeats in 100 000 ids', () => {
    const ids = new Set(Array.from({ length: 100_000 }, () => newId('evt')))
    expect(ids.size).toBe(100_000)
  })
})
