import { t } from 'elysia'
import { iso } from '../lib/time'
import { HEADER_KEPT } from '../domain/agents/mcp-client'
import type { AgentRow, AgentTool as StoredAgentTool, ConversationRow, MessageRow, StoredToolCall } from '../store/agents'
import { Id, Name, Timestamp, UserId } from './common.model'

/** OpenAI's function-name rule: what the model sees as the tool's name. */
const ToolName = t.String({ minLength: 1, maxLength: 64, pattern: '^[A-Za-z0-9_-]+$', description: 'The name the model calls it by (letters, digits, _ and -)' })
const Description = t.String({ minLength: 1, maxLength: 1000 })

export const AgentTool = t.Union([
  t.Object({ type: t.Literal('knowledge_search'), name: t.Optional(ToolName), description: t.Optional(Description) }, { additionalProperties: false, description: 'Searches the agent\'s knowledge_base_ids' }),
  t.Object({ type: t.Literal('workflow'), workflow_id: Id('wf', 'The workflow run as the tool; its start inputs are the tool\'s parameters'), name: t.Optional(ToolName), description: t.Optional(Description) }, { additionalProperties: false }),
  t.Object(
    {
      type: t.Literal('http'),
      name: ToolName,
      description: Description,
      method: t.UnionEnum(['GET', 'POST', 'PUT', 'PATCH', 'DELETE']),
      url: t.String({ minLength: 1, maxLength: 2048, description: 'https URL; {param} placeholders take that argument, the other arguments go in the query (GET, DELETE) or a JSON body' }),
      parameters: t.Record(t.String(), t.Unknown(), { description: 'JSON schema (type "object") of the arguments' }),
    },
    { additionalProperties: false, description: 'An HTTP call under the webhook SSRF rules' },
  ),
  t.Object(
    {
      type: t.Literal('mcp'),
      name: t.String({ minLength: 1, maxLength: 32, pattern: '^[A-Za-z0-9_-]+$', description: 'The server\'s name: its tools are offered as <name>__<tool> (e.g. crm__lookup)' }),
      server_url: t.String({ minLength: 1, maxLength: 2048, description: 'The MCP server\'s Streamable HTTP endpoint; https, under the webhook SSRF rules (checked here, and resolved and pinned at each connection)' }),
      headers: t.Optional(t.Record(
        t.String({ pattern: "^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$" }),
        t.Union([t.String({ minLength: 1, maxLength: 4096 }), t.Null()]),
        {
          maxProperties: 16,
          additionalProperties: false,
          description: `Sent with every request to the server (e.g. Authorization). Values are encrypted at rest and never answered: answers show "${HEADER_KEPT}" for each. Sending "${HEADER_KEPT}" or null keeps the value stored for that header by the tool of the same name and server_url`,
          examples: [{ Authorization: 'Bearer crm-token' }],
        },
      )),
      allowed_tools: t.Optional(t.Array(t.String({ minLength: 1, maxLength: 128 }), { maxItems: 128, description: 'Only these of the server\'s tools (their names on the server, without prefix) are offered; omitted: all' })),
    },
    { additionalProperties: false, description: 'The tools an MCP server lists, offered to the model and called over Streamable HTTP (docs/agents.md, "MCP tools")' },
  ),
])

const AgentFields = {
  name: Name,
  type: t.UnionEnum(['agent', 'chatflow'], { default: undefined, description: 'agent: a model with tools; chatflow: answers with its workflow' }),
  model: t.String({ minLength: 1, maxLength: 128, description: 'An llm of GET /v1/models', examples: ['local-chat'] }),
  instructions: t.Optional(t.String({ maxLength: 100_000, description: 'The system prompt' })),
  tools: t.Optional(t.Array(AgentTool, { maxItems: 32 })),
  knowledge_base_ids: t.Optional(t.Array(Id('kb', 'Knowledge base id'), { maxItems: 32 })),
  workflow_id: t.Optional(t.Union([Id('wf', 'Workflow id (required for a chatflow; it must declare a string input "message")'), t.Null()])),
}

export const CreateAgent = t.Object(
  { workspace_id: t.Optional(Id('ws', 'Workspace (else X-Workspace-Id, the key\'s workspace or the caller\'s only one)')), ...AgentFields, status: t.Optional(t.UnionEnum(['active', 'disabled'], { default: undefined })) },
  { additionalProperties: false, examples: [{ workspace_id: 'ws_01jbz3k9x8q7r6s5t4v3w2y1z0', name: 'Support', type: 'agent', model: 'local-chat', instructions: 'Answer from the handbook.', knowledge_base_ids: ['kb_01jbz3k9x8q7r6s5t4v3w2y1z0'], tools: [{ type: 'knowledge_search' }] }] },
)

export const PatchAgent = t.Object(
  {
    name: t.Optional(Name),
    type: t.Optional(AgentFields.type),
    model: t.Optional(AgentFields.model),
    instructions: AgentFields.instructions,
    tools: AgentFields.tools,
    knowledge_base_ids: AgentFields.knowledge_base_ids,
    workflow_id: AgentFields.workflow_id,
    status: t.Optional(t.UnionEnum(['active', 'disabled'], { default: undefined })),
  },
  { additionalProperties: false, minProperties: 1, examples: [{ instructions: 'Answer briefly.' }] },
)

