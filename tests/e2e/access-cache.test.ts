import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { rmSync } from 'node:fs'
import { startCluster, type Cluster } from '../helpers/cluster'
import { startFakeProvider, writeModelsFile, type FakeProvider } from '../helpers/fake-provider'
import { waitFor } from '../helpers/harness'
import { apiCall, type ServiceProcess } from '../helpers/process'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The check before a model call keeps its answers in server mode too (src/domain/access-cache.ts):
 * two API processes on one PostgreSQL and one Redis. A change made through the API of one (a member
 * removed, a role lowered, the workspace archived, the budget lowered below the spend, the spend
 * raised past the budget) is refused by the very next call in the other, which had the old answer
 * kept: the change is published on Redis before its answer. A batch of charges is published under
 * the workspace's spend, which only answers holding a hard-limit budget depend on. The kept answers there live for ten
 * minutes (ACCESS_CACHE_TTL_MS) and its own charges are held, so only the message can explain it. A
 * knowledge search keeps its base's row the same way: a base changed (retrieval mode, rerank model,
 * embedding model) or deleted in one process is what the next search in the other uses. A change that is never
 * announced (an UPDATE in SQL) is served from a kept answer until ACCESS_CACHE_TTL_MS passes.
 */
const databaseUrl = process.env.DATABASE_URL
const redisUrl = process.env.REDIS_URL

