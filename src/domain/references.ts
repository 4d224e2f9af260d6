import type { Deps } from '../deps'
import { invalid } from '../lib/errors'
import { findAgent, type AgentRow } from '../store/agents'
import { findKnowledgeBase, type KnowledgeBaseRow } from '../store/knowledge'
import { findWorkflow, type WorkflowRow } from '../store/workflows'

/**
 * A definition (an agent, a workflow graph) may name only resources of its own workspace. Checked when
 * it is saved, so a definition never points into another tenant and fails only when it runs. Another
 * workspace's resource and a missing one answer the same 400 naming the field, so a caller learns
 * nothing of other workspaces (docs/workflows.md, "knowledge_retrieval"; docs/agents.md).
 */
export async function workspaceKnowledgeBase(deps: Pick<Deps, 'db'>, workspaceId: string, id: string, param: string): Promise<KnowledgeBaseRow> {
  const kb = await findKnowledgeBase(deps.db.sql, id)
  if (!kb || kb.workspace_id !== workspaceId) throw invalid(param, `knowledge base ${id} not found in workspace ${workspaceId}`)
  return kb
}

export async function workspaceWorkflow(deps: Pick<Deps, 'db'>, workspaceId: string, id: string, param: string): Promise<WorkflowRow> {
  const wf = await findWorkflow(deps.db.sql, id)
  if (!wf || wf.workspace_id !== workspaceId) throw invalid(param, `workflow ${id} not found in workspace ${workspaceId}`)
  return wf
}

/**
 * The agent of a workflow's `agent` node: an `agent` of the workspace (a chatflow answers with a
 * workflow: sub_workflow runs that), without `workflow` tools, whose runs would start outside the
 * run's children and escape its depth limit (docs/workflows.md, "agent").
 */
export async function agentNodeTarget(deps: Pick<Deps, 'db'>, workspaceId: string, id: string, param: string): Promise<AgentRow> {
  const agent = await findAgent(deps.db.sql, id)
  if (!agent || agent.workspace_id !== workspaceId) throw invalid(param, `agent ${id} not found in workspace ${workspaceId}`)
  const problem = agentNodeProblem(agent)
  if (problem) throw invalid(param, problem)
  return agent
}

/** Why an agent cannot answer an `agent` node, or null. */
export function agentNodeProblem(agent: AgentRow): string | null {
  if (agent.type !== 'agent') return `agent ${agent.id} is a chatflow; a sub_workflow node runs its workflow`
  if (agent.tools.some((t) => t.type === 'workflow')) return `agent ${agent.id} has workflow tools, whose runs would escape this run's depth limit; use sub_workflow nodes for workflows`
  return null
}
