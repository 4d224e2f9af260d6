import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { keyFor, startHarness, workspaceOf, type Answer, type Harness } from '../helpers/harness'
import { allFiles, count, createKb, expectError, filesOf, fixture, sendForm, upload, uploadForm, uploadText } from '../helpers/knowledge'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Knowledge-base errors over HTTP (docs/knowledge.md, docs/api.md): upload limits and types,
 * malformed fields, search validation, another workspace's bases and documents (404), and roles
 * (403). No workers run: documents stay `parsing`, which these tests never need to change.
 */

const MAX_UPLOAD = 100_000
let h: Harness
let owner: string
let ws: string
let kb: string
let doc: string

beforeAll(async () => {
  h = await startHarness({ MAX_UPLOAD_BYTES: String(MAX_UPLOAD), RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000' })
  owner = await keyFor(h, 'ke-owner')
  ws = await workspaceOf(h, owner, 'Knowledge errors')
  kb = (await createKb(h, owner, { workspace_id: ws, name: 'Errors' })).id
  doc = await uploadText(h, owner, kb, { name: 'kept.txt', content: 'A document that stays.' })
})
afterAll(() => h?.close())

/** A base of its own, so "nothing left behind" looks at nothing else. */
async function emptyBase(name: string): Promise<string> {
  return (await createKb(h, owner, { workspace_id: ws, name })).id
}

async function expectNothingKept(kbId: string) {
  expect(await count(h, 'documents', 'knowledge_base_id', kbId)).toBe(0)
  expect(filesOf(h, kbId)).toEqual([])
}

/** A request that never answers fails here, not at the test's time-out. */
async function answered(res: Promise<Answer>): Promise<Answer> {
  const hung = Bun.sleep(10_000).then(() => null)
  const out = await Promise.race([res, hung])
  if (out === null) throw new Error('the upload got no answer within 10 s (it hangs)')
  return out
}

describe('upload limits: 413 payload_too_large, nothing kept', () => {
  test('a file over MAX_UPLOAD_BYTES whose request is under the Content-Length pre-check (refused while streaming)', async () => {
    const id = await emptyBase('limit stream')
    const res = await answered(uploadForm(h, owner, id, [{ bytes: 'a'.repeat(MAX_UPLOAD + 20_000), name: 'big.txt' }]))
    expectError(res, 413, 'payload_too_large')
    await expectNothingKept(id)
  })

  test('a file over MAX_UPLOAD_BYTES + 64 KiB (refused from its Content-Length)', async () => {
    const id = await emptyBase('limit length')
    const res = await answered(uploadForm(h, owner, id, [{ bytes: 'a'.repeat(MAX_UPLOAD * 3), name: 'big.txt' }]))
    expectError(res, 413, 'payload_too_large')
    await expectNothingKept(id)
  })

  test('a file of exactly MAX_UPLOAD_BYTES is accepted', async () => {
    const id = await emptyBase('limit exact')
    const res = await answered(uploadForm(h, owner, id, [{ bytes: 'a'.repeat(MAX_UPLOAD), name: 'exact.txt' }]))
    expect(res.status).toBe(201)
    expect(res.body.size_bytes).toBe(MAX_UPLOAD)
    expect(filesOf(h, id)).toEqual([res.body.document_id])
  })

  test('a JSON text upload whose content is over MAX_UPLOAD_BYTES (the body under MAX_JSON_BYTES)', async () => {
    const id = await emptyBase('limit text')
    const res = await h.call('POST', `/v1/knowledge-bases/${id}/documents`, { key: owner, body: { type: 'text', name: 'long.txt', content: 'word '.repeat(MAX_UPLOAD / 4) } })
    expectError(res, 413, 'payload_too_large')
    await expectNothingKept(id)
  })
})

describe('upload types: 415 unsupported_media_type, nothing kept', () => {
  test.each([
    ['an unknown extension', 'sheet.xlsx', () => fixture('sample.docx')],
    ['no extension', 'README', () => fixture('sample.md')],
    ['a .pdf whose content is text', 'report.pdf', () => fixture('sample.txt')],
    ['a .docx that is not a ZIP', 'policy.docx', () => fixture('sample.pdf')],
    ['a .txt with NUL bytes', 'notes.txt', async () => new Uint8Array([0x68, 0x69, 0x00, 0x21])],
  ])('%s', async (_, name, bytes) => {
    const id = await emptyBase(`type ${name}`)
    const res = await uploadForm(h, owner, id, [{ bytes: await bytes(), name }])
    expectError(res, 415, 'unsupported_media_type', 'file')
    expect(res.body.error.message).toContain(name)
    await expectNothingKept(id)
  })

  test('multipart/form-data without a boundary', async () => {
    const res = await h.call('POST', `/v1/knowledge-bases/${kb}/documents`, { key: owner, raw: 'file=x', headers: { 'content-type': 'multipart/form-data' } })
    expectError(res, 415, 'unsupported_media_type')
  })

  test('a body neither multipart nor JSON (text/plain) is 400 invalid_json', async () => {
    const res = await h.call('POST', `/v1/knowledge-bases/${kb}/documents`, { key: owner, raw: 'hello', headers: { 'content-type': 'text/plain' } })
    expectError(res, 400, 'invalid_json')
  })

  test('a url-encoded form is neither multipart nor JSON: 400 invalid_json (docs/api.md)', async () => {
    const res = await h.call('POST', `/v1/knowledge-bases/${kb}/documents`, { key: owner, raw: 'name=a.txt', headers: { 'content-type': 'application/x-www-form-urlencoded' } })
    expectError(res, 400, 'invalid_json')
  })
})

describe('upload fields: 400 validation_error naming the field, nothing kept', () => {
  const hello = { bytes: 'hello there', name: 'hello.txt' }
  test.each([
    ['metadata that is not JSON', { metadata: '{not json' }, 'metadata'],
    ['metadata that is a JSON array', { metadata: '[1, 2]' }, 'metadata'],
    ['metadata that is a JSON string', { metadata: '"tag"' }, 'metadata'],
    ['metadata that is a number', { metadata: '42' }, 'metadata'],
    ['a group of 65 characters', { group: 'g'.repeat(65) }, 'group'],
  ])('%s', async (_, fields, param) => {
    const id = await emptyBase(`field ${param}`)
    expectError(await uploadForm(h, owner, id, [hello], fields), 400, 'validation_error', param)
    await expectNothingKept(id)
  })

  test('no file field', async () => {
    const id = await emptyBase('no file')
    expectError(await uploadForm(h, owner, id, [], { metadata: '{"a":1}' }), 400, 'validation_error', 'file')
    await expectNothingKept(id)
  })

  test('the file in another field than `file`', async () => {
    const id = await emptyBase('other field')
    expectError(await uploadForm(h, owner, id, [{ ...hello, field: 'document' }]), 400, 'validation_error', 'document')
    await expectNothingKept(id)
  })

  test('two files', async () => {
    const id = await emptyBase('two files')
    const res = await uploadForm(h, owner, id, [hello, { bytes: 'second file', name: 'second.txt' }])
    expectError(res, 400, 'validation_error')
    await expectNothingKept(id)
  })

  test('a file without a name', async () => {
    const id = await emptyBase('no name')
    const form = new FormData()
    form.append('file', new Blob(['hello']), '')
    expectError(await sendForm(h, owner, `/v1/knowledge-bases/${id}/documents`, form), 400, 'validation_error', 'file')
    await expectNothingKept(id)
  })

  test.each([
    ['type missing', { name: 'a.txt', content: 'x' }, 'type'],
    ['type not text', { type: 'file', name: 'a.txt', content: 'x' }, 'type'],
    ['name missing', { type: 'text', content: 'x' }, 'name'],
    ['empty name', { type: 'text', name: '', content: 'x' }, 'name'],
    ['content not a string', { type: 'text', name: 'a.txt', content: 42 }, 'content'],
    ['metadata an array', { type: 'text', name: 'a.txt', content: 'x', metadata: ['a'] }, 'metadata'],
    ['an unknown field', { type: 'text', name: 'a.txt', content: 'x', colour: 'red' }, 'colour'],
  ])('text upload: %s', async (_, body, param) => {
    const id = await emptyBase(`text ${param}`)
    expectError(await h.call('POST', `/v1/knowledge-bases/${id}/documents`, { key: owner, body }), 400, 'validation_error', param)
    await expectNothingKept(id)
  })
})

describe('search validation: 400 validation_error', () => {
  test.each([
    ['top_k 0', { query: 'x', top_k: 0 }, 'top_k'],
    ['top_k 101', { query: 'x', top_k: 101 }, 'top_k'],
    ['top_k 2.5', { query: 'x', top_k: 2.5 }, 'top_k'],
    ['an empty query', { query: '' }, 'query'],
    ['a query of spaces', { query: '   ' }, 'query'],
    ['no query', { top_k: 3 }, 'query'],
    ['a filter with an empty array', { query: 'x', filters: { topic: [] } }, 'filters.topic'],
    ['a filter with a nested object', { query: 'x', filters: { topic: { in: ['a'] } } }, 'filters.topic'],
    ['a filter array holding an object', { query: 'x', filters: { topic: [{ a: 1 }] } }, 'filters.topic'],
    ['a null filter value', { query: 'x', filters: { topic: null } }, 'filters.topic'],
    ['filters an array', { query: 'x', filters: ['topic'] }, 'filters'],
    ['rerank not a boolean', { query: 'x', rerank: 'yes' }, 'rerank'],
    ['an unknown field', { query: 'x', k: 3 }, 'k'],
  ])('%s', async (_, body, param) => {
    expectError(await h.call('POST', `/v1/knowledge-bases/${kb}/search`, { key: owner, body }), 400, 'validation_error', param)
  })

  test('top_k 1 and 100 are accepted', async () => {
    for (const top_k of [1, 100]) {
      const res = await h.call('POST', `/v1/knowledge-bases/${kb}/search`, { key: owner, body: { query: 'document', top_k } })
      expect(res.status).toBe(200)
      expect(res.body.results).toEqual([])
    }
  })
})

describe("another workspace's base and documents answer 404, and nothing changes", () => {
  let outsider: string
  beforeAll(async () => {
    outsider = await keyFor(h, 'ke-outsider')
    await workspaceOf(h, outsider, 'Elsewhere')
  })

  const calls: [string, () => Promise<Answer>][] = [
    ['GET base', () => h.call('GET', `/v1/knowledge-bases/${kb}`, { key: outsider })],
    ['PATCH base', () => h.call('PATCH', `/v1/knowledge-bases/${kb}`, { key: outsider, body: { name: 'taken' } })],
    ['DELETE base', () => h.call('DELETE', `/v1/knowledge-bases/${kb}`, { key: outsider })],
    ['list documents', () => h.call('GET', `/v1/knowledge-bases/${kb}/documents`, { key: outsider })],
    ['upload a file', () => uploadForm(h, outsider, kb, [{ bytes: 'intrusion', name: 'x.txt' }])],
    ['upload text', () => h.call('POST', `/v1/knowledge-bases/${kb}/documents`, { key: outsider, body: { type: 'text', name: 'x.txt', content: 'intrusion' } })],
    ['search', () => h.call('POST', `/v1/knowledge-bases/${kb}/search`, { key: outsider, body: { query: 'document' } })],
    ['document status', () => h.call('GET', `/v1/documents/${doc}`, { key: outsider })],
    ['delete document', () => h.call('DELETE', `/v1/documents/${doc}`, { key: outsider })],
    ['reparse document', () => h.call('POST', `/v1/documents/${doc}/reparse`, { key: outsider })],
  ]
  test.each(calls)('%s', async (_, call) => {
    const before = await h.call('GET', `/v1/knowledge-bases/${kb}`, { key: owner })
    const docsBefore = await count(h, 'documents', 'knowledge_base_id', kb)
    const res = await call()
    expectError(res, 404, 'not_found')
    expect(res.body.error.message).not.toContain('ke-owner')
    const after = await h.call('GET', `/v1/knowledge-bases/${kb}`, { key: owner })
    expect(after.body.data).toEqual(before.body.data)
    expect(await count(h, 'documents', 'knowledge_base_id', kb)).toBe(docsBefore)
    expect((await h.call('GET', `/v1/documents/${doc}`, { key: owner })).body.status).toBe('parsing')
  })

  test('unknown ids answer the same 404', async () => {
    expectError(await h.call('GET', '/v1/knowledge-bases/kb_01jbz3k9x8q7r6s5t4v3w2y1z0', { key: owner }), 404, 'not_found')
    expectError(await h.call('GET', '/v1/documents/doc_01jbz3k9x8q7r6s5t4v3w2y1z0', { key: owner }), 404, 'not_found')
  })
})

describe('roles (docs/api.md, "Keys, roles and workspaces"): readonly and user members read and search, only developers change', () => {
  const keys: Record<string, string> = {}
  beforeAll(async () => {
    for (const role of ['readonly', 'user', 'developer']) {
      keys[role] = await keyFor(h, `ke-${role}`)
      const res = await h.call('POST', `/v1/workspaces/${ws}/members`, { key: owner, body: { user_id: `ke-${role}`, role } })
      expect(res.status).toBe(201)
    }
  })

  const reads: [string, (key: string) => Promise<Answer>, number][] = [
    ['list bases', (key) => h.call('GET', `/v1/knowledge-bases?workspace_id=${ws}`, { key }), 200],
    ['get base', (key) => h.call('GET', `/v1/knowledge-bases/${kb}`, { key }), 200],
    ['list documents', (key) => h.call('GET', `/v1/knowledge-bases/${kb}/documents`, { key }), 200],
    ['document status', (key) => h.call('GET', `/v1/documents/${doc}`, { key }), 200],
    ['search', (key) => h.call('POST', `/v1/knowledge-bases/${kb}/search`, { key, body: { query: 'document' } }), 200],
  ]
  test.each(reads)('readonly may %s', async (_, call, status) => {
    expect((await call(keys.readonly!)).status).toBe(status)
  })

  const writes: [string, (key: string) => Promise<Answer>][] = [
    ['create a base', (key) => h.call('POST', '/v1/knowledge-bases', { key, body: { workspace_id: ws, name: 'not allowed' } })],
    ['patch a base', (key) => h.call('PATCH', `/v1/knowledge-bases/${kb}`, { key, body: { name: 'not allowed' } })],
    ['delete a base', (key) => h.call('DELETE', `/v1/knowledge-bases/${kb}`, { key })],
    ['upload a file', (key) => uploadForm(h, key, kb, [{ bytes: 'not allowed', name: 'x.txt' }])],
    ['upload text', (key) => h.call('POST', `/v1/knowledge-bases/${kb}/documents`, { key, body: { type: 'text', name: 'x.txt', content: 'not allowed' } })],
    ['delete a document', (key) => h.call('DELETE', `/v1/documents/${doc}`, { key })],
    ['reparse a document', (key) => h.call('POST', `/v1/documents/${doc}/reparse`, { key })],
  ]
  test.each(writes)('readonly and user may not %s: 403 forbidden', async (_, call) => {
    const docs = await count(h, 'documents', 'knowledge_base_id', kb)
    const before = (await h.call('GET', `/v1/knowledge-bases/${kb}`, { key: owner })).body.data
    for (const role of ['readonly', 'user']) expectError(await call(keys[role]!), 403, 'forbidden')
    expect(await count(h, 'documents', 'knowledge_base_id', kb)).toBe(docs)
    expect((await h.call('GET', `/v1/knowledge-bases/${kb}`, { key: owner })).body.data).toEqual(before)
    expect((await h.call('GET', `/v1/documents/${doc}`, { key: owner })).status).toBe(200)
  })

  test('a developer creates a base, uploads to it and deletes it', async () => {
    const dev = keys.developer!
    const base = await createKb(h, dev, { workspace_id: ws, name: 'by a developer' })
    expect(base.created_by).toBe('ke-developer')
    const id = await upload(h, dev, base.id, { bytes: 'by a developer', name: 'dev.txt' })
    expect((await h.call('DELETE', `/v1/documents/${id}`, { key: dev })).status).toBe(200)
    expect((await h.call('DELETE', `/v1/knowledge-bases/${base.id}`, { key: dev })).status).toBe(200)
  })
})

test('no upload left a partial file behind', () => {
  expect(allFiles(h).filter((f) => f.includes('.partial'))).toEqual([])
})
