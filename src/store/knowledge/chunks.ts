import { newId } from '../../lib/ids'
import type { Sql } from '../db'
import { vectorText } from '../vector-text'

/** Chunks: written by the lease holder of their document's generation. */
export interface ChunkInsert {
  position: number
  content: string
  heading_path: string[]
  tokens: number
  /** The vector, or already its pgvector text (vector-text.ts). */
  embedding: number[] | string
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
             ${sql.json(doc.metadata as never)}, ${dims}, r.embedding::vector
      from g, jsonb_to_recordset(${sql.json(rows as never)}) as r(id text, position int, content text, heading_path text, tokens int, embedding text)
      on conflict (document_id, generation, position) do nothing
      returning 1
    )
    select exists (select 1 from g) as guard, (select count(*)::int from i) as inserted`
  return result!.guard ? result!.inserted : null
}
