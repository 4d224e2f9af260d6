import type { TSchema } from '@sinclair/typebox'
import { t } from 'elysia'
import type { ModelSpec } from '../domain/models/catalog'
import type { ChatMessage } from '../domain/models/types'
import { unsupportedChatParams, type PassedChatParam } from '../domain/models/openai-params'
import { ResponseFormatSchema } from '../domain/models/response-format'
import { AppError } from '../lib/errors'
import { Id } from './common.model'

const ModelId = t.String({ minLength: 1, maxLength: 128, description: 'A model id of GET /v1/models', examples: ['local-chat'] })
const WorkspaceId = t.Optional(Id('ws', 'Workspace charged for the call (else X-Workspace-Id, the key\'s workspace or the caller\'s only one)'))

const TextPart = t.Object({ type: t.Literal('text'), text: t.String() }, { additionalProperties: true })
const Message = t.Object(
  {
    role: t.UnionEnum(['system', 'developer', 'user', 'assistant', 'tool']),
    content: t.Optional(t.Union([t.String({ maxLength: 2_000_000 }), t.Null(), t.Array(TextPart, { maxItems: 1000 })])),
    name: t.Optional(t.String({ maxLength: 128 })),
    tool_call_id: t.Optional(t.String({ maxLength: 256 })),
    tool_calls: t.Optional(t.Array(t.Object({
      id: t.String({ maxLength: 256 }),
      type: t.Literal('function'),
      function: t.Object({ name: t.String({ minLength: 1, maxLength: 128 }), arguments: t.String({ maxLength: 1_000_000 }) }),
    }), { maxItems: 128 })),
  },
  { additionalProperties: false },
)
const Tool = t.Object({
  type: t.Literal('function'),
  function: t.Object({
    name: t.String({ minLength: 1, maxLength: 64, pattern: '^[A-Za-z0-9_-]+$' }),
    description: t.Optional(t.String({ maxLength: 4096 })),
    parameters: t.Optional(t.Record(t.String(), t.Unknown())),
    strict: t.Optional(t.Union([t.Boolean(), t.Null()])),
  }),
})

const chatFields = {
  model: t.String({ minLength: 1, maxLength: 128, description: 'An llm of GET /v1/models, or agent:<agent id> for a turn of that agent (docs/agents.md, "Agents from any OpenAI client")', examples: ['local-chat'] }),
  messages: t.Array(Message, { minItems: 1, maxItems: 10_000 }),
  temperature: t.Optional(t.Number({ minimum: 0, maximum: 2 })),
  max_tokens: t.Optional(t.Integer({ minimum: 1, maximum: 1_000_000 })),
  stream: t.Optional(t.Boolean({ description: 'true: OpenAI-style server-sent events ending with data: [DONE]' })),
  tools: t.Optional(t.Array(Tool, { maxItems: 128 })),
  tool_choice: t.Optional(t.Union([t.UnionEnum(['none', 'auto', 'required'], { default: undefined }), t.Object({ type: t.Literal('function'), function: t.Object({ name: t.String() }) })])),
  stop: t.Optional(t.Union([t.String(), t.Array(t.String(), { maxItems: 4 })])),
  top_p: t.Optional(t.Number({ minimum: 0, maximum: 1 })),
  user: t.Optional(t.String({ maxLength: 256 })),
  stream_options: t.Optional(t.Object({ include_usage: t.Optional(t.Boolean()) })),
  // null: what clients send for "the default" (it was accepted before structured output came).
  response_format: t.Optional(t.Union([ResponseFormatSchema, t.Null()])),
}

export const ChatBody = t.Object(
  { ...chatFields, workspace_id: WorkspaceId },
  { additionalProperties: false, examples: [{ model: 'local-chat', messages: [{ role: 'system', content: 'Answer briefly.' }, { role: 'user', content: 'What is a webhook?' }], temperature: 0.2, max_tokens: 200 }] },
)

