import { Limiter } from '../../../lib/limiter'
import { countTokens } from '../../../lib/tokens'
import type { ResolvedProvider } from '../catalog'
import type { ChatChunk, ChatCompletion, ChatRequest, EmbeddingResult, Provider, RawChunk, RerankResult } from '../types'
import { openAIChatStream } from './openai-stream'
import { isObject, malformed, postJson, type Upstream } from './upstream'
import { usageOf } from './usage'

/**
 * Any OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, LM Studio, DeepSeek...) on plain fetch.
 * Where the upstream reports no usage (some compatible servers never do), tokens are counted with
 * o200k_base (src/lib/tokens.ts): an estimate for non-OpenAI models, but it is what gets priced.
 */

/** OpenAI's own ceiling on inputs per embeddings request. */
const DEFAULT_MAX_BATCH = 2048
/**
 * Embeddings requests in flight to one provider at once. 4 batches of 64 answered in 150 ms each
 * carry ~1 700 inputs/s, while 4 requests stay far inside any paid tier's rate limit and do not
 * swamp a self-hosted server (Ollama serves 1 to 4 requests at a time by default).
 */
export const DEFAULT_MAX_CONCURRENCY = 4

export class OpenAIProvider implements Provider {
  readonly kind = 'openai' as const
  readonly id: string
  readonly maxEmbedBatch: number
  readonly embedLimit: Limiter

  constructor(private readonly p: ResolvedProvider) {
    this.id = p.id
    this.maxEmbedBatch = p.max_batch ?? DEFAULT_MAX_BATCH
    this.embedLimit = new Limiter(p.max_concurrency ?? DEFAULT_MAX_CONCURRENCY)
  }

  private upstream(path: string, body: unknown, signal: AbortSignal): Upstream {
    const headers: Record<string, string> = {}
    if (this.p.key) headers.authorization = `Bearer ${this.p.key}`
    return { provider: this.p, path, headers: { ...headers, ...this.p.headers }, body, signal }
  }

  async chat(req: ChatRequest, signal: AbortSignal): Promise<ChatCompletion> {
    const json = await postJson(this.upstream('/chat/completions', chatBody(req), signal))
    if (!isObject(json) || !Array.isArray(json.choices) || !json.choices.every((c) => isObject(c) && isObject(c.message))) {
      throw malformed(this.p, 'no choices[].message in the chat completion')
    }
    // Checked as far as the gateway reads it (choices[].message); the rest is the upstream's own.
    const completion = json as unknown as ChatCompletion
    completion.object ??= 'chat.completion'
    completion.model ??= req.model
    completion.created ??= Math.floor(Date.now() / 1000)
    completion.usage = usageOf(completion.usage, req, () => completion.choices.map((c) => completionText(c.message)).join(''))
    return completion
  }

  async *chatStream(req: ChatRequest, signal: AbortSignal): AsyncIterable<ChatChunk> {
    for await (const batch of this.chatStreamBatches(req, signal)) for (const r of batch) yield r.chunk
  }

  /** `chatStream`, a read's worth of chunks at a time (openai-stream.ts). */
  chatStreamBatches(req: ChatRequest, signal: AbortSignal, relay?: (r: RawChunk) => string): AsyncIterable<RawChunk[]> {
    return openAIChatStream(this.p, req, this.upstream('/chat/completions', { ...chatBody(req), stream: true, stream_options: { include_usage: true } }, signal), relay)
  }

