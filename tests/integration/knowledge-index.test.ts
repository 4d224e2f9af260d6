import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Database, Tx } from '../../src/store/db'
import { fuse as fuseLists } from '../../src/domain/knowledge/search'
import * as store from '../../src/store/knowledge'
import { startWorkers, type Workers } from '../../src/workers'
import { fakeVector, startFakeProvider, type FakeProvider } from '../helpers/fake-provider'
import { keyFor, startHarness, waitFor, workspaceOf, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The indexes behind search (src/store/migrations/00006_knowledge.sql), checked with EXPLAIN ANALYZE
 * of the statement the store really sends, on the real database (PGlite or PostgreSQL, per DATABASE_URL):
 * the partial HNSW index of each embedding size, the GIN indexes of the tsvector and of the metadata.
 * A base gets 2 100 chunks (just above EXACT_MAX) written directly (random vectors, analyzed) beside one real document, so
 * that plans are those of a table with content; an 8-dimension model served by the fake provider
 * gets its own index.
 */

const FILLER = 2100
/**
 * The filler's metadata: rows i % 300 = 0 are { x: "a", y: "b", tag: "rare" }, the others
 * { x: "a", y: "a" } (even) or { x: "b", y: "b" } (odd), with tag "common".
 */
const RARE = FILLER / 300
const RARE_IDS = Array.from({ length: RARE }, (_, i) => `chk_fill384_${(i + 1) * 300}`).sort()
/** Rows whose content says "zephyr" (i % 700 = 0). */
const ZEPHYR = FILLER / 700

let h: Harness
let workers: Workers
let fake: FakeProvider
let dir: string
let key: string
let ws: string

interface PlanNode {
  'Node Type': string
  'Index Name'?: string
  'Relation Name'?: string
  'Actual Loops'?: number
  Plans?: PlanNode[]
}

/**
 * The nodes of a plan that ran, depth first: "Index Scan using <index>", "Seq Scan on <table>",
 * "Sort"... (a branch the statement's gate turned off shows `never executed`: left out).
 */
function nodesOf(plan: PlanNode, executedOnly = false): string[] {
  if (executedOnly && plan['Actual Loops'] === 0) return []
  const name = plan['Index Name'] ? `${plan['Node Type']} using ${plan['Index Name']}` : plan['Relation Name'] ? `${plan['Node Type']} on ${plan['Relation Name']}` : plan['Node Type']
  return [name, ...(plan.Plans ?? []).flatMap((p) => nodesOf(p, executedOnly))]
}

/** A plan node reading the chunks table or one of its indexes. */
const touchesChunks = (node: string) => / on chunks$| using chunks_/.test(node)

async function explain(tx: Tx, string: string, params: unknown[] = [], analyze = false): Promise<string[]> {
  const [row] = await tx.unsafe(`explain (format json${analyze ? ', analyze' : ''}) ${string}`, params as never[])
  return nodesOf((row!['QUERY PLAN'] as { Plan: PlanNode }[])[0]!.Plan, analyze)
}

/**
 * Runs the store's search and EXPLAIN ANALYZEs the very statement it sent (postgres.js hands every
 * statement and its parameters to the `debug` option), under the settings it ran with (read back in
 * the same transaction): the plan checked is the store's own, whatever its SQL becomes. In server
 * mode the search runs on the search pool, whose connections start with its settings; on the
 * embedded database, in a transaction that sets them first.
 */
async function searched(q: store.SearchQuery, db: Database = h.deps.db) {
  const pool = db.search ?? db.sql
  const options = pool.options as unknown as { debug: unknown }
  const before = options.debug
  const sent: { string: string; params: unknown[]; types: number[] }[] = []
  options.debug = (_connection: number, string: string, params: unknown[], types: number[]) => sent.push({ string, params, types })
  let rows: Awaited<ReturnType<typeof store.searchChunks>>
  try {
    rows = await store.searchChunks(db, q)
  } finally {
    options.debug = before
  }
  // The search, and the settings sent just before it when there were any (other workers share the
  // embedded database's one connection).
  // (A worker's claim is a `with` statement too, on the same connection: it locks, a search never does.)
  const at = sent.findIndex((s) => /^\s*with\b/.test(s.string) && !s.string.includes('picked as') && !/skip locked/i.test(s.string))
  expect(at).toBeGreaterThanOrEqual(0)
  const statement = sent[at]!
  // Not always the one right before it: on a busy machine another worker's statement can come between.
  const setting = sent.slice(0, at).findLast((s) => s.string.includes('set_config('))
  return pool.begin(async (tx) => {
    if (setting) await tx.unsafe(setting.string, setting.params as never[])
    const [settings] = await tx<Record<string, unknown>[]>`select current_setting('hnsw.iterative_scan') as iterative, current_setting('hnsw.ef_search')::int as ef,
      current_setting('enable_seqscan') as seqscan, current_setting('enable_sort') as sort, current_setting('jit', true) as jit`
    // JSON parameters arrive here serialized already: sent as text, the statement's context types them.
    const json = (i: number) => [114, 3802].includes(statement.types[i]!) && typeof statement.params[i] === 'string'
    const params = statement.params.map((p, i) => (json(i) ? JSON.parse(p as string) : statement.types[i] ? tx.typed(p as never, statement.types[i]!) : p))
    if (process.env.SHOW_PLAN) console.log((await tx.unsafe(`explain analyze ${statement.string}`, params as never[])).map((r) => r['QUERY PLAN']).join('\n').replace(/'\[[^\]]*\]'/g, "'[…]'"))
    return { rows, sent: sent.map((s) => s.string.trim()), settings: { ...settings!, jit: settings!.jit ?? 'off' }, executed: await explain(tx, statement.string, params, true) }
  })
}

/**
 * A vector search of a base above EXACT_MAX (a random query vector): it walks its size's graph, under
 * the settings the store sets, with `ef` as its candidate list, and answers `limit` rows in distance
 * order. Server mode: the search pool's connections start with the deployment's list, so a search
 * that needs no longer one is its one statement, without a transaction (`transaction` false); on the
 * embedded database, always a transaction that sets them.
 */
async function expectWalk(db: Database, kb: string, dims: number, limit: number, ef: number, transaction: boolean) {
  const { executed, rows, settings, sent } = await searched({ kbId: kb, dims, vector: randomVector(dims), text: null, filters: {}, limit, mode: 'vector' }, db)
  expect(settings as Record<string, unknown>).toEqual({ iterative: 'relaxed_order', ef, seqscan: 'off', sort: 'off', jit: 'off' })
  expect(sent.some((s) => /^begin\b/i.test(s) || s.includes('set_config('))).toBe(db.search ? transaction : true)
  const graph = `Index Scan using chunks_hnsw_${dims}_idx`
  expect(executed.filter(touchesChunks)).toContain(graph)
  expect(executed.filter(touchesChunks).filter((n) => n !== graph && !/chunks_kb_idx|chunks_unindexed/.test(n))).toEqual([])
  expect(rows.vector.length).toBe(limit)
  for (let i = 1; i < rows.vector.length; i++) expect(rows.vector[i]!.distance).toBeGreaterThanOrEqual(rows.vector[i - 1]!.distance)
}

const randomVector = (dims: number) => `[${Array.from({ length: dims }, () => Math.random() - 0.5).join(',')}]`

/** Where a test's bases are made: a harness, a caller's key, a workspace (the file's, unless a test has its own). */
interface Site {
  h: Harness
  key: string
  ws: string
}

async function createBase(body: Record<string, unknown>, at: Site = { h, key, ws }): Promise<string> {
  const res = await at.h.call('POST', '/v1/knowledge-bases', { key: at.key, body: { workspace_id: at.ws, ...body } })
  if (res.status !== 201) throw new Error(`create base: ${res.status} ${res.text}`)
  return res.body.data.id
}

async function uploadReady(kb: string, docs: Record<string, string>, at: Site = { h, key, ws }): Promise<string[]> {
  const ids: string[] = []
  for (const [name, content] of Object.entries(docs)) {
    const res = await at.h.call('POST', `/v1/knowledge-bases/${kb}/documents`, { key: at.key, body: { type: 'text', name, content } })
    expect(res.status).toBe(201)
    ids.push(res.body.document_id)
  }
  await waitFor(async () => {
    const rows = await at.h.deps.db.sql<{ status: string }[]>`select status from documents where knowledge_base_id = ${kb}`
    if (rows.some((r) => r.status === 'failed')) throw new Error('a document failed')
    return rows.length === ids.length && rows.every((r) => r.status === 'ready')
  }, { timeoutMs: 30_000, what: `the documents of ${kb} to be ready` })
  return ids
}

/**
 * `count` chunks of random vectors appended to a ready document's searchable generation, straight into
 * the table. Their size's graph is dropped first and built again after, with the product's own
 * statement (rebuildVectorIndex): one bulk build is ~5 times faster than as many inserts into the graph
 * (3 000 vectors of 384 dimensions in PGlite: ~20 s against ~100 s; 2 100: 13 s), and the index is the same.
 */
async function fill(kb: string, documentId: string, dims: number, count: number, sql = h.deps.db.sql) {
  await sql.unsafe(`drop index if exists chunks_hnsw_${dims}_idx`)
  await sql`
    insert into chunks (id, knowledge_base_id, document_id, generation, position, content, tokens, metadata, dims, embedding)
    select 'chk_fill' || ${dims}::int || '_' || i, ${kb}, ${documentId}, d.live_generation, 1000 + i,
           case when i % 700 = 0 then 'zephyr filler ' || i else 'filler text number ' || i end, 4,
           case when i % 300 = 0 then '{"x": "a", "y": "b", "tag": "rare"}'::jsonb
                when i % 2 = 0 then '{"x": "a", "y": "a", "tag": "common"}'::jsonb else '{"x": "b", "y": "b", "tag": "common"}'::jsonb end,
           ${dims}, (select array_agg(random() - 0.5)::real[]::vector from generate_series(1, ${dims}) where i > 0)
    from documents d, generate_series(1, ${count}) i
    where d.id = ${documentId}`
  // The document counts them, as ingestion would: the search's gate reads the documents' counts and
  // metadata (a chunk's metadata is its document's). Most filler chunks are "common": so is the
  // document, so that a filter on it counts as unselective there too.
  await sql`update documents set chunks_count = chunks_count + ${count}, metadata = ${sql.json({ tag: 'common' })} where id = ${documentId}`
  await store.rebuildVectorIndex(sql, dims)
  await sql`analyze`
}

beforeAll(async () => {
  fake = await startFakeProvider()
  dir = mkdtempSync(join(tmpdir(), 'ap-kindex-'))
  const modelsFile = join(dir, 'models.json')
  writeFileSync(
    modelsFile,
    JSON.stringify({
      providers: [{ id: 'fake', kind: 'openai', base_url: fake.baseUrl, api_key: 'sk-fake', timeout_ms: 30_000 }],
      // The fake provider answers 8-dimension vectors seeded by the text (tests/helpers/fake-provider.ts).
      models: [{ id: 'fake-embed-8', type: 'embedding', vendor: 'test', dimensions: 8, routes: [{ provider: 'fake', model: 'embed-8' }], pricing: { input_per_1k: 0 } }],
    }),
  )
  h = await startHarness({ MODELS_FILE: modelsFile, RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000' })
  workers = await startWorkers(h.deps)
  key = await keyFor(h, 'index-owner')
  ws = await workspaceOf(h, key, 'Indexes')
}, 60_000)

afterAll(async () => {
  await workers?.stop()
  await h?.close()
  await fake?.close()
  if (dir) rmSync(dir, { recursive: true, force: true })
})

const search384 = (kb: string, vector: string, limit: number, filters: Record<string, unknown> = {}) => ({ kbId: kb, dims: 384, vector, text: null as string | null, filters, limit })

describe('384 dimensions (local-embed)', () => {
  let kb: string

  beforeAll(async () => {
    kb = await createBase({ name: 'Filler', retrieval: { mode: 'vector' } })
    const [doc] = await uploadReady(kb, { 'seed.txt': 'Lumora hubs pair with sensors over Thread.' })
    await fill(kb, doc!, 384, FILLER)
    // Building the HNSW index of 2 100 384-dimension vectors is CPU-bound: ~13 s in PGlite on a
    // quiet 2-core machine, a few times that beside two CPU burners. The limit only catches a hang.
  }, 600_000)

  // The limits searches use: top_k 5 (the default), a hybrid list or a rerank pool (20), top_k 100;
  // the default candidate list (40), and twice a longer list.
  test.each([
    [5, 40, false],
    [20, 40, false],
    [100, 200, true],
  ])('a vector search (limit %d) of a base above EXACT_MAX walks chunks_hnsw_384_idx with ef_search %d (in a transaction in server mode: %p)', async (limit, ef, transaction) => {
    await expectWalk(h.deps.db, kb, 384, limit, ef, transaction)
  })

  test('full-text search is a bitmap scan of chunks_tsv_idx (GIN)', async () => {
    const v = randomVector(384)
    const { executed, rows } = await searched({ ...search384(kb, v, 10), text: 'zephyr', mode: 'fulltext' })
    expect(executed).toContain('Bitmap Index Scan using chunks_tsv_idx')
    expect(executed.filter(touchesChunks).filter((n) => !/chunks_(tsv_idx|pkey)$|^Bitmap Heap Scan on chunks$|chunks_unindexed/.test(n))).toEqual([])
    expect(rows.fulltext.length).toBe(ZEPHYR)
    for (const r of rows.fulltext) expect(r.content).toStartWith('zephyr filler ')
  })

  test('hybrid: the fusion in SQL answers what the domain\'s fuse of the two lists answers (ids, order, scores, distances), with or without a vector or a filter', async () => {
    const cases: [string | null, string, Record<string, unknown>][] = [
      [randomVector(384), 'zephyr filler', {}],
      [randomVector(384), 'filler', { tag: 'common' }],
      [randomVector(384), 'zephyr', { tag: 'rare' }],
      [randomVector(384), 'hubs pair over thread', {}],
      [randomVector(384), 'nothing matches this', {}],
      [null, 'zephyr filler', {}],
    ]
    for (const [vector, text, filters] of cases) {
      for (const fuse of [1, 5, 10, 20]) {
        const limit = Math.max(fuse * 2, 20)
        const q = { ...search384(kb, vector as string, limit, filters), vector, text, mode: 'hybrid' as const }
        const lists = await store.searchChunks(h.deps.db, q)
        const expected = fuseLists([lists.vector, lists.fulltext]).slice(0, fuse)
        const got = (await store.searchChunks(h.deps.db, { ...q, fuse })).fused
        expect(got.map(({ score, ...hit }) => ({ hit, score }))).toEqual(expected)
      }
    }
  })

  test('a selective filter goes exact: the metadata index (GIN, jsonb_path_ops) finds its few chunks, which are sorted by distance; the graph is not walked', async () => {
    const sql = h.deps.db.sql
    const alone = await sql.begin((tx) => explain(tx, `select id from chunks where metadata @> '{"tag": "rare"}'`))
    expect(alone).toEqual(['Bitmap Heap Scan on chunks', 'Bitmap Index Scan using chunks_metadata_idx'])
    const v = randomVector(384)
    const { executed, rows } = await searched({ ...search384(kb, v, 10, { tag: 'rare' }), mode: 'vector' })
    expect(executed).toContain('Bitmap Index Scan using chunks_metadata_idx')
    expect(executed).not.toContain('Index Scan using chunks_hnsw_384_idx')
    expect(rows.vector.map((r) => r.chunk_id).sort()).toEqual(RARE_IDS)
    // Exact: in distance order, whatever the limit.
    for (let i = 1; i < rows.vector.length; i++) expect(rows.vector[i]!.distance).toBeGreaterThanOrEqual(rows.vector[i - 1]!.distance)
    const three = await store.searchChunks(h.deps.db, { ...search384(kb, v, 3, { tag: 'rare' }), mode: 'vector' })
    expect(three.vector.map((r) => r.chunk_id)).toEqual(rows.vector.slice(0, 3).map((r) => r.chunk_id))
  })

  test('an unselective filter walks the graph, with the filter inside the walk (iterative scan): every row passes it', async () => {
    const v = randomVector(384)
    const { executed, rows } = await searched({ ...search384(kb, v, 10, { tag: 'common' }), mode: 'vector' })
    expect(executed).toContain('Index Scan using chunks_hnsw_384_idx')
    expect(rows.vector.length).toBe(10)
    const meta = await h.deps.db.sql<{ metadata: Record<string, unknown> }[]>`select metadata from chunks where id in ${h.deps.db.sql(rows.vector.map((r) => r.chunk_id))}`
    for (const m of meta) expect(m.metadata.tag).toBe('common')
  })

  test.each([[{ tag: 'rare' }], [{ x: 'a', y: 'b' }], [{ tag: ['rare', 'none'] }]])('over HTTP, the filter %j answers exactly the chunks passing it, or exactly top_k', async (filters) => {
    const search = async (body: Record<string, unknown>) => {
      const res = await h.call('POST', `/v1/knowledge-bases/${kb}/search`, { key, body: { query: 'hub pairing', ...body } })
      expect(res.status).toBe(200)
      return res.body.results as { chunk_id: string; metadata: Record<string, unknown> }[]
    }
    const all = await search({ top_k: 10, filters })
    expect(all.map((r) => r.chunk_id).sort()).toEqual(RARE_IDS)
    for (const r of all) expect(r.metadata).toEqual({ x: 'a', y: 'b', tag: 'rare' })
    expect((await search({ top_k: RARE, filters })).map((r) => r.chunk_id)).toEqual(all.map((r) => r.chunk_id))
    expect((await search({ top_k: 3, filters })).map((r) => r.chunk_id)).toEqual(all.slice(0, 3).map((r) => r.chunk_id))
    expect((await search({ top_k: 100 })).length).toBe(100)
  })
})

describe('KNOWLEDGE_EF_SEARCH: the candidate list searches start from', () => {
  let other: Harness
  let otherWorkers: Workers
  let at: Site
  let kb: string

  // A process of its own with the setting at 100, over a base of the fake's 8-dimension vectors
  // (cheap to insert into a graph) just above EXACT_MAX.
  beforeAll(async () => {
    other = await startHarness({ MODELS_FILE: join(dir, 'models.json'), KNOWLEDGE_EF_SEARCH: '100' })
    otherWorkers = await startWorkers(other.deps)
    const otherKey = await keyFor(other, 'ef-owner')
    at = { h: other, key: otherKey, ws: await workspaceOf(other, otherKey, 'Longer lists') }
    kb = await createBase({ name: 'Longer lists', embedding_model: 'fake-embed-8', retrieval: { mode: 'vector' } }, at)
    const [doc] = await uploadReady(kb, { 'seed.txt': 'Hubs pair over Thread.' }, at)
    await fill(kb, doc!, 8, store.EXACT_MAX + 100, other.deps.db.sql)
  }, 300_000)

  afterAll(async () => {
    await otherWorkers?.stop()
    await other?.close()
  })

  // Up to 50 rows the setting's 100 (server mode: the search pool's own, no transaction); beyond, twice the rows.
  test.each([
    [10, 100, false],
    [40, 100, false],
    [50, 100, false],
    [60, 120, true],
  ])('set to 100, a vector search of %d rows walks with ef_search %d (in a transaction in server mode: %p)', async (limit, ef, transaction) => {
    await expectWalk(other.deps.db, kb, 8, limit, ef, transaction)
  })
})

describe('the unindexed part', () => {
  const TEXTS: Record<string, string> = {
    'hubs.md': 'Lumora hubs pair with sensors over Thread. Pairing takes a minute and needs the hub online.',
    'sensors.md': 'Sensors report temperature every minute; a sensor that misses three reports is offline.',
    'thermostat.md': 'The thermostat learns a weekly schedule from manual changes and pre-heats before you wake.',
    'billing.md': 'Invoices are issued monthly. A failed card payment is retried after three days.',
    'webhooks.md': 'Webhook deliveries are signed with HMAC-SHA256 and retried with exponential backoff.',
    'keys.md': 'API keys carry a role; a readonly key may search knowledge bases but not change them.',
  }
  // Each text three times over, in sections: a few dozen chunks of 32 tokens.
  for (const [name, text] of Object.entries(TEXTS)) TEXTS[name] = [1, 2, 3].map((n) => `## Part ${n}\n\n${text} Part ${n} of ${name} adds detail number ${n * 7}.`).join('\n\n')
  const QUERIES = ['how do hubs pair with sensors', 'signed webhook retries', 'readonly key search', 'thermostat schedule', 'card payment retried', 'offline sensor']

  /** Every chunk of the base into one part, straight through the tables (the indexer stopped meanwhile). */
  async function allInto(kb: string, part: 'unindexed' | 'indexed', share = 1) {
    const sql = h.deps.db.sql
    const cols = 'id, knowledge_base_id, document_id, generation, position, content, heading_path, tokens, metadata, dims, embedding'
    const [from, to] = part === 'unindexed' ? ['chunks', 'chunks_unindexed'] : ['chunks_unindexed', 'chunks']
    await sql.unsafe(`with m as (delete from ${from} where knowledge_base_id = $1 and (abs(hashtext(id)) % 100) < $2 returning ${cols}) insert into ${to} (${cols}) select ${cols} from m`, [kb, Math.round(share * 100)])
  }

  const results = async (kb: string) => {
    const out: unknown[] = []
    for (const query of QUERIES) {
      for (const top_k of [1, 3, 10]) {
        const res = await h.call('POST', `/v1/knowledge-bases/${kb}/search`, { key, body: { query, top_k } })
        expect(res.status).toBe(200)
        out.push(res.body.results.map((r: { chunk_id: string; score: number; similarity: number }) => [r.chunk_id, r.score, r.similarity]))
      }
    }
    return out
  }

  test.each(['hybrid', 'vector', 'fulltext'])('%s: results are the same (ids, order, scores) whether the chunks are unindexed, half indexed or indexed', async (mode) => {
    const kb = await createBase({ name: `Parts ${mode}`, retrieval: { mode }, chunking: { chunk_size: 32, chunk_overlap: 4 } })
    await uploadReady(kb, TEXTS)
    await workers.indexer.stop()
    try {
      await allInto(kb, 'unindexed')
      expect(await store.pendingChunks(h.deps.db.sql, kb)).toBeGreaterThan(20)
      const unindexed = await results(kb)
      await allInto(kb, 'indexed', 0.5)
      const pending = await store.pendingChunks(h.deps.db.sql, kb)
      expect(pending).toBeGreaterThan(0)
      const [{ n }] = await h.deps.db.sql<{ n: number }[]>`select count(*)::int as n from chunks where knowledge_base_id = ${kb}` as unknown as [{ n: number }]
      expect(n).toBeGreaterThan(0)
      expect(await results(kb)).toEqual(unindexed)
      // The indexer's own move, this time: everything.
      while ((await store.moveChunks(h.deps.db.sql, 7)) > 0) {}
      expect(await store.pendingChunks(h.deps.db.sql, kb)).toBe(0)
      expect(await results(kb)).toEqual(unindexed)
    } finally {
      workers.indexer.start()
    }
  }, 60_000)

  test('the indexer moves a ready document\'s chunks, and nothing of a generation still being written; a ready swap deletes the old generation from both parts', async () => {
    const sql = h.deps.db.sql
    const kb = await createBase({ name: 'Mover', chunking: { chunk_size: 32, chunk_overlap: 4 } })
    const [doc] = await uploadReady(kb, { 'a.md': TEXTS['hubs.md']! + ' ' + TEXTS['sensors.md']! })
    await waitFor(async () => (await store.pendingChunks(sql, kb)) === 0, { timeoutMs: 20_000, what: 'the indexer to move the chunks' })
    const [{ live }] = (await sql<{ live: number }[]>`select count(*)::int as live from chunks where document_id = ${doc!}`) as unknown as [{ live: number }]
    expect(live).toBeGreaterThan(1)
    await workers.indexer.stop()
    try {
      // A generation being written: rows of generation 2 while the document is not ready at 2.
      await sql`update documents set generation = 2, status = 'embedding' where id = ${doc!}`
      await sql`insert into chunks_unindexed (id, knowledge_base_id, document_id, generation, position, content, tokens, metadata, dims, embedding)
        select 'chk_gen2_' || position, knowledge_base_id, document_id, 2, position, content, tokens, metadata, dims, embedding from chunks where document_id = ${doc!}`
      expect(await store.moveChunks(sql, 1000)).toBe(0)
      // Generation 1 is still the searched one, indexed; generation 2 is not searched yet.
      expect(await store.pendingChunks(sql, kb)).toBe(0)
      // Its ready swap, as the document machine writes it: generation 2 live, generation 1 gone from both parts.
      const [row] = await sql`select * from documents where id = ${doc!}`
      const saved = await store.writeDocumentTransition(sql, { id: doc!, status: 'embedding', generation: 2 }, { status: 'ready', snapshot: row!.snapshot, generation: 2, ready: { chunks: live } })
      expect(saved?.live_generation).toBe(2)
      const parts = await sql`select 'indexed' as part, generation from chunks where document_id = ${doc!} union all select 'unindexed', generation from chunks_unindexed where document_id = ${doc!}`
      expect(new Set(parts.map((p) => `${p.part}:${p.generation}`))).toEqual(new Set(['unindexed:2']))
      expect(await store.moveChunks(sql, 1000)).toBe(live)
      expect(await store.pendingChunks(sql, kb)).toBe(0)
    } finally {
      workers.indexer.start()
    }
  }, 60_000)

  test('two indexers moving at once move each chunk once', async () => {
    const sql = h.deps.db.sql
    const kb = await createBase({ name: 'Two movers', chunking: { chunk_size: 32, chunk_overlap: 4 } })
    await workers.indexer.stop()
    try {
      await uploadReady(kb, TEXTS)
      await allInto(kb, 'unindexed')
      const before = await store.pendingChunks(sql, kb)
      const moved = await Promise.all([0, 1, 2].map(async () => {
        let n = 0
        for (let m = 1; m > 0; n += m) m = await store.moveChunks(sql, 3)
        return n
      }))
      expect(moved.reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(before)
      const [{ n, distinct }] = (await sql<{ n: number; distinct: number }[]>`select count(*)::int as n, count(distinct (document_id, generation, position))::int as distinct from chunks where knowledge_base_id = ${kb}`) as unknown as [{ n: number; distinct: number }]
      expect(n).toBe(before)
      expect(distinct).toBe(before)
      expect(await store.pendingChunks(sql, kb)).toBe(0)
    } finally {
      workers.indexer.start()
    }
  }, 60_000)
})

describe('another embedding size (8 dimensions, an OpenAI-kind provider)', () => {
  test('a base of a new size creates its partial HNSW index, and its searches use it', async () => {
    const sql = h.deps.db.sql
    const indexes = () => sql<{ indexname: string; indexdef: string }[]>`select indexname, indexdef from pg_indexes where tablename = 'chunks' and indexname like 'chunks_hnsw_%' order by indexname`
    expect((await indexes()).map((i) => i.indexname)).toEqual(['chunks_hnsw_384_idx'])
    const kb = await createBase({ name: 'Eight', embedding_model: 'fake-embed-8', retrieval: { mode: 'vector' } })
    const created = await indexes()
    expect(created.map((i) => i.indexname)).toEqual(['chunks_hnsw_384_idx', 'chunks_hnsw_8_idx'])
    // The graph holds normalised halfvec (16-bit) copies of the vectors, as the 384-dimension one does.
    for (const [i, dims] of created.map((c, k) => [c, k === 0 ? 384 : 8] as const)) {
      expect(i.indexdef.replace(/[()]/g, '')).toContain(`USING hnsw l2_normalizeembedding::vector${dims}::halfvec${dims} halfvec_cosine_ops`)
      expect(i.indexdef).toMatch(new RegExp(`WITH \\(m='${store.HNSW_M}', ef_construction='${store.HNSW_EF_CONSTRUCTION}'\\) WHERE \\(dims = ${dims}\\)$`))
    }

    const texts = { 'a.txt': 'Hubs pair over Thread.', 'b.txt': 'Sensors report every minute.', 'c.txt': 'Thermostats learn a schedule.' }
    const [docA] = await uploadReady(kb, texts)
    expect(fake.requests.filter((r) => r.path === '/v1/embeddings' && r.model === 'embed-8').length).toBeGreaterThanOrEqual(1)
    const query = 'how do hubs pair'
    const res = await h.call('POST', `/v1/knowledge-bases/${kb}/search`, { key, body: { query, top_k: 3 } })
    expect(res.status).toBe(200)
    // The fake's vectors are seeded by the text: the expected order is their cosine to the query's.
    const q = fakeVector(query, 8)
    const cos = (t: string) => fakeVector(t, 8).reduce((s, x, i) => s + x * q[i]!, 0)
    const expected = Object.entries(texts).sort(([, x], [, y]) => cos(y) - cos(x))
    expect(res.body.results.map((r: { document_name: string }) => r.document_name)).toEqual(expected.map(([name]) => name))
    res.body.results.forEach((r: { score: number }, i: number) => expect(r.score).toBeCloseTo(Math.max(0, cos(expected[i]![1])), 5))

    await fill(kb, docA!, 8, FILLER)
    const v = randomVector(8)
    const { executed, rows } = await searched({ kbId: kb, dims: 8, vector: v, text: null, filters: {}, limit: 10, mode: 'vector' })
    // Its own index, not the 384-dimension one (whose predicate dims = 384 excludes these chunks).
    expect(executed).toContain('Index Scan using chunks_hnsw_8_idx')
    expect(executed).not.toContain('Index Scan using chunks_hnsw_384_idx')
    expect(rows.vector.length).toBe(10)

    // A model's vector with components past halfvec's ±65 504 is indexed (normalised first) and found
    // by its direction, its distance computed from the stored vector.
    const big = `[1000000,2000000,${'0,'.repeat(5)}1]`
    await sql`insert into chunks (id, knowledge_base_id, document_id, generation, position, content, tokens, metadata, dims, embedding)
      select 'chk_big8', ${kb}, d.id, d.live_generation, 99999, 'large components', 2, '{}', 8, ${big}::vector from documents d where d.id = ${docA!}`
    await sql`update documents set chunks_count = chunks_count + 1 where id = ${docA!}`
    const found = await searched({ kbId: kb, dims: 8, vector: `[0.5,1,0,0,0,0,0,0]`, text: null, filters: {}, limit: 10, mode: 'vector' })
    expect(found.executed).toContain('Index Scan using chunks_hnsw_8_idx')
    expect(found.rows.vector[0]!.chunk_id).toBe('chk_big8')
    expect(found.rows.vector[0]!.distance).toBeCloseTo(0, 6)
  }, 300_000)
})
