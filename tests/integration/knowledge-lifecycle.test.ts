import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { existsSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { startWorkers, type Workers } from '../../src/workers'
import { startFakeProvider, writeModelsFile, type FakeProvider } from '../helpers/fake-provider'
import { keyFor, startHarness, waitFor, workspaceOf, type Harness } from '../helpers/harness'
import { chunksOf, count, createKb, expectError, filesOf, outboxOf, settled, statusOf, upload, uploadText } from '../helpers/knowledge'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Re-parse and delete (docs/knowledge.md "Re-parse and delete"): a re-parse builds a new generation
 * while the old chunks stay searchable, then swaps; it is refused (409) unless the document is ready
 * or failed; it re-cuts with the base's current chunking. A delete removes the row, its chunks and
 * its original in any status, and an ingestion that was pending never happens.
 */

let h: Harness
let workers: Workers
let fake: FakeProvider
let dir: string
let owner: string
let ws: string

const DIMS = 16

beforeAll(async () => {
  fake = await startFakeProvider()
  fake.script('steady-up', [{ dimensions: DIMS }])
  // `flaky-embed` goes first to a provider whose answers are scripted per test and time out after
  // 2 s, then fails over to a steady one: a scripted hang holds a document in `embedding`.
  let modelsFile: string
  ;({ dir, file: modelsFile } = writeModelsFile('ap-kl-', {
    providers: [
      { id: 'first', kind: 'openai', base_url: fake.baseUrl, api_key: 'sk-fake', timeout_ms: 2_000 },
      { id: 'steady', kind: 'openai', base_url: fake.baseUrl, api_key: 'sk-fake', timeout_ms: 10_000 },
    ],
    models: [{ id: 'flaky-embed', type: 'embedding', vendor: 'test', dimensions: DIMS, routes: [{ provider: 'first', model: 'flaky-up' }, { provider: 'steady', model: 'steady-up' }] }],
  }))
  h = await startHarness({ MODELS_FILE: modelsFile, RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000' })
  workers = await startWorkers(h.deps)
  owner = await keyFor(h, 'kl-owner')
  ws = await workspaceOf(h, owner, 'Lifecycle')
})

afterAll(async () => {
  await workers?.stop()
  await h?.close()
  await fake?.close()
  if (dir) rmSync(dir, { recursive: true, force: true })
})

/** Only the document worker stops (the others register metrics once per process): uploads stay `parsing`. */
const stopWorkers = () => workers.documents.stop()
const restartWorkers = () => workers.documents.start()

const row = async (id: string) =>
  (await h.deps.db.sql<{ status: string; generation: number; live_generation: number | null; chunks_count: number }[]>`
    select status, generation, live_generation, chunks_count from documents where id = ${id}`)[0] ?? null

const search = async (kbId: string, query: string, top_k = 20) => {
  const res = await h.call('POST', `/v1/knowledge-bases/${kbId}/search`, { key: owner, body: { query, top_k } })
  expect(res.status).toBe(200)
  return res.body.results as { chunk_id: string; document_id: string }[]
}

const reparse = (id: string) => h.call('POST', `/v1/documents/${id}/reparse`, { key: owner })

const GUIDE = '# Guide\n\nInstall the agent with the package manager.\n\n## Usage\n\nStart the agent and point it at a workspace.\n\n## Limits\n\nOne agent per host.'

describe('reparse', () => {
  test('from ready: 202, parsing, then ready as generation 2 with new chunk ids and none of generation 1 left', async () => {
    const kb = (await createKb(h, owner, { workspace_id: ws, name: 'Reparse' })).id
    const id = await uploadText(h, owner, kb, { name: 'guide.md', content: GUIDE, metadata: { v: 1 } })
    const first = await settled(h, owner, id)
    expect(first).toMatchObject({ status: 'ready', chunks_count: 3 })
    const oldIds = (await chunksOf(h, id)).map((c) => c.id)

    const res = await reparse(id)
    expect(res.status).toBe(202)
    expect(Object.keys(res.body).sort()).toEqual(['data', 'meta', 'request_id'])
    // The answer describes the searchable generation: still the old one's count and time.
    expect(res.body.data).toMatchObject({ id, knowledge_base_id: kb, name: 'guide.md', type: 'md', status: 'parsing', error: null, chunks_count: 3, indexed_at: first.indexed_at, metadata: { v: 1 } })

    const s = await settled(h, owner, id)
    expect(s).toMatchObject({ status: 'ready', chunks_count: 3 })
    expect(Date.parse(s.indexed_at)).toBeGreaterThanOrEqual(Date.parse(first.indexed_at))
    expect(await row(id)).toEqual({ status: 'ready', generation: 2, live_generation: 2, chunks_count: 3 })
    const chunks = await chunksOf(h, id)
    expect(chunks.map((c) => [c.generation, c.position])).toEqual([[2, 0], [2, 1], [2, 2]])
    for (const c of chunks) expect(oldIds).not.toContain(c.id)
    expect((await search(kb, 'install the agent')).map((r) => r.chunk_id).sort()).toEqual(chunks.map((c) => c.id).sort())
    const events = await outboxOf(h, id)
    expect(events.map((e) => [e.type, e.data.chunks_count])).toEqual([['knowledge.document.ready', 3], ['knowledge.document.ready', 3]])
    expect(events[1]!.data.indexed_at).toBe(s.indexed_at)
  })

  test('the old chunks stay searchable while the new generation is being embedded, then are swapped at once', async () => {
    fake.script('flaky-up', [{ dimensions: DIMS }])
    const kb = (await createKb(h, owner, { workspace_id: ws, name: 'Swap', embedding_model: 'flaky-embed', retrieval: { mode: 'vector' } })).id
    const id = await uploadText(h, owner, kb, { name: 'guide.md', content: GUIDE })
    expect((await settled(h, owner, id)).status).toBe('ready')
    const oldIds = (await chunksOf(h, id)).map((c) => c.id).sort()

    // The re-parse's embedding request hangs on the first route (2 s, then failover); searches answer.
    fake.script('flaky-up', ['hang', { dimensions: DIMS }])
    expect((await reparse(id)).status).toBe(202)
    // The hanging request is the re-parse's: until it is in, a search could take the scripted hang.
    await waitFor(() => fake.open() === 1, { what: 'the re-parse\'s embedding request to hang' })
    expect(fake.requests.at(-1)!.json.input.length).toBe(3)
    expect(await row(id)).toMatchObject({ status: 'embedding', generation: 2, live_generation: 1, chunks_count: 3 })
    expect((await search(kb, 'install the agent')).map((r) => r.chunk_id).sort()).toEqual(oldIds)
    expect(await statusOf(h, owner, id)).toMatchObject({ status: 'embedding', chunks_count: 3 })

    const s = await settled(h, owner, id)
    expect(s.status).toBe('ready')
    const newIds = (await chunksOf(h, id)).map((c) => c.id).sort()
    expect(newIds.length).toBe(3)
    expect(newIds.some((c) => oldIds.includes(c))).toBe(false)
    expect((await search(kb, 'install the agent')).map((r) => r.chunk_id).sort()).toEqual(newIds)
  })

  test('from failed: 202, and it fails again with the same error as a new generation', async () => {
    const kb = (await createKb(h, owner, { workspace_id: ws, name: 'Failed again' })).id
    const id = await upload(h, owner, kb, { bytes: '', name: 'empty.txt' })
    expect((await settled(h, owner, id)).status).toBe('failed')
    const res = await reparse(id)
    expect(res.status).toBe(202)
    expect(res.body.data).toMatchObject({ status: 'parsing', error: null })
    expect((await settled(h, owner, id)).status).toBe('failed')
    expect(await row(id)).toMatchObject({ status: 'failed', generation: 2, live_generation: null })
    const events = await outboxOf(h, id)
    expect(events.map((e) => [e.type, e.data.error.code])).toEqual([['knowledge.document.failed', 'empty_document'], ['knowledge.document.failed', 'empty_document']])
  })

  test('of a document still parsing: 409 conflict, the document unchanged', async () => {
    const kb = (await createKb(h, owner, { workspace_id: ws, name: 'Busy' })).id
    await stopWorkers()
    let id = ''
    try {
      id = await uploadText(h, owner, kb, { name: 'busy.txt', content: 'Still being ingested.' })
      expectError(await reparse(id), 409, 'conflict')
      expect(await row(id)).toEqual({ status: 'parsing', generation: 1, live_generation: null, chunks_count: 0 })
    } finally {
      await restartWorkers()
    }
    expect((await settled(h, owner, id)).status).toBe('ready')
    expect(await row(id)).toMatchObject({ generation: 1, live_generation: 1 })
  })

  test('after the base\'s chunking changed: nothing changes until the re-parse re-cuts with the new chunk_size', async () => {
    const kb = (await createKb(h, owner, { workspace_id: ws, name: 'Recut' })).id
    const paragraphs = Array.from({ length: 10 }, (_, i) => `Step ${i}: open the panel, choose option ${i}, confirm the dialog and wait for the green light.`)
    const id = await uploadText(h, owner, kb, { name: 'steps.txt', content: paragraphs.join('\n\n') })
    const before = await settled(h, owner, id)
    expect(before).toMatchObject({ status: 'ready', chunks_count: 1 })

    const patched = await h.call('PATCH', `/v1/knowledge-bases/${kb}`, { key: owner, body: { chunking: { chunk_size: 32, chunk_overlap: 0 } } })
    expect(patched.status).toBe(200)
    expect(await row(id)).toMatchObject({ generation: 1, chunks_count: 1 })
    expect((await chunksOf(h, id)).length).toBe(1)

    expect((await reparse(id)).status).toBe(202)
    const small = await settled(h, owner, id)
    expect(small.status).toBe('ready')
    const chunks = await chunksOf(h, id)
    expect(small.chunks_count).toBe(chunks.length)
    expect(chunks.length).toBeGreaterThanOrEqual(10)
    expect(chunks.every((c) => c.generation === 2 && c.tokens <= 32)).toBe(true)

    await h.call('PATCH', `/v1/knowledge-bases/${kb}`, { key: owner, body: { chunking: { chunk_size: 512, chunk_overlap: 0 } } })
    expect((await reparse(id)).status).toBe(202)
    expect(await settled(h, owner, id)).toMatchObject({ status: 'ready', chunks_count: 1 })
    expect((await chunksOf(h, id)).map((c) => c.generation)).toEqual([3])
  })
})

describe('delete', () => {
  test('a ready document: the row, its chunks and its original go; it is no longer found or searched', async () => {
    const kb = (await createKb(h, owner, { workspace_id: ws, name: 'Delete ready' })).id
    const id = await uploadText(h, owner, kb, { name: 'gone.md', content: GUIDE, group: 'g', metadata: { k: 'v' } })
    const other = await uploadText(h, owner, kb, { name: 'stays.txt', content: 'The agent stays installed.' })
    const s = await settled(h, owner, id)
    await settled(h, owner, other)
    expect(filesOf(h, kb)).toEqual([id, other].sort())

    const res = await h.call('DELETE', `/v1/documents/${id}`, { key: owner })
    expect(res.status).toBe(200)
    expect(res.body.data).toMatchObject({ id, knowledge_base_id: kb, name: 'gone.md', type: 'md', group: 'g', metadata: { k: 'v' }, status: 'ready', chunks_count: 3, indexed_at: s.indexed_at, deleted: true })

    expect(await row(id)).toBeNull()
    expect(await count(h, 'chunks', 'document_id', id)).toBe(0)
    expect(filesOf(h, kb)).toEqual([other])
    expectError(await h.call('GET', `/v1/documents/${id}`, { key: owner }), 404, 'not_found')
    expectError(await h.call('DELETE', `/v1/documents/${id}`, { key: owner }), 404, 'not_found')
    expectError(await reparse(id), 404, 'not_found')
    expect((await search(kb, 'install the agent')).map((r) => r.document_id)).toEqual([other])
    expect(await count(h, 'chunks', 'document_id', other)).toBe(1)
  })

  test('a failed document', async () => {
    const kb = (await createKb(h, owner, { workspace_id: ws, name: 'Delete failed' })).id
    const id = await upload(h, owner, kb, { bytes: '%PDF-1.7\nnot really a pdf', name: 'broken.pdf' })
    expect((await settled(h, owner, id)).status).toBe('failed')
    const res = await h.call('DELETE', `/v1/documents/${id}`, { key: owner })
    expect(res.status).toBe(200)
    expect(res.body.data).toMatchObject({ id, status: 'failed', error: { code: 'parse_error' }, deleted: true })
    expect(await row(id)).toBeNull()
    expect(filesOf(h, kb)).toEqual([])
  })

  test('while still parsing (workers stopped): deleted at once, and nothing is ingested once workers start', async () => {
    const kb = (await createKb(h, owner, { workspace_id: ws, name: 'Delete parsing' })).id
    await stopWorkers()
    let doomed = ''
    let control = ''
    try {
      doomed = await upload(h, owner, kb, { bytes: 'Never to be indexed.', name: 'doomed.txt' })
      control = await upload(h, owner, kb, { bytes: 'Indexed once workers run.', name: 'control.txt' })
      const res = await h.call('DELETE', `/v1/documents/${doomed}`, { key: owner })
      expect(res.status).toBe(200)
      expect(res.body.data).toMatchObject({ id: doomed, status: 'parsing', chunks_count: 0, indexed_at: null, deleted: true })
      expect(filesOf(h, kb)).toEqual([control])
    } finally {
      await restartWorkers()
    }
    expect((await settled(h, owner, control)).status).toBe('ready')
    expect(await row(doomed)).toBeNull()
    expect(await count(h, 'chunks', 'document_id', doomed)).toBe(0)
    expect(await count(h, 'chunks', 'knowledge_base_id', kb)).toBe(1)
    expect(await outboxOf(h, doomed)).toEqual([])
    expect(filesOf(h, kb)).toEqual([control])
  })
})

test('no original is left without its document', async () => {
  const root = join(h.deps.config.dataDir, 'files')
  const docs = new Set((await h.deps.db.sql<{ id: string }[]>`select id from documents`).map((r) => r.id))
  for (const kb of existsSync(root) ? (await Array.fromAsync(new Bun.Glob('*').scan({ cwd: root, onlyFiles: false }))) : []) {
    for (const f of filesOf(h, kb)) expect(docs.has(f)).toBe(true)
  }
})
