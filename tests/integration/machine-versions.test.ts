import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { originalKey } from '../../src/domain/knowledge/documents'
import { newId } from '../../src/lib/ids'
import { runDefinition } from '../../src/machines/workflow-run.machine'
import * as knowledge from '../../src/store/knowledge'
import { insertDeliveries } from '../../src/store/deliveries'
import { findRun, insertRun, type RunRow } from '../../src/store/runs'
import { DELIVERY_TIMER } from '../../src/domain/deliveries'
import { waitFor } from '../helpers/harness'
import { startRunsEnv, type RunsEnv } from '../helpers/runs'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Versioned snapshots on real rows (docs/architecture.md, "Versioned snapshots"): the snapshots
 * committed in tests/fixtures/snapshots, one file per machine and version, written by the machines
 * of their day in the middle of their work, are loaded into rows and finished by today's workers;
 * a row written by a newer version of the service is never executed, and an API call that would
 * transition it answers 503.
 */
const DIR = join(import.meta.dir, '..', 'fixtures', 'snapshots')
const fixtures = readdirSync(DIR).map((f) => ({ file: f, ...JSON.parse(readFileSync(join(DIR, f), 'utf8')) }))
const of = (machine: string) => fixtures.filter((f) => f.machine === machine)

let env: RunsEnv
const sql = () => env.h.deps.db.sql

beforeAll(async () => {
  env = await startRunsEnv()
}, 60_000)
afterAll(async () => {
  await env?.close()
})

async function insertFixtureRun(fx: any, version = fx.machine_version): Promise<RunRow> {
  const wf = await env.workflow(fx.graph)
  const { version: wfVersion } = (await env.h.call('GET', `/v1/workflows/${wf}`, { key: env.owner })).body.data
  return insertRun(sql(), {
    id: newId('run'), workflow_id: wf, workflow_version: wfVersion, workspace_id: env.ws, user_id: 'fixture',
    inputs: fx.inputs, snapshot: fx.snapshot, machine_version: version, request_id: null,
  })
}

describe('workflow-run snapshots', () => {
  test.each(of('workflow-run').map((f) => [f.file, f]))('%s: resumed by a worker of today, the node in flight runs again, the run completes once', async (_, fx) => {
    const run = await insertFixtureRun(fx)
    env.workers.runs.nudge()
    const done = await env.finished(run.id)
    expect(done).toMatchObject({ status: 'completed', outputs: { greeting: 'Hello Ada' } })
    const row = (await findRun(sql(), run.id))!
    // Written back at today's version by its first transition.
    expect(row.machine_version).toBe(runDefinition.version)
    const events = await env.eventsOf(run.id)
    expect(events.filter((e) => e.event === 'done')).toHaveLength(1)
    expect(events.filter((e) => e.event === 'node_end').map((e) => e.data.node_id).sort()).toEqual(['end', 'greet', 'pause'])
    expect((await env.outboxOf(run.id)).map((e) => e.type)).toEqual(['workflow.run.completed'])
  })

  test('a run written by a newer version is never claimed nor executed; cancelling it answers 503', async () => {
    const fx = of('workflow-run')[0]
    const newer = await insertFixtureRun(fx, 99)
    // Claims take the oldest first: once a later run of today's version has finished, the newer one was passed over.
    const later = await insertFixtureRun(fx)
    env.workers.runs.nudge()
    expect((await env.finished(later.id)).status).toBe('completed')
    const row = (await findRun(sql(), newer.id))!
    expect({ status: row.status, lease_owner: row.lease_owner, next_seq: row.next_seq, machine_version: row.machine_version, snapshot: row.snapshot }).toEqual({
      status: 'running', lease_owner: null, next_seq: 1, machine_version: 99, snapshot: fx.snapshot,
    })
    const cancel = await env.h.call('POST', `/v1/runs/${newer.id}/cancel`, { key: env.owner })
    expect(cancel.status).toBe(503)
    expect(cancel.body.error.code).toBe('unavailable')
    expect((await findRun(sql(), newer.id))!.status).toBe('running')
  })
})