  async embed(model: string, inputs: string[], signal: AbortSignal): Promise<EmbeddingResult> {
    const vectors: number[][] = []
    let tokens = 0
    // The gateway batches already; this keeps the adapter within the upstream's limit on its own.
    for (let i = 0; i < inputs.length; i += this.maxEmbedBatch) {
      const batch = inputs.slice(i, i + this.maxEmbedBatch)
      const json = await postJson(this.upstream('/embeddings', { model, input: batch }, signal))
      const data = isObject(json) && Array.isArray(json.data) ? (json.data as unknown[]) : null
      if (!data || data.length !== batch.length) throw malformed(this.p, `expected ${batch.length} embeddings, got ${data?.length ?? 'none'}`)
      const ordered = new Array<number[]>(batch.length)
      for (const [pos, d] of data.entries()) {
        if (!isObject(d) || !Array.isArray(d.embedding)) throw malformed(this.p, 'an embedding that is not an array of numbers')
        const index = typeof d.index === 'number' ? d.index : pos
        if (index < 0 || index >= batch.length || ordered[index]) throw malformed(this.p, `embedding index ${index} is out of range or repeated`)
        ordered[index] = d.embedding as number[]
      }
      vectors.push(...ordered)
      const usage = (json as { usage?: { prompt_tokens?: number; total_tokens?: number } }).usage
      tokens += usage?.prompt_tokens ?? usage?.total_tokens ?? batch.reduce((n, s) => n + countTokens(s), 0)
    }
    return { vectors, tokens }
  }

  /**
   * The Jina/Cohere/Voyage `/rerank` shape: `{model, query, documents, top_n}` answered by `results`
   * (Jina, Cohere) or `data` (Voyage) of `{index, relevance_score}`; a bare array of `{index, score}`
   * (Hugging Face TEI) is read too.
   */
  async rerank(model: string, query: string, documents: string[], topN: number | undefined, signal: AbortSignal): Promise<RerankResult> {
    const body: Record<string, unknown> = { model, query, documents }
    if (topN !== undefined) body.top_n = topN
    const json = await postJson(this.upstream('/rerank', body, signal))
    const list = Array.isArray(json) ? json : isObject(json) ? (json.results ?? json.data) : undefined
    if (!Array.isArray(list)) throw malformed(this.p, 'no results in the rerank answer')
    const results = list.map((r: unknown) => {
      const score = isObject(r) ? (r.relevance_score ?? r.score) : undefined
      if (!isObject(r) || typeof r.index !== 'number' || r.index < 0 || r.index >= documents.length || typeof score !== 'number') {
        throw malformed(this.p, 'a rerank result without index and relevance_score')
      }
      return { index: r.index, relevance_score: score }
    })
    results.sort((a, b) => b.relevance_score - a.relevance_score)
    if (topN !== undefined) results.splice(topN)
    return { results, tokens: rerankTokens(json, query, documents) }
  }
}

/** Only the fields of ChatRequest, so nothing the gateway carries along (`stream`...) leaks upstream. */
function chatBody(req: ChatRequest): Record<string, unknown> {
  const body: Record<string, unknown> = { model: req.model, messages: req.messages }
  for (const k of ['temperature', 'max_tokens', 'tools', 'tool_choice', 'stop', 'top_p', 'user', 'response_format'] as const) {
    if (req[k] !== undefined) body[k] = req[k]
  }
  // The other OpenAI parameters, as the client sent them (openai-params.ts).
  if (req.openai) Object.assign(body, req.openai)
  return body
}

function completionText(m: { content: string | null; tool_calls?: { function: { name: string; arguments: string } }[] }): string {
  return (m.content ?? '') + (m.tool_calls ?? []).map((t) => t.function.name + t.function.arguments).join('')
}

/**
 * Jina and Voyage report `usage.total_tokens`; Cohere bills rerank in search units
 * (`meta.billed_units.search_units`), not tokens, so its answer is counted like an unreported one.
 */
function rerankTokens(json: unknown, query: string, documents: string[]): number {
  if (isObject(json)) {
    const usage = json.usage
    if (isObject(usage) && typeof usage.total_tokens === 'number') return usage.total_tokens
    const billed = isObject(json.meta) ? json.meta.billed_units : undefined
    if (isObject(billed) && typeof billed.input_tokens === 'number') return billed.input_tokens + (typeof billed.output_tokens === 'number' ? billed.output_tokens : 0)
  }
  // Each document is scored against the query, so the query is read once per document.
  return documents.reduce((n, d) => n + countTokens(query) + countTokens(d), 0)
}
