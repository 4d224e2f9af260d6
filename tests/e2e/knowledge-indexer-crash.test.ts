import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { generateKey } from '../../src/domain/api-keys'
import { openEmbedded, type Sql } from '../../src/store/db'
import { startCluster, type Cluster } from '../helpers/cluster'
import { waitFor } from '../helpers/harness'
import { apiCall, EMBEDDED, killAll, spawnService, type ServiceProcess } from '../helpers/process'

/**
 * The chunk indexer survives its process (docs/knowledge.md, "Indexing"): the real service as a
 * subprocess, the default model (local-embed, 384 dimensions), a few thousand chunks whose move
 * into the vector index takes seconds, the process SIGKILLed while they move, a re-parse under way.
 * (a) Embedded: killed mid-move (proved by opening the data directory afterwards: both parts hold
 *     rows), restarted on the same DATA_DIR: every live position is in exactly one part, `chunks`
 *     holds nothing stale, search answers at once and as before, the move finishes, the re-parsed
 *     document ends ready at generation 2 with exactly its chunks.
 * (b) Server mode: one of two worker processes is killed mid-move while searches run against the
 *     API the whole time; the other finishes the move; the same invariants.
 *
 * What "as before" means: each base stays under EXACT_MAX (2 000) indexed chunks, so its vector
 * search is exact in both parts, and every full-text query matches fewer chunks than FULLTEXT_POOL
 * (200), so the full-text list is exact too (src/store/knowledge/search.ts): results before the
 * kill, after it and once everything is moved are then the same lists, ids, order and scores. The
 * re-parsed document gets new chunk ids (the same texts): in its base results are compared without
 * chunk ids; the other base has no re-parse and is compared whole.
 */

const CHUNKING = { chunk_size: 32, chunk_overlap: 0 }
/**
 * Per base: 5 documents of 100 one-chunk paragraphs, 500 chunks (under EXACT_MAX); two bases. PGlite
 * moves ~50-100 chunks a second here (an HNSW insert each, while it also serves the ingestion and
 * searches on its one connection): the move of 1 000 chunks outlasts the ingestion and the reference
 * searches by several seconds, and the test stays under a minute.
 */
const DOCS = 5
const PARAGRAPHS = 100

/**
 * Words of no language, 144 of them: four per paragraph, so that each appears in ~15 of a base's
 * chunks and a query of two of them matches well under FULLTEXT_POOL chunks (a word every chunk
 * holds, "paragraph" or "manual", would not: queries of the hybrid base use only these).
 */
const SYLLABLES = ['ka', 'lo', 'mi', 'ne', 'ru', 'sa', 'ti', 'vo', 'ze', 'bu', 'fa', 'gi']
const WORDS = SYLLABLES.flatMap((a) => SYLLABLES.map((b) => `${a}${b}x`))
/** A small deterministic generator (mulberry32) seeded by the document's tag and the position. */
function random(seed: number) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}
const seedOf = (s: string) => [...s].reduce((h, c) => (Math.imul(h, 31) + c.charCodeAt(0)) | 0, 7)
const wordsOf = (tag: string, i: number) => {
  const r = random(seedOf(`${tag}:${i}`))
  return Array.from({ length: 4 }, () => WORDS[Math.floor(r() * WORDS.length)]!)
}
/** Paragraphs of about 20 tokens: with chunk_size 32 each is one chunk; no two alike. */
const paragraphs = (tag: string) => Array.from({ length: PARAGRAPHS }, (_, i) => `Paragraph ${i} of the ${tag} manual: ${wordsOf(tag, i).join(' ')}.`).join('\n\n')
/** Queries of words of the vocabulary (for full text and vector), and for the vector base, ones naming a paragraph. */
const WORD_QUERIES = [`${WORDS[3]} ${WORDS[77]}`, `${WORDS[20]} ${WORDS[101]}`, `${WORDS[140]} ${WORDS[9]}`, `${WORDS[55]}`, wordsOf('vec0', 7).join(' ')]
const PARAGRAPH_QUERIES = ['Paragraph 42 of the vec0 manual', 'Paragraph 7 of the vec3 manual']

interface Result {
  chunk_id: string
  document_id: string
  content: string
  score: number
  similarity: number
}

