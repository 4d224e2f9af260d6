/**
 * Writes tests/fixtures/snapshots/<machine>.v<version>.json: snapshots of each machine's current
 * version, made by the machines themselves, in the middle of their work (a run with a node in
 * flight and one on a wait, a document being chunked, a delivery waiting to retry). Committed and
 * never rewritten: tests/integration/machine-versions.test.ts loads every version's files into real
 * rows and checks that today's workers upgrade and finish them. Run it once when a machine's version
 * is bumped (it refuses to overwrite a file).
 *
 *   bun scripts/snapshot-fixtures.ts
 */
import { existsSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { advanceMany, start } from '../src/machines/runner'
import { documentDefinition } from '../src/machines/document.machine'
import { deliveryDefinition } from '../src/machines/webhook-delivery.machine'
import { runDefinition } from '../src/machines/workflow-run.machine'

const DIR = join(import.meta.dir, '..', 'tests', 'fixtures', 'snapshots')
const at = '2026-01-01T00:00:00.000Z'

const graph = {
  nodes: [
    { id: 'start', type: 'start', config: { inputs: [{ name: 'name', type: 'string' }] } },
    { id: 'greet', type: 'template', config: { template: 'Hello {{inputs.name}}' } },
    { id: 'pause', type: 'wait', config: { seconds: 1 } },
    { id: 'end', type: 'end', config: { outputs: { greeting: '{{nodes.greet.output.text}}' } } },
  ],
  edges: [
    { source: 'start', target: 'greet' },
    { source: 'start', target: 'pause' },
    { source: 'greet', target: 'end' },
    { source: 'pause', target: 'end' },
  ],
}
// Version 1 was written with `greet` in flight; version 2 (retries) with its first attempt failed
// and the second due: a worker of today resumes the back-off, then runs it.
const run = advanceMany(runDefinition.machine, start(runDefinition.machine, undefined as never).persisted, [
  { type: 'node.started', node: 'start', at },
  { type: 'node.completed', node: 'start', output: { name: 'Ada' }, durationMs: 1, end: false },
  { type: 'node.started', node: 'greet', at },
  { type: 'node.retrying', node: 'greet', attempt: 2, until: '2026-01-01T00:00:00.500Z', code: 'upstream_error', message: 'status 503' },
  { type: 'node.started', node: 'pause', at },
  { type: 'node.waiting', node: 'pause', until: '2026-01-01T00:00:01.000Z' },
])!.persisted

const chunking = { chunk_size: 200, chunk_overlap: 20 }
const document = advanceMany(documentDefinition.machine, start(documentDefinition.machine, undefined as never).persisted, [
  { type: 'upload.stored', chunking },
  { type: 'parsed' },
])!.persisted

const delivery = advanceMany(deliveryDefinition.machine, start(deliveryDefinition.machine, { delays: [100, 200, 400], leaseMs: 5000, manual: false }).persisted, [
  { type: 'timer.fired' },
  { type: 'attempt.failed', retryable: true },
])!.persisted

const fixtures = [
  { def: runDefinition, body: { note: 'A run: `start` completed, `greet` retrying (its first attempt failed, the second due long ago) when its worker died, `pause` waiting (its time long past).', inputs: { name: 'Ada' }, graph, snapshot: run } },
  { def: documentDefinition, body: { note: 'A document parsed and being chunked when its worker died.', status: 'chunking', content: 'Refunds take five days. Shipping is free over fifty euros.', snapshot: document } },
  { def: deliveryDefinition, body: { note: 'A delivery whose first attempt failed (5xx), waiting for its retry.', status: 'retrying', attempts_count: 1, snapshot: delivery } },
]
for (const { def, body } of fixtures) {
  const file = join(DIR, `${def.name}.v${def.version}.json`)
  if (existsSync(file)) {
    console.log(`kept ${file} (fixtures are never rewritten)`)
    continue
  }
  writeFileSync(file, `${JSON.stringify({ machine: def.name, machine_version: def.version, ...body }, null, 2)}\n`)
  console.log(`wrote ${file}`)
}