export const Agent = t.Object({
  id: t.String(),
  name: t.String(),
  type: t.UnionEnum(['agent', 'chatflow']),
  model: t.String(),
  workspace_id: t.String(),
  status: t.UnionEnum(['active', 'disabled']),
  version: t.Integer(),
  instructions: t.String(),
  tools: t.Array(AgentTool),
  knowledge_base_ids: t.Array(t.String()),
  workflow_id: t.Union([t.String(), t.Null()]),
  created_at: Timestamp,
  updated_at: Timestamp,
})

export function toAgent(a: AgentRow): typeof Agent.static {
  return {
    id: a.id, name: a.name, type: a.type, model: a.model, workspace_id: a.workspace_id, status: a.status, version: a.version,
    instructions: a.instructions, tools: a.tools.map(agentToolView), knowledge_base_ids: a.knowledge_base_ids, workflow_id: a.workflow_id,
    created_at: iso(a.created_at)!, updated_at: iso(a.updated_at)!,
  }
}

/** A stored tool as answered: an mcp tool's header names, each value shown as "***" (never the value, sealed or not). */
function agentToolView(tool: StoredAgentTool): typeof AgentTool.static {
  if (tool.type !== 'mcp') return tool
  const { headers_sealed, ...rest } = tool
  return headers_sealed && Object.keys(headers_sealed).length > 0 ? { ...rest, headers: Object.fromEntries(Object.keys(headers_sealed).map((n) => [n, HEADER_KEPT])) } : rest
}

export const AgentParams = t.Object({ id: Id('agt', 'Agent id') })
export const ConversationParams = t.Object({ conversation_id: Id('conv', 'Conversation id') })

/** The chat body (docs/agents.md, "A turn"); `message` up to 32 000 characters. */
export const ChatBody = t.Object(
  {
    message: t.String({ minLength: 1, maxLength: 32_000, description: 'The user message' }),
    user_id: UserId,
    conversation_id: t.Optional(Id('conv', 'Continues this conversation (of this agent and user_id); omitted: a new one')),
    stream: t.Optional(t.Boolean({ description: 'With Accept: text/event-stream: server-sent events' })),
    inputs: t.Optional(t.Record(t.String(), t.Unknown(), { description: 'Start-node inputs of a chatflow agent' })),
  },
  { additionalProperties: false, examples: [{ message: 'How long do refunds take?', user_id: 'user_42' }] },
)

const Usage = t.Object({ tokens_in: t.Integer(), tokens_out: t.Integer(), credits: t.Number() })

export const ChatAnswer = t.Object({
  request_id: t.String(),
  agent_id: t.String(),
  conversation_id: t.String(),
  message: t.Object({ role: t.String(), content: t.String() }),
  tool_calls: t.Array(t.Object({ tool: t.String(), input: t.Record(t.String(), t.Unknown()), duration_ms: t.Integer() })),
  usage: Usage,
}, { description: 'The synchronous chat answer' })

export const Conversation = t.Object({
  id: t.String(),
  agent_id: t.String(),
  user_id: t.String(),
  title: t.String({ description: 'The first message, cut to 80 characters' }),
  message_count: t.Integer(),
  created_at: Timestamp,
  updated_at: Timestamp,
})

export const Message = t.Object({
  id: t.String(),
  role: t.UnionEnum(['user', 'assistant']),
  content: t.String(),
  tool_calls: t.Array(t.Object({ tool: t.String(), input: t.Record(t.String(), t.Unknown()), output: t.Record(t.String(), t.Unknown()), duration_ms: t.Integer() })),
  usage: t.Union([Usage, t.Null()]),
  agent_version: t.Union([t.Integer(), t.Null()]),
  finish_reason: t.Union([t.String(), t.Null()], { description: 'stop, length, error (the turn failed) or client_closed (the stream\'s client left); null for user messages' }),
  run_id: t.Union([t.String(), t.Null()], { description: 'The run that answered (chatflow)' }),
  created_at: Timestamp,
})

export const ConversationHistory = t.Object({
  ...Conversation.properties,
  messages: t.Array(Message),
  next_cursor: t.Union([t.String(), t.Null()]),
  has_more: t.Boolean(),
})

export function toConversation(c: ConversationRow): typeof Conversation.static {
  return { id: c.id, agent_id: c.agent_id, user_id: c.user_id, title: c.title, message_count: c.message_count, created_at: iso(c.created_at)!, updated_at: iso(c.updated_at)! }
}

export function toMessage(m: MessageRow): typeof Message.static {
  return {
    id: m.id, role: m.role, content: m.content, tool_calls: m.tool_calls, usage: m.usage, agent_version: m.agent_version,
    finish_reason: m.finish_reason, run_id: m.run_id, created_at: iso(m.created_at)!,
  }
}

/** The answer's `tool_calls` items (docs/agents.md, "A turn"): the tool, its input and how long it took (the output is in the history). */
export const toolView = (c: StoredToolCall) => ({ tool: c.tool, input: c.input, duration_ms: c.duration_ms })
