import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { join } from 'node:path'
import { createMachine } from 'xstate'
import { describeMachine } from '../../src/machines/describe'
import { MACHINE_DOCS_DIR, machineDocFiles, renderMachineDoc } from '../../src/machines/docs'
import { machines } from '../../src/machines/registry'

setDefaultTimeout(TEST_TIMEOUT_MS)

/** docs/machines/ is generated from the machine definitions: a changed machine needs `bun run diagrams`. */
const root = join(import.meta.dir, '..', '..')

async function committed(path: string): Promise<string | null> {
  const file = Bun.file(join(root, path))
  return (await file.exists()) ? file.text() : null
}

/** Equal, or a failure that says what to do (bun:test's matchers take no message). */
function expectFresh(path: string, onDisk: string | null, expected: string) {
  if (onDisk === expected) return
  const why = onDisk === null ? 'is missing' : 'is stale'
  throw new Error(`${path} ${why}: run bun run diagrams (and commit the result)`)
}

describe('docs/machines is up to date', () => {
  test('the registry is not empty (the checks below are not vacuous)', () => {
    expect(machines.length).toBeGreaterThan(0)
  })

  for (const entry of machines) {
    test(`${MACHINE_DOCS_DIR}/${entry.name}.md`, async () => {
      const path = `${MACHINE_DOCS_DIR}/${entry.name}.md`
      expectFresh(path, await committed(path), renderMachineDoc(describeMachine(entry)))
    })
  }

  test(`${MACHINE_DOCS_DIR}/README.md and no page of a machine that is gone`, async () => {
    const files = machineDocFiles(machines)
    const index = files.find((f) => f.path.endsWith('/README.md'))!
    expectFresh(index.path, await committed(index.path), index.content)
    const pages = new Bun.Glob('*.md').scanSync(join(root, MACHINE_DOCS_DIR))
    const extra = [...pages].map((name) => `${MACHINE_DOCS_DIR}/${name}`).filter((p) => !files.some((f) => f.path === p))
    if (extra.length) throw new Error(`${extra.join(', ')} no longer generated: run bun run diagrams`)
  })

  test('a changed machine makes its page stale', () => {
    // The same machine with one state description changed, built from its config (the registry's stays as it is).
    const entry = machines[0]!
    const config = entry.machine.config as { states: Record<string, Record<string, unknown>> }
    const [first, firstConfig] = Object.entries(config.states)[0]!
    const changed = createMachine({ ...config, states: { ...config.states, [first]: { ...firstConfig, description: 'changed' } } } as never)
    const page = renderMachineDoc(describeMachine(entry))
    expect(renderMachineDoc(describeMachine({ ...entry, machine: changed }))).not.toBe(page)
    expect(renderMachineDoc(describeMachine({ ...entry, version: entry.version + 1 }))).not.toBe(page)
    expect(renderMachineDoc(describeMachine(entry))).toBe(page)
  })
})
