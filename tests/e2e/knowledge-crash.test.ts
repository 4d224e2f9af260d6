import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Server } from 'bun'
import { generateKey } from '../../src/domain/api-keys'
import { openEmbedded } from '../../src/store/db'
import { startCluster, type Cluster } from '../helpers/cluster'
import { fakeVector } from '../helpers/fake-provider'
import { waitFor } from '../helpers/harness'
import { ALL_CHUNKS } from '../helpers/knowledge'
import { apiCall, EMBEDDED, killAll, spawnService, type ServiceProcess } from '../helpers/process'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Ingestion survives its process (docs/knowledge.md, "Workers", "Re-parse and delete"): the real
 * service as a subprocess, its embedding model a slow loopback server.
 * (a) Embedded: SIGKILLed while a batch of chunks is being embedded, restarted on the same DATA_DIR;
 *     the restarted service ends the dead one's lease and resumes the document, embeds only the positions not
 *     written yet, and becomes ready once, without a duplicate chunk.
 * (b) A delete during embedding stops the ingestion: nothing of the document remains, no event.
 * (c) A re-parse keeps the old chunks searchable until the new generation replaces them.
 * (d) Server mode: the worker process holding the lease is killed; another worker finishes.
 */

/** src/workers/documents.ts DOCUMENT_LEASE_MS. */
const DOCUMENT_LEASE_MS = 15_000
/** src/domain/knowledge/ingest.ts EMBED_BATCH. */
const EMBED_BATCH = 64
/** src/domain/knowledge/ingest.ts EMBED_AHEAD: calls started before the first write; one more after each write. */
const EMBED_AHEAD = 5
const DIMS = 16
const CHUNKING = { chunk_size: 32, chunk_overlap: 0 }

/**
 * Paragraphs of 19 tokens: with chunk_size 32 each is one chunk, and its text names its position,
 * so the loopback server can tell which document and which positions a request carries.
 */
const paragraphs = (tag: string, n: number) => Array.from({ length: n }, (_, i) => `Paragraph ${i} of the ${tag} manual: the ${tag} valve number ${i} opens slowly under pressure.`).join('\n\n')
const positionOf = (input: string) => Number(/^Paragraph (\d+) /.exec(input)?.[1] ?? NaN)
const range = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => from + i)
/** A document's calls are in flight together: the order they reach the server in is not theirs. */
const byPosition = <T extends { inputs: string[] }>(requests: T[]) => [...requests].sort((a, b) => positionOf(a.inputs[0]!) - positionOf(b.inputs[0]!))

interface EmbedRequest {
  inputs: string[]
  answered: boolean
}

/**
 * OpenAI's /v1/embeddings on loopback: vectors seeded by the text; a request of several inputs (a
 * batch of chunks) is answered after `delayMs`, a single input (a search query) at once, and with
 * `quickFirst` the batch of position 0 at once too (so it is written while the next ones wait).
 */
interface EmbedServer {
  server: Server<undefined>
  baseUrl: string
  delayMs: number
  quickFirst: boolean
  requests: EmbedRequest[]
  /** The requests carrying chunks of the document tagged `tag`. */
  of(tag: string): EmbedRequest[]
}

function startEmbedServer(): EmbedServer {
  const s: EmbedServer = {
    server: null as never,
    baseUrl: '',
    delayMs: 0,
    quickFirst: false,
    requests: [],
    of: (tag) => s.requests.filter((r) => r.inputs.some((i) => i.includes(` the ${tag} manual`))),
  }
  s.server = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    idleTimeout: 0,
    async fetch(req) {
      if (new URL(req.url).pathname !== '/v1/embeddings') return new Response('no', { status: 404 })
      const json = (await req.json()) as { model: string; input: string | string[] }
      const inputs = Array.isArray(json.input) ? json.input : [json.input]
      const rec: EmbedRequest = { inputs, answered: false }
      s.requests.push(rec)
      // A slow provider on purpose (the fake's pace): a batch is still in flight when the worker is killed.
      if (inputs.length > 1 && s.delayMs > 0 && !(s.quickFirst && positionOf(inputs[0]!) === 0)) await Bun.sleep(s.delayMs)
      rec.answered = true
      const tokens = inputs.reduce((n, t) => n + t.split(/\s+/).length, 0)
      return Response.json({
        object: 'list',
        model: json.model,
        data: inputs.map((t, index) => ({ object: 'embedding', index, embedding: fakeVector(t, DIMS) })),
        usage: { prompt_tokens: tokens, total_tokens: tokens },
      })
    },
  })
  s.baseUrl = `http://127.0.0.1:${s.server.port}/v1`
  return s
}

