/**
 * The schemas of POST /v1/mcp (src/routes/mcp.ts, docs/mcp.md): the JSON-RPC message it takes and
 * answers, and the input schema of each tool, composed from the models of the REST route the tool
 * stands for, so a field means the same thing (and is checked the same way) in both.
 */
import { t, type TSchema } from 'elysia'
import { AgentParams, ChatBody } from './agents.model'
import { Id } from './common.model'
import { KnowledgeBaseParams, SearchBody } from './knowledge.model'
import { numbersAsNumbers } from './openapi-refine'
import { TriggerBody, WorkflowParams } from './runs.model'

const JsonRpcId = t.Union([t.String({ minLength: 1, maxLength: 256 }), t.Integer()], { description: 'The request id; the answer carries it back. Absent in a notification' })

/**
 * One JSON-RPC 2.0 message (a request, a notification, or a response to a server request). Batches
 * (a JSON array) are not taken: MCP dropped them in protocol version 2025-06-18, and no SDK sends them.
 */
export const JsonRpcMessage = t.Object(
  {
    jsonrpc: t.Literal('2.0'),
    id: t.Optional(JsonRpcId),
    method: t.Optional(t.String({ minLength: 1, maxLength: 128, examples: ['tools/call'] })),
    params: t.Optional(t.Record(t.String(), t.Unknown())),
    result: t.Optional(t.Unknown()),
    error: t.Optional(t.Unknown()),
  },
  {
    additionalProperties: false,
    description: 'A JSON-RPC 2.0 message of the Model Context Protocol (Streamable HTTP transport): initialize, tools/list, tools/call, ping or a notification',
    examples: [
      { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'search_knowledge', arguments: { knowledge_base_id: 'kb_01jbz3k9x8q7r6s5t4v3w2y1z0', query: 'How long do refunds take?', top_k: 3 } } },
      { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'my-client', version: '1.0.0' } } },
    ],
  },
)

export const JsonRpcAnswer = t.Object(
  {
    jsonrpc: t.Literal('2.0'),
    id: t.Union([JsonRpcId, t.Null()]),
    result: t.Optional(t.Record(t.String(), t.Unknown(), { description: 'tools/call: { content, structuredContent, isError? }; a failed tool call is a result with isError: true' })),
    error: t.Optional(t.Object({ code: t.Integer({ description: '-32602: unknown tool; -32601: unknown method' }), message: t.String(), data: t.Optional(t.Unknown()) })),
  },
  {
    description: 'The JSON-RPC answer (application/json; never a stream)',
    examples: [{
      jsonrpc: '2.0',
      id: 1,
      result: {
        content: [{ type: 'text', text: '{"results":[...]}' }],
        structuredContent: { results: [{ chunk_id: 'chk_01jbz3k9x8q7r6s5t4v3w2y1z0', document_id: 'doc_01jbz3k9x8q7r6s5t4v3w2y1z0', document_name: 'returns.md', content: 'Refunds take 5 days.', score: 0.92, similarity: 0.81, metadata: {} }] },
      },
    }],
  },
)

/** The number of items list_resources answers when the call names no limit (as the REST lists). */
export const LIST_DEFAULT_LIMIT = 20

// Tool inputs: the path parameter of the REST route beside its body model.
export const SearchKnowledgeInput = t.Composite([t.Object({ knowledge_base_id: KnowledgeBaseParams.properties.id }), SearchBody], { additionalProperties: false })

export const RunWorkflowInput = t.Composite([t.Object({ workflow_id: WorkflowParams.properties.id }), TriggerBody], { additionalProperties: false })

/** ChatBody without `stream` (a tool answers once), and user_id optional: the key's own user by default. */
export const ChatWithAgentInput = t.Composite(
  [
    t.Object({ agent_id: AgentParams.properties.id }),
    t.Omit(ChatBody, ['stream', 'user_id']),
    t.Object({ user_id: t.Optional(t.String({ ...stripped(ChatBody.properties.user_id), description: 'The end user the conversation is for. Default: the API key\'s own user_id (below the developer role, the only one allowed)' })) }),
  ],
  { additionalProperties: false },
)

