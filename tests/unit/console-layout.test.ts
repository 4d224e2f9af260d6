import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { layers, stateText } from '../../src/console/layout'

setDefaultTimeout(TEST_TIMEOUT_MS)

describe('the console\'s run graph layout', () => {
  test('a column per longest path from the start; nodes of one column stacked', () => {
    // start → a → c → end, start → b → end: end sits after c, not beside it.
    const edges = [
      { source: 'start', target: 'a' }, { source: 'start', target: 'b' }, { source: 'a', target: 'c' },
      { source: 'c', target: 'end' }, { source: 'b', target: 'end' },
    ]
    const { placed, columns, rows } = layers(['start', 'a', 'b', 'c', 'end'], edges)
    expect(placed).toEqual([
      { id: 'start', column: 0, row: 0 }, { id: 'a', column: 1, row: 0 }, { id: 'b', column: 1, row: 1 },
      { id: 'c', column: 2, row: 0 }, { id: 'end', column: 3, row: 0 },
    ])
    expect({ columns, rows }).toEqual({ columns: 4, rows: 2 })
  })

  test('a cycle or an edge to an unknown node does not hang or throw', () => {
    const { placed } = layers(['a', 'b'], [{ source: 'a', target: 'b' }, { source: 'b', target: 'a' }, { source: 'a', target: 'zz' }])
    expect(placed.length).toBe(2)
    expect(layers([], []).columns).toBe(0)
  })

  test('states read as words, completed as done, the attempt when past the first', () => {
    expect(stateText('completed', 1)).toBe('done')
    expect(stateText('retrying', 3)).toBe('retrying (attempt 3)')
    expect(stateText('waiting', null)).toBe('waiting')
  })
})
