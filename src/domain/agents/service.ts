import type { Deps } from '../../deps'
import { invalid } from '../../lib/errors'
import { newId } from '../../lib/ids'
import type { ListQuery } from '../../lib/lists'
import { checkUrlShape, UnsafeUrlError } from '../../lib/net-guard'
import * as store from '../../store/agents'
import type { Action, Caller } from '../access'
import { knowledgeBaseIn, workflowIn } from '../references'
import { inputSpec } from '../workflows/graph'
import { access, listScope, loadOwned } from '../workspaces'
import { toolName } from './tools'

export interface AgentInput {
  name: string
  type: 'agent' | 'chatflow'
  model: string
  instructions?: string
  tools?: store.AgentTool[]
  knowledge_base_ids?: string[]
  workflow_id?: string | null
  status?: 'active' | 'disabled'
}

export type AgentPatch = Partial<AgentInput>

/** An agent the caller may take `action` on; one of a workspace it may not see is 404. */
export function loadAgent(deps: Deps, caller: Caller, id: string, action: Action): Promise<store.AgentRow> {
  return loadOwned(deps.db.sql, caller, 'agent', id, action, store.findAgent)
}

export async function createAgent(deps: Deps, caller: Caller, workspaceId: string, input: AgentInput): Promise<store.AgentRow> {
  await access(deps.db.sql, caller, workspaceId, 'build')
  const fields = await checkDefinition(deps, workspaceId, {
    name: input.name,
    type: input.type,
    model: input.model,
    instructions: input.instructions ?? '',
    tools: input.tools ?? [],
    knowledge_base_ids: [...new Set(input.knowledge_base_ids ?? [])],
    workflow_id: input.workflow_id ?? null,
    status: input.status ?? 'active',
  })
  return store.insertAgent(deps.db.sql, { ...fields, id: newId('agt'), workspace_id: workspaceId, created_by: caller.userId })
}

/** PATCH: the given fields replace the stored ones, the whole is checked again, `version` goes up by one. */
export async function updateAgent(deps: Deps, caller: Caller, id: string, patch: AgentPatch): Promise<store.AgentRow> {
  const current = await loadAgent(deps, caller, id, 'build')
  const merged: store.AgentFields = {
    name: patch.name ?? current.name,
    type: patch.type ?? current.type,
    model: patch.model ?? current.model,
    instructions: patch.instructions ?? current.instructions,
    tools: patch.tools ?? current.tools,
    knowledge_base_ids: patch.knowledge_base_ids ? [...new Set(patch.knowledge_base_ids)] : current.knowledge_base_ids,
    workflow_id: patch.workflow_id !== undefined ? patch.workflow_id : current.workflow_id,
    status: patch.status ?? current.status,
  }
  const fields = await checkDefinition(deps, current.workspace_id, merged)
  return deps.db.sql.begin(async (tx) => {
    await store.lockAgent(tx, id)
    return store.updateAgent(tx, id, fields)
  })
}

export async function deleteAgent(deps: Deps, caller: Caller, id: string): Promise<void> {
  await loadAgent(deps, caller, id, 'build')
  await store.deleteAgent(deps.db.sql, id)
}

/** Every workspace the caller can read, or the one named (docs/api.md, "Lists"). */
export async function listAgents(deps: Deps, caller: Caller, workspaceId: string | undefined, q: ListQuery): Promise<store.AgentRow[]> {
  return store.listAgents(deps.db.sql, await listScope(deps.db.sql, caller, workspaceId), q)
}

/**
 * What the schema cannot see: the model is an `llm` of the catalogue, the knowledge bases and
 * workflows named are of the agent's workspace, a chatflow has a workflow declaring a `message`
 * input, `knowledge_search` has bases to search, tool names are unique, an http tool's URL passes
 * the SSRF rules' shape check (its address is checked at each call).
 */
async function checkDefinition(deps: Deps, workspaceId: string, a: store.AgentFields): Promise<store.AgentFields> {
  const spec = deps.models.list().find((m) => m.id === a.model)
  if (!spec) throw invalid('model', `unknown model ${a.model}; GET /v1/models lists them`)
  if (spec.type !== 'llm') throw invalid('model', `model ${a.model} is of type ${spec.type}, not llm`)
  const sql = deps.db.sql
  for (const [i, id] of a.knowledge_base_ids.entries()) await knowledgeBaseIn(sql, workspaceId, id, `knowledge_base_ids[${i}]`)
  if (a.type === 'chatflow') {
    if (!a.workflow_id) throw invalid('workflow_id', 'is required for a chatflow agent')
    const wf = await workflowIn(sql, workspaceId, a.workflow_id, 'workflow_id')
    const message = inputSpec(wf.graph).find((s) => s.name === 'message')
    if (!message || message.type !== 'string') {
      throw invalid('workflow_id', `workflow ${a.workflow_id} must declare a string input "message" (the user's message) to answer a chatflow`)
    }
  } else if (a.workflow_id) {
    await workflowIn(sql, workspaceId, a.workflow_id, 'workflow_id')
  }
  const names = new Set<string>()
  const policy = { allowHttp: deps.config.webhookAllowHttp, allowPrivate: deps.config.webhookAllowPrivateNetworks }
  for (const [i, tool] of a.tools.entries()) {
    const at = `tools[${i}]`
    if (tool.type === 'knowledge_search' && a.knowledge_base_ids.length === 0) {
      throw invalid(at, 'a knowledge_search tool needs knowledge_base_ids to search')
    }
    if (tool.type === 'workflow') await workflowIn(sql, workspaceId, tool.workflow_id, `${at}.workflow_id`)
    if (tool.type === 'http') {
      try {
        checkUrlShape(tool.url.replace(/\{[A-Za-z_][A-Za-z0-9_]*\}/g, 'x'), policy)
      } catch (err) {
        if (err instanceof UnsafeUrlError) throw invalid(`${at}.url`, `${err.message}`)
        throw err
      }
      if (tool.parameters.type !== 'object') throw invalid(`${at}.parameters`, 'must be a JSON schema of type "object"')
    }
    const name = toolName(tool)
    if (names.has(name)) throw invalid(`${at}.name`, `another tool is already named ${name}`)
    names.add(name)
  }
  return a
}
