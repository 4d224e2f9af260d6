import type { Limiter } from '../../lib/limiter'
import type { PassedChatParams } from './openai-params'
import type { ResponseFormat } from './response-format'

/**
 * The gateway's own shapes: OpenAI's chat completion format (the format of `/v1/models/llm/chat` and the
 * OpenAI drop-ins) is the lingua franca; every provider adapter maps to and from it.
 */
export type Role = 'system' | 'user' | 'assistant' | 'tool' | 'developer'

export interface ToolCall {
  id: string
  type: 'function'
  function: { name: string; arguments: string }
}

export interface ChatMessage {
  role: Role
  content: string | null
  name?: string
  tool_calls?: ToolCall[]
  tool_call_id?: string
}

export interface ToolDefinition {
  type: 'function'
  function: { name: string; description?: string; parameters?: Record<string, unknown> }
}

export interface ChatRequest {
  /** The upstream model name of the route being tried (not the catalogue id). */
  model: string
  messages: ChatMessage[]
  temperature?: number
  max_tokens?: number
  tools?: ToolDefinition[]
  tool_choice?: unknown
  stop?: string | string[]
  top_p?: number
  user?: string
  /** OpenAI's structured output; each provider maps it (docs/models.md, "Structured output"). */
  response_format?: ResponseFormat
  /**
   * The other OpenAI parameters the client sent (`seed`, `reasoning_effort`, `logprobs`, `n`...),
   * as sent: an OpenAI-kind provider passes them on, another maps those it can or is not routed to
   * (openai-params.ts).
   */
  openai?: PassedChatParams
}

export interface Usage {
  prompt_tokens: number
  completion_tokens: number
  total_tokens: number
}

export type FinishReason = 'stop' | 'length' | 'tool_calls' | 'content_filter'

export interface ChatCompletion {
  id: string
  object: 'chat.completion'
  created: number
  model: string
  choices: { index: number; message: ChatMessage; finish_reason: FinishReason | null; logprobs?: unknown }[]
  usage: Usage & { prompt_tokens_details?: unknown; completion_tokens_details?: unknown }
  /** What an OpenAI-kind upstream adds, passed back as it sent it. */
  system_fingerprint?: string | null
  service_tier?: string | null
}

/** One streamed piece, in OpenAI's `chat.completion.chunk` form. */
export interface ChatChunk {
  id: string
  object: 'chat.completion.chunk'
  created: number
  model: string
  choices: {
    index: number
    delta: { role?: Role; content?: string | null; tool_calls?: { index: number; id?: string; type?: 'function'; function?: { name?: string; arguments?: string } }[] }
    finish_reason: FinishReason | null
  }[]
  usage?: Usage | null
}

export interface EmbeddingResult {
  vectors: number[][]
  tokens: number
}

export interface RerankResult {
  results: { index: number; relevance_score: number }[]
  tokens: number
}

/** Consecutive templated events of an upstream stream, relayed as bytes (`WireEvents`): their relayed bytes and their texts joined. */
export interface WireRun {
  wire: Uint8Array
  text: string
  count: number
}

/** A chunk and, when it came from the upstream as is, its JSON text (null: made here). */
export interface RawChunk {
  chunk: ChatChunk
  data: string | null
  /**
   * Several content chunks relayed as bytes, already in the relay's form (`chatStreamBatches`'
   * `relay`); `chunk` then stands for them all: their id, model..., their texts joined.
   */
  run?: WireRun
}

/**
 * What a provider must do. Every call takes an AbortSignal (client disconnect, time-out). Errors are
 * `ProviderError` so the gateway can tell a reason to fail over (429, 5xx, time-out, network) from
 * one to stop at (400, 401...).
 */
export interface Provider {
  readonly id: string
  readonly kind: 'openai' | 'anthropic' | 'local'
  chat(req: ChatRequest, signal: AbortSignal): Promise<ChatCompletion>
  /** Chunks as they come; the last carries `usage` when the upstream reports it. */
  chatStream(req: ChatRequest, signal: AbortSignal): AsyncIterable<ChatChunk>
  /**
   * The same chunks, those of one upstream read together, each with the upstream's own JSON text
   * when there is one (a relay can then pass it on without serialising the chunk again). Optional:
   * the gateway falls back to `chatStream`, one chunk at a time. With `relay` (what a relay writes of
   * a chunk, without `data: `), the usual content chunks may come as `run`s of bytes in that form.
   */
  chatStreamBatches?(req: ChatRequest, signal: AbortSignal, relay?: (r: RawChunk) => string): AsyncIterable<RawChunk[]>
  embed(model: string, inputs: string[], signal: AbortSignal): Promise<EmbeddingResult>
  rerank(model: string, query: string, documents: string[], topN: number | undefined, signal: AbortSignal): Promise<RerankResult>
  /** Largest batch of `embed` inputs one upstream request may carry. */
  readonly maxEmbedBatch: number
  /**
   * Bounds the embeddings requests in flight to this provider, across every call (catalogue
   * `max_concurrency`); null where batches cost this thread's CPU and are sent one after another.
   */
  readonly embedLimit: Limiter | null
}

export type FailoverReason = 'rate_limited' | 'server_error' | 'timeout' | 'network_error'

export class ProviderError extends Error {
  override name = 'ProviderError'
  constructor(
    message: string,
    /** The upstream HTTP status, when there was one. */
    readonly status: number | null,
    /** Set when another route should be tried; null when the request itself is at fault. */
    readonly failover: FailoverReason | null,
    readonly retryAfterMs?: number,
    /** The request parameter at fault, for a refusal (400) the caller can fix. */
    readonly param?: string,
  ) {
    super(message)
  }
}

/** Classifies an upstream HTTP status for failover (429, 5xx; not 400/401: docs/models.md, "Failover and the circuit breaker"). */
export function failoverFor(status: number): FailoverReason | null {
  if (status === 429) return 'rate_limited'
  // 408 Request Timeout is the upstream's own time-out: another route may well answer.
  if (status === 408) return 'timeout'
  if (status >= 500) return 'server_error'
  return null
}
