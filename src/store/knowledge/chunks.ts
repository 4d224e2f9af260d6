import { newId } from '../../lib/ids'
import type { Pool, Sql } from '../db'
import { jsonb } from '../db'
import { vectorText } from '../vector-text'

/** Chunks: written by the lease holder of their document's generation. */
export interface ChunkInsert {
  position: number
  content: string
  heading_path: string[]
  tokens: number
  /** The vector (its float4 values, or numbers), or already its pgvector text (vector-text.ts). */
  embedding: ArrayLike<number> | string
}


/**
 * Positions of a generation already written (a resumed ingestion embeds only the others). A
 * generation being written is all in the unindexed part: only the live one is ever moved out.
 */
export async function writtenPositions(sql: Sql, documentId: string, generation: number): Promise<Set<number>> {
  const rows = await sql<{ position: number }[]>`select position from chunks_unindexed where document_id = ${documentId} and generation = ${generation}`
  return new Set(rows.map((r) => r.position))
}

/**
 * Writes chunks of a document's generation into the unindexed part (docs/knowledge.md, "Indexing":
 * no vector index to maintain, so writing costs what the rows do), only while that document is still being built at that
 * generation by this worker (a delete or a take-over writes nothing); a position already written
 * is left as it is. Answers how many rows were inserted, or null when the guard failed.
 */
export async function insertChunks(
  sql: Sql,
  doc: { id: string; knowledge_base_id: string; generation: number; metadata: Record<string, unknown>; owner: string },
  dims: number,
  chunks: ChunkInsert[],
): Promise<number | null> {
  if (chunks.length === 0) return 0
  const rows = chunks.map((c) => ({
    id: newId('chk'),
    position: c.position,
    content: c.content,
    heading_path: `{${c.heading_path.map((h) => `"${h.replaceAll('\\', '\\\\').replaceAll('"', '\\"')}"`).join(',')}}`,
    tokens: c.tokens,
    embedding: typeof c.embedding === 'string' ? c.embedding : vectorText(c.embedding),
  }))
  const [result] = await sql<{ guard: boolean; inserted: number }[]>`
    with g as (
      select id from documents
      where id = ${doc.id} and generation = ${doc.generation} and lease_owner = ${doc.owner} and status = 'embedding'
      for share
    ), i as (
      insert into chunks_unindexed (id, knowledge_base_id, document_id, generation, position, content, heading_path, tokens, metadata, dims, embedding)
      select r.id, ${doc.knowledge_base_id}, g.id, ${doc.generation}, r.position, r.content, r.heading_path::text[], r.tokens,
             ${jsonb(sql, doc.metadata)}, ${dims}, r.embedding::vector
      from g, jsonb_to_recordset(${jsonb(sql, rows)}) as r(id text, position int, content text, heading_path text, tokens int, embedding text)
      on conflict (document_id, generation, position) do nothing
      returning 1
    )
    select exists (select 1 from g) as guard, (select count(*)::int from i) as inserted`
  return result!.guard ? result!.inserted : null
}

/**
 * Server mode's write of the same rows (docs/knowledge.md, "Writing chunks"): the guard, then the
 * rows through `COPY ... FROM STDIN (FORMAT binary)`, in one transaction that holds the document's
 * row (for share) as the insert's guard does. Each vector goes as its float4 values (pgvector's
 * binary form: 1.5 kB at 384 dimensions, read without parsing) instead of ~4.3 kB of text that
 * PostgreSQL parses a number at a time, and the rows go without a JSON document around them; the
 * stored rows are the same.
 *
 * A COPY that PostgreSQL refuses is not reported by postgres.js once its data is sent (the stream
 * never finishes), so nothing it could refuse is sent: rows whose values PostgreSQL would refuse (a
 * value that is not a finite float4, a NUL character) and a batch with a position written already
 * (COPY has no `on conflict`; the lease and writtenPositions rule it out, and the guard's statement
 * checks it under the row's lock) go through insertChunks, which answers as it always has. A COPY
 * that still does not finish within COPY_TIMEOUT_MS (a connection lost) fails the write.
 */
export async function copyChunks(
  sql: Pool,
  doc: { id: string; knowledge_base_id: string; generation: number; metadata: Record<string, unknown>; owner: string },
  dims: number,
  chunks: ChunkInsert[],
): Promise<number | null> {
  if (chunks.length === 0) return 0
  const metadata = JSON.stringify(doc.metadata)
  if (!copyable(chunks, dims, metadata)) return insertChunks(sql, doc, dims, chunks)
  const data = copyRows(doc, dims, chunks, metadata)
  const positions = chunks.map((c) => c.position)
  const copied = await sql.begin(async (tx) => {
    const [g] = await tx<{ taken: boolean }[]>`
      select exists (
        select 1 from chunks_unindexed
        where document_id = ${doc.id} and generation = ${doc.generation} and position = any(${positions}::int[])
      ) as taken
      from documents
      where id = ${doc.id} and generation = ${doc.generation} and lease_owner = ${doc.owner} and status = 'embedding'
      for share`
    if (!g) return null
    if (g.taken) return 'taken' as const
    const stream = await tx`copy chunks_unindexed (id, knowledge_base_id, document_id, generation, position, content, heading_path, tokens, metadata, dims, embedding) from stdin (format binary)`.writable()
    let timer: ReturnType<typeof setTimeout> | undefined
    try {
      await new Promise<void>((resolve, reject) => {
        stream.on('error', reject)
        stream.on('finish', resolve)
        timer = setTimeout(() => reject(new Error(`writing ${chunks.length} chunks with COPY did not finish within ${COPY_TIMEOUT_MS / 1000} s`)), COPY_TIMEOUT_MS)
        stream.end(data)
      })
    } finally {
      clearTimeout(timer)
    }
    return chunks.length
  })
  return copied === 'taken' ? insertChunks(sql, doc, dims, chunks) : copied
}