export const ListResourcesInput = t.Object(
  {
    type: t.UnionEnum(['agents', 'workflows', 'knowledge_bases'], { description: 'What to list' }),
    workspace_id: t.Optional(Id('ws', 'Only this workspace (else X-Workspace-Id); without either, every workspace the caller can read. One the caller cannot read is not found')),
    limit: t.Optional(t.Integer({ minimum: 1, maximum: 100, description: `Page size, 1-100 (default ${LIST_DEFAULT_LIMIT}), newest first` })),
    cursor: t.Optional(t.String({ minLength: 1, maxLength: 1024, description: 'The next_cursor of the previous page' })),
  },
  { additionalProperties: false },
)

/** A schema's JSON Schema keywords alone (TypeBox keeps its own markers under symbols). */
function stripped(schema: TSchema): Record<string, unknown> {
  return JSON.parse(JSON.stringify(schema))
}

/**
 * The JSON Schema a tools/list answer carries: plain JSON (TypeBox's symbols left out), integers as
 * integers only, and no schema that constrains nothing (docs/mcp.md, "Tool schemas").
 */
export const jsonSchemaOf = (schema: TSchema) => anyValueSpelledOut(numbersAsNumbers(stripped(schema))) as { type: 'object'; properties?: Record<string, object>; required?: string[] }

/**
 * Keywords that constrain a value: a schema with none of them (TypeBox's t.Unknown() is `{}`) accepts
 * anything, which is legal JSON Schema but which the MCP Inspector's --strict reports as an untyped
 * schema and some clients refuse or map to a string.
 */
const CONSTRAINING = new Set([
  'type', 'enum', 'const', 'multipleOf', 'maximum', 'exclusiveMaximum', 'minimum', 'exclusiveMinimum', 'maxLength', 'minLength', 'pattern', 'format',
  'maxItems', 'minItems', 'uniqueItems', 'contains', 'items', 'prefixItems', 'maxProperties', 'minProperties', 'required', 'properties', 'patternProperties',
  'additionalProperties', 'propertyNames', 'allOf', 'anyOf', 'oneOf', 'not', '$ref',
])
/** Any JSON value, each kind with its own `type` (a `type` array is less portable: some clients take one type). */
const ANY_JSON = [{ type: 'string' }, { type: 'number' }, { type: 'boolean' }, { type: 'object' }, { type: 'array' }, { type: 'null' }]
const SUBSCHEMA_MAPS = ['properties', 'patternProperties', '$defs']
const SUBSCHEMAS = ['items', 'additionalProperties', 'not', 'contains']
const SUBSCHEMA_LISTS = ['anyOf', 'oneOf', 'allOf', 'prefixItems']

/** Every schema in `node` that constrains nothing becomes "any JSON value" spelled out, its annotations kept. */
function anyValueSpelledOut<T>(node: T): T {
  if (!node || typeof node !== 'object' || Array.isArray(node)) return node
  const out: Record<string, unknown> = { ...(node as Record<string, unknown>) }
  for (const key of SUBSCHEMA_MAPS) if (out[key] && typeof out[key] === 'object') out[key] = Object.fromEntries(Object.entries(out[key] as object).map(([k, v]) => [k, anyValueSpelledOut(v)]))
  for (const key of SUBSCHEMAS) if (out[key] && typeof out[key] === 'object') out[key] = anyValueSpelledOut(out[key])
  for (const key of SUBSCHEMA_LISTS) if (Array.isArray(out[key])) out[key] = (out[key] as unknown[]).map(anyValueSpelledOut)
  if (!Object.keys(out).some((k) => CONSTRAINING.has(k))) out.anyOf = ANY_JSON
  return out as T
}