describe.skipIf(!databaseUrl || !redisUrl)('server mode: the check before a model call, kept, follows changes made in another process', () => {
  let cluster: Cluster
  let fake: FakeProvider
  let models: { dir: string; file: string }
  /** Where changes are made. */
  let a: ServiceProcess
  /** Where the calls are made. */
  let b: ServiceProcess
  const keys: Record<string, string> = {}
  let seq = 0

  const must = async (sp: ServiceProcess, key: string, method: string, path: string, body?: unknown) => {
    const res = await apiCall(sp, key, method, path, body)
    if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(res.body)}`)
    return res.body
  }
  const keyOf = async (userId: string) => (keys[userId] ??= (await must(a, cluster.rootKey, 'POST', '/v1/api-keys', { user_id: userId, name: userId })).data.key as string)
  /** 100 + 200 tokens at 1 and 2 credits per 1 000: 0.5 credits a call. */
  const chat = async (sp: ServiceProcess, ws: string, user = 'owner') =>
    (await apiCall(sp, await keyOf(user), 'POST', '/v1/models/llm/chat', { model: 'priced', messages: [{ role: 'user', content: 'hi' }], workspace_id: ws })).status
  const newWorkspace = async () => (await must(a, await keyOf('owner'), 'POST', '/v1/workspaces', { name: `Kept ${++seq}` })).data.id as string
  const change = (method: string, path: string, body?: unknown) => must(a, keys.owner!, method, path, body)

  beforeAll(async () => {
    fake = await startFakeProvider()
    fake.script('*', [{ text: 'kept', usage: { prompt_tokens: 100, completion_tokens: 200 } }])
    models = writeModelsFile('ap-e2e-access-', {
      providers: [{ id: 'fake', kind: 'openai', base_url: fake.baseUrl, api_key: 'sk-fake' }],
      models: [
        { id: 'priced', type: 'llm', vendor: 'test', routes: [{ provider: 'fake', model: 'priced-up' }], pricing: { input_per_1k: 1, output_per_1k: 2 } },
        { id: 'fake-embed', type: 'embedding', vendor: 'test', dimensions: 8, routes: [{ provider: 'fake', model: 'up-embed' }] },
        { id: 'fake-rerank', type: 'rerank', vendor: 'test', routes: [{ provider: 'fake', model: 'up-rerank' }] },
      ],
    })
    cluster = await startCluster({ name: 'access', workers: 0, apiOnly: true, env: { MODELS_FILE: models.file, ACCESS_CACHE_TTL_MS: '600000' } })
    a = cluster.api
    // b holds its own charges: a batch of them would drop its kept answers itself (one more read, no
    // message needed), and the test would not tell whether the other process' message did.
    b = await cluster.spawn('api', { CREDITS_FLUSH_MS: '600000' })
  }, 90_000)

  afterAll(async () => {
    await cluster?.close()
    await fake?.close()
    if (models) rmSync(models.dir, { recursive: true, force: true })
  })

  test('a member removed, a role lowered, the workspace archived and restored: the next call in the other process follows', async () => {
    const ws = await newWorkspace()
    await change('POST', `/v1/workspaces/${ws}/members`, { user_id: 'kept-dev', role: 'developer' })
    await change('POST', `/v1/workspaces/${ws}/members`, { user_id: 'kept-other', role: 'developer' })
    for (let i = 0; i < 2; i++) expect(await chat(b, ws, 'kept-dev')).toBe(200)
    await change('DELETE', `/v1/workspaces/${ws}/members/kept-dev`)
    expect(await chat(b, ws, 'kept-dev')).toBe(404)

    for (let i = 0; i < 2; i++) expect(await chat(b, ws, 'kept-other')).toBe(200)
    await change('PATCH', `/v1/workspaces/${ws}/members/kept-other`, { role: 'readonly' })
    expect(await chat(b, ws, 'kept-other')).toBe(403)

    for (let i = 0; i < 2; i++) expect(await chat(b, ws)).toBe(200)
    await change('POST', `/v1/workspaces/${ws}/archive`)
    expect(await chat(b, ws)).toBeGreaterThanOrEqual(400)
    await change('POST', `/v1/workspaces/${ws}/restore`)
    expect(await chat(b, ws)).toBe(200)
  })

  test('a budget lowered below the spend, and the spend of another process raised past the budget', async () => {
    const ws = await newWorkspace()
    await change('PUT', `/v1/workspaces/${ws}/budget`, { credits: 100, period: 'month', thresholds: [], hard_limit: true })
    for (let i = 0; i < 3; i++) expect(await chat(b, ws)).toBe(200)
    // 1.5 credits used: a hard limit of 1 refuses the next call.
    await change('PUT', `/v1/workspaces/${ws}/budget`, { credits: 1, period: 'month', thresholds: [], hard_limit: true })
    expect(await chat(b, ws)).toBe(402)
    await change('PUT', `/v1/workspaces/${ws}/budget`, { credits: 4, period: 'month', thresholds: [], hard_limit: true })
    expect(await chat(b, ws)).toBe(200)
    expect(await chat(b, ws)).toBe(200)
    // 2.5 used (held by b, counted by its check); a's three calls make 4, once written: reading the
    // usage there writes what a holds first, and its batch is announced before the answer.
    for (let i = 0; i < 3; i++) expect(await chat(a, ws)).toBe(200)
    await change('GET', `/v1/workspaces/${ws}/usage`)
    expect(await chat(b, ws)).toBe(402)
  })

  test('a batch of charges drops the kept answers a hard limit compares, and no other', async () => {
    /** A role lowered in SQL (announced by nobody): only a read after it sees it. */
    const unannounced = async (ws: string, user: string) => {
      await change('POST', `/v1/workspaces/${ws}/members`, { user_id: user, role: 'developer' })
      for (let i = 0; i < 2; i++) expect(await chat(b, ws, user)).toBe(200)
      await cluster.db`update workspace_members set role = 'readonly' where workspace_id = ${ws} and user_id = ${user}`
      // Charged in a, written by its usage read (the batch is published before that answer).
      expect(await chat(a, ws)).toBe(200)
      await change('GET', `/v1/workspaces/${ws}/usage`)
      // Messages arrive in order: once a later change has reached b, this batch's message has too.
      const marker = await newWorkspace()
      expect(await chat(b, marker)).toBe(200)
      await change('POST', `/v1/workspaces/${marker}/archive`)
      await waitFor(async () => (await chat(b, marker)) >= 400, { what: 'b to hear of the later change' })
    }
    // No budget, and a budget without a hard limit: the spend is not part of the answer's decision,
    // so b keeps serving the answer it read before the role was lowered.
    const free = await newWorkspace()
    await unannounced(free, 'spend-free')
    expect(await chat(b, free, 'spend-free')).toBe(200)
    const soft = await newWorkspace()
    await change('PUT', `/v1/workspaces/${soft}/budget`, { credits: 1000, period: 'month', thresholds: [50], hard_limit: false })
    await unannounced(soft, 'spend-soft')
    expect(await chat(b, soft, 'spend-soft')).toBe(200)
    // A hard limit compares the spend: b reads again, and sees the lowered role.
    const hard = await newWorkspace()
    await change('PUT', `/v1/workspaces/${hard}/budget`, { credits: 1000, period: 'month', thresholds: [], hard_limit: true })
    await unannounced(hard, 'spend-hard')
    expect(await chat(b, hard, 'spend-hard')).toBe(403)
  })

  test('a knowledge base changed or deleted in one process: the next search in the other follows', async () => {
    const ws = await newWorkspace()
    // A worker ingests the document (the API processes run none).
    await cluster.spawn('worker')
    const kb = (await change('POST', '/v1/knowledge-bases', { workspace_id: ws, name: 'kept', retrieval: { mode: 'hybrid' } })).data.id as string
    const doc = (await change('POST', `/v1/knowledge-bases/${kb}/documents`, { type: 'text', name: 'tide.txt', content: 'The lighthouse keeper writes down the tide every morning.' })).document_id as string
    await waitFor(async () => (await change('GET', `/v1/documents/${doc}`)).status === 'ready', { timeoutMs: 30_000, what: 'the document to be ready' })
    const search = (id: string, body: Record<string, unknown> = {}, user = 'owner') =>
      apiCall(b, keys[user]!, 'POST', `/v1/knowledge-bases/${id}/search`, { query: 'lighthouse tide', top_k: 3, ...body })
    const calls = (path: string) => fake.requests.filter((r) => r.path === path).length

    // Hybrid: the one chunk first in both lists scores 1, its cosine below.
    for (let i = 0; i < 2; i++) {
      const res = await search(kb)
      expect(res.status).toBe(200)
      expect(res.body.results[0].score).toBe(1)
      expect(res.body.results[0].similarity).toBeLessThan(1)
    }
    // Kept: a change nobody announces (SQL) is not seen by b...
    await cluster.db`update knowledge_bases set retrieval_mode = 'vector' where id = ${kb}`
    expect((await search(kb)).body.results[0].score).toBe(1)
    // ...an announced one is, at once: vector mode scores by the cosine.
    await change('PATCH', `/v1/knowledge-bases/${kb}`, { retrieval: { mode: 'vector' } })
    const vector = (await search(kb)).body.results[0]
    expect(vector.score).toBe(vector.similarity)
    expect(vector.score).toBeLessThan(1)

    // The rerank model: local-rerank, then the provider's.
    const reranks = calls('/v1/rerank')
    expect((await search(kb, { rerank: true })).status).toBe(200)
    expect(calls('/v1/rerank')).toBe(reranks)
    await change('PATCH', `/v1/knowledge-bases/${kb}`, { rerank_model: 'fake-rerank' })
    expect((await search(kb, { rerank: true })).status).toBe(200)
    expect(calls('/v1/rerank')).toBe(reranks + 1)

    // The embedding model of an empty base: local-embed, then the provider's.
    const empty = (await change('POST', '/v1/knowledge-bases', { workspace_id: ws, name: 'empty' })).data.id as string
    const embeds = calls('/v1/embeddings')
    for (let i = 0; i < 2; i++) expect((await search(empty)).status).toBe(200)
    expect(calls('/v1/embeddings')).toBe(embeds)
    await change('PATCH', `/v1/knowledge-bases/${empty}`, { embedding_model: 'fake-embed' })
    expect((await search(empty)).status).toBe(200)
    expect(calls('/v1/embeddings')).toBe(embeds + 1)

    // A reader removed from the workspace: the base is not found for them.
    await change('POST', `/v1/workspaces/${ws}/members`, { user_id: 'kb-reader', role: 'readonly' })
    await keyOf('kb-reader')
    for (let i = 0; i < 2; i++) expect((await search(kb, {}, 'kb-reader')).status).toBe(200)
    await change('DELETE', `/v1/workspaces/${ws}/members/kb-reader`)
    expect((await search(kb, {}, 'kb-reader')).status).toBe(404)

    // Deleted: not found at once.
    expect((await search(kb)).status).toBe(200)
    await change('DELETE', `/v1/knowledge-bases/${kb}`)
    expect((await search(kb)).status).toBe(404)
  }, 90_000)

  test('a change never announced (SQL) is served from a kept answer for ACCESS_CACHE_TTL_MS at most', async () => {
    // Its own charges held (no batch of its own announces the workspace meanwhile); answers kept 1.5 s.
    const c = await cluster.spawn('api', { ACCESS_CACHE_TTL_MS: '1500', CREDITS_FLUSH_MS: '600000' })
    const ws = await newWorkspace()
    expect(await chat(c, ws)).toBe(200)
    await cluster.db`update workspaces set status = 'archived', archived_at = now() where id = ${ws}`
    // Kept: nothing told c (1.5 s is far longer than this call takes).
    expect(await chat(c, ws)).toBe(200)
    // Not for longer than the time limit.
    await waitFor(async () => (await chat(c, ws)) >= 400, { timeoutMs: 15_000, intervalMs: 100, what: 'the un-announced archive refused' })
    // A process that never kept an answer reads it at once.
    expect(await chat(b, ws)).toBeGreaterThanOrEqual(400)
  })
})
