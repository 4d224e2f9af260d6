import { afterAll, beforeAll, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import * as store from '../../src/store/knowledge'
import { startWorkers, type Workers } from '../../src/workers'
import { keyFor, startHarness, waitFor, workspaceOf, type Harness } from '../helpers/harness'
import { manual, WORD_QUERIES } from '../helpers/manuals'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Search while chunks move into the vector index (docs/knowledge.md, "Indexing"), on the real
 * database (PGlite or PostgreSQL, per DATABASE_URL): two movers at once, a few rows a statement,
 * and searches running all along. Each search sees every chunk once, in one part or the other: its
 * results are those of the base before any move (the base is under EXACT_MAX and the queries match
 * under FULLTEXT_POOL chunks, so both lists are exact wherever the chunks are).
 */

let h: Harness
let workers: Workers
let key: string
let ws: string

beforeAll(async () => {
  h = await startHarness({ RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000' })
  workers = await startWorkers(h.deps)
  key = await keyFor(h, 'moves-owner')
  ws = await workspaceOf(h, key, 'Moves')
}, 60_000)

afterAll(async () => {
  await workers?.stop()
  await h?.close()
})

test('two movers and searches at once: every search answers as before the move, never a chunk twice', async () => {
  const sql = h.deps.db.sql
  const kb = await h.call('POST', '/v1/knowledge-bases', { key, body: { workspace_id: ws, name: 'Moving', chunking: { chunk_size: 32, chunk_overlap: 0 }, retrieval: { mode: 'hybrid' } } })
  expect(kb.status).toBe(201)
  const kbId = kb.body.data.id as string
  // The service's own indexer stays out: the two movers below are the only ones.
  await workers.indexer.stop()
  try {
    for (const tag of ['vec0', 'm1', 'm2']) {
      const res = await h.call('POST', `/v1/knowledge-bases/${kbId}/documents`, { key, body: { type: 'text', name: `${tag}.txt`, content: manual(tag, 100) } })
      expect(res.status).toBe(201)
    }
    await waitFor(
      async () => {
        const rows = await sql<{ status: string }[]>`select status from documents where knowledge_base_id = ${kbId}`
        if (rows.some((r) => r.status === 'failed')) throw new Error('a document failed')
        return rows.length === 3 && rows.every((r) => r.status === 'ready')
      },
      { timeoutMs: 30_000, what: 'the documents to be ready' },
    )
    const pending = await store.pendingChunks(sql, kbId)
    expect(pending).toBe(300)

    const search = async (query: string) => {
      const res = await h.call('POST', `/v1/knowledge-bases/${kbId}/search`, { key, body: { query, top_k: 10 } })
      expect(res.status).toBe(200)
      return res.body.results as { chunk_id: string; score: number; similarity: number }[]
    }
    const before = new Map<string, unknown>()
    for (const q of WORD_QUERIES) before.set(q, await search(q))
    for (const rs of before.values()) expect((rs as unknown[]).length).toBe(10)

    let moving = true
    const movers = Promise.all(
      [0, 1].map(async () => {
        let n = 0
        for (let m = 1; m > 0; n += m) m = await store.moveChunks(sql, 2)
        return n
      }),
    ).finally(() => {
      moving = false
    })
    // Searches until the movers are done, each compared with its answer before the move.
    const during: { query: string; same: boolean; twice: string[]; whileMoving: boolean }[] = []
    for (let i = 0; moving; i++) {
      const query = WORD_QUERIES[i % WORD_QUERIES.length]!
      const rs = await search(query)
      const ids = rs.map((r) => r.chunk_id)
      during.push({ query, same: Bun.deepEquals(rs, before.get(query)), twice: ids.filter((id, j) => ids.indexOf(id) !== j), whileMoving: moving })
    }
    const moved = await movers
    expect(moved[0]! + moved[1]!).toBe(pending)
    expect(await store.pendingChunks(sql, kbId)).toBe(0)
    expect(during.filter((d) => !d.same || d.twice.length > 0)).toEqual([])
    // Searches ran among the moves, not only before or after them.
    expect(during.filter((d) => d.whileMoving).length).toBeGreaterThanOrEqual(3)
    console.log(`moves: ${pending} chunks moved, ${during.filter((d) => d.whileMoving).length} searches among the moves`)
    for (const q of WORD_QUERIES) expect(await search(q)).toEqual(before.get(q) as never)
    const [{ n, distinct }] = (await sql<{ n: number; distinct: number }[]>`
      select count(*)::int as n, count(distinct (document_id, generation, position))::int as distinct from chunks where knowledge_base_id = ${kbId}`) as unknown as [{ n: number; distinct: number }]
    expect({ n, distinct }).toEqual({ n: pending, distinct: pending })
  } finally {
    workers.indexer.start()
  }
}, 60_000)