function writeModelsFile(dir: string, embed: EmbedServer): string {
  const path = join(dir, 'models.json')
  writeFileSync(
    path,
    JSON.stringify({
      // max_concurrency above EMBED_AHEAD: every call a document starts reaches the server at once.
      providers: [{ id: 'loop', kind: 'openai', base_url: embed.baseUrl, api_key: 'sk-loop-test', timeout_ms: 30_000, max_concurrency: 8 }],
      models: [{ id: 'loop-embed', type: 'embedding', vendor: 'loop', dimensions: DIMS, routes: [{ provider: 'loop', model: 'loop-embed-16' }] }],
    }),
  )
  return path
}

/** Whether the service logged an ingestion error or retry for this document. */
const loggedTrouble = (sp: ServiceProcess, docId: string) =>
  sp.output().split('\n').filter((l) => l.includes(docId) && /ingesting a document failed|will retry the document/.test(l))

describe('embedded: ingestion survives SIGKILL, delete and re-parse', () => {
  let tmp: string
  let embed: EmbedServer
  let modelsFile: string
  let sp: ServiceProcess
  let kbId: string
  const rootKey = generateKey()
  /** What the last test checks in the store once the service has stopped. */
  const ids = { crash: '', deleted: '', reparsed: '' }

  beforeAll(() => {
    tmp = mkdtempSync(join(tmpdir(), 'ap-e2e-knowledge-crash-'))
    embed = startEmbedServer()
    modelsFile = writeModelsFile(tmp, embed)
  })
  afterAll(async () => {
    await killAll()
    await embed?.server.stop(true)
    if (tmp) rmSync(tmp, { recursive: true, force: true })
  })

  const boot = () =>
    spawnService({
      env: { ...EMBEDDED, DATA_DIR: join(tmp, 'data'), MODELS_FILE: modelsFile, BOOTSTRAP_API_KEY: rootKey, RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000' },
    })
  const call = (method: string, path: string, body?: unknown) => apiCall(sp, rootKey, method, path, body)
  const status = async (id: string) => (await call('GET', `/v1/documents/${id}`)).body
  const upload = async (tag: string, n: number) => {
    const r = await call('POST', `/v1/knowledge-bases/${kbId}/documents`, { type: 'text', name: `${tag}.txt`, content: paragraphs(tag, n), metadata: { doc: tag } })
    expect(r.status).toBe(201)
    expect(r.body.status).toBe('parsing')
    return r.body.document_id as string
  }
  const search = async (tag: string, query: string, top_k = 10) => {
    const r = await call('POST', `/v1/knowledge-bases/${kbId}/search`, { query, top_k, filters: { doc: tag } })
    expect(r.status).toBe(200)
    return r.body.results as { chunk_id: string; document_id: string; content: string; metadata: Record<string, unknown> }[]
  }

  test('killed while a batch is being embedded: taken up at once by the restarted service, only the missing positions are embedded, ready once', async () => {
    sp = boot()
    await sp.ready(30_000)
    const ws = await call('POST', '/v1/workspaces', { name: 'Crash knowledge' })
    expect(ws.status).toBe(201)
    const kb = await call('POST', '/v1/knowledge-bases', { workspace_id: ws.body.data.id, name: 'Manuals', embedding_model: 'loop-embed', chunking: CHUNKING })
    expect(kb.status).toBe(201)
    expect(kb.body.data).toMatchObject({ embedding_model: 'loop-embed', chunking: CHUNKING })
    kbId = kb.body.data.id

    const N = 600 // ten batches: 64 × 9 + 24
    // Long enough that the five in flight are still unanswered when the kill lands on a busy machine.
    embed.delayMs = 4000
    embed.quickFirst = true
    const id = (ids.crash = await upload('crash', N))
    // The first batch answered and written (the sixth request starts only after its insert), the next five in flight.
    await waitFor(async () => embed.of('crash').length > EMBED_AHEAD && (await status(id)).status === 'embedding', { timeoutMs: 15_000, intervalMs: 20, what: 'the sixth batch to be requested' })
    sp.proc.kill('SIGKILL')
    const othersAnswered = embed.of('crash').some((r) => r.answered && positionOf(r.inputs[0]!) !== 0)
    await sp.exited
    embed.quickFirst = false
    embed.delayMs = 300
    const before = byPosition(embed.of('crash'))
    expect(before.length).toBe(EMBED_AHEAD + 1)
    expect(before.map((r) => r.inputs.map(positionOf))).toEqual(range(0, EMBED_AHEAD + 1).map((b) => range(b * EMBED_BATCH, (b + 1) * EMBED_BATCH)))
    expect(othersAnswered).toBe(false)
    const killedAt = Date.now()

    sp = boot()
    await sp.ready(30_000)
    // The dead service's lease on it was ended at the start (the data directory's lock proved it gone),
    // not left to run out.
    await sp.waitForOutput(/"documents":1\b.*its runs and documents are taken up now/, 10_000)
    const done = await waitFor(
      async () => {
        const s = await status(id)
        return s.status === 'ready' || s.status === 'failed' ? s : null
      },
      { timeoutMs: DOCUMENT_LEASE_MS + 25_000, intervalMs: 100, what: 'the document to be ingested after the restart' },
    )
    expect(done).toMatchObject({ id, status: 'ready', chunks_count: N })
    expect(typeof done.indexed_at).toBe('string')

    // After the restart: positions 64..599 once each, in batches, never the 64 written before the kill.
    const after = byPosition(embed.of('crash').slice(EMBED_AHEAD + 1))
    const positions = after.flatMap((r) => r.inputs.map(positionOf))
    expect(positions).toEqual(range(EMBED_BATCH, N))
    expect(after.map((r) => r.inputs.length)).toEqual([64, 64, 64, 64, 64, 64, 64, 64, 24])

    const list = await call('GET', `/v1/knowledge-bases/${kbId}/documents`)
    expect(list.status).toBe(200)
    expect(list.body.data).toHaveLength(1)
    expect(list.body.data[0]).toMatchObject({ id, name: 'crash.txt', type: 'txt', status: 'ready', error: null, chunks_count: N, metadata: { doc: 'crash' } })
    const hits = await search('crash', 'crash valve number 7 opens slowly', 5)
    expect(hits).toHaveLength(5)
    for (const h of hits) expect(h).toMatchObject({ document_id: id, metadata: { doc: 'crash' } })
    expect(hits.map((h) => h.content)).toContain(`Paragraph 7 of the crash manual: the crash valve number 7 opens slowly under pressure.`)
    expect(loggedTrouble(sp, id)).toEqual([])
    console.log(`knowledge crash (embedded): ready ${Date.now() - killedAt} ms after the kill`)
  }, DOCUMENT_LEASE_MS + 70_000)

  test('deleted while embedding: 200, then 404, the ingestion stops without an error', async () => {
    embed.delayMs = 2000
    // Seven batches: the five started at first are in flight, the other two wait for writes.
    const id = (ids.deleted = await upload('delete', 400))
    await waitFor(async () => embed.of('delete').length >= EMBED_AHEAD && (await status(id)).status === 'embedding', { timeoutMs: 15_000, intervalMs: 20, what: 'the first batches to be requested' })
    const del = await call('DELETE', `/v1/documents/${id}`)
    expect(del.status).toBe(200)
    expect(del.body.data).toMatchObject({ id, knowledge_base_id: kbId, name: 'delete.txt', status: 'embedding', chunks_count: 0, deleted: true })
    const requested = embed.of('delete').length
    expect(requested).toBe(EMBED_AHEAD)

    const gone = await call('GET', `/v1/documents/${id}`)
    expect(gone.status).toBe(404)
    expect(gone.body.error.code).toBe('not_found')
    expect((await call('DELETE', `/v1/documents/${id}`)).status).toBe(404)
    // The batches in flight are answered; the first write is refused and no next batch is asked for.
    await waitFor(() => embed.of('delete').every((r) => r.answered), { timeoutMs: 10_000, what: 'the batches in flight to be answered' })
    // No next batch within 1.5 s: the subject is that nothing more is asked for, so a fixed wait.
    await Bun.sleep(1500)
    expect(embed.of('delete').length).toBe(requested)
    const list = await call('GET', `/v1/knowledge-bases/${kbId}/documents`)
    expect(list.body.data.map((d: { id: string }) => d.id)).toEqual([ids.crash])
    expect(await search('delete', 'delete valve number 3 opens slowly')).toEqual([])
    expect(loggedTrouble(sp, id)).toEqual([])
  }, 40_000)

  test('re-parsed: the old chunks answer searches until the new generation replaces them', async () => {
    embed.delayMs = 0
    const N = 100
    const id = (ids.reparsed = await upload('reparse', N))
    const first = await waitFor(
      async () => {
        const s = await status(id)
        return s.status === 'ready' || s.status === 'failed' ? s : null
      },
      { timeoutMs: 15_000, what: 'the document to be ready' },
    )
    expect(first).toMatchObject({ status: 'ready', chunks_count: N })
    const query = 'reparse valve number 42 opens slowly'
    const old = await search('reparse', query)
    expect(old).toHaveLength(10)
    const oldAll = await search('reparse', query, N)
    for (const h of old) expect(h.document_id).toBe(id)

    embed.delayMs = 2000
    const requestedBefore = embed.of('reparse').length
    const re = await call('POST', `/v1/documents/${id}/reparse`)
    expect(re.status).toBe(202)
    expect(re.body.data).toMatchObject({ id, status: 'parsing', chunks_count: N, indexed_at: first.indexed_at, error: null })
    expect((await call('POST', `/v1/documents/${id}/reparse`)).status).toBe(409)
    await waitFor(async () => embed.of('reparse').length > requestedBefore && (await status(id)).status === 'embedding', { timeoutMs: 15_000, intervalMs: 20, what: 'the new generation to be embedding' })
    // Mid-way: the searchable generation is the old one, whole.
    const during = await search('reparse', query)
    expect(await status(id)).toMatchObject({ status: 'embedding', chunks_count: N, indexed_at: first.indexed_at })
    expect(during.map((h) => h.chunk_id)).toEqual(old.map((h) => h.chunk_id))

    const second = await waitFor(
      async () => {
        const s = await status(id)
        return s.status === 'ready' || s.status === 'failed' ? s : null
      },
      { timeoutMs: 20_000, what: 'the new generation to be ready' },
    )
    expect(second).toMatchObject({ status: 'ready', chunks_count: N })
    expect(second.indexed_at > first.indexed_at).toBe(true)
    const now = await search('reparse', query)
    expect(now).toHaveLength(10)
    // Same texts (the chunking did not change), new chunks: none of the old ids is left. Compared
    // whole: these paragraphs tie, and ties go by chunk id, random within a millisecond, so which of
    // them fill the first ten places differs from one generation to the next.
    const nowAll = await search('reparse', query, N)
    expect(nowAll).toHaveLength(N)
    expect(new Set(nowAll.map((h) => h.content))).toEqual(new Set(oldAll.map((h) => h.content)))
    const oldIds = new Set(old.map((h) => h.chunk_id))
    expect(now.filter((h) => oldIds.has(h.chunk_id))).toEqual([])
    expect(loggedTrouble(sp, id)).toEqual([])
  }, 60_000)

  test('after a clean stop, the store: one chunk per position, one ready event per generation, nothing of the deleted document', async () => {
    expect(ids.crash && ids.deleted && ids.reparsed).toBeTruthy()
    expect(await sp.stop('SIGTERM')).toBe(0)
    const db = await openEmbedded({ dataDir: join(tmp, 'data') })
    try {
      const sql = db.sql
      const dup = await sql`select document_id, generation, position from ${sql.unsafe(ALL_CHUNKS)} c group by 1, 2, 3 having count(*) > 1`
      expect([...dup]).toEqual([])
      const chunks = await sql<{ document_id: string; generation: number; n: number; positions: number; lo: number; hi: number }[]>`
        select document_id, generation, count(*)::int as n, count(distinct position)::int as positions, min(position)::int as lo, max(position)::int as hi
        from ${sql.unsafe(ALL_CHUNKS)} c where knowledge_base_id = ${kbId} group by 1, 2 order by 1, 2`
      expect(new Map(chunks.map((c) => [c.document_id, c]))).toEqual(
        new Map([
          [ids.crash, { document_id: ids.crash, generation: 1, n: 600, positions: 600, lo: 0, hi: 599 }],
          [ids.reparsed, { document_id: ids.reparsed, generation: 2, n: 100, positions: 100, lo: 0, hi: 99 }],
        ]),
      )
      expect(chunks).toHaveLength(2)
      const docs = await sql<{ id: string; status: string; generation: number; live_generation: number; attempts: number; lease_owner: string | null }[]>`
        select id, status, generation, live_generation, attempts, lease_owner from documents where knowledge_base_id = ${kbId} order by created_at`
      expect([...docs]).toEqual([
        // Claimed twice: by the killed process, then after the restart.
        { id: ids.crash, status: 'ready', generation: 1, live_generation: 1, attempts: 2, lease_owner: null },
        { id: ids.reparsed, status: 'ready', generation: 2, live_generation: 2, attempts: 1, lease_owner: null },
      ])
      const events = await sql<{ doc: string; type: string; chunks_count: number }[]>`
        select data->>'document_id' as doc, type, (data->>'chunks_count')::int as chunks_count from events
        where type like 'knowledge.document.%' order by created_at, id`
      expect([...events]).toEqual([
        { doc: ids.crash, type: 'knowledge.document.ready', chunks_count: 600 },
        { doc: ids.reparsed, type: 'knowledge.document.ready', chunks_count: 100 },
        { doc: ids.reparsed, type: 'knowledge.document.ready', chunks_count: 100 },
      ])
    } finally {
      await db.close()
    }
  }, 30_000)
})

const databaseUrl = process.env.DATABASE_URL
const redisUrl = process.env.REDIS_URL

if (!databaseUrl || !redisUrl) {
  describe('server mode: the worker process holding a document is killed', () => {
    test.skip('skipped: DATABASE_URL and REDIS_URL are unset (CI sets both)', () => {})
  })
} else {
  describe('server mode: the worker process holding a document is killed', () => {
    let tmp: string
    let embed: EmbedServer
    let cluster: Cluster

    beforeAll(async () => {
      tmp = mkdtempSync(join(tmpdir(), 'ap-e2e-knowledge-crash-server-'))
      embed = startEmbedServer()
      // An API process that runs no workers: the two worker-only processes are the only claimants.
      cluster = await startCluster({ name: 'kcrash', workers: 2, apiOnly: true, env: { MODELS_FILE: writeModelsFile(tmp, embed) } })
    }, 60_000)
    afterAll(async () => {
      await killAll()
      await cluster?.close()
      await embed?.server.stop(true)
      if (tmp) rmSync(tmp, { recursive: true, force: true })
    })

    test('the other worker takes it over after the lease and embeds only the missing positions; ready once', async () => {
      const { api, db, rootKey } = cluster
      const call = (method: string, path: string, body?: unknown) => apiCall(api, rootKey, method, path, body)
      const ws = await call('POST', '/v1/workspaces', { name: 'Crash knowledge (server)' })
      expect(ws.status).toBe(201)
      const kb = await call('POST', '/v1/knowledge-bases', { workspace_id: ws.body.data.id, name: 'Manuals', embedding_model: 'loop-embed', chunking: CHUNKING })
      expect(kb.status).toBe(201)
      const N = 600
      embed.delayMs = 4000
      embed.quickFirst = true
      const up = await call('POST', `/v1/knowledge-bases/${kb.body.data.id}/documents`, { type: 'text', name: 'server.txt', content: paragraphs('server', N) })
      expect(up.status).toBe(201)
      const id = up.body.document_id as string
      const row = async () => (await db<{ status: string; lease_owner: string | null; attempts: number }[]>`select status, lease_owner, attempts from documents where id = ${id}`)[0]!
      // The first batch answered and written (the sixth request starts only after its insert), the next five in flight.
      await waitFor(async () => embed.of('server').length > EMBED_AHEAD && (await row()).status === 'embedding', { timeoutMs: 15_000, intervalMs: 20, what: 'the sixth batch to be requested' })
      const held = await row()
      // The lease owner is `<pid>:<random>`: one of the two worker processes.
      const holderPid = Number(held.lease_owner?.split(':')[0])
      const [holder, other] = cluster.workers[0]!.proc.pid === holderPid ? cluster.workers : [...cluster.workers].reverse()
      expect(holder!.proc.pid).toBe(holderPid)
      holder!.proc.kill('SIGKILL')
      const othersAnswered = embed.of('server').some((r) => r.answered && positionOf(r.inputs[0]!) !== 0)
      await holder!.exited
      embed.quickFirst = false
      embed.delayMs = 300
      expect(othersAnswered).toBe(false)
      expect(byPosition(embed.of('server')).map((r) => r.inputs.map(positionOf))).toEqual(range(0, EMBED_AHEAD + 1).map((b) => range(b * EMBED_BATCH, (b + 1) * EMBED_BATCH)))

      const owners = new Set<string>()
      const done = await waitFor(
        async () => {
          const r = await row()
          if (r.lease_owner) owners.add(r.lease_owner.split(':')[0]!)
          return r.status === 'ready' || r.status === 'failed' ? r : null
        },
        { timeoutMs: DOCUMENT_LEASE_MS + 25_000, intervalMs: 50, what: 'the document to be ingested by the other worker' },
      )
      expect(done).toEqual({ status: 'ready', lease_owner: null, attempts: 2 })
      expect(owners.has(String(other!.proc.pid))).toBe(true)
      expect(byPosition(embed.of('server').slice(EMBED_AHEAD + 1)).flatMap((r) => r.inputs.map(positionOf))).toEqual(range(EMBED_BATCH, N))

      const [chunks] = await db<{ n: number; positions: number; generations: number }[]>`
        select count(*)::int as n, count(distinct position)::int as positions, count(distinct generation)::int as generations from ${db.unsafe(ALL_CHUNKS)} c where document_id = ${id}`
      expect(chunks).toEqual({ n: N, positions: N, generations: 1 })
      const events = await db<{ type: string; chunks_count: number }[]>`
        select type, (data->>'chunks_count')::int as chunks_count from events where data->>'document_id' = ${id}`
      expect([...events]).toEqual([{ type: 'knowledge.document.ready', chunks_count: N }])
      expect((await call('GET', `/v1/documents/${id}`)).body).toMatchObject({ id, status: 'ready', chunks_count: N })
      expect(loggedTrouble(other!, id)).toEqual([])
      expect(other!.proc.exitCode).toBeNull()
    }, DOCUMENT_LEASE_MS + 60_000)
  })
}
