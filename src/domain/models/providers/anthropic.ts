import type { ResolvedProvider } from '../catalog'
import { ProviderError, type ChatChunk, type ChatCompletion, type ChatMessage, type ChatRequest, type EmbeddingResult, type FailoverReason, type FinishReason, type Provider, type RerankResult, type ToolCall } from '../types'
import { wantsJson } from '../response-format'
import { isObject, malformed, postJson, postSse, type Upstream } from './upstream'
import { usageOf } from './usage'

/**
 * Anthropic's Messages API behind the OpenAI chat format. What differs on the wire:
 * - system prompts are a top-level `system`, not messages;
 * - roles strictly alternate user/assistant, so consecutive same-role messages are merged, and tool
 *   results travel as `tool_result` blocks in a user message (all of one turn's in one message);
 * - tool calls are `tool_use` blocks whose `input` is an object, not a JSON string;
 * - `max_tokens` is required (1024 when the request has none);
 * - a stream is named events (message_start, content_block_*, message_delta, message_stop) where a
 *   tool call is a content block whose arguments arrive as `input_json_delta` fragments;
 * - there is no `response_format`: json_object is a system instruction, and json_schema is a tool whose
 *   `input_schema` is the schema, which the model is made to call; its input comes back as the
 *   message's content, as JSON text (docs/models.md, "Structured output").
 */

const VERSION = '2023-06-01'
/** Anthropic rejects a request without max_tokens; 1024 is its own documentation's example. */
const DEFAULT_MAX_TOKENS = 1024

type Block =
  | { type: 'text'; text: string }
  | { type: 'tool_use'; id: string; name: string; input: Record<string, unknown> }
  | { type: 'tool_result'; tool_use_id: string; content: string }

interface AnthropicMessage {
  role: 'user' | 'assistant'
  content: Block[]
}

export class AnthropicProvider implements Provider {
  readonly kind = 'anthropic' as const
  readonly id: string
  readonly maxEmbedBatch = 1
  // The catalogue routes no embedding model here (llm only).
  readonly embedLimit = null

  constructor(private readonly p: ResolvedProvider) {
    this.id = p.id
  }

  private upstream(body: unknown, signal: AbortSignal): Upstream {
    const headers: Record<string, string> = { 'anthropic-version': VERSION }
    if (this.p.key) headers['x-api-key'] = this.p.key
    return { provider: this.p, path: '/messages', headers: { ...headers, ...this.p.headers }, body, signal }
  }

  async chat(req: ChatRequest, signal: AbortSignal): Promise<ChatCompletion> {
    const answerTool = answerToolOf(req)
    const json = await postJson(this.upstream(messagesBody(req), signal))
    if (!isObject(json) || !Array.isArray(json.content)) throw malformed(this.p, 'no content in the message')
    let text = ''
    const toolCalls: ToolCall[] = []
    for (const b of json.content as unknown[]) {
      if (!isObject(b)) continue
      if (b.type === 'text' && typeof b.text === 'string') text += b.text
      // Blocks of other types (thinking, server tools) have no OpenAI counterpart and are left out.
      if (b.type === 'tool_use' && b.name === answerTool) text += JSON.stringify(b.input ?? {})
      else if (b.type === 'tool_use') toolCalls.push({ id: String(b.id), type: 'function', function: { name: String(b.name), arguments: JSON.stringify(b.input ?? {}) } })
    }
    const message: ChatMessage = { role: 'assistant', content: text || (toolCalls.length > 0 ? null : '') }
    if (toolCalls.length > 0) message.tool_calls = toolCalls
    const u = isObject(json.usage) ? json.usage : {}
    return {
      id: typeof json.id === 'string' ? json.id : 'msg',
      object: 'chat.completion',
      created: Math.floor(Date.now() / 1000),
      model: typeof json.model === 'string' ? json.model : req.model,
      choices: [{ index: 0, message, finish_reason: finishOf(answerTool && toolCalls.length === 0 && json.stop_reason === 'tool_use' ? 'end_turn' : json.stop_reason) }],
      usage: usageOf({ prompt_tokens: promptTokens(u), completion_tokens: typeof u.output_tokens === 'number' ? u.output_tokens : undefined }, req, () => text + toolCalls.map((t) => t.function.name + t.function.arguments).join('')),
    }
  }