/** The invariants of both parts (docs/knowledge.md, "Indexing"), as the store holds them. */
async function checkParts(sql: Sql, kbIds: string[]) {
  const docs = await sql<{ id: string; status: string; generation: number; live_generation: number | null; chunks_count: number; lease_owner: string | null }[]>`
    select id, status, generation, live_generation, chunks_count, lease_owner from documents where knowledge_base_id in ${sql(kbIds)} order by id`
  expect(docs).toHaveLength(kbIds.length * DOCS)
  // Every position of a document's live generation once, in one part or the other.
  const live = await sql<{ id: string; n: number; positions: number; lo: number; hi: number }[]>`
    select d.id, count(c.position)::int as n, count(distinct c.position)::int as positions, min(c.position)::int as lo, max(c.position)::int as hi
    from documents d left join (select document_id, generation, position from chunks union all select document_id, generation, position from chunks_unindexed) c
      on c.document_id = d.id and c.generation = d.live_generation
    where d.knowledge_base_id in ${sql(kbIds)} group by d.id order by d.id`
  expect(live.map((l) => ({ ...l }))).toEqual(docs.map((d) => ({ id: d.id, n: d.chunks_count, positions: d.chunks_count, lo: 0, hi: d.chunks_count - 1 })))
  // Every document was ready once: it has a live generation, of PARAGRAPHS chunks.
  expect(docs.filter((d) => d.live_generation === null || d.chunks_count !== PARAGRAPHS)).toEqual([])
  // Nothing in the vector index but live generations; nothing anywhere of a generation neither live nor being written.
  const stale = await sql`select c.id, c.document_id, c.generation from chunks c join documents d on d.id = c.document_id where c.generation is distinct from d.live_generation`
  expect([...stale]).toEqual([])
  const orphans = await sql`select u.id, u.document_id, u.generation from chunks_unindexed u join documents d on d.id = u.document_id
    where u.generation is distinct from d.live_generation and u.generation <> d.generation`
  expect([...orphans]).toEqual([])
  const [parts] = await sql<{ indexed: number; unindexed: number; pending: number }[]>`
    select (select count(*)::int from chunks where knowledge_base_id in ${sql(kbIds)}) as indexed,
           (select count(*)::int from chunks_unindexed where knowledge_base_id in ${sql(kbIds)}) as unindexed,
           (select count(*)::int from chunks_unindexed u join documents d on d.id = u.document_id and d.live_generation = u.generation
            where u.knowledge_base_id in ${sql(kbIds)}) as pending`
  return { docs, ...parts! }
}

