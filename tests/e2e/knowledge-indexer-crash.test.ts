import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { existsSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { generateKey } from '../../src/domain/api-keys'
import { openEmbedded, type Sql } from '../../src/store/db'
import { startCluster, type Cluster } from '../helpers/cluster'
import { waitFor } from '../helpers/harness'
import { manual, WORD_QUERIES } from '../helpers/manuals'
import { apiCall, EMBEDDED, fetchService, killAll, spawnService, type ServiceProcess } from '../helpers/process'

setDefaultTimeout(TEST_TIMEOUT_MS)

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
 * Documents of 100 one-chunk paragraphs per base, two bases, each under EXACT_MAX. PGlite moves
 * 100-400 chunks a second on these machines once ingestion is over (an HNSW insert each, while it
 * also serves the searches on its one connection), one batch of 8 a second while documents are
 * ingested: 600 chunks outlast the reference searches and the re-parse several times over (the
 * kill came with 144 moved, quiet). The hybrid base keeps 2 documents: its full-text queries then
 * match fewer chunks than FULLTEXT_POOL, as "as before" needs (see the top). PostgreSQL, with two indexers
 * moving 128 rows a statement, needs the most a base may hold to be caught mid-move with work left.
 */
type Docs = { vec: number; hyb: number }
const EMBEDDED_DOCS: Docs = { vec: 4, hyb: 2 }
const SERVER_DOCS: Docs = { vec: 15, hyb: 15 }
const total = (docs: Docs) => docs.vec + docs.hyb
const PARAGRAPHS = 100

/** Paragraphs of about 20 tokens: with chunk_size 32 each is one chunk; no two alike. */
const paragraphs = (tag: string) => manual(tag, PARAGRAPHS)
/** For the vector base only: queries naming a paragraph (their words are in every chunk). */
const PARAGRAPH_QUERIES = ['Paragraph 42 of the vec0 manual', 'Paragraph 7 of the vec3 manual']

interface Result {
  chunk_id: string
  document_id: string
  content: string
  score: number
  similarity: number
}

/**
 * The invariants of both parts (docs/knowledge.md, "Indexing"), as the store holds them, true at any
 * moment (each is one statement, and a move is one): every position of a document's live generation
 * once, in one part or the other; nothing in `chunks` but live generations; nothing anywhere of a
 * generation neither live nor being written. Answers the documents and the parts' sizes.
 */
async function checkParts(sql: Sql, kbIds: string[], docCount: number) {
  const docs = await sql<{ id: string; status: string; generation: number; live_generation: number | null; chunks_count: number; lease_owner: string | null }[]>`
    select id, status, generation, live_generation, chunks_count, lease_owner from documents where knowledge_base_id in ${sql(kbIds)} order by id`
  expect(docs).toHaveLength(docCount)
  // The documents' rows read in the same statement: one may become ready (or swap generations) meanwhile.
  const live = await sql<{ id: string; chunks_count: number; n: number; positions: number; lo: number; hi: number }[]>`
    select d.id, d.chunks_count, count(c.position)::int as n, count(distinct c.position)::int as positions, min(c.position)::int as lo, max(c.position)::int as hi
    from documents d left join (select document_id, generation, position from chunks union all select document_id, generation, position from chunks_unindexed) c
      on c.document_id = d.id and c.generation = d.live_generation
    where d.knowledge_base_id in ${sql(kbIds)} and d.live_generation is not null group by d.id order by d.id`
  expect(live.filter((l) => !(l.n === l.chunks_count && l.positions === l.chunks_count && l.lo === 0 && l.hi === l.chunks_count - 1))).toEqual([])
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

type Call = (method: string, path: string, body?: unknown) => Promise<{ status: number; body: any }>
interface Base {
  id: string
  tag: keyof Docs
  mode: 'vector' | 'hybrid'
}

/** A workspace with a vector base (`vec`, the one whose document is re-parsed) and a hybrid one (`hyb`), then every document uploaded. */
async function upload(call: Call, name: string, perBase: Docs): Promise<{ vec: Base; hyb: Base; docIds: Record<string, string> }> {
  const ws = await call('POST', '/v1/workspaces', { name })
  expect(ws.status).toBe(201)
  const bases: Base[] = []
  for (const [tag, mode] of [['vec', 'vector'], ['hyb', 'hybrid']] as const) {
    const kb = await call('POST', '/v1/knowledge-bases', { workspace_id: ws.body.data.id, name: `Manuals ${mode}`, chunking: CHUNKING, retrieval: { mode } })
    expect(kb.status).toBe(201)
    expect(kb.body.data).toMatchObject({ embedding_model: 'local-embed', dimensions: 384, retrieval: { mode } })
    bases.push({ id: kb.body.data.id, tag, mode })
  }
  const docIds: Record<string, string> = {}
  for (let d = 0; d < Math.max(perBase.vec, perBase.hyb); d++) {
    for (const b of bases.filter((b) => d < perBase[b.tag])) {
      const tag = `${b.tag}${d}`
      const up = await call('POST', `/v1/knowledge-bases/${b.id}/documents`, { type: 'text', name: `${tag}.txt`, content: paragraphs(tag), metadata: { doc: tag } })
      expect(up.status).toBe(201)
      docIds[tag] = up.body.document_id
    }
  }
  return { vec: bases[0]!, hyb: bases[1]!, docIds }
}

/** Whether every document of the bases is ready (a failed one fails the test). */
async function allReady(call: Call, bases: Base[], perBase: Docs): Promise<boolean> {
  for (const b of bases) {
    const list = await call('GET', `/v1/knowledge-bases/${b.id}/documents?limit=100`)
    expect(list.status).toBe(200)
    const docs = list.body.data as { status: string; chunks_count: number; name: string }[]
    const failed = docs.filter((d) => d.status === 'failed')
    if (failed.length) throw new Error(`failed: ${JSON.stringify(failed)}`)
    if (docs.length !== perBase[b.tag] || docs.some((d) => d.status !== 'ready')) return false
    expect(docs.map((d) => d.chunks_count)).toEqual(Array(perBase[b.tag]).fill(PARAGRAPHS))
  }
  return true
}

const searchOf = (call: Call) => async (b: Base, query: string) => {
  const r = await call('POST', `/v1/knowledge-bases/${b.id}/search`, { query, top_k: 10 })
  expect(r.status).toBe(200)
  return r.body.results as Result[]
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
    const { vec, hyb, docIds } = await upload(call, 'Indexer crash', EMBEDDED_DOCS)
    const bases = [vec, hyb]
    await waitFor(() => allReady(call, bases, EMBEDDED_DOCS), { timeoutMs: 40_000, intervalMs: 50, what: 'every document to be ready' })
    const tReady = Date.now()

    // The reference results, while the indexer moves (search is exact in both parts: see the top).
    const search = searchOf(call)
    // The re-parsed document is in the vector base: its results are compared without chunk ids.
    const project = (b: Base, rs: Result[]) => (b === vec ? rs.map(({ chunk_id: _, ...r }) => r) : rs)
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
    // The indexer yields to ingestion (one batch a second while documents are processed, the re-parse
    // included): killed once it has moved more than the re-parsed document's first generation (the
    // oldest chunks, moved first; its swap to generation 2 deletes them), as the service's own count says.
    const movedSoFar = await waitFor(
      async () => {
        const { text } = await fetchService(sp, '/metrics')
        const n = Number(/^knowledge_chunks_indexed_total (\d+)$/m.exec(text)?.[1] ?? 0)
        return n > PARAGRAPHS ? n : null
      },
      { timeoutMs: 20_000, intervalMs: 10, what: 'the indexer to move more than a document' },
    )
    sp.proc.kill('SIGKILL')
    await sp.exited
    const tKill = Date.now()

    // Mid-move, proved: both parts hold live chunks. `kept`: the indexed chunks that stay indexed,
    // those of each document's newest generation (the re-parsed document's first generation, if it is
    // still indexed, goes at its swap).
    const { kept, ...atKill } = await inStore(async (sql) => {
      const parts = await checkParts(sql, bases.map((b) => b.id), total(EMBEDDED_DOCS))
      const [row] = await sql<{ n: number }[]>`select count(*)::int as n from chunks c join documents d on d.id = c.document_id and c.generation = d.generation
        where c.knowledge_base_id in ${sql(bases.map((b) => b.id))}`
      return { ...parts, kept: row!.n }
    })
    console.log(`indexer crash (embedded): ready after ${tReady - t0} ms, killed ${tKill - tReady} ms later (${movedSoFar} moved by its count); at the kill ${atKill.indexed} indexed, ${atKill.pending} pending, ${atKill.unindexed} unindexed; the re-parsed document ${reStatus} then ${JSON.stringify(atKill.docs.find((d) => d.id === reparsed))}`)
    if (atKill.indexed === 0 || atKill.pending === 0)
      throw new Error(`not killed mid-move (${atKill.indexed} chunks indexed, ${atKill.pending} pending): the move was ${atKill.indexed === 0 ? 'not started' : 'over'} after ${tKill - tReady} ms; adjust EMBEDDED_DOCS`)
    expect(atKill.docs.filter((d) => d.live_generation === null || d.chunks_count !== PARAGRAPHS)).toEqual([])
    expect(atKill.indexed + atKill.pending).toBe(total(EMBEDDED_DOCS) * PARAGRAPHS)

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

    // Until everything is moved, watched through the restarted service's own count of chunks moved
    // (the data directory has one holder at a time): everything but `kept` is moved by this process. The moves are CPU-bound (an HNSW
    // insert a chunk): on a busy machine they take longer, so what fails the test is a count that stops
    // rising, not the time it takes.
    const toMove = total(EMBEDDED_DOCS) * PARAGRAPHS - kept
    const movedSince = async () => Number(/^knowledge_chunks_indexed_total (\d+)$/m.exec((await fetchService(sp, '/metrics')).text)?.[1] ?? 0)
    let seen = -1
    let since = Date.now()
    await waitFor(
      async () => {
        const n = await movedSince()
        if (n > seen) [seen, since] = [n, Date.now()]
        else if (Date.now() - since > 30_000) throw new Error(`the move stopped: ${n} of ${toMove} chunks moved, none in 30 s`)
        return n >= toMove
      },
      { timeoutMs: 540_000, intervalMs: 100, what: `the restarted service to move ${toMove} chunks` },
    )
    expect(await sp.stop('SIGTERM')).toBe(0)
    const last = await inStore((sql) => checkParts(sql, bases.map((b) => b.id), total(EMBEDDED_DOCS)))
    expect({ indexed: last.indexed, unindexed: last.unindexed }).toEqual({ indexed: total(EMBEDDED_DOCS) * PARAGRAPHS, unindexed: 0 })
    for (const d of last.docs) expect(d).toMatchObject({ status: 'ready', generation: d.id === reparsed ? 2 : 1, live_generation: d.id === reparsed ? 2 : 1, chunks_count: PARAGRAPHS })

    await boot()
    expect(await snapshot()).toEqual(before)
    const hits = await search(vec, `Paragraph 42 of the vec0 manual`)
    expect(hits[0]).toMatchObject({ document_id: reparsed, content: expect.stringMatching(/^Paragraph 42 of the vec0 manual: /) })
    expect(sp.output()).not.toMatch(/chunk indexer failed/)
    console.log(`indexer crash (embedded): everything moved ${Date.now() - tKill} ms after the kill`)
  }, 600_000)
})