  async *chatStream(req: ChatRequest, signal: AbortSignal): AsyncIterable<ChatChunk> {
    const answerTool = answerToolOf(req)
    /** Content blocks of the answer tool, whose input is streamed as the message's content. */
    const answerBlocks = new Set<number>()
    const events = postSse(this.upstream({ ...messagesBody(req), stream: true }, signal))
    let id = 'msg'
    let model = req.model
    const created = Math.floor(Date.now() / 1000)
    const chunk = (delta: ChatChunk['choices'][number]['delta'], finish: FinishReason | null = null): ChatChunk => ({ id, object: 'chat.completion.chunk', created, model, choices: [{ index: 0, delta, finish_reason: finish }] })
    /** content block index → OpenAI tool call index (tool calls are numbered 0.. among themselves). */
    const tools = new Map<number, number>()
    let prompt: number | undefined
    let output: number | undefined
    let stopReason: unknown = null
    const parts: string[] = []
    for await (const event of events) {
      const e = this.eventOf(event.data)
      if (e === null) continue
      switch (e.type) {
        case 'message_start': {
          const m = isObject(e.message) ? e.message : {}
          if (typeof m.id === 'string') id = m.id
          if (typeof m.model === 'string') model = m.model
          if (isObject(m.usage)) prompt = promptTokens(m.usage)
          yield chunk({ role: 'assistant', content: '' })
          break
        }
        case 'content_block_start': {
          const b = isObject(e.content_block) ? e.content_block : {}
          if (b.type === 'tool_use' && b.name === answerTool) {
            answerBlocks.add(Number(e.index))
          } else if (b.type === 'tool_use') {
            const index = tools.size
            tools.set(Number(e.index), index)
            parts.push(String(b.name))
            yield chunk({ tool_calls: [{ index, id: String(b.id), type: 'function', function: { name: String(b.name), arguments: '' } }] })
          } else if (b.type === 'text' && typeof b.text === 'string' && b.text) {
            parts.push(b.text)
            yield chunk({ content: b.text })
          }
          break
        }
        case 'content_block_delta': {
          const d = isObject(e.delta) ? e.delta : {}
          if (d.type === 'text_delta' && typeof d.text === 'string') {
            parts.push(d.text)
            yield chunk({ content: d.text })
          } else if (d.type === 'input_json_delta' && typeof d.partial_json === 'string' && d.partial_json && answerBlocks.has(Number(e.index))) {
            parts.push(d.partial_json)
            yield chunk({ content: d.partial_json })
          } else if (d.type === 'input_json_delta' && typeof d.partial_json === 'string' && d.partial_json) {
            const index = tools.get(Number(e.index))
            if (index === undefined) throw malformed(this.p, `input_json_delta for block ${String(e.index)}, which is not a tool_use`)
            parts.push(d.partial_json)
            yield chunk({ tool_calls: [{ index, function: { arguments: d.partial_json } }] })
          }
          break
        }
        case 'message_delta': {
          if (isObject(e.delta) && e.delta.stop_reason !== undefined) stopReason = e.delta.stop_reason
          // Counts in message_delta are cumulative; input_tokens appears there on newer API versions.
          if (isObject(e.usage)) {
            if (typeof e.usage.output_tokens === 'number') output = e.usage.output_tokens
            if (typeof e.usage.input_tokens === 'number') prompt = promptTokens(e.usage)
          }
          break
        }
        case 'message_stop': {
          const usage = usageOf({ prompt_tokens: prompt, completion_tokens: output }, req, () => parts.join(''))
          const answered = answerBlocks.size > 0 && tools.size === 0 && stopReason === 'tool_use'
          yield { ...chunk({}, finishOf(answered ? 'end_turn' : stopReason)), usage }
          return
        }
        case 'error':
          throw this.streamError(e.error)
        // ping, content_block_stop, and event types added later carry nothing to map.
      }
    }
    throw malformed(this.p, 'the stream ended before message_stop')
  }

