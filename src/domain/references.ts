import { invalid } from '../lib/errors'
import type { Pool as Sql } from '../store/db'
import { findKnowledgeBase, type KnowledgeBaseRow } from '../store/knowledge'
import { findWorkflow, type WorkflowRow } from '../store/workflows'

/**
 * A definition (an agent, a workflow graph) may name only resources of its own workspace. Checked when
 * it is saved, so a definition never points into another tenant and fails only when it runs. Another
 * workspace's resource and a missing one answer the same 400 naming the field, so a caller learns
 * nothing of other workspaces (docs/workflows.md, "knowledge_retrieval"; docs/agents.md).
 */
export async function knowledgeBaseIn(sql: Sql, workspaceId: string, id: string, param: string): Promise<KnowledgeBaseRow> {
  const kb = await findKnowledgeBase(sql, id)
  if (!kb || kb.workspace_id !== workspaceId) throw invalid(param, `knowledge base ${id} not found in workspace ${workspaceId}`)
  return kb
}

export async function workflowIn(sql: Sql, workspaceId: string, id: string, param: string): Promise<WorkflowRow> {
  const wf = await findWorkflow(sql, id)
  if (!wf || wf.workspace_id !== workspaceId) throw invalid(param, `workflow ${id} not found in workspace ${workspaceId}`)
  return wf
}