/** How long one batch's COPY may take (64 rows take milliseconds). */
const COPY_TIMEOUT_MS = 30_000

/** Whether PostgreSQL takes every value of these rows as COPY sends them (else insertChunks writes them). */
function copyable(chunks: ChunkInsert[], dims: number, metadata: string): boolean {
  // JSON.stringify escapes a NUL and a lone surrogate, both of which jsonb refuses.
  if (metadata.includes('\\u0000') || /\\ud[89a-f]/i.test(metadata)) return false
  for (const c of chunks) {
    const v = c.embedding
    if (typeof v === 'string' || v.length !== dims) return false
    for (let k = 0; k < dims; k++) if (!Number.isFinite(Math.fround(v[k]!))) return false
    if (c.content.includes('\0') || c.heading_path.some((h) => h.includes('\0'))) return false
  }
  return true
}

const COPY_SIGNATURE = [0x50, 0x47, 0x43, 0x4f, 0x50, 0x59, 0x0a, 0xff, 0x0d, 0x0a, 0x00] // PGCOPY\n\377\r\n\0
const TEXT_OID = 25
const encoder = new TextEncoder()

/** The rows in COPY's binary format: a header, per row its 11 fields (length, then bytes), a trailer. */
function copyRows(doc: { id: string; knowledge_base_id: string; generation: number }, dims: number, chunks: ChunkInsert[], json: string): Uint8Array {
  const kb = encoder.encode(doc.knowledge_base_id)
  const docId = encoder.encode(doc.id)
  // jsonb's binary form: a version byte (1), then the JSON text.
  const metadata = encoder.encode(`\u0001${json}`)
  let size = 19 + 2
  const texts = chunks.map((c) => {
    const id = encoder.encode(newId('chk'))
    const content = encoder.encode(c.content)
    const headings = c.heading_path.map((h) => encoder.encode(h))
    size += 2 + 11 * 4 + id.length + kb.length + docId.length + 4 + 4 + content.length + 4 + metadata.length + 4 + 4 + dims * 4
    size += 12 + (headings.length > 0 ? 8 : 0) + headings.reduce((n, h) => n + 4 + h.length, 0)
    return { id, content, headings }
  })
  const out = new Uint8Array(size)
  const view = new DataView(out.buffer)
  let o = 0
  const bytes = (b: Uint8Array) => {
    view.setInt32(o, b.length)
    out.set(b, o + 4)
    o += 4 + b.length
  }
  const int4 = (n: number) => {
    view.setInt32(o, 4)
    view.setInt32(o + 4, n)
    o += 8
  }
  out.set(COPY_SIGNATURE, 0)
  o = 19 // the signature, then flags and the header extension's length, both 0
  chunks.forEach((c, i) => {
    const t = texts[i]!
    view.setInt16(o, 11)
    o += 2
    bytes(t.id)
    bytes(kb)
    bytes(docId)
    int4(doc.generation)
    int4(c.position)
    bytes(t.content)
    // text[]: dimensions, a has-nulls flag, the element type, then per dimension its length and lower bound.
    const start = o
    o += 4
    view.setInt32(o, t.headings.length > 0 ? 1 : 0)
    view.setInt32(o + 4, 0)
    view.setInt32(o + 8, TEXT_OID)
    o += 12
    if (t.headings.length > 0) {
      view.setInt32(o, t.headings.length)
      view.setInt32(o + 4, 1)
      o += 8
      for (const h of t.headings) bytes(h)
    }
    view.setInt32(start, o - start - 4)
    int4(c.tokens)
    bytes(metadata)
    int4(dims)
    // vector: its dimensions (int16), an unused int16, then each value as a float4.
    view.setInt32(o, 4 + dims * 4)
    view.setInt16(o + 4, dims)
    view.setInt16(o + 6, 0)
    o += 8
    const v = c.embedding as ArrayLike<number>
    for (let k = 0; k < dims; k++, o += 4) view.setFloat32(o, v[k]!)
  })
  view.setInt16(o, -1)
  o += 2
  if (o !== size) throw new Error(`COPY rows: ${o} bytes written, ${size} counted`)
  return out
}
