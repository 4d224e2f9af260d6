import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import corpus from '../fixtures/retrieval-corpus.json'
import { startWorkers, type Workers } from '../../src/workers'
import { keyFor, startHarness, waitFor, workspaceOf, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Retrieval quality and behaviour on the labelled corpus (tests/fixtures/retrieval-corpus.json: 64
 * passages, 37 queries): one base per retrieval mode in one workspace, each passage a short text
 * document (`<passage id>.txt`, one chunk with the default chunking) carrying its metadata. Real app,
 * real workers, local-embed and local-rerank: no stand-in at all.
 */

type Mode = 'vector' | 'fulltext' | 'hybrid'
const MODES: Mode[] = ['vector', 'fulltext', 'hybrid']
type Passage = (typeof corpus.passages)[number]
type Query = { id: string; kind: string; text: string; relevant: string[]; filters: Record<string, unknown> | null }
const queries = corpus.queries as Query[]
const passages: Passage[] = corpus.passages
const byId = new Map(passages.map((p) => [p.id, p]))

let h: Harness
let workers: Workers
let key: string
const bases = {} as Record<Mode, string>

const contentOf = (p: Passage) => `${p.title}\n\n${p.text}`
const idOf = (documentName: string) => documentName.replace(/\.txt$/, '')

async function search(mode: Mode, body: Record<string, unknown>) {
  const res = await h.call('POST', `/v1/knowledge-bases/${bases[mode]}/search`, { key, body })
  if (res.status !== 200) throw new Error(`search ${mode} ${JSON.stringify(body)}: ${res.status} ${res.text}`)
  return res.body.results as { chunk_id: string; document_id: string; document_name: string; content: string; score: number; metadata: Record<string, unknown> }[]
}

/** A chunk's metadata satisfies the filters: every key equal, an array meaning any of its values. */
function satisfies(metadata: Record<string, unknown>, filters: Record<string, unknown>): boolean {
  return Object.entries(filters).every(([k, v]) => (Array.isArray(v) ? v : [v]).some((x) => metadata[k] === x))
}

const matching = (filters: Record<string, unknown>) => passages.filter((p) => satisfies(p.metadata, filters)).map((p) => p.id)

beforeAll(async () => {
  h = await startHarness({ RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000' })
  workers = await startWorkers(h.deps)
  key = await keyFor(h, 'retrieval-owner')
  const ws = await workspaceOf(h, key, 'Retrieval')
  for (const mode of MODES) {
    const res = await h.call('POST', '/v1/knowledge-bases', { key, body: { workspace_id: ws, name: `Lumora ${mode}`, retrieval: { mode } } })
    expect(res.status).toBe(201)
    expect(res.body.data).toMatchObject({ retrieval: { mode }, embedding_model: 'local-embed', dimensions: 384, rerank_model: 'local-rerank', chunking: { chunk_size: 256, chunk_overlap: 32 } })
    bases[mode] = res.body.data.id
    for (const p of passages) {
      const up = await h.call('POST', `/v1/knowledge-bases/${bases[mode]}/documents`, { key, body: { type: 'text', name: `${p.id}.txt`, content: contentOf(p), metadata: p.metadata } })
      expect(up.status).toBe(201)
    }
  }
  await waitFor(
    async () => {
      const [row] = await h.deps.db.sql<{ ready: number; failed: number }[]>`
        select count(*) filter (where status = 'ready')::int as ready, count(*) filter (where status = 'failed')::int as failed
        from documents where knowledge_base_id in ${h.deps.db.sql(Object.values(bases))}`
      if (row!.failed > 0) throw new Error(`${row!.failed} document(s) failed`)
      return row!.ready === 3 * passages.length
    },
    { timeoutMs: 60_000, what: 'every passage of the three bases to be ready' },
  )
}, 120_000)

afterAll(async () => {
  await workers?.stop()
  await h?.close()
})

describe('recall@5 on the labelled corpus', () => {
  test('every passage is one chunk carrying its metadata', async () => {
    const rows = await h.deps.db.sql<{ name: string; chunks_count: number; metadata: Record<string, unknown> }[]>`
      select name, chunks_count, metadata from documents where knowledge_base_id = ${bases.hybrid} order by name`
    expect(rows.map((r) => r.name)).toEqual(passages.map((p) => `${p.id}.txt`).sort())
    for (const r of rows) {
      expect(r.chunks_count).toBe(1)
      expect(r.metadata).toEqual(byId.get(idOf(r.name))!.metadata)
    }
  })

  test('hybrid recalls at least as much as vector and full-text alone', async () => {
    const returned = {} as Record<Mode, Record<string, string[]>>
    for (const mode of MODES) {
      returned[mode] = {}
      for (const q of queries) {
        const results = await search(mode, { query: q.text, top_k: 5, ...(q.filters ? { filters: q.filters } : {}) })
        expect(results.length).toBeLessThanOrEqual(5)
        returned[mode][q.id] = results.map((r) => idOf(r.document_name))
      }
    }
    // recall@k of one query from its top 5 (each mode's order is the same for any top_k ≤ 5).
    const recall = (mode: Mode, q: Query, k: number) => q.relevant.filter((id) => returned[mode][q.id]!.slice(0, k).includes(id)).length / q.relevant.length
    const mean = (mode: Mode, k: number, kind?: string) => {
      const qs = queries.filter((q) => !kind || q.kind === kind)
      return Math.round((qs.reduce((s, q) => s + recall(mode, q, k), 0) / qs.length) * 1000) / 1000
    }
    const figures = Object.fromEntries(MODES.map((m) => [m, mean(m, 5)])) as Record<Mode, number>
    const kinds = [...new Set(queries.map((q) => q.kind))]
    console.log(`recall@5 over ${queries.length} queries: vector ${figures.vector}, fulltext ${figures.fulltext}, hybrid ${figures.hybrid}`)
    console.log(`recall@5 per kind: ${kinds.map((k) => `${k} ${MODES.map((m) => `${m} ${mean(m, 5, k)}`).join(' / ')}`).join('; ')}`)
    console.log(`(for information) recall@1: ${MODES.map((m) => `${m} ${mean(m, 1)}`).join(', ')}; recall@3: ${MODES.map((m) => `${m} ${mean(m, 3)}`).join(', ')}`)
    for (const mode of MODES) {
      const missed = queries.filter((q) => recall(mode, q, 5) < 1)
      if (missed.length > 0) console.log(`${mode} misses at 5: ${missed.map((q) => `${q.id} (${q.kind}; relevant ${q.relevant}; got ${returned[mode][q.id]})`).join('; ')}`)
    }
    const below = queries.filter((q) => recall('hybrid', q, 5) < Math.max(recall('vector', q, 5), recall('fulltext', q, 5)))
    if (below.length > 0) console.log(`hybrid below another mode on: ${below.map((q) => q.id).join(', ')}`)
    for (const mode of MODES) expect(figures[mode]).toBeGreaterThanOrEqual(0.5)
    expect(figures.hybrid).toBeGreaterThanOrEqual(Math.max(figures.vector, figures.fulltext))
  })
})

describe('filters', () => {
  const filtered = queries.filter((q) => q.filters)

  test.each(MODES)('%s: every result of a filtered query satisfies its filter, and the filter excludes passages the query would find', async (mode) => {
    expect(filtered.length).toBe(7)
    let excluded = 0
    for (const q of filtered) {
      const results = await search(mode, { query: q.text, top_k: 20, filters: q.filters })
      expect(results.length).toBeGreaterThan(0)
      for (const r of results) {
        expect(satisfies(r.metadata, q.filters!)).toBe(true)
        expect(r.metadata).toEqual(byId.get(idOf(r.document_name))!.metadata)
      }
      const unfiltered = await search(mode, { query: q.text, top_k: 5 })
      excluded += unfiltered.filter((r) => !satisfies(r.metadata, q.filters!)).length
    }
    // Not vacuous: without their filters, these queries do find passages outside them.
    expect(excluded).toBeGreaterThan(0)
  })

  // year 2019: p13, p54, p63; tier pro or enterprise: 14 passages.
  const selective: [Mode, Record<string, unknown>, string][] = [
    ['vector', { year: 2019 }, 'operating temperature of indoor devices'],
    ['hybrid', { year: 2019 }, 'operating temperature of indoor devices'],
    ['vector', { tier: ['pro', 'enterprise'] }, 'refund'],
    ['hybrid', { tier: ['pro', 'enterprise'] }, 'refund'],
  ]
  test.each(selective)('%s: a filter matching N chunks answers exactly N with top_k ≥ N, exactly top_k below (%j)', async (mode, filters, query) => {
    const ids = matching(filters)
    const n = ids.length
    const all = await search(mode, { query, top_k: n + 5, filters })
    expect(all.map((r) => idOf(r.document_name)).sort()).toEqual(ids)
    expect(new Set(all.map((r) => r.chunk_id)).size).toBe(n)
    const few = await search(mode, { query, top_k: 2, filters })
    expect(few.map((r) => r.chunk_id)).toEqual(all.slice(0, 2).map((r) => r.chunk_id))
    const exact = await search(mode, { query, top_k: n, filters })
    expect(exact.map((r) => r.chunk_id)).toEqual(all.map((r) => r.chunk_id))
  })

  test('fulltext: a filter answers the matching chunks that contain a query word, all of them and no more', async () => {
    // "enterprise" occurs in 14 passages, 6 of them of tier enterprise and 10 of tier pro or enterprise.
    expect((await search('fulltext', { query: 'enterprise', top_k: 20 })).length).toBe(14)
    const tierEnterprise = await search('fulltext', { query: 'enterprise', top_k: 10, filters: { tier: 'enterprise' } })
    expect(tierEnterprise.map((r) => idOf(r.document_name)).sort()).toEqual(matching({ tier: 'enterprise' }))
    expect((await search('fulltext', { query: 'enterprise', top_k: 4, filters: { tier: 'enterprise' } })).length).toBe(4)
    const either = await search('fulltext', { query: 'enterprise', top_k: 20, filters: { tier: ['pro', 'enterprise'] } })
    expect(either.map((r) => idOf(r.document_name)).sort()).toEqual(['p08', 'p15', 'p16', 'p26', 'p30', 'p34', 'p43', 'p44', 'p47', 'p55'])
    // A filter no chunk with the word satisfies: nothing, rather than something unfiltered.
    expect(await search('fulltext', { query: 'harassment', top_k: 5, filters: { topic: 'hardware' } })).toEqual([])
    // Several keys: all must hold.
    const both = await search('vector', { query: 'audit log', top_k: 10, filters: { topic: 'security', tier: 'enterprise' } })
    expect(both.map((r) => idOf(r.document_name)).sort()).toEqual(matching({ topic: 'security', tier: 'enterprise' }))
  })
})

describe('rerank', () => {
  /**
   * local-rerank is BM25 over the candidate pool's texts: exact words only (a final "s" dropped), each
   * query word weighted by its rarity in the pool and saturating with repetition. local-embed's
   * vectors also see other forms of a word (character n-grams) and reward dense overlap. So a text
   * that repeats "recalibrate/recalibrated/drift/drifted" around "humidity readings" is nearest to
   * the query, while the text holding the query's exact phrase covers its two rare words
   * ("recalibrating", "drifting": in no other text) and wins the rerank.
   */
  const QUERY = 'recalibrating drifting humidity readings'
  const texts: Record<string, string> = {
    'near.txt': 'Recalibrate drifted humidity readings: a recalibration fixes humidity readings that drift. Recalibrated humidity readings drift less.',
    'exact.txt': 'Recalibrating drifting humidity readings is needed only when they differ by more than five percent from a reference instrument kept in the same room for a whole day, away from windows and vents.',
    'display.txt': 'The thermostat shows humidity readings next to the temperature on its home screen.',
    'upload.txt': 'Humidity readings are uploaded to Lumora Cloud every five minutes.',
    'battery.txt': 'Batteries in the outdoor sensor last about two years.',
  }
  let kb: string
  let ws: string

  beforeAll(async () => {
    ws = await workspaceOf(h, key, 'Rerank')
    const res = await h.call('POST', '/v1/knowledge-bases', { key, body: { workspace_id: ws, name: 'Rerank', retrieval: { mode: 'vector' } } })
    expect(res.status).toBe(201)
    kb = res.body.data.id
    for (const [name, content] of Object.entries(texts)) {
      expect((await h.call('POST', `/v1/knowledge-bases/${kb}/documents`, { key, body: { type: 'text', name, content } })).status).toBe(201)
    }
    await waitFor(async () => {
      const [row] = await h.deps.db.sql<{ n: number }[]>`select count(*)::int as n from documents where knowledge_base_id = ${kb} and status = 'ready'`
      return row!.n === 5
    }, { timeoutMs: 30_000, what: 'the rerank base to be ready' })
  })

  const searchKb = async (body: Record<string, unknown>) => {
    const res = await h.call('POST', `/v1/knowledge-bases/${kb}/search`, { key, body: { query: QUERY, ...body } })
    expect(res.status).toBe(200)
    return res.body.results as { document_name: string; content: string; score: number }[]
  }

  test('the vector stage ranks the near text first, by cosine similarity', async () => {
    const results = await searchKb({ top_k: 5 })
    expect(results.map((r) => r.document_name)).toEqual(['near.txt', 'exact.txt', 'upload.txt', 'display.txt', 'battery.txt'])
    // The scores are the cosine similarities of the query's and the chunks' local-embed vectors (≥ 0).
    const emb = await h.call('POST', '/v1/models/embeddings', { key, body: { workspace_id: ws, model: 'local-embed', input: [QUERY, ...results.map((r) => r.content)] } })
    expect(emb.status).toBe(200)
    const [q, ...vectors] = emb.body.data.map((d: { embedding: number[] }) => d.embedding) as number[][]
    const cosines = vectors.map((v) => Math.max(0, v.reduce((s, x, i) => s + x * q![i]!, 0)))
    results.forEach((r, i) => expect(r.score).toBeCloseTo(cosines[i]!, 5))
    expect(results[0]!.score).toBeGreaterThan(results[1]!.score)
  })

  test('rerank: true puts the exact phrase first; scores are local-rerank\'s, descending, at most top_k', async () => {
    const pool = await searchKb({ top_k: 5 })
    const results = await searchKb({ top_k: 3, rerank: true })
    expect(results.map((r) => r.document_name)).toEqual(['exact.txt', 'near.txt', 'upload.txt'])
    // The pool was every chunk (max(4 × 3, 20) ≥ 5): the same texts reranked by the model directly.
    const direct = await h.call('POST', '/v1/models/rerank', { key, body: { workspace_id: ws, model: 'local-rerank', query: QUERY, documents: pool.map((r) => r.content) } })
    expect(direct.status).toBe(200)
    const expected = (direct.body.results as { index: number; relevance_score: number }[]).slice(0, 3)
    expect(results.map((r) => r.document_name)).toEqual(expected.map((e) => pool[e.index]!.document_name))
    results.forEach((r, i) => expect(r.score).toBeCloseTo(expected[i]!.relevance_score, 5))
    for (let i = 1; i < results.length; i++) expect(results[i]!.score).toBeLessThan(results[i - 1]!.score)
    // Not the cosine scores of the first stage.
    expect(results[0]!.score).not.toBeCloseTo(pool.find((r) => r.document_name === 'exact.txt')!.score, 3)
    expect(await searchKb({ top_k: 1, rerank: true })).toMatchObject([{ document_name: 'exact.txt', score: results[0]!.score }])
  })

  test.each(MODES)('%s corpus base: rerank answers at most top_k results, scores descending in [0, 1)', async (mode) => {
    for (const q of queries.slice(0, 12)) {
      const results = await search(mode, { query: q.text, top_k: 3, rerank: true })
      expect(results.length).toBeGreaterThan(0)
      expect(results.length).toBeLessThanOrEqual(3)
      for (let i = 0; i < results.length; i++) {
        expect(results[i]!.score).toBeGreaterThanOrEqual(0)
        expect(results[i]!.score).toBeLessThan(1)
        if (i > 0) expect(results[i]!.score).toBeLessThanOrEqual(results[i - 1]!.score)
      }
    }
  })
})