/**
 * The OpenAI drop-in: the fields above, the OpenAI parameters passed to the providers that take them,
 * `max_completion_tokens` (the newer name of `max_tokens`), and the OpenAI parameters this service does
 * not implement, accepted only with their default value (the rest is a 400 naming the parameter:
 * docs/models.md, "OpenAI compatibility"). Unknown fields are a 400, as OpenAI answers.
 */
const nullable = <T extends TSchema>(schema: T) => t.Optional(t.Union([schema, t.Null()]))
/** The OpenAI parameters passed to the providers that take them (openai-params.ts), each checked for its type only: its values are the provider's to judge. */
const passedFields = {
  seed: nullable(t.Integer()),
  reasoning_effort: nullable(t.String({ maxLength: 32, description: 'Passed to OpenAI-kind providers as sent (minimal, low, medium, high...)' })),
  logprobs: nullable(t.Boolean()),
  top_logprobs: nullable(t.Integer({ minimum: 0, maximum: 20 })),
  presence_penalty: nullable(t.Number({ minimum: -2, maximum: 2 })),
  frequency_penalty: nullable(t.Number({ minimum: -2, maximum: 2 })),
  logit_bias: nullable(t.Record(t.String({ pattern: '^[0-9]+$' }), t.Number({ minimum: -100, maximum: 100 }), { additionalProperties: false, description: 'Token ids to biases' })),
  n: nullable(t.Integer({ minimum: 1, maximum: 128, description: 'Several choices (usage counts them all); OpenAI-kind providers only' })),
  parallel_tool_calls: nullable(t.Boolean()),
  metadata: nullable(t.Record(t.String({ maxLength: 64 }), t.String({ maxLength: 512 }))),
  service_tier: nullable(t.String({ maxLength: 32 })),
  prediction: nullable(t.Record(t.String(), t.Unknown())),
  modalities: nullable(t.Array(t.String({ maxLength: 32 }), { maxItems: 4 })),
  audio: nullable(t.Record(t.String(), t.Unknown())),
  verbosity: nullable(t.String({ maxLength: 32 })),
  prompt_cache_key: nullable(t.String({ maxLength: 1024 })),
  safety_identifier: nullable(t.String({ maxLength: 1024 })),
} satisfies Record<PassedChatParam, unknown>

export const OpenAIChatBody = t.Object(
  {
    ...chatFields,
    ...passedFields,
    max_completion_tokens: t.Optional(t.Integer({ minimum: 1, maximum: 1_000_000 })),
    ...Object.fromEntries(unsupportedChatParams.map((p) => [p, t.Optional(t.Unknown({ description: 'Accepted only with its default value' }))])),
    workspace_id: WorkspaceId,
  },
  { additionalProperties: false },
)

const Input = t.Array(t.String({ maxLength: 1_000_000 }), { minItems: 1, maxItems: 4096 })
export const EmbeddingsBody = t.Object(
  { model: ModelId, input: Input, workspace_id: WorkspaceId },
  { additionalProperties: false, examples: [{ model: 'local-embed', input: ['refund policy', 'how do I get my money back?'] }] },
)
export const OpenAIEmbeddingsBody = t.Object(
  {
    model: ModelId,
    input: t.Union([t.String({ maxLength: 1_000_000 }), Input]),
    encoding_format: t.Optional(t.UnionEnum(['float', 'base64'], { default: undefined })),
    dimensions: t.Optional(t.Integer({ minimum: 1, description: 'The model\'s own dimension, or fewer for models that can be shortened (text-embedding-3-*); otherwise 400' })),
    user: t.Optional(t.String()),
    workspace_id: WorkspaceId,
  },
  { additionalProperties: false },
)

export const RerankBody = t.Object(
  {
    model: ModelId,
    query: t.String({ minLength: 1, maxLength: 100_000 }),
    documents: t.Array(t.String({ maxLength: 1_000_000 }), { minItems: 1, maxItems: 10_000 }),
    top_n: t.Optional(t.Integer({ minimum: 1, maximum: 10_000 })),
    workspace_id: WorkspaceId,
  },
  { additionalProperties: false, examples: [{ model: 'local-rerank', query: 'refund', documents: ['Refunds take 5 days.', 'Our office is in Paris.'], top_n: 1 }] },
)