  /** An event's JSON object (null: another JSON value, which carries nothing to map). */
  private eventOf(data: string) {
    let e: unknown
    try {
      e = JSON.parse(data)
    } catch {
      throw malformed(this.p, `an SSE event that is not JSON: ${data.slice(0, 80)}`)
    }
    return isObject(e) ? e : null
  }

  /** An `error` event sent after the 200, read like the status it would have had. */
  private streamError(error: unknown): ProviderError {
    const err = isObject(error) ? error : {}
    return new ProviderError(`${this.p.id}: error mid-stream: ${String(err.message ?? err.type ?? 'unknown')}`, null, streamFailover(err.type))
  }

  async embed(_model: string, _inputs: string[], _signal: AbortSignal): Promise<EmbeddingResult> {
    throw new ProviderError(`${this.p.id}: an anthropic provider serves chat models only`, 400, null)
  }

  async rerank(_model: string, _query: string, _documents: string[], _topN: number | undefined, _signal: AbortSignal): Promise<RerankResult> {
    throw new ProviderError(`${this.p.id}: an anthropic provider serves chat models only`, 400, null)
  }
}

/** Cached input is reported apart from `input_tokens`; all of it was read, so all of it is prompt. */
function promptTokens(u: Record<string, unknown>): number | undefined {
  if (typeof u.input_tokens !== 'number') return undefined
  const count = (v: unknown) => (typeof v === 'number' ? v : 0)
  return u.input_tokens + count(u.cache_creation_input_tokens) + count(u.cache_read_input_tokens)
}

function finishOf(stop: unknown): FinishReason | null {
  switch (stop) {
    case 'end_turn':
    case 'stop_sequence':
    case 'pause_turn':
      return 'stop'
    case 'max_tokens':
      return 'length'
    case 'tool_use':
      return 'tool_calls'
    case 'refusal':
      return 'content_filter'
    default:
      return stop ? 'stop' : null
  }
}

/** The `error.type` of an event sent after the 200, read like the status it would have had. */
function streamFailover(type: unknown): FailoverReason | null {
  if (type === 'rate_limit_error') return 'rate_limited'
  if (type === 'overloaded_error' || type === 'api_error') return 'server_error'
  return null
}

export function messagesBody(req: ChatRequest): Record<string, unknown> {
  const system: string[] = []
  const messages: AnthropicMessage[] = []
  const push = (role: AnthropicMessage['role'], content: Block[]) => {
    if (content.length === 0) return
    const prev = messages.at(-1)
    if (prev?.role === role) prev.content.push(...content)
    else messages.push({ role, content })
  }
  for (const m of req.messages) {
    if (m.role === 'system' || m.role === 'developer') {
      if (m.content) system.push(m.content)
    } else if (m.role === 'tool') {
      push('user', [{ type: 'tool_result', tool_use_id: m.tool_call_id ?? '', content: m.content ?? '' }])
    } else if (m.role === 'assistant') {
      push('assistant', [...textBlock(m.content), ...(m.tool_calls ?? []).map(toolUse)])
    } else {
      push('user', textBlock(m.content))
    }
  }
  const body: Record<string, unknown> = { model: req.model, max_tokens: req.max_tokens ?? DEFAULT_MAX_TOKENS, messages }
  if (system.length > 0) body.system = system.join('\n\n')
  if (req.temperature !== undefined) body.temperature = req.temperature
  if (req.top_p !== undefined) body.top_p = req.top_p
  if (req.stop !== undefined) body.stop_sequences = typeof req.stop === 'string' ? [req.stop] : req.stop
  if (req.user !== undefined) body.metadata = { user_id: req.user }
  if (req.tools?.length) {
    body.tools = req.tools.map((t) => ({
      name: t.function.name,
      ...(t.function.description ? { description: t.function.description } : {}),
      input_schema: t.function.parameters ?? { type: 'object', properties: {} },
    }))
  }
  const choice = toolChoice(req.tool_choice)
  // OpenAI's parallel_tool_calls: false is Anthropic's disable_parallel_tool_use (with tools only).
  if (req.openai?.parallel_tool_calls === false && req.tools?.length) body.tool_choice = { ...(choice ?? { type: 'auto' }), disable_parallel_tool_use: true }
  else if (choice) body.tool_choice = choice
  structuredOutput(req, body, system)
  return body
}

