import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { embedText } from '../../src/domain/models/local/embed'
import { countTokens } from '../../src/lib/tokens'
import { startWorkers, type Workers } from '../../src/workers'
import { keyFor, startHarness, workspaceOf, type Harness } from '../helpers/harness'
import { chunksOf, createKb, expectIso, filesOf, fixture, listed, outboxOf, settled, statusOf, upload, uploadForm, uploadText } from '../helpers/knowledge'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Documents end to end with the real workers (docs/knowledge.md "Documents"): every fixture of
 * tests/fixtures/documents uploaded by multipart to `ready` or `failed` with its error code, the
 * exact answers of the upload and the status, the chunks stored (metadata, positions, heading
 * paths), the outbox events, the `group` and `status` filters, and JSON text uploads.
 */

let h: Harness
let workers: Workers
let owner: string
let ws: string
let kb: string

beforeAll(async () => {
  h = await startHarness({ RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000' })
  workers = await startWorkers(h.deps)
  owner = await keyFor(h, 'kd-owner')
  ws = await workspaceOf(h, owner, 'Documents')
  kb = (await createKb(h, owner, { workspace_id: ws, name: 'Fixtures' })).id
})

afterAll(async () => {
  await workers?.stop()
  await h?.close()
})

const DOC_ID = /^doc_[0-9a-z]{26}$/

/** Uploads a fixture, checks the 201's exact shape and the first status answer; answers the id. */
async function uploadFixture(kbId: string, name: string, fields: Record<string, string | Record<string, unknown>> = {}) {
  const bytes = await fixture(name)
  const res = await uploadForm(h, owner, kbId, [{ bytes, name }], fields)
  expect(res.status).toBe(201)
  expect(res.body).toEqual({ request_id: res.headers.get('x-request-id'), document_id: res.body.document_id, name, size_bytes: bytes.byteLength, status: 'parsing', created_at: res.body.created_at })
  expect(res.body.document_id).toMatch(DOC_ID)
  expectIso(res.body.created_at)
  return { id: res.body.document_id as string, created_at: res.body.created_at as string, size: bytes.byteLength }
}

describe('every fixture uploaded by multipart', () => {
  const ready: [string, string, (string[])[]][] = [
    ['sample.pdf', 'pdf', [[]]],
    ['sample.docx', 'docx', [['Travel Policy'], ['Travel Policy', 'Booking'], ['Travel Policy', 'Expenses']]],
    ['sample.html', 'html', [['Release Notes'], ['Release Notes', 'Indexing'], ['Release Notes', 'Indexing', 'Limits']]],
    ['sample.md', 'md', [['Knowledge Bases'], ['Knowledge Bases', 'Uploading'], ['Knowledge Bases', 'Chunking'], ['Knowledge Bases', 'Chunking', 'Overlap']]],
    ['sample.csv', 'csv', [[], [], []]],
    ['sample.json', 'json', [[]]],
    ['sample.txt', 'txt', [[]]],
  ]

  test.each(ready)('%s (%s) is ready: its chunks, its status, its list entry, its event', async (name, type, headingPaths) => {
    const metadata = { fixture: name, lang: 'en', year: 2024, tags: ['a', 'b'] }
    const up = await uploadFixture(kb, name, { metadata, group: 'fixtures' })
    const first = await statusOf(h, owner, up.id)
    expect(Object.keys(first).sort()).toEqual(['chunks_count', 'id', 'indexed_at', 'request_id', 'status'])

    const s = await settled(h, owner, up.id)
    expect(s).toEqual({ request_id: s.request_id, id: up.id, status: 'ready', chunks_count: headingPaths.length, indexed_at: s.indexed_at })
    expectIso(s.indexed_at)

    const chunks = await chunksOf(h, up.id)
    expect(chunks.map((c) => c.position)).toEqual(headingPaths.map((_, i) => i))
    expect(chunks.map((c) => c.heading_path)).toEqual(headingPaths)
    for (const c of chunks) {
      expect(c).toMatchObject({ knowledge_base_id: kb, document_id: up.id, generation: 1, metadata, dims: 384 })
      expect(c.id).toMatch(/^chk_/)
      expect(c.content.trim().length).toBeGreaterThan(0)
      expect(c.tokens).toBeGreaterThan(0)
      expect(c.tokens).toBeLessThanOrEqual(256)
    }
    // A heading starts its chunk; CSV chunks repeat the header.
    chunks.forEach((c, i) => {
      if (headingPaths[i]!.length > 0) expect(c.content.startsWith(`${headingPaths[i]!.at(-1)}\n\n`)).toBe(true)
      if (type === 'csv') expect(c.content.startsWith('id,name,city,plan,notes\n')).toBe(true)
    })

    expect(await listed(h, owner, kb, up.id)).toEqual({
      id: up.id,
      knowledge_base_id: kb,
      name,
      type,
      group: 'fixtures',
      size_bytes: up.size,
      metadata,
      status: 'ready',
      error: null,
      chunks_count: headingPaths.length,
      indexed_at: s.indexed_at,
      created_at: up.created_at,
      updated_at: s.indexed_at,
    })
    expect(await outboxOf(h, up.id)).toEqual([
      { type: 'knowledge.document.ready', workspace_id: ws, data: { knowledge_base_id: kb, document_id: up.id, name, chunks_count: headingPaths.length, indexed_at: s.indexed_at } },
    ])
    expect(filesOf(h, kb)).toContain(up.id)
  })

  test('the chunks hold the fixtures\' text', async () => {
    const docx = await uploadFixture(kb, 'sample.docx')
    await settled(h, owner, docx.id)
    expect((await chunksOf(h, docx.id)).map((c) => c.content)).toEqual([
      'Travel Policy\n\nThis policy applies to every employee who travels for work.',
      'Booking\n\nBook flights at least 14 days in advance.\n\nEconomy class for flights under 6 hours\n\nBusiness class for longer flights',
      'Expenses\n\nSubmit receipts within 30 days of your return.\n\nItem | Limit\n\nHotel | 200 EUR per night',
    ])
  })

  const failing: [string, string, RegExp][] = [
    ['corrupt.pdf', 'parse_error', /PDF could not be read/],
    ['empty.txt', 'empty_document', /no text/],
    ['no-text.pdf', 'empty_document', /no text/],
    ['encrypted.pdf', 'parse_error', /protected by a password/],
  ]
  test.each(failing)('%s fails with %s', async (name, code, message) => {
    const up = await uploadFixture(kb, name, { metadata: { fixture: name } })
    const s = await settled(h, owner, up.id)
    expect(s).toEqual({ request_id: s.request_id, id: up.id, status: 'failed', chunks_count: 0, indexed_at: null })
    const entry = await listed(h, owner, kb, up.id)
    expect(entry).toMatchObject({ status: 'failed', chunks_count: 0, indexed_at: null, group: null, metadata: { fixture: name } })
    expect(Object.keys(entry.error).sort()).toEqual(['code', 'message'])
    expect(entry.error.code).toBe(code)
    expect(entry.error.message).toMatch(message)
    expect(await chunksOf(h, up.id)).toEqual([])
    expect(await outboxOf(h, up.id)).toEqual([
      { type: 'knowledge.document.failed', workspace_id: ws, data: { knowledge_base_id: kb, document_id: up.id, name, error: entry.error } },
    ])
    // The original is kept for a re-parse.
    expect(filesOf(h, kb)).toContain(up.id)
  })
})

describe('the documents list', () => {
  test('group is stored and filters; status and status_in filter', async () => {
    const base = (await createKb(h, owner, { workspace_id: ws, name: 'Filters' })).id
    const a1 = await upload(h, owner, base, { bytes: 'Alpha one.', name: 'a1.txt' }, { group: 'alpha' })
    const a2 = await uploadText(h, owner, base, { name: 'a2.txt', content: 'Alpha two.', group: 'alpha' })
    const b1 = await upload(h, owner, base, { bytes: 'Beta one.', name: 'b1.txt' }, { group: 'team/beta 2' })
    const none = await upload(h, owner, base, { bytes: '', name: 'empty.txt' })
    for (const id of [a1, a2, b1, none]) await settled(h, owner, id)

    const ids = async (query: string) => {
      const res = await h.call('GET', `/v1/knowledge-bases/${base}/documents?${query}`, { key: owner })
      expect(res.status).toBe(200)
      return res.body.data.map((d: any) => d.id).sort()
    }
    expect(await ids('group=alpha')).toEqual([a1, a2].sort())
    expect(await ids(`group=${encodeURIComponent('team/beta 2')}`)).toEqual([b1])
    expect(await ids('group=gamma')).toEqual([])
    expect(await ids('status=ready')).toEqual([a1, a2, b1].sort())
    expect(await ids('status=failed')).toEqual([none])
    expect(await ids('status_in=ready,failed')).toEqual([a1, a2, b1, none].sort())
    expect(await ids('status=parsing')).toEqual([])
    expect(await ids('status=failed&group=alpha')).toEqual([])
    expect((await listed(h, owner, base, none)).group).toBeNull()
    expect((await listed(h, owner, base, a2)).group).toBe('alpha')

    const page = await h.call('GET', `/v1/knowledge-bases/${base}/documents?limit=3`, { key: owner })
    expect(page.body.data.map((d: any) => d.id)).toEqual([none, b1, a2])
    expect(page.body.has_more).toBe(true)
    const rest = await h.call('GET', `/v1/knowledge-bases/${base}/documents?limit=3&cursor=${page.body.next_cursor}`, { key: owner })
    expect(rest.body).toMatchObject({ data: [{ id: a1 }], has_more: false, next_cursor: null })
  })

  test('an unknown status is 400', async () => {
    const res = await h.call('GET', `/v1/knowledge-bases/${kb}/documents?status=done`, { key: owner })
    expect(res.status).toBe(400)
    expect(res.body.error.code).toBe('invalid_filter')
  })
})

describe('JSON text uploads', () => {
  test('201 with the upload\'s exact shape; size_bytes counts UTF-8 bytes; no metadata is {}', async () => {
    const content = 'Café prices rose in the café district.'
    const res = await h.call('POST', `/v1/knowledge-bases/${kb}/documents`, { key: owner, body: { type: 'text', name: 'café.txt', content } })
    expect(res.status).toBe(201)
    expect(res.body).toEqual({ request_id: res.headers.get('x-request-id'), document_id: res.body.document_id, name: 'café.txt', size_bytes: Buffer.byteLength(content), status: 'parsing', created_at: res.body.created_at })
    expect((await settled(h, owner, res.body.document_id)).status).toBe('ready')
    expect(await listed(h, owner, kb, res.body.document_id)).toMatchObject({ type: 'txt', metadata: {}, group: null, size_bytes: Buffer.byteLength(content) })
  })

  test.each([
    ['guide.md', 'md', [['Install'], ['Install', 'On Linux']]],
    ['GUIDE.Markdown', 'md', [['Install'], ['Install', 'On Linux']]],
    ['guide.txt', 'txt', [[]]],
    ['guide', 'txt', [[]]],
    ['guide.html', 'txt', [[]]],
  ])('%s is parsed as %s', async (name, type, paths) => {
    const content = '# Install\n\nRun the installer.\n\n## On Linux\n\nUse the package manager.'
    const id = await uploadText(h, owner, kb, { name, content, metadata: { source: 'text' } })
    expect((await settled(h, owner, id)).status).toBe('ready')
    expect((await listed(h, owner, kb, id)).type).toBe(type)
    const chunks = await chunksOf(h, id)
    expect(chunks.map((c) => c.heading_path)).toEqual(paths)
    expect(chunks.every((c) => c.metadata.source === 'text')).toBe(true)
  })

  test('a long text on a small chunk_size: many chunks, positions 0..n-1, each within chunk_size', async () => {
    const base = (await createKb(h, owner, { workspace_id: ws, name: 'Small chunks', chunking: { chunk_size: 32, chunk_overlap: 8 } })).id
    const paragraphs = Array.from({ length: 12 }, (_, i) => `Paragraph ${i} says that the number ${i} follows ${i - 1} and comes before ${i + 1} in order.`)
    const id = await uploadText(h, owner, base, { name: 'long.md', content: `# Numbers\n\n${paragraphs.join('\n\n')}`, metadata: { kind: 'long' } })
    const s = await settled(h, owner, id)
    expect(s.status).toBe('ready')
    const chunks = await chunksOf(h, id)
    expect(chunks.length).toBe(s.chunks_count)
    expect(chunks.length).toBeGreaterThanOrEqual(12)
    expect(chunks.map((c) => c.position)).toEqual(chunks.map((_, i) => i))
    for (const c of chunks) {
      expect(c.tokens).toBeLessThanOrEqual(32)
      expect(c.heading_path).toEqual(['Numbers'])
      expect(c.metadata).toEqual({ kind: 'long' })
    }
    // Every paragraph's text made it into some chunk.
    const all = chunks.map((c) => c.content).join('\n')
    for (let i = 0; i < 12; i++) expect(all).toContain(`Paragraph ${i} says`)
  })

  test('local-embed: the vectors the document process computes are the provider\'s, charged for the chunks\' tokens', async () => {
    const base = (await createKb(h, owner, { workspace_id: ws, name: 'Embedded here', chunking: { chunk_size: 40, chunk_overlap: 8 } })).id
    const content = `# Returns\n\n${Array.from({ length: 9 }, (_, i) => `Item ${i}: refunds reach the card within ${i + 3} days; the warehouse confirms receipt first.`).join('\n\n')}`
    const id = await uploadText(h, owner, base, { name: 'returns.md', content })
    expect((await settled(h, owner, id)).status).toBe('ready')
    const sql = h.deps.db.sql
    const rows = await sql<{ content: string; tokens: number; embedding: string }[]>`
      select content, tokens, embedding::text as embedding from chunks where document_id = ${id}
      union all select content, tokens, embedding::text from chunks_unindexed where document_id = ${id} order by 1`
    expect(rows.length).toBeGreaterThan(2)
    for (const r of rows) {
      expect(r.tokens).toBe(countTokens(r.content))
      const stored = r.embedding.slice(1, -1).split(',').map((v) => Math.fround(Number(v)))
      expect(stored).toEqual(embedText(r.content).map((v) => Math.fround(v)))
    }
    // Charges are written behind the call (docs/models.md, "Credits and budgets"): the ones this process holds first.
    await h.deps.models.charges.flush()
    const [charged] = await sql<{ tokens: number; calls: number }[]>`
      select coalesce(sum(tokens_in), 0)::int as tokens, count(*)::int as calls from credit_ledger where request_id = ${id} and model = 'local-embed' and kind = 'embedding'`
    expect(charged).toEqual({ tokens: rows.reduce((n, r) => n + r.tokens, 0), calls: 1 })
  })
})