describe('document snapshots', () => {
  test.each(of('document').map((f) => [f.file, f]))('%s: resumed by a worker of today, the document becomes ready, announced once', async (_, fx) => {
    const kb = (await env.h.call('POST', '/v1/knowledge-bases', { key: env.owner, body: { workspace_id: env.ws, name: `fixture ${fx.file}` } })).body.data
    const id = newId('doc')
    const bytes = new TextEncoder().encode(fx.content)
    const stored = await env.h.deps.files.write(originalKey({ knowledge_base_id: kb.id, id }), [bytes], 1_000_000)
    await knowledge.insertDocument(sql(), {
      id, knowledge_base_id: kb.id, workspace_id: env.ws, name: 'fixture.txt', doc_type: 'txt', group: null, size_bytes: stored.size,
      sha256: stored.sha256, metadata: {}, status: fx.status, snapshot: fx.snapshot, machine_version: fx.machine_version, created_by: 'fixture',
    })
    env.workers.documents.nudge()
    const ready = await waitFor(async () => {
      const doc = await knowledge.findDocument(sql(), id)
      return doc && (doc.status === 'ready' || doc.status === 'failed') ? doc : null
    }, { what: `document ${id} settled`, timeoutMs: 30_000 })
    if (!ready) throw new Error('unreachable')
    expect({ status: ready.status, error: ready.error, machine_version: ready.machine_version }).toEqual({ status: 'ready', error: null, machine_version: 1 })
    expect(ready.chunks_count).toBeGreaterThan(0)
    const announced = await sql()<{ type: string }[]>`select type from events where data->>'document_id' = ${id}`
    expect(announced.map((e) => e.type)).toEqual(['knowledge.document.ready'])
  })

  test('a document written by a newer version is never claimed', async () => {
    const fx = of('document')[0]
    const kb = (await env.h.call('POST', '/v1/knowledge-bases', { key: env.owner, body: { workspace_id: env.ws, name: 'newer' } })).body.data
    const row = (id: string, version: number) => ({
      id, knowledge_base_id: kb.id, workspace_id: env.ws, name: 'n.txt', doc_type: 'txt', group: null, size_bytes: 1,
      sha256: '', metadata: {}, status: fx.status, snapshot: fx.snapshot, machine_version: version, created_by: 'fixture',
    })
    const newer = newId('doc')
    await knowledge.insertDocument(sql(), row(newer, 99))
    const today = newId('doc')
    await env.h.deps.files.write(originalKey({ knowledge_base_id: kb.id, id: today }), [new TextEncoder().encode(fx.content)], 1_000_000)
    await knowledge.insertDocument(sql(), row(today, 1))
    env.workers.documents.nudge()
    await waitFor(async () => (await knowledge.findDocument(sql(), today))?.status === 'ready', { what: 'the document of today ready', timeoutMs: 30_000 })
    const untouched = (await knowledge.findDocument(sql(), newer))!
    expect({ status: untouched.status, lease_owner: untouched.lease_owner, attempts: untouched.attempts, machine_version: untouched.machine_version }).toEqual({
      status: 'chunking', lease_owner: null, attempts: 0, machine_version: 99,
    })
  })
})

describe('webhook-delivery snapshots', () => {
  test.each(of('webhook-delivery').map((f) => [f.file, f]))('%s: its retry is sent by a worker of today and it succeeds', async (_, fx) => {
    const hook = await env.h.call('POST', '/v1/webhooks', {
      key: env.owner,
      body: { workspace_id: env.ws, url: `http://127.0.0.1:${env.hooks.port}/fixture`, events: ['workflow.run.completed'], secret: 'whsec_fixture_secret_0123456789abcdef' },
    })
    expect(hook.status).toBe(201)
    const id = newId('dlv')
    await sql().begin((tx) =>
      insertDeliveries(tx, [{
        id, webhook_id: hook.body.data.id, event_id: newId('evt'), event_type: 'workflow.run.completed', data: { run_id: 'run_fixture' },
        status: fx.status, snapshot: fx.snapshot, machine_version: fx.machine_version, next_attempt_at: new Date(),
      }]),
    )
    // The row as the fixture left it: one attempt made.
    await sql()`update webhook_deliveries set attempts_count = ${fx.attempts_count} where id = ${id}`
    await env.h.deps.timers.schedule(DELIVERY_TIMER, [{ id, at: new Date() }])
    const done = await waitFor(async () => {
      const [row] = await sql()<{ status: string; attempts_count: number; machine_version: number }[]>`select status, attempts_count, machine_version from webhook_deliveries where id = ${id}`
      return row && row.status !== 'retrying' ? row : null
    }, { what: `delivery ${id} settled`, timeoutMs: 30_000 })
    expect({ ...done }).toEqual({ status: 'succeeded', attempts_count: 2, machine_version: 1 })
    expect(env.hookRequests.filter((r) => r.path === '/fixture')).toHaveLength(1)
  })
})

describe('the fixtures', () => {
  test('every machine has a fixture of its current version', async () => {
    const { machines } = await import('../../src/machines/registry')
    for (const m of machines) expect(of(m.name).map((f) => f.machine_version)).toContain(m.version)
  })
})
