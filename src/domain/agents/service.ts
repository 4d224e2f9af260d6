import type { Deps } from '../../deps'
import { invalid } from '../../lib/errors'
import { newId } from '../../lib/ids'
import type { ListQuery } from '../../lib/lists'
import { checkUrlShape, UnsafeUrlError, urlPolicy } from '../../lib/net-guard'
import * as store from '../../store/agents'
import type { Action, Caller } from '../access'
import { workspaceKnowledgeBase, workspaceWorkflow } from '../references'
import { inputSpec } from '../workflows/graph'
import { access, listScope, loadOwned } from '../ownership'
import { checkServerUrl, HEADER_KEPT } from './mcp-client'
import type { WriteKey } from '../../store/idempotent-writes'
import { toolName } from './tools'

/** An `mcp` tool as the API takes it: plain header values, or `"***"`/null to keep the stored one (docs/agents.md, "MCP tools"). */
export interface McpToolInput {
  type: 'mcp'
  name: string
  server_url: string
  headers?: Record<string, string | null>
  allowed_tools?: string[]
}

export type AgentToolInput = Exclude<store.AgentTool, { type: 'mcp' }> | McpToolInput

export interface AgentInput {
  name: string
  type: 'agent' | 'chatflow'
  model: string
  instructions?: string
  tools?: AgentToolInput[]
  knowledge_base_ids?: string[]
  workflow_id?: string | null
  status?: 'active' | 'disabled'
}

export type AgentPatch = Partial<AgentInput>

/** An agent the caller may take `action` on; one of a workspace it may not see is 404. */
export function loadAgent(deps: Deps, caller: Caller, id: string, action: Action): Promise<store.AgentRow> {
  return loadOwned(deps, caller, 'agent', id, action, store.findAgent)
}

export async function createAgent(deps: Deps, caller: Caller, workspaceId: string, input: AgentInput, key?: WriteKey): Promise<store.AgentRow> {
  await access(deps, caller, workspaceId, 'build')
  const fields = await checkDefinition(deps, workspaceId, {
    name: input.name,
    type: input.type,
    model: input.model,
    instructions: input.instructions ?? '',
    tools: sealTools(deps, input.tools ?? [], []),
    knowledge_base_ids: [...new Set(input.knowledge_base_ids ?? [])],
    workflow_id: input.workflow_id ?? null,
    status: input.status ?? 'active',
  })
  return store.insertAgent(deps.db.sql, { ...fields, id: newId('agt'), workspace_id: workspaceId, created_by: caller.userId }, key)
}

