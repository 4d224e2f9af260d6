import { expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { duration } from '../../src/console/format'

setDefaultTimeout(TEST_TIMEOUT_MS)

// The console showed a 2-minute run as "131731 ms".
test.each([
  [null, '—'],
  [0, '0 ms'],
  [850, '850 ms'],
  [1_400, '1.4 s'],
  [12_300, '12 s'],
  [131_731, '2 min 12 s'],
  [120_000, '2 min'],
  [3_900_000, '1 h 5 min'],
] as const)('%p ms reads %p', (ms, text) => {
  expect(duration(ms)).toBe(text)
})
