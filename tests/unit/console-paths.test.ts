import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { describeMachine } from '../../src/machines/describe'
import { machines } from '../../src/machines/registry'
import { deliveryPath, documentPath, highlighted, runPath, stateId } from '../../src/console/paths'

setDefaultTimeout(TEST_TIMEOUT_MS)

describe('the console\'s machine paths', () => {
  test('a delivery: one sending per attempt, a retrying between them', () => {
    expect(deliveryPath({ status: 'pending', attempts: [] })).toEqual({ current: 'pending', path: [] })
    expect(deliveryPath({ status: 'succeeded', attempts: [{}] })).toEqual({ current: 'succeeded', path: ['pending', 'sending'] })
    expect(deliveryPath({ status: 'retrying', attempts: [{}] })).toEqual({ current: 'retrying', path: ['pending', 'sending'] })
    expect(deliveryPath({ status: 'failed', attempts: [{}, {}, {}] })).toEqual({ current: 'failed', path: ['pending', 'sending', 'retrying', 'sending', 'retrying', 'sending'] })
  })

  test('a document: the ingestion order up to its status; a failure placed by its error code', () => {
    expect(documentPath({ status: 'uploading', error: null })).toEqual({ current: 'uploading', path: [] })
    expect(documentPath({ status: 'embedding', error: null })).toEqual({ current: 'embedding', path: ['uploading', 'parsing', 'chunking'] })
    expect(documentPath({ status: 'ready', error: null }).path).toEqual(['uploading', 'parsing', 'chunking', 'embedding'])
    expect(documentPath({ status: 'failed', error: { code: 'parse_error' } })).toEqual({ current: 'failed', path: ['uploading', 'parsing'] })
    expect(documentPath({ status: 'failed', error: { code: 'empty_document' } }).path.at(-1)).toBe('parsing')
    expect(documentPath({ status: 'failed', error: { code: 'upstream_error' } }).path.at(-1)).toBe('embedding')
    expect(documentPath({ status: 'failed', error: { code: 'insufficient_credits' } }).path.at(-1)).toBe('embedding')
  })

  test('a run: running, then its final status', () => {
    expect(runPath('running')).toEqual({ current: 'running', path: [] })
    expect(runPath('cancelled')).toEqual({ current: 'cancelled', path: ['running'] })
  })

  test('every state a path names exists in the machine it is drawn on', () => {
    const byName = new Map(machines.map(describeMachine).map((m) => [m.name, new Set(m.states.map((s) => s.name))]))
    const check = (machine: string, hl: { current: string; path: string[] }) => {
      for (const s of [...hl.path, hl.current]) expect(byName.get(machine)!.has(s)).toBe(true)
    }
    for (const status of ['running', 'completed', 'failed', 'cancelled']) check('workflow-run', runPath(status))
    for (const status of ['pending', 'retrying', 'succeeded', 'failed']) check('webhook-delivery', deliveryPath({ status, attempts: [{}, {}] }))
    for (const status of ['uploading', 'parsing', 'chunking', 'embedding', 'ready']) check('document', documentPath({ status, error: null }))
    check('document', documentPath({ status: 'failed', error: { code: 'parse_error' } }))
  })

  test('the highlight appends classes for the Mermaid ids of the machine\'s own text', () => {
    const m = machines.map(describeMachine).find((x) => x.name === 'webhook-delivery')!
    const text = highlighted(m.mermaid, { current: 'failed', path: ['pending', 'sending', 'retrying', 'sending'] })
    expect(text.startsWith(m.mermaid.trimEnd())).toBe(true)
    expect(text).toContain('  class pending,sending,retrying visited\n')
    expect(text).toContain('  class failed current\n')
    // Every id it names is declared in the diagram.
    for (const id of ['pending', 'sending', 'retrying', 'failed']) expect(m.mermaid).toContain(` as ${id}`)
    expect(stateId('running.waiting')).toBe('running_waiting')
    expect(highlighted('stateDiagram-v2\n', { current: 'a', path: [] })).not.toContain('visited\n')
  })
})

describe('the console\'s source', () => {
  const files = (dir: string): string[] =>
    readdirSync(dir).flatMap((f) => (statSync(join(dir, f)).isDirectory() ? files(join(dir, f)) : f.endsWith('.ts') ? [join(dir, f)] : []))
  const sources = files(join(import.meta.dir, '..', '..', 'src', 'console')).map((f) => [f, readFileSync(f, 'utf8')] as const)

  test('never turns a string into markup: no innerHTML, outerHTML, insertAdjacentHTML, document.write or eval', () => {
    expect(sources.length).toBeGreaterThan(5)
    for (const [file, text] of sources) {
      const code = text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/\/\/.*$/gm, '')
      expect({ file, sinks: code.match(/\b(innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\s*\(|new Function)\b/g) ?? [] }).toEqual({ file, sinks: [] })
    }
  })
})