/** The instruction that asks for a JSON object (Anthropic has no JSON mode to switch on). */
export const JSON_INSTRUCTION = 'Answer with one JSON object and nothing else: no prose before or after it, no Markdown code fence.'

/** The tool that carries a json_schema answer: the schema's name, when its root is an object (Anthropic's input_schema must be). */
function answerToolOf(req: ChatRequest): string | null {
  const f = req.response_format
  return f?.type === 'json_schema' && f.json_schema.schema.type === 'object' ? f.json_schema.name : null
}

/**
 * response_format in Anthropic's terms. json_schema becomes a tool whose input_schema is the schema
 * and a tool_choice that forces it: the model writes a tool's input against its schema, which holds
 * it far closer than an instruction alone (the llm node still validates what comes back). With tools
 * of the caller's own the choice is `any`, so the model may call one of them first; a tool the caller
 * named stays the choice; `none` forces the answer's tool, the only one the caller still wants called.
 * A schema whose root is not an object cannot be a tool's input, so it travels in the instruction.
 */
function structuredOutput(req: ChatRequest, body: Record<string, unknown>, system: string[]): void {
  const f = req.response_format
  if (!wantsJson(f)) return
  const tool = answerToolOf(req)
  if (f.type === 'json_object') system.push(JSON_INSTRUCTION)
  else if (!tool) system.push(`${JSON_INSTRUCTION} It must satisfy this JSON Schema: ${JSON.stringify(f.json_schema.schema)}`)
  else {
    if (req.tools?.some((t) => t.function.name === tool)) {
      throw new ProviderError(`response_format.json_schema.name "${tool}" is also the name of one of the tools; Anthropic receives the schema as a tool, so the names must differ`, 400, null, undefined, 'response_format')
    }
    system.push(`Give your answer by calling the tool ${tool}: its input is the answer.`)
    const tools = (body.tools as unknown[] | undefined) ?? []
    body.tools = [...tools, { name: tool, description: f.json_schema.description ?? 'The answer, as structured data', input_schema: f.json_schema.schema }]
    const asked = (body.tool_choice as { type?: string } | undefined)?.type
    if (asked !== 'tool') body.tool_choice = tools.length > 0 && asked !== 'none' ? { type: 'any' } : { type: 'tool', name: tool }
  }
  body.system = system.join('\n\n')
}

/** Anthropic rejects empty text blocks. */
function textBlock(content: string | null): Block[] {
  return content ? [{ type: 'text', text: content }] : []
}

/**
 * `input` must be an object; arguments a model once produced that are not a JSON object are sent as
 * `{}` rather than failing the whole conversation over a past turn.
 */
function toolUse(t: ToolCall): Block {
  let input: unknown
  try {
    input = JSON.parse(t.function.arguments || '{}')
  } catch {}
  return { type: 'tool_use', id: t.id, name: t.function.name, input: isObject(input) ? input : {} }
}

function toolChoice(choice: unknown): Record<string, unknown> | undefined {
  if (choice === 'auto') return { type: 'auto' }
  if (choice === 'required') return { type: 'any' }
  if (choice === 'none') return { type: 'none' }
  if (isObject(choice) && isObject(choice.function) && typeof choice.function.name === 'string') return { type: 'tool', name: choice.function.name }
  return undefined
}