/**
 * The worker process whose database connection is running a move right now, if any: the client
 * port of the backend running `moveChunks` (pg_stat_activity), found among the process' sockets
 * (/proc/<pid>/fd → socket inode → /proc/net/tcp*).
 */
async function moverNow(db: Sql, workers: ServiceProcess[]): Promise<ServiceProcess | null> {
  const rows = await db<{ port: number }[]>`
    select client_port as port from pg_stat_activity
    where datname = current_database() and pid <> pg_backend_pid() and state = 'active' and query like '%picked as%'`
  if (rows.length === 0) return null
  const ports = new Set(rows.map((r) => r.port))
  const inodes = new Set<string>()
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    if (!existsSync(table)) continue
    for (const line of readFileSync(table, 'utf8').split('\n').slice(1)) {
      const f = line.trim().split(/\s+/)
      if (f.length > 9 && ports.has(parseInt(f[1]!.split(':')[1]!, 16))) inodes.add(f[9]!)
    }
  }
  for (const w of workers) {
    if (w.proc.exitCode !== null || w.proc.signalCode !== null) continue
    for (const fd of readdirSync(`/proc/${w.proc.pid}/fd`)) {
      let link = ''
      try {
        link = readlinkSync(`/proc/${w.proc.pid}/fd/${fd}`)
      } catch {}
      const inode = /^socket:\[(\d+)\]$/.exec(link)?.[1]
      if (inode && inodes.has(inode)) return w
    }
  }
  return null
}

