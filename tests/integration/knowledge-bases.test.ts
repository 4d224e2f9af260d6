import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { existsSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { startWorkers, type Workers } from '../../src/workers'
import { startFakeProvider, writeModelsFile, type FakeProvider } from '../helpers/fake-provider'
import { keyFor, startHarness, workspaceOf, type Answer, type Harness } from '../helpers/harness'
import { chunksOf, count, createKb, expectError, expectIso, filesOf, outboxOf, settled, upload, uploadText } from '../helpers/knowledge'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Knowledge bases end to end (docs/knowledge.md "Knowledge bases"): create with defaults and with
 * every field, list, get, patch, model and chunking checks, the embedding model change (409 without
 * reembed; with it every document re-indexed as a new generation), and delete with documents,
 * chunks and originals. A second embedding model (16 dimensions) and a rerank model are served by
 * the loopback fake provider through MODELS_FILE.
 */

let h: Harness
let workers: Workers
let fake: FakeProvider
let dir: string
let owner: string
let ws: string

const FAKE_DIMS = 16

beforeAll(async () => {
  fake = await startFakeProvider()
  fake.script('fake-embed-up', [{ dimensions: FAKE_DIMS }])
  let modelsFile: string
  ;({ dir, file: modelsFile } = writeModelsFile('ap-kb-', {
    providers: [{ id: 'fake', kind: 'openai', base_url: fake.baseUrl, api_key: 'sk-fake', timeout_ms: 10_000 }],
    models: [
      { id: 'fake-embed', type: 'embedding', vendor: 'test', dimensions: FAKE_DIMS, routes: [{ provider: 'fake', model: 'fake-embed-up' }] },
      { id: 'huge-embed', type: 'embedding', vendor: 'test', dimensions: 3072, routes: [{ provider: 'fake', model: 'huge-embed-up' }] },
      { id: 'fake-rerank', type: 'rerank', vendor: 'test', routes: [{ provider: 'fake', model: 'fake-rerank-up' }] },
    ],
  }))
  h = await startHarness({ MODELS_FILE: modelsFile, RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000' })
  workers = await startWorkers(h.deps)
  owner = await keyFor(h, 'kb-owner')
  ws = await workspaceOf(h, owner, 'Bases')
})

afterAll(async () => {
  await workers?.stop()
  await h?.close()
  await fake?.close()
  if (dir) rmSync(dir, { recursive: true, force: true })
})

const get = async (id: string) => {
  const res = await h.call('GET', `/v1/knowledge-bases/${id}`, { key: owner })
  expect(res.status).toBe(200)
  return res.body.data
}

const generations = (docId: string) => h.deps.db.sql<{ generation: number; live_generation: number | null }[]>`select generation, live_generation from documents where id = ${docId}`

describe('create, get, list', () => {
  test('defaults: local-embed (384), local-rerank, chunking 256/32, hybrid', async () => {
    const res = await h.call('POST', '/v1/knowledge-bases', { key: owner, body: { workspace_id: ws, name: 'Defaults' } })
    expect(res.status).toBe(201)
    expect(Object.keys(res.body).sort()).toEqual(['data', 'meta', 'request_id'])
    expect(res.body.meta).toEqual({ version: 'v1', deprecated_warnings: [] })
    const kb = res.body.data
    expect(kb).toEqual({
      id: kb.id,
      workspace_id: ws,
      name: 'Defaults',
      description: '',
      embedding_model: 'local-embed',
      dimensions: 384,
      rerank_model: 'local-rerank',
      chunking: { chunk_size: 256, chunk_overlap: 32 },
      retrieval: { mode: 'hybrid' },
      created_by: 'kb-owner',
      created_at: kb.created_at,
      updated_at: kb.created_at,
    })
    expect(kb.id).toMatch(/^kb_[0-9a-z]{26}$/)
    expectIso(kb.created_at)
    expect(await get(kb.id)).toEqual(kb)
  })

  test('every field; the HNSW index of the new size exists', async () => {
    const body = {
      workspace_id: ws,
      name: 'Everything',
      description: 'All the settings',
      embedding_model: 'fake-embed',
      rerank_model: 'fake-rerank',
      chunking: { chunk_size: 512, chunk_overlap: 64, separators: ['\n\n', '. ', ''] },
      retrieval: { mode: 'vector' },
    }
    const kb = await createKb(h, owner, body)
    const { workspace_id: _, ...rest } = body
    expect(kb).toEqual({ ...rest, id: kb.id, workspace_id: ws, dimensions: FAKE_DIMS, retrieval: { mode: 'vector' }, created_by: 'kb-owner', created_at: kb.created_at, updated_at: kb.created_at })
    expect(await get(kb.id)).toEqual(kb)
    const indexes = await h.deps.db.sql<{ indexname: string }[]>`select indexname from pg_indexes where indexname = ${`chunks_hnsw_${FAKE_DIMS}_idx`}`
    expect(indexes.length).toBe(1)
  })

  test('without workspace_id: the caller\'s only workspace (docs/api.md, "Keys, roles and workspaces")', async () => {
    const solo = await keyFor(h, 'kb-solo')
    const soloWs = await workspaceOf(h, solo, 'Solo')
    const kb = await createKb(h, solo, { name: 'Resolved' })
    expect(kb.workspace_id).toBe(soloWs)
  })

  test('list by workspace_id: newest first, paginated without repeats, other workspaces left out', async () => {
    const paged = await workspaceOf(h, owner, 'Paged')
    const ids: string[] = []
    for (let i = 0; i < 5; i++) ids.push((await createKb(h, owner, { workspace_id: paged, name: `Paged ${i}` })).id)
    const seen: string[] = []
    const sizes: number[] = []
    let cursor: string | null = null
    do {
      const res: Answer = await h.call('GET', `/v1/knowledge-bases?workspace_id=${paged}&limit=2${cursor ? `&cursor=${cursor}` : ''}`, { key: owner })
      expect(res.status).toBe(200)
      expect(Object.keys(res.body).sort()).toEqual(['data', 'has_more', 'next_cursor', 'request_id'])
      expect(res.body.has_more).toBe(res.body.next_cursor !== null)
      sizes.push(res.body.data.length)
      for (const kb of res.body.data) expect(kb.workspace_id).toBe(paged)
      seen.push(...res.body.data.map((kb: any) => kb.id))
      cursor = res.body.next_cursor
    } while (cursor)
    expect(sizes).toEqual([2, 2, 1])
    expect(seen).toEqual([...ids].reverse())
    const byName = await h.call('GET', `/v1/knowledge-bases?workspace_id=${paged}&sort=name&limit=100`, { key: owner })
    expect(byName.body.data.map((kb: any) => kb.name)).toEqual(['Paged 0', 'Paged 1', 'Paged 2', 'Paged 3', 'Paged 4'])
    const first = await h.call('GET', `/v1/knowledge-bases?workspace_id=${ws}&limit=100`, { key: owner })
    expect(first.body.data.some((kb: any) => ids.includes(kb.id))).toBe(false)
  })
})

describe('patch', () => {
  test.each([
    ['name', { name: 'Renamed' }],
    ['description', { description: 'Now described' }],
    ['chunking', { chunking: { chunk_size: 128, chunk_overlap: 16 } }],
    ['chunking with separators', { chunking: { chunk_size: 64, chunk_overlap: 0, separators: ['\n'] } }],
    ['retrieval', { retrieval: { mode: 'fulltext' } }],
    ['rerank_model', { rerank_model: 'fake-rerank' }],
  ])('%s: that field changes, nothing else', async (_, patch) => {
    const before = await createKb(h, owner, { workspace_id: ws, name: 'To patch', chunking: { chunk_size: 300, chunk_overlap: 30, separators: [' '] } })
    const res = await h.call('PATCH', `/v1/knowledge-bases/${before.id}`, { key: owner, body: patch })
    expect(res.status).toBe(200)
    const after = res.body.data
    expect(after).toEqual({ ...before, ...patch, updated_at: after.updated_at })
    expect(Date.parse(after.updated_at)).toBeGreaterThanOrEqual(Date.parse(before.updated_at))
    expect(await get(before.id)).toEqual(after)
  })

  test('an empty patch changes nothing but updated_at', async () => {
    const before = await createKb(h, owner, { workspace_id: ws, name: 'Untouched' })
    const res = await h.call('PATCH', `/v1/knowledge-bases/${before.id}`, { key: owner, body: {} })
    expect(res.status).toBe(200)
    expect({ ...res.body.data, updated_at: before.updated_at }).toEqual(before)
  })
})

describe('models and chunking are checked (400/404), nothing stored', () => {
  const basesIn = async () => (await h.deps.db.sql<{ n: number }[]>`select count(*)::int as n from knowledge_bases where workspace_id = ${ws}`)[0]!.n

  test.each([
    ['an unknown embedding model', { embedding_model: 'no-such-model' }, 404, 'not_found'],
    ['a chat model as embedding_model', { embedding_model: 'local-chat' }, 400, 'validation_error'],
    ['a rerank model as embedding_model', { embedding_model: 'local-rerank' }, 400, 'validation_error'],
    ['an embedding model of 3072 dimensions (over 2000)', { embedding_model: 'huge-embed' }, 400, 'validation_error'],
    ['an unknown rerank model', { rerank_model: 'no-such-reranker' }, 404, 'not_found'],
    ['an embedding model as rerank_model', { rerank_model: 'local-embed' }, 400, 'validation_error'],
    ['chunk_overlap equal to half of chunk_size', { chunking: { chunk_size: 256, chunk_overlap: 128 } }, 400, 'validation_error'],
    ['chunk_overlap over half of chunk_size', { chunking: { chunk_size: 100, chunk_overlap: 80 } }, 400, 'validation_error'],
    ['chunk_size 31', { chunking: { chunk_size: 31, chunk_overlap: 0 } }, 400, 'validation_error'],
    ['chunk_size 4097', { chunking: { chunk_size: 4097, chunk_overlap: 0 } }, 400, 'validation_error'],
    ['an unknown retrieval mode', { retrieval: { mode: 'semantic' } }, 400, 'validation_error'],
  ])('%s', async (_, fields, status, code) => {
    const n = await basesIn()
    expectError(await h.call('POST', '/v1/knowledge-bases', { key: owner, body: { workspace_id: ws, name: 'Refused', ...fields } }), status, code)
    expect(await basesIn()).toBe(n)
    const kb = await createKb(h, owner, { workspace_id: ws, name: 'Patched with bad fields' })
    expectError(await h.call('PATCH', `/v1/knowledge-bases/${kb.id}`, { key: owner, body: fields }), status, code)
    expect(await get(kb.id)).toEqual(kb)
  })

  test('chunk_overlap just under half of chunk_size is accepted', async () => {
    const kb = await createKb(h, owner, { workspace_id: ws, name: 'Edge', chunking: { chunk_size: 256, chunk_overlap: 127 } })
    expect(kb.chunking).toEqual({ chunk_size: 256, chunk_overlap: 127 })
  })

  test('the errors name the fields sent (docs/api.md, "Errors": param is the path)', async () => {
    const check = async (body: Record<string, unknown>, param: string) => {
      const res = await h.call('POST', '/v1/knowledge-bases', { key: owner, body: { workspace_id: ws, name: 'Param', ...body } })
      expect({ status: res.status, param: res.body.error?.param }).toEqual({ status: res.status, param })
    }
    await check({ chunking: { chunk_size: 100, chunk_overlap: 50 } }, 'chunking.chunk_overlap')
    await check({ chunking: { chunk_size: 31, chunk_overlap: 0 } }, 'chunking.chunk_size')
    await check({ embedding_model: 'huge-embed' }, 'embedding_model')
    await check({ embedding_model: 'local-chat' }, 'embedding_model')
    await check({ rerank_model: 'local-embed' }, 'rerank_model')
  })
})

describe('changing the embedding model', () => {
  test('on an empty base: no reembed needed', async () => {
    const kb = await createKb(h, owner, { workspace_id: ws, name: 'Empty' })
    const res = await h.call('PATCH', `/v1/knowledge-bases/${kb.id}`, { key: owner, body: { embedding_model: 'fake-embed' } })
    expect(res.status).toBe(200)
    expect(res.body.data).toMatchObject({ embedding_model: 'fake-embed', dimensions: FAKE_DIMS })
  })

  test('on a base with documents: 409 conflict without reembed; with reembed every document is a new generation', async () => {
    const kb = await createKb(h, owner, { workspace_id: ws, name: 'Reembed', retrieval: { mode: 'vector' } })
    const docs = [
      await uploadText(h, owner, kb.id, { name: 'cats.md', content: '# Cats\n\nCats sleep most of the day.\n\n## Food\n\nCats eat fish and chicken.', metadata: { animal: 'cat' } }),
      await uploadText(h, owner, kb.id, { name: 'dogs.txt', content: 'Dogs need a walk twice a day.', metadata: { animal: 'dog' } }),
    ]
    const before = new Map<string, { ids: string[]; status: any }>()
    for (const id of docs) {
      const s = await settled(h, owner, id)
      expect(s.status).toBe('ready')
      before.set(id, { ids: (await chunksOf(h, id)).map((c) => c.id), status: s })
    }

    const refused = await h.call('PATCH', `/v1/knowledge-bases/${kb.id}`, { key: owner, body: { embedding_model: 'fake-embed', name: 'Not renamed' } })
    expectError(refused, 409, 'conflict', 'embedding_model')
    expect(await get(kb.id)).toEqual(kb)
    for (const id of docs) expect((await generations(id))[0]).toEqual({ generation: 1, live_generation: 1 })

    const sameModel = await h.call('PATCH', `/v1/knowledge-bases/${kb.id}`, { key: owner, body: { embedding_model: 'local-embed' } })
    expect(sameModel.status).toBe(200)

    const embedsBefore = fake.requests.filter((r) => r.path === '/v1/embeddings').length
    const res = await h.call('PATCH', `/v1/knowledge-bases/${kb.id}`, { key: owner, body: { embedding_model: 'fake-embed', reembed: true } })
    expect(res.status).toBe(200)
    expect(res.body.data).toMatchObject({ embedding_model: 'fake-embed', dimensions: FAKE_DIMS })
    // Requeued in the PATCH's transaction: the new generation exists before any worker touched it.
    for (const id of docs) expect((await generations(id))[0]!.generation).toBe(2)

    for (const id of docs) {
      const s = await settled(h, owner, id)
      expect(s).toMatchObject({ status: 'ready', chunks_count: before.get(id)!.status.chunks_count })
      expect(Date.parse(s.indexed_at)).toBeGreaterThanOrEqual(Date.parse(before.get(id)!.status.indexed_at))
      expect((await generations(id))[0]).toEqual({ generation: 2, live_generation: 2 })
      const chunks = await chunksOf(h, id)
      expect(chunks.length).toBe(s.chunks_count)
      expect(chunks.every((c) => c.generation === 2 && c.dims === FAKE_DIMS)).toBe(true)
      for (const c of chunks) expect(before.get(id)!.ids).not.toContain(c.id)
      expect((await outboxOf(h, id)).map((e) => e.type)).toEqual(['knowledge.document.ready', 'knowledge.document.ready'])
    }
    const embeds = fake.requests.filter((r) => r.path === '/v1/embeddings').slice(embedsBefore)
    expect(embeds.length).toBeGreaterThanOrEqual(2)
    expect(embeds.every((r) => r.model === 'fake-embed-up')).toBe(true)

    // Searches now embed the query with the new model and find the new chunks.
    const search = await h.call('POST', `/v1/knowledge-bases/${kb.id}/search`, { key: owner, body: { query: 'what do cats eat', top_k: 10 } })
    expect(search.status).toBe(200)
    expect(search.body.results.length).toBe([...before.values()].reduce((n, b) => n + b.ids.length, 0))
    expect(fake.requests.at(-1)!.json.input).toEqual(['what do cats eat'])
  })
})

describe('delete', () => {
  test('a base goes with its documents, chunks and originals; other bases keep theirs', async () => {
    const kb = await createKb(h, owner, { workspace_id: ws, name: 'Doomed' })
    const kept = await createKb(h, owner, { workspace_id: ws, name: 'Kept' })
    const doomed = [
      await upload(h, owner, kb.id, { bytes: 'First doomed document.\n\nWith two paragraphs.', name: 'one.txt' }),
      await uploadText(h, owner, kb.id, { name: 'two.md', content: '# Two\n\nThe second doomed document.' }),
    ]
    const keptDoc = await uploadText(h, owner, kept.id, { name: 'kept.txt', content: 'This one stays.' })
    for (const id of [...doomed, keptDoc]) expect((await settled(h, owner, id)).status).toBe('ready')
    expect(await count(h, 'chunks', 'knowledge_base_id', kb.id)).toBeGreaterThan(0)
    expect(filesOf(h, kb.id)).toEqual([...doomed].sort())

    const res = await h.call('DELETE', `/v1/knowledge-bases/${kb.id}`, { key: owner })
    expect(res.status).toBe(200)
    expect(res.body.data).toEqual({ id: kb.id, deleted: true })

    expect(await count(h, 'documents', 'knowledge_base_id', kb.id)).toBe(0)
    expect(await count(h, 'chunks', 'knowledge_base_id', kb.id)).toBe(0)
    expect(existsSync(join(h.deps.config.dataDir, 'files', kb.id))).toBe(false)
    expectError(await h.call('GET', `/v1/knowledge-bases/${kb.id}`, { key: owner }), 404, 'not_found')
    for (const id of doomed) expectError(await h.call('GET', `/v1/documents/${id}`, { key: owner }), 404, 'not_found')
    expectError(await h.call('DELETE', `/v1/knowledge-bases/${kb.id}`, { key: owner }), 404, 'not_found')
    const list = await h.call('GET', `/v1/knowledge-bases?workspace_id=${ws}&limit=100`, { key: owner })
    expect(list.body.data.some((b: any) => b.id === kb.id)).toBe(false)

    expect(await count(h, 'documents', 'knowledge_base_id', kept.id)).toBe(1)
    expect(await count(h, 'chunks', 'knowledge_base_id', kept.id)).toBe(1)
    expect(filesOf(h, kept.id)).toEqual([keptDoc])
  })
})

describe('a search keeps the base it read', () => {
  test('the next search follows a change of retrieval mode or rerank model, a delete, and its workspace deleted', async () => {
    const space = await workspaceOf(h, owner, 'Kept bases')
    const kb = await createKb(h, owner, { workspace_id: space, name: 'Kept', retrieval: { mode: 'hybrid' } })
    expect((await settled(h, owner, await uploadText(h, owner, kb.id, { name: 'tide.txt', content: 'The lighthouse keeper writes down the tide every morning.' }))).status).toBe('ready')
    const search = (id: string, body: Record<string, unknown> = {}) => h.call('POST', `/v1/knowledge-bases/${id}/search`, { key: owner, body: { query: 'lighthouse tide', top_k: 3, ...body } })
    const reranks = () => fake.requests.filter((r) => r.path === '/v1/rerank').length

    // Hybrid: the one chunk, first in both lists, scores 1.
    for (let i = 0; i < 2; i++) expect((await search(kb.id)).body.results[0].score).toBe(1)
    expect((await h.call('PATCH', `/v1/knowledge-bases/${kb.id}`, { key: owner, body: { retrieval: { mode: 'vector' } } })).status).toBe(200)
    const hit = (await search(kb.id)).body.results[0]
    expect(hit.score).toBe(hit.similarity)
    expect(hit.score).toBeLessThan(1)

    const before = reranks()
    expect((await search(kb.id, { rerank: true })).status).toBe(200)
    expect(reranks()).toBe(before)
    expect((await h.call('PATCH', `/v1/knowledge-bases/${kb.id}`, { key: owner, body: { rerank_model: 'fake-rerank' } })).status).toBe(200)
    expect((await search(kb.id, { rerank: true })).status).toBe(200)
    expect(reranks()).toBe(before + 1)

    expect((await h.call('DELETE', `/v1/knowledge-bases/${kb.id}`, { key: owner })).status).toBeLessThan(300)
    expectError(await search(kb.id), 404, 'not_found')

    // The workspace deleted with a base in it: the base's row may still be kept, its access is not.
    const other = await createKb(h, owner, { workspace_id: space, name: 'Kept too' })
    for (let i = 0; i < 2; i++) expect((await search(other.id)).status).toBe(200)
    expect((await h.call('DELETE', `/v1/workspaces/${space}`, { key: owner })).status).toBeLessThan(300)
    expectError(await search(other.id), 404, 'not_found')
  })
})