describe('embedded: the chunk indexer SIGKILLed mid-move', () => {
  let tmp: string
  let sp: ServiceProcess
  const rootKey = generateKey()

  beforeAll(() => {
    tmp = mkdtempSync(join(tmpdir(), 'ap-e2e-indexer-crash-'))
  })
  afterAll(async () => {
    await killAll()
    if (tmp) rmSync(tmp, { recursive: true, force: true })
  })

  const dataDir = () => join(tmp, 'data')
  const boot = async () => {
    sp = spawnService({ env: { ...EMBEDDED, DATA_DIR: dataDir(), BOOTSTRAP_API_KEY: rootKey, RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000' } })
    await sp.ready(30_000)
  }
  const call = (method: string, path: string, body?: unknown) => apiCall(sp, rootKey, method, path, body)
  /** The store, with the service stopped (PGlite is one process' at a time: the data directory is locked). */
  const inStore = async <T>(look: (sql: Sql) => Promise<T>): Promise<T> => {
    const db = await openEmbedded({ dataDir: dataDir() })
    try {
      return await look(db.sql)
    } finally {
      await db.close()
    }
  }

  test('nothing lost, nothing duplicated, nothing stale; search answers at once and as before; the re-parse ends at generation 2', async () => {
    const t0 = Date.now()
    await boot()
    const ws = await call('POST', '/v1/workspaces', { name: 'Indexer crash' })
    expect(ws.status).toBe(201)
    const bases: { id: string; tag: string; mode: string }[] = []
    for (const [tag, mode] of [['vec', 'vector'], ['hyb', 'hybrid']] as const) {
      const kb = await call('POST', '/v1/knowledge-bases', { workspace_id: ws.body.data.id, name: `Manuals ${mode}`, chunking: CHUNKING, retrieval: { mode } })
      expect(kb.status).toBe(201)
      expect(kb.body.data).toMatchObject({ embedding_model: 'local-embed', dimensions: 384, retrieval: { mode } })
      bases.push({ id: kb.body.data.id, tag, mode })
    }
    const docIds: Record<string, string> = {}
    for (let d = 0; d < DOCS; d++) {
      for (const b of bases) {
        const tag = `${b.tag}${d}`
        const up = await call('POST', `/v1/knowledge-bases/${b.id}/documents`, { type: 'text', name: `${tag}.txt`, content: paragraphs(tag), metadata: { doc: tag } })
        expect(up.status).toBe(201)
        docIds[tag] = up.body.document_id
      }
    }
    const allReady = async () => {
      for (const b of bases) {
        const list = await call('GET', `/v1/knowledge-bases/${b.id}/documents?limit=100`)
        expect(list.status).toBe(200)
        const docs = list.body.data as { status: string; chunks_count: number; name: string }[]
        const failed = docs.filter((d) => d.status === 'failed')
        if (failed.length) throw new Error(`failed: ${JSON.stringify(failed)}`)
        if (docs.length !== DOCS || docs.some((d) => d.status !== 'ready')) return false
        expect(docs.map((d) => d.chunks_count)).toEqual(Array(DOCS).fill(PARAGRAPHS))
      }
      return true
    }
    await waitFor(allReady, { timeoutMs: 40_000, intervalMs: 50, what: 'every document to be ready' })
    const tReady = Date.now()

    // The reference results, while the indexer moves (search is exact in both parts: see the top).
    const search = async (b: (typeof bases)[number], query: string) => {
      const r = await call('POST', `/v1/knowledge-bases/${b.id}/search`, { query, top_k: 10 })
      expect(r.status).toBe(200)
      return r.body.results as Result[]
    }
    const vec = bases[0]!
    // The re-parsed document is in the vector base: its results are compared without chunk ids.
    const project = (b: (typeof bases)[number], rs: Result[]) => (b === vec ? rs.map(({ chunk_id: _, ...r }) => r) : rs)
    const snapshot = async () => {
      const out: Record<string, unknown> = {}
      for (const b of bases) for (const q of b === vec ? [...WORD_QUERIES, ...PARAGRAPH_QUERIES] : WORD_QUERIES) out[`${b.mode}: ${q}`] = project(b, await search(b, q))
      return out
    }
    const before = await snapshot()
    for (const [q, rs] of Object.entries(before)) expect({ q, n: (rs as unknown[]).length }).toEqual({ q, n: 10 })
    // The paragraph query finds its paragraph first (the document re-parsed below).
    expect((before[`vector: Paragraph 42 of the vec0 manual`] as Result[])[0]).toMatchObject({ document_id: docIds.vec0, content: expect.stringMatching(/^Paragraph 42 of the vec0 manual: /) })

    const reparsed = docIds.vec0!
    const re = await call('POST', `/v1/documents/${reparsed}/reparse`)
    expect(re.status).toBe(202)
    // Killed once the re-parse is past parsing: its new generation being written, or ready and moving.
    const reStatus = await waitFor(
      async () => {
        const s = (await call('GET', `/v1/documents/${reparsed}`)).body.status as string
        return s === 'parsing' ? null : s
      },
      { timeoutMs: 15_000, intervalMs: 10, what: 'the re-parse to be past parsing' },
    )
    sp.proc.kill('SIGKILL')
    await sp.exited
    const tKill = Date.now()

    // Mid-move, proved: both parts hold live chunks.
    const atKill = await inStore((sql) => checkParts(sql, bases.map((b) => b.id)))
    console.log(`indexer crash (embedded): ready after ${tReady - t0} ms, killed ${tKill - tReady} ms later; at the kill ${atKill.indexed} indexed, ${atKill.pending} pending, ${atKill.unindexed} unindexed; the re-parsed document ${reStatus} then ${JSON.stringify(atKill.docs.find((d) => d.id === reparsed))}`)
    if (atKill.indexed === 0 || atKill.pending === 0)
      throw new Error(`not killed mid-move (${atKill.indexed} chunks indexed, ${atKill.pending} pending): the move was ${atKill.indexed === 0 ? 'not started' : 'over'} after ${tKill - tReady} ms; adjust DOCS / PARAGRAPHS`)
    expect(atKill.indexed + atKill.pending).toBe(2 * DOCS * PARAGRAPHS)

    // Restarted: search answers at once, as before.
    await boot()
    expect(await snapshot()).toEqual(before)

    // The re-parse resumes (after the dead process' lease, if it had claimed the document) and ends ready at generation 2.
    const done = await waitFor(
      async () => {
        const s = (await call('GET', `/v1/documents/${reparsed}`)).body
        return s.status === 'ready' || s.status === 'failed' ? s : null
      },
      { timeoutMs: 40_000, intervalMs: 100, what: 'the re-parsed document to be ready' },
    )
    expect(done).toMatchObject({ id: reparsed, status: 'ready', chunks_count: PARAGRAPHS })

    // Until everything is moved: stopped, looked at, started again (one holder of DATA_DIR at a time).
    let last: Awaited<ReturnType<typeof checkParts>> | null = null
    for (let round = 0; ; round++) {
      expect(await sp.stop('SIGTERM')).toBe(0)
      last = await inStore((sql) => checkParts(sql, bases.map((b) => b.id)))
      if (last.pending === 0 && last.unindexed === 0) break
      if (round > 20) throw new Error(`the move did not finish: ${JSON.stringify(last)}`)
      await boot()
      await Bun.sleep(3000)
    }
    expect({ indexed: last.indexed, unindexed: last.unindexed }).toEqual({ indexed: 2 * DOCS * PARAGRAPHS, unindexed: 0 })
    for (const d of last.docs) expect(d).toMatchObject({ status: 'ready', generation: d.id === reparsed ? 2 : 1, live_generation: d.id === reparsed ? 2 : 1, chunks_count: PARAGRAPHS })

    await boot()
    expect(await snapshot()).toEqual(before)
    const hits = await search(vec, `Paragraph 42 of the vec0 manual`)
    expect(hits[0]).toMatchObject({ document_id: reparsed, content: expect.stringMatching(/^Paragraph 42 of the vec0 manual: /) })
    expect(sp.output()).not.toMatch(/chunk indexer failed/)
    console.log(`indexer crash (embedded): everything moved ${Date.now() - tKill} ms after the kill`)
  }, 120_000)
})
