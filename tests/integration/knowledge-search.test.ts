import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { chargeIn } from '../../src/domain/credits'
import { startWorkers, type Workers } from '../../src/workers'
import { keyFor, startHarness, workspaceOf, type Harness } from '../helpers/harness'
import { chunksOf, createKb, settled, upload, uploadText } from '../helpers/knowledge'
import { chain, end, start } from '../helpers/runs'
import corpus from '../fixtures/retrieval-corpus.json'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Search (docs/knowledge.md, "Search") and the workflow `knowledge_retrieval` node
 * (docs/workflows.md) over the first 24 passages of tests/fixtures/retrieval-corpus.json,
 * each uploaded as one text document (one chunk) with its metadata, embedded with local-embed.
 */

interface Passage {
  id: string
  title: string
  text: string
  metadata: Record<string, string | number>
}
const PASSAGES = (corpus.passages as Passage[]).slice(0, 24)
const contentOf = (p: Passage) => `${p.title}\n\n${p.text}`

let h: Harness
let workers: Workers
let owner: string
let ws: string
let outsider: string
const bases: Record<'vector' | 'hybrid' | 'fulltext', string> = { vector: '', hybrid: '', fulltext: '' }
/** document id → passage, per base. */
const docs = new Map<string, Passage>()

beforeAll(async () => {
  h = await startHarness({ RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000' })
  workers = await startWorkers(h.deps)
  owner = await keyFor(h, 'ks-owner')
  ws = await workspaceOf(h, owner, 'Search')
  outsider = await keyFor(h, 'ks-outsider')
  await workspaceOf(h, outsider, 'Elsewhere')
  for (const mode of ['vector', 'hybrid', 'fulltext'] as const) {
    bases[mode] = (await createKb(h, owner, { workspace_id: ws, name: `Lumora ${mode}`, retrieval: { mode } })).id
    const ids = []
    for (const p of PASSAGES) {
      const id = await uploadText(h, owner, bases[mode], { name: `${p.id}.txt`, content: contentOf(p), metadata: p.metadata })
      docs.set(id, p)
      ids.push(id)
    }
    for (const id of ids) expect((await settled(h, owner, id)).status).toBe('ready')
  }
}, 120_000)

afterAll(async () => {
  await workers?.stop()
  await h?.close()
})

async function search(kbId: string, body: Record<string, unknown>, key = owner) {
  const res = await h.call('POST', `/v1/knowledge-bases/${kbId}/search`, { key, body })
  expect(res.status).toBe(200)
  expect(Object.keys(res.body).sort()).toEqual(['request_id', 'results'])
  return res.body.results as { chunk_id: string; document_id: string; document_name: string; content: string; score: number; similarity: number; metadata: Record<string, unknown> }[]
}

const passagesOf = (results: { document_id: string }[]) => results.map((r) => docs.get(r.document_id)!.id)

describe('results', () => {
  test.each(['vector', 'hybrid', 'fulltext'] as const)('%s: the published item shape, each field the stored chunk\'s, scores in [0, 1]', async (mode) => {
    const results = await search(bases[mode], { query: 'express shipping fee for late parcels' })
    expect(results.length).toBe(5)
    for (const r of results) {
      expect(Object.keys(r).sort()).toEqual(['chunk_id', 'content', 'document_id', 'document_name', 'metadata', 'score', 'similarity'])
      const p = docs.get(r.document_id)!
      expect(p).toBeDefined()
      const [chunk] = await chunksOf(h, r.document_id)
      expect(r).toEqual({ chunk_id: chunk!.id, document_id: r.document_id, document_name: `${p.id}.txt`, content: chunk!.content, score: r.score, similarity: r.similarity, metadata: p.metadata })
      expect(r.content).toBe(contentOf(p))
      expect(r.score).toBeGreaterThanOrEqual(0)
      expect(r.score).toBeLessThanOrEqual(1)
      expect(r.similarity).toBeGreaterThanOrEqual(0)
      expect(r.similarity).toBeLessThanOrEqual(1)
    }
    expect(new Set(results.map((r) => r.chunk_id)).size).toBe(5)
  })

  // A client that sorts by score must keep the order: hybrid results once showed the cosine similarity
  // while being ordered by their fused rank (0.110 before 0.135).
  test.each([
    ['vector', false], ['hybrid', false], ['fulltext', false], ['vector', true], ['hybrid', true], ['fulltext', true],
  ] as const)('%s (rerank %p): ordered by the score shown, over many queries', async (mode, rerank) => {
    const queries = ['express shipping fee for late parcels', 'refund', 'battery warranty', 'how do I reset my password', ...PASSAGES.slice(0, 4).map((p) => contentOf(p).split(' ').slice(3, 9).join(' '))]
    for (const query of queries) {
      const results = await search(bases[mode], { query, top_k: 12, rerank })
      const scores = results.map((r) => r.score)
      expect(scores).toEqual([...scores].sort((a, b) => b - a))
      if (mode === 'vector' && !rerank) expect(scores).toEqual(results.map((r) => r.similarity))
    }
  })

  test('vector mode: ordered by score, best first; a passage\'s own text scores 1', async () => {
    const p = PASSAGES[1]!
    const results = await search(bases.vector, { query: contentOf(p), top_k: 24 })
    expect(results.length).toBe(24)
    expect(passagesOf(results)[0]).toBe(p.id)
    expect(results[0]!.score).toBe(1)
    for (let i = 1; i < results.length; i++) expect(results[i]!.score).toBeLessThanOrEqual(results[i - 1]!.score)
    expect(results.at(-1)!.score).toBeLessThan(1)
  })

  test.each(['vector', 'hybrid', 'fulltext'] as const)('%s: a query local-embed maps to the zero vector (only punctuation) answers 200 and no results', async (mode) => {
    // Found by the fuzz test: every cosine distance to a zero vector is NaN, which left score null
    // and failed the response schema (500) in vector and hybrid mode.
    const res = await h.call('POST', `/v1/knowledge-bases/${bases[mode]}/search`, { body: { query: '{} ![ ?!' } })
    expect(res.status).toBe(200)
    expect(res.body.results).toEqual([])
  })

  test('top_k: default 5, 1, and more than there are chunks', async () => {
    expect((await search(bases.vector, { query: 'refund' })).length).toBe(5)
    expect((await search(bases.vector, { query: 'refund', top_k: 1 })).length).toBe(1)
    expect((await search(bases.vector, { query: 'refund', top_k: 100 })).length).toBe(24)
  })

  test('fulltext mode: only chunks holding a word of the query (stemmed)', async () => {
    const results = await search(bases.fulltext, { query: 'warehouses lithium', top_k: 100 })
    const expected = PASSAGES.filter((p) => /warehouse|lithium/i.test(contentOf(p))).map((p) => p.id).sort()
    expect(expected.length).toBeGreaterThan(0)
    expect(passagesOf(results).sort()).toEqual(expected)
  })

  test('a base with no ready document answers results: []', async () => {
    const empty = (await createKb(h, owner, { workspace_id: ws, name: 'Empty' })).id
    expect(await search(empty, { query: 'shipping' })).toEqual([])
    const failedOnly = (await createKb(h, owner, { workspace_id: ws, name: 'Failed only' })).id
    const id = await upload(h, owner, failedOnly, { bytes: '', name: 'empty.txt' })
    expect((await settled(h, owner, id)).status).toBe('failed')
    expect(await search(failedOnly, { query: 'shipping', top_k: 100 })).toEqual([])
  })

  test('a document not yet ready is not searched', async () => {
    const kb = (await createKb(h, owner, { workspace_id: ws, name: 'Pending', retrieval: { mode: 'fulltext' } })).id
    const readyId = await uploadText(h, owner, kb, { name: 'ready.txt', content: 'The quokka lives on Rottnest island.' })
    expect((await settled(h, owner, readyId)).status).toBe('ready')
    await workers.documents.stop()
    let pending = ''
    try {
      pending = await uploadText(h, owner, kb, { name: 'pending.txt', content: 'Another quokka photo from the island.' })
      expect((await h.call('GET', `/v1/documents/${pending}`, { key: owner })).body.status).toBe('parsing')
      expect((await search(kb, { query: 'quokka island', top_k: 10 })).map((r) => r.document_id)).toEqual([readyId])
    } finally {
      workers.documents.start()
    }
    expect((await settled(h, owner, pending)).status).toBe('ready')
    expect((await search(kb, { query: 'quokka island', top_k: 10 })).map((r) => r.document_id).sort()).toEqual([readyId, pending].sort())
  })

  test('a workspace over its hard budget answers 402 budget_exceeded, and nothing is charged; an outsider still gets 404; without hard_limit it searches', async () => {
    const spent = await workspaceOf(h, owner, 'Spent')
    const kb = (await createKb(h, owner, { workspace_id: spent, name: 'Spent' })).id
    expect((await h.call('PUT', `/v1/workspaces/${spent}/budget`, { key: owner, body: { credits: 1, period: 'month', thresholds: [], hard_limit: true } })).status).toBe(200)
    await h.deps.db.sql.begin((tx) => chargeIn(tx, { workspace_id: spent, model: 'local-chat', kind: 'chat', tokens_in: 1, tokens_out: 0, credits: 1, request_id: null }))
    // Charges are written behind the answer: the ones this process holds are flushed before counting.
    const ledger = async () => {
      await h.deps.models.charges.flush()
      return (await h.deps.db.sql`select id from credit_ledger where workspace_id = ${spent}`).length
    }
    const refused = await h.call('POST', `/v1/knowledge-bases/${kb}/search`, { key: owner, body: { query: 'warranty claim' } })
    expect(refused.status).toBe(402)
    expect(refused.body.error.code).toBe('budget_exceeded')
    expect(await ledger()).toBe(1)
    const hidden = await h.call('POST', `/v1/knowledge-bases/${kb}/search`, { key: outsider, body: { query: 'warranty claim' } })
    expect(hidden.status).toBe(404)
    expect(hidden.body.error.message).toContain(`knowledge base ${kb}`)
    expect((await h.call('PUT', `/v1/workspaces/${spent}/budget`, { key: owner, body: { credits: 1, period: 'month', thresholds: [], hard_limit: false } })).status).toBe(200)
    expect(await search(kb, { query: 'warranty claim' })).toEqual([])
    // The query's embedding is charged (0 credits for local-embed, one ledger row).
    expect(await ledger()).toBe(2)
  })

  test('a readonly member searches too', async () => {
    const reader = await keyFor(h, 'ks-reader')
    expect((await h.call('POST', `/v1/workspaces/${ws}/members`, { key: owner, body: { user_id: 'ks-reader', role: 'readonly' } })).status).toBe(201)
    const mine = await search(bases.vector, { query: 'warranty claim' })
    expect(await search(bases.vector, { query: 'warranty claim' }, reader)).toEqual(mine)
  })
})

describe('filters match the metadata exactly, inside the query', () => {
  const matches = (p: Passage, filters: Record<string, unknown>) =>
    Object.entries(filters).every(([k, v]) => (Array.isArray(v) ? v.includes(p.metadata[k]) : p.metadata[k] === v))

  const cases: [string, Record<string, unknown>][] = [
    ['a scalar', { topic: 'returns' }],
    ['a number', { year: 2022 }],
    ['an array: any of', { topic: ['shipping', 'billing'] }],
    ['two keys', { topic: ['shipping', 'returns'], year: 2023 }],
    ['a key only some passages have', { tier: 'free' }],
    ['a number as a string matches nothing', { year: '2022' }],
    ['an unknown value', { topic: 'gardening' }],
    ['an unknown key', { colour: 'blue' }],
  ]
  test.each(cases)('%s', async (_, filters) => {
    const expected = PASSAGES.filter((p) => matches(p, filters)).map((p) => p.id).sort()
    // top_k 100 over 24 chunks: vector (and hybrid, whose vector list is as deep) find every match.
    for (const mode of ['vector', 'hybrid'] as const) {
      const results = await search(bases[mode], { query: 'orders and refunds', top_k: 100, filters })
      expect(passagesOf(results).sort()).toEqual(expected)
    }
  })

  test('fulltext: the filter and the words both hold', async () => {
    const filters = { topic: ['shipping', 'billing'], year: [2022, 2023] }
    const results = await search(bases.fulltext, { query: 'shipped', top_k: 100, filters })
    const expected = PASSAGES.filter((p) => matches(p, filters) && /\bship(s|ped|ping)?\b/i.test(contentOf(p))).map((p) => p.id).sort()
    expect(expected.length).toBeGreaterThan(1)
    expect(passagesOf(results).sort()).toEqual(expected)
  })

  test('a selective filter still answers top_k results', async () => {
    const results = await search(bases.vector, { query: 'shipping', top_k: 3, filters: { topic: 'billing' } })
    expect(results.length).toBe(3)
    for (const r of results) expect(r.metadata.topic).toBe('billing')
  })
})

describe('the workflow knowledge_retrieval node', () => {
  async function workflow(nodeConfig: Record<string, unknown>) {
    const graph = chain(
      start([{ name: 'question', type: 'string', required: true }]),
      { id: 'search', type: 'knowledge_retrieval', config: { query: '{{inputs.question}}', ...nodeConfig } },
      end({ results: '{{nodes.search.output.results}}', first: '{{nodes.search.output.results.0.content}}' }),
    )
    const res = await h.call('POST', '/v1/workflows', { key: owner, body: { workspace_id: ws, name: 'Retrieve', graph } })
    expect(res.status).toBe(201)
    return res.body.data.id as string
  }
  const run = (wf: string, question: string) => h.call('POST', `/v1/workflows/${wf}/runs`, { key: owner, body: { inputs: { question } } })

  test('a sync run answers the base\'s results, each with its knowledge_base_id', async () => {
    const wf = await workflow({ knowledge_base_ids: [bases.vector], top_k: 3 })
    const res = await run(wf, 'How long does standard shipping take?')
    expect(res.status).toBe(200)
    expect(res.body.status).toBe('completed')
    const expected = await search(bases.vector, { query: 'How long does standard shipping take?', top_k: 3 })
    expect(res.body.outputs).toEqual({ results: expected.map((r) => ({ ...r, knowledge_base_id: bases.vector })), first: expected[0]!.content })
  })

  test('filters apply; several bases are merged by score and cut to top_k', async () => {
    const wf = await workflow({ knowledge_base_ids: [bases.vector, bases.hybrid], top_k: 4, filters: { topic: 'returns' } })
    const res = await run(wf, 'return a damaged item for a refund')
    expect(res.body.status).toBe('completed')
    const results = res.body.outputs.results as any[]
    expect(results.length).toBe(4)
    for (const r of results) {
      expect(r.metadata.topic).toBe('returns')
      expect([bases.vector, bases.hybrid]).toContain(r.knowledge_base_id)
    }
    for (let i = 1; i < results.length; i++) expect(results[i].score).toBeLessThanOrEqual(results[i - 1].score)
  })

  test('a base of another workspace, or none, is refused when the workflow is saved (POST and PUT): 400 naming the field, nothing saved', async () => {
    const foreign = (await createKb(h, outsider, { name: 'Not yours' })).id
    const graphWith = (ids: string[]) =>
      chain(start([{ name: 'question', type: 'string', required: true }]), { id: 'search', type: 'knowledge_retrieval', config: { query: '{{inputs.question}}', knowledge_base_ids: ids } }, end({}))
    const count = async () => (await h.deps.db.sql`select count(*)::int as n from workflows where workspace_id = ${ws}`)[0]!.n
    const before = await count()
    for (const [ids, at] of [[[bases.vector, foreign], 1], [['kb_01jbz3k9x8q7r6s5t4v3w2y1z0'], 0]] as const) {
      const res = await h.call('POST', '/v1/workflows', { key: owner, body: { workspace_id: ws, name: 'Reaching out', graph: graphWith([...ids]) } })
      expect({ status: res.status, code: res.body.error?.code, param: res.body.error?.param }).toEqual({ status: 400, code: 'validation_error', param: `graph.nodes.1.config.knowledge_base_ids.${at}` })
      expect(res.body.error.message).toContain(ids[at])
    }
    expect(await count()).toBe(before)
    // PUT over a valid workflow: refused, the saved version and graph unchanged.
    const wf = await workflow({ knowledge_base_ids: [bases.vector] })
    const res = await h.call('PUT', `/v1/workflows/${wf}`, { key: owner, body: { name: 'Reaching out', graph: graphWith([foreign]) } })
    expect({ status: res.status, param: res.body.error?.param }).toEqual({ status: 400, param: 'graph.nodes.1.config.knowledge_base_ids.0' })
    const saved = (await h.call('GET', `/v1/workflows/${wf}`, { key: owner })).body.data
    expect(saved.version).toBe(1)
    expect(saved.graph.nodes[1].config.knowledge_base_ids).toEqual([bases.vector])
    // The same refusal for an agent naming the base (checked there since agents came).
    const agent = await h.call('POST', '/v1/agents', { key: owner, body: { workspace_id: ws, name: 'Reaching out', type: 'agent', model: 'local-chat', knowledge_base_ids: [foreign] } })
    expect({ status: agent.status, param: agent.body.error?.param }).toEqual({ status: 400, param: 'knowledge_base_ids[0]' })
  })

  test('a member of both workspaces cannot join them either: its other workspace\'s base is refused too', async () => {
    const both = await workspaceOf(h, owner, 'Also mine')
    const mine = (await createKb(h, owner, { workspace_id: both, name: 'Mine, elsewhere' })).id
    const graph = chain(start([{ name: 'question', type: 'string', required: true }]), { id: 'search', type: 'knowledge_retrieval', config: { query: '{{inputs.question}}', knowledge_base_ids: [mine] } }, end({}))
    const res = await h.call('POST', '/v1/workflows', { key: owner, body: { workspace_id: ws, name: 'Bridging', graph } })
    expect({ status: res.status, param: res.body.error?.param }).toEqual({ status: 400, param: 'graph.nodes.1.config.knowledge_base_ids.0' })
  })

  test('a base deleted after the save fails the run with knowledge_base_not_found', async () => {
    const doomed = (await createKb(h, owner, { workspace_id: ws, name: 'Doomed' })).id
    const wf = await workflow({ knowledge_base_ids: [bases.vector, doomed] })
    expect((await h.call('DELETE', `/v1/knowledge-bases/${doomed}`, { key: owner })).status).toBe(200)
    const res = await run(wf, 'shipping')
    expect(res.status).toBe(200)
    expect(res.body.status).toBe('failed')
    expect(res.body.error).toEqual({ code: 'knowledge_base_not_found', message: res.body.error.message, node: 'search' })
    expect(res.body.error.message).toContain(doomed)
  })
})