export const ModelView = t.Object({
  id: t.String(),
  object: t.Literal('model'),
  created: t.Integer({ description: 'Unix seconds: when this process loaded its catalogue (OpenAI\'s field; the catalogue keeps no date)' }),
  owned_by: t.String({ description: 'The vendor, as OpenAI\'s field' }),
  type: t.UnionEnum(['llm', 'embedding', 'rerank']),
  vendor: t.String(),
  context_length: t.Optional(t.Integer()),
  supports_function_call: t.Optional(t.Boolean()),
  dimensions: t.Optional(t.Integer()),
})

const CATALOGUE_LOADED = Math.floor(Date.now() / 1000)

export function toModel(m: ModelSpec): typeof ModelView.static {
  const out: typeof ModelView.static = { id: m.id, object: 'model', created: CATALOGUE_LOADED, owned_by: m.vendor, type: m.type, vendor: m.vendor }
  if (m.type === 'llm') {
    if (m.context_length !== undefined) out.context_length = m.context_length
    out.supports_function_call = m.supports_function_call ?? false
  }
  if (m.type === 'embedding' && m.dimensions !== undefined) out.dimensions = m.dimensions
  return out
}

const Details = t.Optional(t.Record(t.String(), t.Unknown(), { description: 'As the provider reported it (cached, reasoning and audio tokens...)' }))
const UsageView = t.Object({ prompt_tokens: t.Integer(), completion_tokens: t.Integer(), total_tokens: t.Integer(), credits: t.Number(), prompt_tokens_details: Details, completion_tokens_details: Details })
export const ChatCompletionView = t.Object(
  {
    request_id: t.String(),
    id: t.String(),
    object: t.Literal('chat.completion'),
    created: t.Integer(),
    model: t.String(),
    choices: t.Array(t.Object({
      index: t.Integer(),
      message: t.Record(t.String(), t.Unknown()),
      finish_reason: t.Union([t.String(), t.Null()]),
      logprobs: t.Optional(t.Union([t.Record(t.String(), t.Unknown()), t.Null()], { description: 'With logprobs: true, as the provider sent them' })),
    })),
    usage: UsageView,
    system_fingerprint: t.Optional(t.Union([t.String(), t.Null()])),
    service_tier: t.Optional(t.Union([t.String(), t.Null()])),
  },
  { description: 'OpenAI chat.completion plus request_id and usage.credits; with stream: true, text/event-stream of chat.completion.chunk objects ending with data: [DONE]' },
)

export const EmbeddingsView = t.Object({
  request_id: t.String(),
  model: t.String(),
  data: t.Array(t.Object({ embedding: t.Array(t.Number()), index: t.Integer() })),
  usage: t.Object({ tokens: t.Integer(), credits: t.Number() }),
})

export const RerankView = t.Object({
  request_id: t.String(),
  model: t.String(),
  results: t.Array(t.Object({ index: t.Integer(), relevance_score: t.Number() })),
  usage: t.Object({ tokens: t.Integer(), credits: t.Number() }),
})

type MessageIn = typeof Message.static

/** Text parts are joined; the gateway speaks plain-text content (images are not supported). */
export function toMessages(messages: MessageIn[]): ChatMessage[] {
  return messages.map((m, i) => {
    let content: string | null = null
    if (typeof m.content === 'string') content = m.content
    else if (Array.isArray(m.content)) {
      const bad = m.content.find((p) => p.type !== 'text')
      if (bad) throw new AppError('validation_error', `messages[${i}].content: only text parts are supported`, { param: `messages.${i}.content` })
      content = m.content.map((p) => p.text).join('')
    }
    if (m.role === 'tool' && !m.tool_call_id) throw new AppError('validation_error', `messages[${i}].tool_call_id: is required for a tool message`, { param: `messages.${i}.tool_call_id` })
    const out: ChatMessage = { role: m.role, content }
    if (m.name !== undefined) out.name = m.name
    if (m.tool_call_id !== undefined) out.tool_call_id = m.tool_call_id
    if (m.tool_calls !== undefined) out.tool_calls = m.tool_calls
    return out
  })
}
