import type { ListQuery } from '../../lib/lists'
import type { Pool, Sql, Tx } from '../db'
import { inWorkspaces, listClauses, type WorkspaceScope } from '../lists'
import type { Role } from '../workspaces'

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

export async function insertKnowledgeBase(sql: Sql, kb: Omit<KnowledgeBaseRow, 'created_at' | 'updated_at'>): Promise<KnowledgeBaseRow> {
  const [row] = await sql<KnowledgeBaseRow[]>`
    insert into knowledge_bases (id, workspace_id, name, description, embedding_model, dimensions, chunking, retrieval_mode, rerank_model, created_by)
    values (${kb.id}, ${kb.workspace_id}, ${kb.name}, ${kb.description}, ${kb.embedding_model}, ${kb.dimensions}, ${sql.json(kb.chunking as never)},
            ${kb.retrieval_mode}, ${kb.rerank_model}, ${kb.created_by})
    returning *`
  return row!
}

/**
 * A search's one read before it calls the embedding model: the base, the caller's access to its
 * workspace (the columns deciding access needs) and that workspace's budget with the credits used in
 * the period `period` (its first day, YYYY-MM-DD), as three reads would answer them. Null: no such base.
 */
export async function findKnowledgeBaseForSearch(sql: Sql, id: string, userId: string, period: string): Promise<{
  kb: KnowledgeBaseRow
  access: { id: string; owner_id: string; status: 'active' | 'archived'; role: Role | null }
  budget: { credits: string; period: 'month'; hard_limit: boolean; used: string } | null
} | null> {
  const [row] = await sql<(KnowledgeBaseRow & {
    ws_owner_id: string; ws_status: 'active' | 'archived'; ws_role: Role | null
    budget_credits: string | null; budget_period: 'month' | null; budget_hard_limit: boolean | null; budget_used: string
  })[]>`
    select k.*, w.owner_id as ws_owner_id, w.status as ws_status, m.role as ws_role,
           b.credits::text as budget_credits, b.period as budget_period, b.hard_limit as budget_hard_limit, coalesce(p.used, 0)::text as budget_used
    from knowledge_bases k
    join workspaces w on w.id = k.workspace_id
    left join workspace_members m on m.workspace_id = w.id and m.user_id = ${userId}
    left join workspace_budgets b on b.workspace_id = w.id
    left join credit_periods p on p.workspace_id = w.id and p.period_start = ${period}
    where k.id = ${id}`
  if (!row) return null
  const { ws_owner_id, ws_status, ws_role, budget_credits, budget_period, budget_hard_limit, budget_used, ...kb } = row
  return {
    kb,
    access: { id: kb.workspace_id, owner_id: ws_owner_id, status: ws_status, role: ws_role },
    budget: budget_credits === null ? null : { credits: budget_credits, period: budget_period!, hard_limit: budget_hard_limit!, used: budget_used },
  }
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
      chunking = ${p.chunking ? tx.json(p.chunking as never) : tx`chunking`},
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
