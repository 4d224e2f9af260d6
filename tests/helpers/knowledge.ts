import { expect } from 'bun:test'
import { existsSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import { waitFor, type Answer, type Harness } from './harness'

/**
 * Knowledge-base test helpers (tests/integration/knowledge-*.test.ts, tests/http/knowledge.*.test.ts):
 * multipart uploads through `app.handle`, waiting for a document to settle, and looks at what the
 * database and DATA_DIR/files hold behind the API.
 */

export const FIXTURES = join(import.meta.dir, '../fixtures/documents')
export const fixture = async (name: string) => new Uint8Array(await Bun.file(join(FIXTURES, name)).arrayBuffer())

const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/
export const expectIso = (v: unknown) => expect(v).toMatch(ISO)

/** Answers like h.call's, for a Request built by hand (a multipart body). */
export async function send(h: Harness, req: Request): Promise<Answer> {
  const res = await h.app.handle(req)
  const text = await res.text()
  let body: unknown = text
  try {
    body = JSON.parse(text)
  } catch {}
  return { status: res.status, headers: res.headers, body: body as any, text }
}

export interface FilePart {
  bytes: Uint8Array | string
  name: string
  field?: string
}

/** A multipart upload: `files` (default field `file`), and text fields as given (metadata as a string, or an object serialized). */
export function uploadForm(h: Harness, key: string, kbId: string, files: FilePart[], fields: Record<string, string | Record<string, unknown>> = {}): Promise<Answer> {
  const form = new FormData()
  for (const f of files) form.append(f.field ?? 'file', new Blob([f.bytes]), f.name)
  for (const [name, value] of Object.entries(fields)) form.append(name, typeof value === 'string' ? value : JSON.stringify(value))
  return sendForm(h, key, `/v1/knowledge-bases/${kbId}/documents`, form)
}

/** A form sent as curl and browsers do: serialized, with its Content-Length (a bare FormData body has none). */
export async function sendForm(h: Harness, key: string, path: string, form: FormData, headers: Record<string, string> = {}): Promise<Answer> {
  const encoded = new Response(form)
  // Read before the body: once the body is consumed, Bun's Response forgets the boundary it chose.
  const contentType = encoded.headers.get('content-type')!
  const body = new Uint8Array(await encoded.arrayBuffer())
  return send(h, new Request(h.base + path, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': contentType, 'content-length': String(body.byteLength), ...headers }, body }))
}

/** One file uploaded; expects the 201 and answers the document id. */
export async function upload(h: Harness, key: string, kbId: string, file: FilePart, fields: Record<string, string | Record<string, unknown>> = {}): Promise<string> {
  const res = await uploadForm(h, key, kbId, [file], fields)
  if (res.status !== 201) throw new Error(`upload of ${file.name} answered ${res.status} ${res.text}`)
  return res.body.document_id
}

/** A JSON text upload; expects the 201 and answers the document id. */
export async function uploadText(h: Harness, key: string, kbId: string, body: { name: string; content: string; metadata?: Record<string, unknown>; group?: string }): Promise<string> {
  const res = await h.call('POST', `/v1/knowledge-bases/${kbId}/documents`, { key, body: { type: 'text', ...body } })
  if (res.status !== 201) throw new Error(`text upload of ${body.name} answered ${res.status} ${res.text}`)
  return res.body.document_id
}

/** Creates a knowledge base; answers its representation. */
export async function createKb(h: Harness, key: string, body: Record<string, unknown>): Promise<any> {
  const res = await h.call('POST', '/v1/knowledge-bases', { key, body })
  if (res.status !== 201) throw new Error(`could not create a knowledge base: ${res.status} ${res.text}`)
  return res.body.data
}

/** GET /v1/documents/{id}'s body. */
export async function statusOf(h: Harness, key: string, id: string): Promise<any> {
  const res = await h.call('GET', `/v1/documents/${id}`, { key })
  expect(res.status).toBe(200)
  return res.body
}

/** The document's status answer once it is ready or failed (workers must run). */
export function settled(h: Harness, key: string, id: string, timeoutMs = 20_000): Promise<any> {
  return waitFor(
    async () => {
      const s = await statusOf(h, key, id)
      return s.status === 'ready' || s.status === 'failed' ? s : null
    },
    { timeoutMs, what: `document ${id} to be ready or failed` },
  )
}

/** The document as the documents list shows it (name, type, group, metadata, error...). */
export async function listed(h: Harness, key: string, kbId: string, id: string): Promise<any> {
  const res = await h.call('GET', `/v1/knowledge-bases/${kbId}/documents?limit=100`, { key })
  expect(res.status).toBe(200)
  return res.body.data.find((d: any) => d.id === id) ?? null
}

export interface ChunkRow {
  id: string
  document_id: string
  knowledge_base_id: string
  generation: number
  position: number
  content: string
  heading_path: string[]
  tokens: number
  metadata: Record<string, unknown>
  dims: number
}

/** Both parts of the chunk store: indexed (`chunks`) and not yet (`chunks_unindexed`), as one relation. */
export const ALL_CHUNKS = `(select id, document_id, knowledge_base_id, generation, position, content, heading_path, tokens, metadata, dims from chunks
  union all select id, document_id, knowledge_base_id, generation, position, content, heading_path, tokens, metadata, dims from chunks_unindexed)`

/** Every chunk row of a document (any generation, indexed or not), by generation then position. */
export function chunksOf(h: Harness, documentId: string): Promise<ChunkRow[]> {
  return h.deps.db.sql<ChunkRow[]>`
    select id, document_id, knowledge_base_id, generation, position, content, heading_path, tokens, metadata, dims
    from ${h.deps.db.sql.unsafe(ALL_CHUNKS)} c where document_id = ${documentId} order by generation, position`
}

export async function count(h: Harness, table: 'documents' | 'chunks', column: 'knowledge_base_id' | 'document_id' | 'id', value: string): Promise<number> {
  const sql = h.deps.db.sql
  const [row] = await sql<{ n: number }[]>`select count(*)::int as n from ${table === 'chunks' ? sql.unsafe(ALL_CHUNKS) : sql(table)} t where ${sql(column)} = ${value}`
  return row!.n
}

/** The outbox rows (`events`) about a document, oldest first. */
export function outboxOf(h: Harness, documentId: string): Promise<{ type: string; data: any; workspace_id: string }[]> {
  return h.deps.db.sql<{ type: string; data: any; workspace_id: string }[]>`
    select type, data, workspace_id from events where data->>'document_id' = ${documentId} order by created_at, id`
}

/** The originals kept for a base: DATA_DIR/files/<kb>/ (empty when the directory is gone). */
export function filesOf(h: Harness, kbId: string): string[] {
  const dir = join(h.deps.config.dataDir, 'files', kbId)
  return existsSync(dir) ? readdirSync(dir).sort() : []
}

/** Every file under DATA_DIR/files, partial writes included, as `<kb>/<name>`. */
export function allFiles(h: Harness): string[] {
  const root = join(h.deps.config.dataDir, 'files')
  if (!existsSync(root)) return []
  return readdirSync(root).flatMap((kb) => readdirSync(join(root, kb)).map((f) => `${kb}/${f}`)).sort()
}

/** docs/api.md, "Errors": `{ request_id, error: { code, message, param?, details? } }`, nothing else. */
export function expectError(res: Answer, status: number, code: string, param?: string) {
  expect({ status: res.status, code: res.body?.error?.code }).toEqual({ status, code })
  expect(res.headers.get('content-type')).toContain('application/json')
  expect(Object.keys(res.body).sort()).toEqual(['error', 'request_id'])
  expect(res.body.request_id).toBe(res.headers.get('x-request-id')!)
  expect(typeof res.body.error.message).toBe('string')
  expect(res.body.error.message.length).toBeGreaterThan(0)
  for (const k of Object.keys(res.body.error)) expect(['code', 'message', 'param', 'details']).toContain(k)
  if (param !== undefined) expect(res.body.error.param).toBe(param)
  expect(res.text).not.toMatch(/\bat .*\.ts:\d+|\/src\/|select |insert into|stack/i)
}
