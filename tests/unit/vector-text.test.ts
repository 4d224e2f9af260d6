import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { embedText } from '../../src/domain/models/local/embed'
import { vectorText } from '../../src/store/vector-text'

setDefaultTimeout(TEST_TIMEOUT_MS)

/** The float4 values pgvector would store from a text: each value's nearest float4. */
const float4s = (text: string) => text.slice(1, -1).split(',').map((s) => Math.fround(Number(s)))

describe('vectorText', () => {
  test('every value reads back as its own float4, whatever its magnitude or sign', () => {
    const values: number[] = [0, -0, 1, -1, 0.1, 1 / 3, 2 ** -149, -(2 ** -126), 3.4028234663852886e38, 1e-7, 123456789, 0.000999999]
    let seed = 7
    for (let i = 0; i < 20_000; i++) {
      seed = (Math.imul(seed, 1_103_515_245) + 12_345) >>> 0
      const u = seed / 2 ** 32
      values.push((u - 0.5) * 10 ** (Math.floor(u * 1e6) % 40 - 20))
    }
    const text = vectorText(values)
    expect(float4s(text)).toEqual(values.map((v) => Math.fround(v) || 0))
  })

  test('a local-embed vector: the same float4s as join writes, in fewer characters', () => {
    const v = embedText('Refunds are issued within 14 days of a return being received at the warehouse.')
    const text = vectorText(v)
    expect(float4s(text)).toEqual(float4s(`[${v.join(',')}]`))
    expect(text.length).toBeLessThan(`[${v.join(',')}]`.length)
    expect(text).toMatch(/^\[[-0-9e,]+\]$/)
  })

  test('an empty vector and exact decimals', () => {
    expect(vectorText([])).toBe('[]')
    expect(vectorText([0.5, -2, 100, 0.25])).toBe('[5e-1,-2,1e2,25e-2]')
  })
})
