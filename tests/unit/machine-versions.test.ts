import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { loadRow, loadSnapshot, NewerSnapshot, type MachineDefinition } from '../../src/machines/definition'
import { documentDefinition } from '../../src/machines/document.machine'
import { deliveryDefinition } from '../../src/machines/webhook-delivery.machine'
import { runDefinition } from '../../src/machines/workflow-run.machine'
import type { Persisted } from '../../src/machines/runner'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Loading stored snapshots (src/machines/definition.ts): a snapshot of an earlier version is brought
 * to the current one through each upgrade in turn, a current one is read as it is, a newer one is
 * refused. The committed fixtures (tests/fixtures/snapshots) of every version resolve in today's
 * machines; tests/integration/machine-versions.test.ts finishes them on real rows.
 */
const definitions: MachineDefinition<any>[] = [runDefinition, documentDefinition, deliveryDefinition]
const DIR = join(import.meta.dir, '..', 'fixtures', 'snapshots')
const fixtures = readdirSync(DIR).map((f) => JSON.parse(readFileSync(join(DIR, f), 'utf8')))

/** The run machine as if it had reached version 3, its context having gained two fields on the way. */
const runV3: MachineDefinition<any> = {
  ...runDefinition,
  version: 3,
  upgrades: {
    1: (s) => ({ ...s, context: { ...(s.context as object), retries: {} } }),
    2: (s) => ({ ...s, context: { ...(s.context as object), waiting: null } }),
  },
}

describe('loadSnapshot', () => {
  const v1 = fixtures.find((f) => f.machine === 'workflow-run' && f.machine_version === 1)!
  test('an earlier version goes through every upgrade in order, and the result resolves in the machine', () => {
    const up = loadSnapshot(runV3, { snapshot: v1.snapshot, machine_version: 1 }) as Persisted<any>
    expect(up.context).toEqual({ ...v1.snapshot.context, retries: {}, waiting: null })
    expect(up.value).toBe('running')
    expect(runV3.machine.resolveState(up as never).value).toBe('running')
    expect(loadSnapshot(runV3, { snapshot: { ...v1.snapshot, context: { ...v1.snapshot.context, retries: {} } }, machine_version: 2 }).context).toHaveProperty('waiting', null)
  })

  test('the current version is read as it is (the same object)', () => {
    const stored = { snapshot: v1.snapshot, machine_version: runDefinition.version }
    expect(loadSnapshot(runDefinition, stored)).toBe(v1.snapshot)
    const row = { id: 'run_x', ...stored }
    expect(loadRow(runDefinition, row)).toBe(row)
  })

  test('a row of an earlier version is answered upgraded, marked current, the stored row untouched', () => {
    const row = { id: 'run_x', snapshot: v1.snapshot, machine_version: 1 }
    const loaded = loadRow(runV3, row)
    expect(loaded.machine_version).toBe(3)
    expect(loaded.snapshot.context).toHaveProperty('waiting', null)
    expect(row.machine_version).toBe(1)
    expect(row.snapshot.context).not.toHaveProperty('waiting')
  })

  test('a newer version is refused with NewerSnapshot, naming both versions', () => {
    const newer = runDefinition.version + 1
    expect(() => loadSnapshot(runDefinition, { snapshot: v1.snapshot, machine_version: newer })).toThrow(NewerSnapshot)
    expect(() => loadSnapshot(runDefinition, { snapshot: v1.snapshot, machine_version: newer })).toThrow(new RegExp(`version ${newer} .* knows up to ${runDefinition.version}`))
  })

  test('a missing upgrade is a definition bug, not a silent pass-through', () => {
    const broken = { ...runV3, upgrades: { 1: runV3.upgrades[1]! } }
    expect(() => loadSnapshot(broken, { snapshot: v1.snapshot, machine_version: 1 })).toThrow(/no upgrade from snapshot version 2 to 3/)
  })
})

describe('the definitions', () => {
  test.each(definitions.map((d) => [d.name, d]))('%s: an upgrade for every version below the current one', (_, d) => {
    for (let v = 1; v < d.version; v++) expect(typeof d.upgrades[v]).toBe('function')
  })

  test.each(definitions.map((d) => [d.name, d]))('%s: every state it announces exists', (_, d) => {
    for (const state of Object.keys(d.announces)) expect(Object.keys(d.machine.config.states ?? {})).toContain(state)
  })

  test.each(fixtures.map((f) => [`${f.machine}.v${f.machine_version}`, f]))('fixture %s loads into a state today\'s machine resolves', (_, f) => {
    const d = definitions.find((x) => x.name === f.machine)!
    const snapshot = loadSnapshot(d, { snapshot: f.snapshot, machine_version: f.machine_version })
    const resolved = d.machine.resolveState(snapshot as never)
    expect(resolved.value).toBe(snapshot.value)
    expect(resolved.status).toBe('active')
  })
})
