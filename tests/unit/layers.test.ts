import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { circles, importGraph, layerBreaches, longFiles, longFunctions } from '../../scripts/layers'

setDefaultTimeout(TEST_TIMEOUT_MS)

// The shape of src/ that docs/architecture.md ("Layers") promises a reader: `bun run layers` prints
// the same findings with their paths.
describe('the layout of src/', () => {
  const graph = importGraph()

  test('the graph is read: every layer is there, and imports are found', () => {
    const files = [...graph.keys()]
    for (const layer of ['routes/', 'domain/', 'store/', 'workers/', 'machines/', 'lib/']) expect(files.some((f) => f.startsWith(layer))).toBe(true)
    expect(graph.get('app.ts')).toContain('routes/runs.ts')
  })

  test('no import circle between files', () => {
    expect(circles(graph)).toEqual([])
  })

  test('no import against the layer order (no store file imports the domain, no domain or route file reaches a worker)', () => {
    expect(layerBreaches(graph)).toEqual([])
  })

  test('a circle and a breach are found when there is one', () => {
    const bad = new Map([
      ['store/a.ts', ['domain/b.ts']],
      ['domain/b.ts', ['store/a.ts', 'deps.ts']],
      ['deps.ts', ['workers/c.ts']],
      ['workers/c.ts', []],
    ])
    expect(circles(bad)).toEqual([['domain/b.ts', 'store/a.ts']])
    expect(layerBreaches(bad).map((b) => b.rule)).toEqual(['store may not import domain', 'deps may not import workers', 'store reaches a worker', 'domain reaches a worker'])
  })

  test('no source file over 400 lines, no function over 80', () => {
    expect(longFiles()).toEqual([])
    expect(longFunctions()).toEqual([])
  })
})