describe.skipIf(!process.env.DATABASE_URL || !process.env.REDIS_URL)('server mode: a worker process SIGKILLed mid-move', () => {
  let cluster: Cluster

  beforeAll(async () => {
    // An API process that runs no workers: the two worker-only processes are the only indexers.
    cluster = await startCluster({ name: 'icrash', workers: 2, apiOnly: true })
  }, 60_000)
  afterAll(async () => {
    await killAll()
    await cluster?.close()
  })

  test('the other worker finishes the move; searches answer throughout, never a chunk twice; nothing lost, duplicated or stale', async () => {
    const { api, db, rootKey, workers } = cluster
    const call: Call = (method, path, body) => apiCall(api, rootKey, method, path, body)
    const search = searchOf(call)
    const { vec, hyb, docIds } = await upload(call, 'Indexer crash (server)', SERVER_DOCS)
    const bases = [vec, hyb]
    const reparsed = docIds.vec0!
    const kbIds = bases.map((b) => b.id)
    const status = async (id: string) => (await call('GET', `/v1/documents/${id}`)).body as { status: string; chunks_count: number }

    // Searches from the first ready document of each base on, until the end: each answer 200, with results.
    const readyIn = (b: Base) => db`select 1 from documents where knowledge_base_id = ${b.id} and status = 'ready' limit 1`.then((r) => r.length > 0)
    await waitFor(async () => (await readyIn(vec)) && (await readyIn(hyb)), { timeoutMs: 30_000, intervalMs: 20, what: 'a ready document in each base' })
    const answers: { at: string; base: string; query: string; status: number; n: number; twice: string[] }[] = []
    let phase = 'before the kill'
    let searching = true
    const loop = (async () => {
      for (let i = 0; searching; i++) {
        const b = bases[i % 2]!
        const query = WORD_QUERIES[i % WORD_QUERIES.length]!
        const r = await call('POST', `/v1/knowledge-bases/${b.id}/search`, { query, top_k: 10 })
        const results = (r.status === 200 ? r.body.results : []) as Result[]
        // Never one chunk twice, nor one position of a document twice (two generations, or both parts).
        const keys = results.flatMap((x) => [x.chunk_id, `${x.document_id}/${x.content}`])
        answers.push({ at: phase, base: b.mode, query, status: r.status, n: results.length, twice: keys.filter((k, j) => keys.indexOf(k) !== j) })
      }
    })()

    try {
      // The re-parse, once its document is ready and moves are under way.
      const parts = async () =>
        (await db<{ unindexed: number; indexed: number }[]>`
          select (select count(*)::int from chunks_unindexed where knowledge_base_id in ${db(kbIds)}) as unindexed,
                 (select count(*)::int from chunks where knowledge_base_id in ${db(kbIds)}) as indexed`)[0]!
      await waitFor(async () => (await status(reparsed)).status === 'ready' && (await parts()).indexed > 0, { timeoutMs: 30_000, intervalMs: 10, what: 'the first document ready and moves under way' })
      const re = await call('POST', `/v1/documents/${reparsed}/reparse`)
      expect(re.status).toBe(202)
      await waitFor(async () => (await status(reparsed)).status !== 'parsing', { timeoutMs: 15_000, intervalMs: 10, what: 'the re-parse to be past parsing' })

      // Mid-move: both parts hold chunks of the bases, and a worker's connection is running a move: that
      // worker is killed (once a search has answered, so that searches are seen on both sides of the kill).
      const victim = (await waitFor(
        async () => {
          const p = await parts()
          return answers.length > 0 && p.unindexed > 0 && p.indexed > 0 ? await moverNow(db, workers) : null
        },
        { timeoutMs: 30_000, intervalMs: 5, what: 'a worker running a move while both parts hold chunks' },
      ))!
      victim.proc.kill('SIGKILL')
      const atKill = await parts()
      await victim.exited
      phase = 'after the kill'
      const survivor = workers.find((w) => w !== victim)!
      console.log(`indexer crash (server): killed pid ${victim.proc.pid} mid-move (${atKill.indexed} indexed, ${atKill.unindexed} unindexed); re-parse ${(await status(reparsed)).status}`)
      expect(atKill.unindexed).toBeGreaterThan(0)
      // While the survivor moves, the invariants hold.
      await checkParts(db, kbIds, total(SERVER_DOCS))

      // The survivor finishes: every document ready (the dead worker's leases run out first), the re-parse at generation 2, nothing pending.
      await waitFor(
        async () => {
          const [d] = await db<{ generation: number; live_generation: number }[]>`select generation, live_generation from documents where id = ${reparsed}`
          return d!.live_generation === 2 && (await allReady(call, bases, SERVER_DOCS)) && (await parts()).unindexed === 0
        },
        { timeoutMs: 45_000, intervalMs: 100, what: 'every document ready, the re-parse live and every chunk moved' },
      )
      phase = 'moved'
      // A few searches more once everything is moved.
      const settled = answers.length
      await waitFor(() => answers.length >= settled + 4, { timeoutMs: 10_000, what: 'searches after the move' })
      expect(survivor.proc.exitCode).toBeNull()
      expect(survivor.output()).not.toMatch(/chunk indexer failed/)
    } finally {
      searching = false
      await loop
    }

    const final = await checkParts(db, kbIds, total(SERVER_DOCS))
    expect({ indexed: final.indexed, unindexed: final.unindexed, pending: final.pending }).toEqual({ indexed: total(SERVER_DOCS) * PARAGRAPHS, unindexed: 0, pending: 0 })
    for (const d of final.docs) expect(d).toMatchObject({ status: 'ready', generation: d.id === reparsed ? 2 : 1, live_generation: d.id === reparsed ? 2 : 1, chunks_count: PARAGRAPHS, lease_owner: null })
    const dup = await db`select document_id, generation, position from chunks group by 1, 2, 3 having count(*) > 1`
    expect([...dup]).toEqual([])

    // Search, throughout: each answer 200 with results, no chunk twice; some in every phase.
    expect(answers.filter((a) => a.status !== 200 || a.n === 0 || a.twice.length > 0)).toEqual([])
    const byPhase = Object.groupBy(answers, (a) => a.at)
    expect(Object.keys(byPhase).sort()).toEqual(['after the kill', 'before the kill', 'moved'])
    const hits = await search(vec, 'Paragraph 42 of the vec0 manual')
    expect(hits[0]).toMatchObject({ document_id: reparsed, content: expect.stringMatching(/^Paragraph 42 of the vec0 manual: /) })
    console.log(`indexer crash (server): ${answers.length} searches (${Object.entries(byPhase).map(([k, v]) => `${v!.length} ${k}`).join(', ')})`)
  }, 300_000)
})
