import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import * as store from '../../src/store/knowledge'
import { keyFor, startHarness, workspaceOf, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Server mode's binary COPY of chunks (store.copyChunks, docs/knowledge.md "Writing chunks") against
 * the insert statement it stands in for: the same stored rows, the same guard, and the rows COPY
 * could not send (a position written already, a value PostgreSQL refuses) written or refused by the
 * insert statement as before. The embedded database has no COPY path: there the test checks nothing.
 */

let h: Harness
let kb: string
let doc: string
const OWNER = 'test-copy-owner'
const DIMS = 384

beforeAll(async () => {
  h = await startHarness()
  const key = await keyFor(h, 'u_copy')
  const ws = await workspaceOf(h, key)
  const res = await h.call('POST', '/v1/knowledge-bases', { key, body: { workspace_id: ws, name: 'copy' } })
  expect(res.status).toBe(201)
  kb = res.body.data.id
  // A document row being embedded by OWNER (no worker claims it: its lease runs for an hour).
  const up = await h.call('POST', `/v1/knowledge-bases/${kb}/documents`, { key, body: { type: 'text', name: 'a.md', content: 'one line' } })
  expect(up.status).toBe(201)
  doc = up.body.document_id ?? up.body.data?.id
  await h.deps.db.sql`update documents set status = 'embedding', generation = 7, lease_owner = ${OWNER}, lease_until = now() + interval '1 hour', metadata = ${h.deps.db.sql.json({ lang: 'fr', n: 1 })} where id = ${doc}`
})

afterAll(async () => {
  await h?.close()
})

const vector = (seed: number) => Float32Array.from({ length: DIMS }, (_, i) => Math.sin(seed * 31 + i) / 7)
const chunk = (position: number, extra: Partial<store.ChunkInsert> = {}): store.ChunkInsert => ({
  position,
  content: `chunk ${position}: "quotes", back\\slash, tab\there, é ü 日本, 🙂`,
  heading_path: position % 2 ? [] : ['Top "one"', 'back\\slash', 'a,b {c}'],
  tokens: 10 + position,
  embedding: vector(position),
  ...extra,
})
const target = (generation: number, owner = OWNER) => ({ id: doc, knowledge_base_id: kb, generation, metadata: { lang: 'fr', n: 1 }, owner })
const rowsOf = (generation: number) =>
  h.deps.db.sql<Record<string, unknown>[]>`
    select position, content, heading_path, tokens, metadata, dims, embedding::text as embedding, tsv::text as tsv
    from chunks_unindexed where document_id = ${doc} and generation = ${generation} order by position`

describe('binary COPY of chunks (server mode)', () => {
  test('stores the rows the insert statement stores', async () => {
    if (h.deps.db.kind !== 'postgres') return
    const chunks = Array.from({ length: 6 }, (_, i) => chunk(i))
    expect(await store.copyChunks(h.deps.db.sql, target(7), DIMS, chunks)).toBe(6)
    // The insert statement's rows, for comparison, in another generation of the same document.
    await h.deps.db.sql`update documents set generation = 8 where id = ${doc}`
    expect(await store.insertChunks(h.deps.db.sql, target(8), DIMS, chunks.map((c) => ({ ...c, embedding: Array.from(c.embedding as Float32Array) })))).toBe(6)
    await h.deps.db.sql`update documents set generation = 7 where id = ${doc}`
    const copied = await rowsOf(7)
    expect(copied).toHaveLength(6)
    expect(copied).toEqual(await rowsOf(8))
    expect(copied[0]!.heading_path).toEqual(['Top "one"', 'back\\slash', 'a,b {c}'])
    expect(copied[1]!.heading_path).toEqual([])
  })

  test('a position written already: the batch goes through the insert statement, which skips it', async () => {
    if (h.deps.db.kind !== 'postgres') return
    const chunks = [chunk(5), chunk(6)]
    expect(await store.copyChunks(h.deps.db.sql, target(7), DIMS, chunks)).toBe(1)
    expect((await rowsOf(7)).map((r) => r.position)).toEqual([0, 1, 2, 3, 4, 5, 6])
  })

  test('the guard: another owner or generation writes nothing and answers null', async () => {
    if (h.deps.db.kind !== 'postgres') return
    expect(await store.copyChunks(h.deps.db.sql, target(7, 'someone else'), DIMS, [chunk(20)])).toBeNull()
    expect(await store.copyChunks(h.deps.db.sql, target(6), DIMS, [chunk(20)])).toBeNull()
    expect((await rowsOf(7)).map((r) => r.position)).not.toContain(20)
  })

  test('values PostgreSQL refuses are refused as by the insert statement, and the pool goes on', async () => {
    if (h.deps.db.kind !== 'postgres') return
    const bad = vector(30)
    bad[3] = Number.POSITIVE_INFINITY
    await expect(store.copyChunks(h.deps.db.sql, target(7), DIMS, [chunk(30, { embedding: bad })])).rejects.toThrow()
    await expect(store.copyChunks(h.deps.db.sql, target(7), DIMS, [chunk(31, { content: 'nul \0 inside' })])).rejects.toThrow()
    expect(await store.copyChunks(h.deps.db.sql, target(7), DIMS, [chunk(32)])).toBe(1)
    expect((await rowsOf(7)).map((r) => r.position)).toEqual([0, 1, 2, 3, 4, 5, 6, 32])
  })
})
