import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { describeMachine } from '../../src/machines/describe'
import { machines } from '../../src/machines/registry'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The console and docs/machines draw the machines with Mermaid, which lays the diagram out in the
 * browser (it measures the labels' text there), so the labels' boxes are checked by
 * tests/e2e/console.test.ts. What the drawing's text decides is checked here: Mermaid stacks the labels
 * of parallel arrows between the same two states on top of each other, so every machine has at most
 * one arrow per ordered pair of states, its label a line per transition.
 */
describe('one arrow per pair of states in every machine diagram', () => {
  test('the registry is not empty (the checks below are not vacuous)', () => {
    expect(machines.length).toBeGreaterThanOrEqual(3)
  })

  for (const entry of machines) {
    test(entry.name, () => {
      const arrows = describeMachine(entry).mermaid.split('\n').flatMap((line) => {
        const m = /^\s*(\S+) --> (\S+)(?: : (.*))?$/.exec(line)
        return m ? [{ pair: `${m[1]} --> ${m[2]}`, label: m[3] ?? '' }] : []
      })
      expect(arrows.length).toBeGreaterThan(0)
      const pairs = arrows.map((a) => a.pair)
      expect(pairs.filter((p, i) => pairs.indexOf(p) !== i)).toEqual([])
    })
  }

  test('the delivery machine: the three ways from sending to failed share one arrow, a line each', () => {
    const mermaid = describeMachine(machines.find((m) => m.name === 'webhook-delivery')!).mermaid
    expect(mermaid).toContain('  sending --> failed : attempt.failed [isPermanent]<br>attempt.failed<br>attempt.abandoned\n')
    expect(mermaid).toContain('  sending --> retrying : attempt.failed [canRetry]<br>attempt.abandoned [canRetry]\n')
  })
})