/** PATCH: the given fields replace the stored ones, the whole is checked again, `version` goes up by one. */
export async function updateAgent(deps: Deps, caller: Caller, id: string, patch: AgentPatch): Promise<store.AgentRow> {
  const current = await loadAgent(deps, caller, id, 'build')
  const merged: store.AgentFields = {
    name: patch.name ?? current.name,
    type: patch.type ?? current.type,
    model: patch.model ?? current.model,
    instructions: patch.instructions ?? current.instructions,
    tools: patch.tools ? sealTools(deps, patch.tools, current.tools) : current.tools,
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
  return store.listAgents(deps.db.sql, await listScope(deps, caller, workspaceId), q)
}

/** Header names the transport sets itself (or that would break it): an `mcp` tool may not set them. */
const RESERVED_HEADERS = new Set([
  'host', 'content-length', 'content-type', 'accept', 'connection', 'transfer-encoding', 'keep-alive', 'upgrade', 'te', 'trailer',
  'mcp-session-id', 'mcp-protocol-version', 'last-event-id', 'traceparent', 'tracestate', 'user-agent',
])

/**
 * The tools as stored: an `mcp` tool's header values sealed by the SecretBox. A value of `"***"` or
 * null keeps the value stored for that header by the current tool of the same name and server_url
 * (what GET answers can be sent back as they are); a new server_url needs every value again, so a
 * stored credential can never be pointed at another server.
 */
function sealTools(deps: Deps, tools: AgentToolInput[], current: store.AgentTool[]): store.AgentTool[] {
  return tools.map((tool, i) => {
    if (tool.type !== 'mcp') return tool
    const { headers, ...rest } = tool
    if (!headers || Object.keys(headers).length === 0) return rest
    const stored = current.find((c): c is Extract<store.AgentTool, { type: 'mcp' }> => c.type === 'mcp' && c.name === tool.name)
    const sealed: Record<string, string> = {}
    const seen = new Set<string>()
    for (const [name, value] of Object.entries(headers)) {
      const at = `tools[${i}].headers.${name}`
      const lower = name.toLowerCase()
      if (RESERVED_HEADERS.has(lower)) throw invalid(at, `${name} is set by the MCP transport itself and cannot be configured`)
      if (seen.has(lower)) throw invalid(at, `the header ${name} is given twice (header names are case-insensitive)`)
      seen.add(lower)
      if (value === null || value === HEADER_KEPT) {
        const kept = stored?.server_url === tool.server_url ? Object.entries(stored.headers_sealed ?? {}).find(([n]) => n.toLowerCase() === lower) : undefined
        if (!kept) {
          throw invalid(at, stored && stored.server_url !== tool.server_url
            ? 'a stored value is kept only for the same server_url; send the value again for the new server'
            : `no stored value to keep (${JSON.stringify(HEADER_KEPT)} and null keep the value stored for this tool's header); send the value`)
        }
        sealed[name] = kept[1]
        continue
      }
      if (/[\r\n\0]/.test(value)) throw invalid(at, 'must not contain line breaks or NUL')
      sealed[name] = deps.secretBox.seal(value)
    }
    return { ...rest, headers_sealed: sealed }
  })
}

/**
 * What the schema cannot see: the model is an `llm` of the catalogue, the knowledge bases and
 * workflows named are of the agent's workspace, a chatflow has a workflow declaring a `message`
 * input, `knowledge_search` has bases to search, tool names are unique, an http tool's URL passes
 * the SSRF rules' shape check (its address is checked at each call), an mcp tool's server_url too,
 * and its host is not a loopback or private address literal (or `localhost`).
 */
async function checkDefinition(deps: Deps, workspaceId: string, a: store.AgentFields): Promise<store.AgentFields> {
  const spec = deps.models.list().find((m) => m.id === a.model)
  if (!spec) throw invalid('model', `unknown model ${a.model}; GET /v1/models lists them`)
  if (spec.type !== 'llm') throw invalid('model', `model ${a.model} is of type ${spec.type}, not llm`)
  for (const [i, id] of a.knowledge_base_ids.entries()) await workspaceKnowledgeBase(deps, workspaceId, id, `knowledge_base_ids[${i}]`)
  if (a.type === 'chatflow') {
    if (!a.workflow_id) throw invalid('workflow_id', 'is required for a chatflow agent')
    const wf = await workspaceWorkflow(deps, workspaceId, a.workflow_id, 'workflow_id')
    const message = inputSpec(wf.graph).find((s) => s.name === 'message')
    if (!message || message.type !== 'string') {
      throw invalid('workflow_id', `workflow ${a.workflow_id} must declare a string input "message" (the user's message) to answer a chatflow`)
    }
  } else if (a.workflow_id) {
    await workspaceWorkflow(deps, workspaceId, a.workflow_id, 'workflow_id')
  }
  const names = new Set<string>()
  const policy = urlPolicy(deps.config)
  for (const [i, tool] of a.tools.entries()) {
    const at = `tools[${i}]`
    if (tool.type === 'knowledge_search' && a.knowledge_base_ids.length === 0) {
      throw invalid(at, 'a knowledge_search tool needs knowledge_base_ids to search')
    }
    if (tool.type === 'workflow') await workspaceWorkflow(deps, workspaceId, tool.workflow_id, `${at}.workflow_id`)
    if (tool.type === 'http') {
      try {
        checkUrlShape(tool.url.replace(/\{[A-Za-z_][A-Za-z0-9_]*\}/g, 'x'), policy)
      } catch (err) {
        if (err instanceof UnsafeUrlError) throw invalid(`${at}.url`, `${err.message}`)
        throw err
      }
      if (tool.parameters.type !== 'object') throw invalid(`${at}.parameters`, 'must be a JSON schema of type "object"')
    }
    if (tool.type === 'mcp') {
      const refused = checkServerUrl(tool.server_url, policy)
      if (refused) throw invalid(`${at}.server_url`, refused)
    }
    const name = toolName(tool)
    if (names.has(name)) throw invalid(`${at}.name`, `another tool is already named ${name}`)
    names.add(name)
  }
  // An mcp tool's tools are named `<name>__<tool>`: no other tool may take a name of that form.
  for (const [i, tool] of a.tools.entries()) {
    if (tool.type === 'mcp') continue
    const clash = a.tools.find((m) => m.type === 'mcp' && toolName(tool).startsWith(`${m.name}__`))
    if (clash) throw invalid(`tools[${i}].name`, `names starting with ${clash.name}__ are those of the mcp tool ${clash.name}'s tools`)
  }
  return a
}
