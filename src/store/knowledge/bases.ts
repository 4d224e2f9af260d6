import type { ListQuery } from '../../lib/lists'
import type { Pool, Sql, Tx } from '../db'
import { jsonb } from '../db'
import { insertKeyed, type WriteKey } from '../idempotent-writes'
import { inWorkspaces, listClauses, type WorkspaceScope } from '../lists'
import { accessAndBudgetOf, accessBudgetColumns, accessBudgetJoins, type AccessAndBudget, type AccessBudgetColumns } from '../credits'

/** Knowledge bases: their rows and the vector index of each embedding size. */
export type RetrievalMode = 'vector' | 'hybrid' | 'fulltext'

export interface Chunking {
  chunk_size: number
  chunk_overlap: number
  separators?: string[]
}

export interface KnowledgeBaseRow {
  id: string
  workspace_id: string
  name: string
  description: string
  embedding_model: string
  dimensions: number
  chunking: Chunking
  retrieval_mode: RetrievalMode
  rerank_model: string
  created_by: string
  created_at: Date
  updated_at: Date
}

export async function insertKnowledgeBase(sql: Sql, kb: Omit<KnowledgeBaseRow, 'created_at' | 'updated_at'>, key?: WriteKey): Promise<KnowledgeBaseRow> {
  const [row] = await insertKeyed(sql, key, 'knowledge_base', sql<KnowledgeBaseRow[]>`
    insert into knowledge_bases (id, workspace_id, name, description, embedding_model, dimensions, chunking, retrieval_mode, rerank_model, created_by)
    values (${kb.id}, ${kb.workspace_id}, ${kb.name}, ${kb.description}, ${kb.embedding_model}, ${kb.dimensions}, ${jsonb(sql, kb.chunking)},
            ${kb.retrieval_mode}, ${kb.rerank_model}, ${kb.created_by})
    returning *`)
  return row!
}

/**
 * A search's one read before it calls the embedding model: the base, the caller's access to its
 * workspace and that workspace's budget with the credits used in the period `period` (its first
 * day, YYYY-MM-DD), as the base's read and the read before a model call would answer them. Null:
 * no such base.
 */
export async function findKnowledgeBaseForSearch(sql: Sql, id: string, userId: string, period: string): Promise<({ kb: KnowledgeBaseRow } & AccessAndBudget) | null> {
  const [row] = await sql<(KnowledgeBaseRow & AccessBudgetColumns)[]>`
    select k.*, ${accessBudgetColumns(sql)}
    from knowledge_bases k
    join workspaces w on w.id = k.workspace_id
    ${accessBudgetJoins(sql, userId, period)}
    where k.id = ${id}`
  if (!row) return null
  const { ws_owner_id, ws_status, ws_role, budget_credits, budget_period, budget_hard_limit, budget_used, ...kb } = row
  return { kb, ...accessAndBudgetOf(kb.workspace_id, row) }
}

export async function findKnowledgeBase(sql: Sql, id: string): Promise<KnowledgeBaseRow | null> {
  const [row] = await sql<KnowledgeBaseRow[]>`select * from knowledge_bases where id = ${id}`
  return row ?? null
}

export async function listKnowledgeBases(sql: Sql, scope: WorkspaceScope, q: ListQuery): Promise<KnowledgeBaseRow[]> {
  const c = listClauses(sql, q)
  return sql<KnowledgeBaseRow[]>`select * from knowledge_bases where ${inWorkspaces(sql, scope)} ${c.and} order by ${c.orderBy} limit ${c.limit}`
}

export type KnowledgeBasePatch = Partial<Pick<KnowledgeBaseRow, 'name' | 'description' | 'embedding_model' | 'dimensions' | 'chunking' | 'retrieval_mode' | 'rerank_model'>>

export async function updateKnowledgeBase(tx: Sql, id: string, p: KnowledgeBasePatch): Promise<KnowledgeBaseRow> {
  const [row] = await tx<KnowledgeBaseRow[]>`
    update knowledge_bases set
      name = ${p.name ?? tx`name`},
      description = ${p.description ?? tx`description`},
      embedding_model = ${p.embedding_model ?? tx`embedding_model`},
      dimensions = ${p.dimensions ?? tx`dimensions`},
      chunking = ${p.chunking ? jsonb(tx, p.chunking) : tx`chunking`},
      retrieval_mode = ${p.retrieval_mode ?? tx`retrieval_mode`},
      rerank_model = ${p.rerank_model ?? tx`rerank_model`},
      updated_at = now()
    where id = ${id}
    returning *`
  return row!
}

export async function lockKnowledgeBase(tx: Tx, id: string): Promise<KnowledgeBaseRow | null> {
  const [row] = await tx<KnowledgeBaseRow[]>`select * from knowledge_bases where id = ${id} for update`
  return row ?? null
}

export async function deleteKnowledgeBase(sql: Sql, id: string): Promise<void> {
  await sql`delete from knowledge_bases where id = ${id}`
}

/** Whether a base holds any document (in any status: each would be embedded with the base's model). */
export async function hasDocuments(sql: Sql, kbId: string): Promise<boolean> {
  const [row] = await sql<{ any: boolean }[]>`select exists (select 1 from documents where knowledge_base_id = ${kbId}) as any`
  return row!.any
}
