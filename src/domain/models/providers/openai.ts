import { Limiter } from '../../../lib/limiter'
import { countChatTokens, countTokens } from '../../../lib/tokens'
import type { ResolvedProvider } from '../catalog'
import type { ChatChunk, ChatCompletion, ChatRequest, EmbeddingResult, Provider, RawChunk, RerankResult, Usage } from '../types'
import { isObject, malformed, MAX_EVENT, postJson, postSseData, postSseReads, type Upstream } from './upstream'
import { WireEvents } from './wire-events'

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

/** A content that no chunk's text holds (private-use characters), to cut a relayed chunk around. */
const MARK = '\uE000\uE001\uE000'

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
    const completion = json as ChatCompletion
    completion.object ??= 'chat.completion'
    completion.model ??= req.model
    completion.created ??= Math.floor(Date.now() / 1000)
    completion.usage = usageOf(completion.usage, req, () => completion.choices.map((c) => completionText(c.message)).join(''))
    return completion
  }

  /**
   * `stream_options.include_usage` asks for a last chunk with `choices: []` and the usage; servers
   * that ignore it get one synthesised in the same shape, after their last chunk, so a consumer
   * never waits on a held-back chunk to learn the usage.
   */
  async *chatStream(req: ChatRequest, signal: AbortSignal): AsyncIterable<ChatChunk> {
    for await (const batch of this.chatStreamBatches(req, signal)) for (const r of batch) yield r.chunk
  }

  /**
   * `chatStream`, a read's worth of chunks at a time, each with the upstream's JSON text. The first
   * batch ends at the first chunk that carries something (text, a tool call, a finish): a relay
   * sends the start of the answer before the rest of that read is parsed (a fast upstream's first
   * read can hold the whole answer).
   */
  async *chatStreamBatches(req: ChatRequest, signal: AbortSignal, relay?: (r: RawChunk) => string): AsyncIterable<RawChunk[]> {
    const upstream = this.upstream('/chat/completions', { ...chatBody(req), stream: true, stream_options: { include_usage: true } }, signal)
    let usageSeen = false
    let finished = false
    let last: ChatChunk | undefined
    const parts: string[] = []
    let done = false
    let started = false
    const contents = new ContentChunks()
    let out: RawChunk[] = []
    // A bad event fails the stream after the good ones read with it have been passed on.
    let failure: unknown = null
    // With a relay: the body split at the byte level, the usual content chunks relayed as bytes.
    const wire = relay ? new WireEvents() : null
    let learned = 0
    let runChunk: ChatChunk | null = null
    /** One event: 'stop' at [DONE] or a bad event, 'first' at the first chunk that carries something. */
    const take = (data: string): 'stop' | 'first' | undefined => {
      if (data === '[DONE]') {
        done = true
        return 'stop'
      }
      let c: ChatChunk
      try {
        c = this.checked(data, contents)
      } catch (err) {
        failure = err
        return 'stop'
      }
      last = c
      if (c.usage) usageSeen = true
      let something = false
      for (const choice of c.choices) {
        if (choice.finish_reason) finished = something = true
        if (choice.delta?.content) {
          parts.push(choice.delta.content)
          something = true
        }
        const calls = choice.delta?.tool_calls
        if (calls) {
          something = true
          for (const t of calls) parts.push(t.function?.name ?? '', t.function?.arguments ?? '')
        }
      }
      out.push({ chunk: c, data })
      if (wire && contents.learned !== learned) {
        learned = contents.learned
        runChunk = this.learnWire(wire, contents, relay!)
      }
      if (something && !started) {
        started = true
        return 'first'
      }
    }
    if (wire) {
      const reads = postSseReads(upstream)
      let ended = false
      try {
        while (!ended) {
          const r = await reads.next()
          if (r.done) {
            ended = true
            wire.finish()
          } else wire.push(r.value)
          // Before the first chunk that carries something, a run is one event: the first batch ends there.
          for (let item = wire.next(started ? 0 : 1); item !== null; item = wire.next(started ? 0 : 1)) {
            if (typeof item === 'string') {
              const s = take(item)
              if (s === 'stop') break
              if (s === 'first') {
                yield out
                out = []
              }
            } else {
              // Chunks of the template's id, model... with these texts: one chunk for them all.
              const c: ChatChunk = { ...runChunk!, choices: [{ index: 0, delta: { content: item.text }, finish_reason: null }] }
              last = c
              parts.push(item.text)
              out.push({ chunk: c, data: null, run: item })
              if (!started && item.text) {
                started = true
                yield out
                out = []
              }
            }
          }
          if (out.length > 0) {
            yield out
            out = []
          }
          if (failure) throw failure
          if (wire.overflow) throw malformed(this.p, `an event larger than ${MAX_EVENT} bytes`)
          if (done) break
        }
      } finally {
        if (!ended) await reads.return(undefined)
      }
    } else {
      for await (const events of postSseData(upstream)) {
        for (const event of events) {
          const s = take(event.data)
          if (s === 'stop') break
          if (s === 'first') {
            yield out
            out = []
          }
        }
        if (out.length > 0) {
          yield out
          out = []
        }
        if (failure) throw failure
        if (done) break
      }
    }
    // A clean end without [DONE] or a finish_reason is a cut answer, not a complete one.
    if (!done && !finished) throw malformed(this.p, 'the stream ended before [DONE]')
    if (!usageSeen) {
      const l = last as ChatChunk | undefined
      const chunk: ChatChunk = {
        id: l?.id ?? 'chatcmpl-usage',
        object: 'chat.completion.chunk',
        created: l?.created ?? Math.floor(Date.now() / 1000),
        model: l?.model ?? req.model,
        choices: [],
        usage: usageOf(undefined, req, () => parts.join('')),
      }
      yield [{ chunk, data: null }]
    }
  }

  /**
   * The chunks `contents` knows by their text around the content, for `wire` to relay as bytes: what
   * `relay` makes of one of them, cut around its content (none when the content is not kept as is).
   * Answers the chunk those runs stand for (its content aside).
   */
  private learnWire(wire: WireEvents, contents: ContentChunks, relay: (r: RawChunk) => string): ChatChunk | null {
    const t = contents.template(MARK)
    const relayed = t ? relay({ chunk: t.chunk, data: `${t.prefix}${MARK}${t.suffix}` }) : ''
    const at = relayed.indexOf(MARK)
    if (!t || at < 0 || relayed.indexOf(MARK, at + 1) >= 0) {
      wire.learn(null)
      return null
    }
    wire.learn({ inPrefix: `data: ${t.prefix}`, inSuffix: t.suffix, outPrefix: `data: ${relayed.slice(0, at)}`, outSuffix: `${relayed.slice(at + MARK.length)}\n\n` })
    return t.chunk
  }

  /** One event's chunk, or why it is not one. */
  private checked(data: string, contents: ContentChunks): ChatChunk {
    const fast = contents.read(data)
    if (fast) return fast
    let chunk: unknown
    try {
      chunk = JSON.parse(data)
    } catch {
      throw malformed(this.p, `an SSE event that is not JSON: ${data.slice(0, 80)}`)
    }
    // OpenAI reports a failure after the 200 as `data: {"error": {...}}`.
    if (isObject(chunk) && isObject(chunk.error)) throw malformed(this.p, `error mid-stream: ${String(chunk.error.message ?? 'unknown')}`)
    if (!isObject(chunk) || !Array.isArray(chunk.choices)) throw malformed(this.p, 'a chunk without choices')
    return chunk as ChatChunk
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

/**
 * The chunk that makes up nearly all of an OpenAI stream, in the exact form OpenAI's servers (and the
 * compatible ones that copy them) write it: one choice whose delta is text, no finish reason, no
 * usage. Recognised by one pattern instead of parsing the whole JSON text; anything else (a tool call,
 * the finish, the usage, other fields, other spacing) is parsed as usual.
 */
const CONTENT_CHUNK = /^\{"id":"([^"\\]*)","object":"chat\.completion\.chunk","created":(\d{1,15}),"model":"([^"\\]*)",(?:"service_tier":"[^"\\]*",)?(?:"system_fingerprint":(?:"[^"\\]*"|null),)?"choices":\[\{"index":0,"delta":\{("role":"assistant",)?"content":"((?:[^"\\]|\\.)*)"(?:,"refusal":null)?\},"logprobs":null,"finish_reason":null\}\](,"usage":null)?(?:,"obfuscation":"[^"\\]*")?\}$/

export function contentChunk(data: string): ChatChunk | null {
  return new ContentChunks().read(data)
}

/**
 * `contentChunk` for the events of one stream. Its chunks differ only in their text: once an event
 * has matched the pattern, the next one that starts and ends with the same characters around a text
 * without quote or backslash is the same chunk with that text, known by two comparisons instead of
 * the pattern (a fifth of the relay's CPU per chunk, bench/README.md).
 */
export class ContentChunks {
  private prefix = ''
  private suffix = ''
  private last: { id: string; created: number; model: string; role: boolean; usage: boolean } | null = null
  /** How many times the pattern matched (the text around the content may have changed each time). */
  learned = 0

  /** The text around the content of the chunks known since the last match, and a chunk of them with `content`. */
  template(content: string): { prefix: string; suffix: string; chunk: ChatChunk } | null {
    const l = this.last
    return l === null ? null : { prefix: this.prefix, suffix: this.suffix, chunk: chunkOf(l.id, l.created, l.model, l.role, l.usage, content) }
  }

  read(data: string): ChatChunk | null {
    const l = this.last
    if (l !== null && data.length >= this.prefix.length + this.suffix.length && data.startsWith(this.prefix) && data.endsWith(this.suffix)) {
      const content = data.slice(this.prefix.length, data.length - this.suffix.length)
      if (content.indexOf('"') < 0 && content.indexOf('\\') < 0) return chunkOf(l.id, l.created, l.model, l.role, l.usage, content)
    }
    const m = CONTENT_CHUNK.exec(data)
    if (!m) return null
    // The text as JSON wrote it: decoded only when it has an escape.
    const raw = m[5]!
    const content = raw.indexOf('\\') < 0 ? raw : (JSON.parse(`"${raw}"`) as string)
    const last = { id: m[1]!, created: Number(m[2]), model: m[3]!, role: m[4] !== undefined, usage: m[6] !== undefined }
    // id, model and fingerprint hold no quote, so the first `"content":"` after the delta's opening is the text's.
    const start = data.indexOf('"content":"', data.indexOf('"choices":[{"index":0,"delta":{')) + 11
    this.prefix = data.slice(0, start)
    this.suffix = data.slice(start + raw.length)
    this.last = last
    this.learned++
    return chunkOf(last.id, last.created, last.model, last.role, last.usage, content)
  }
}

function chunkOf(id: string, created: number, model: string, role: boolean, usage: boolean, content: string): ChatChunk {
  const delta: ChatChunk['choices'][number]['delta'] = role ? { role: 'assistant', content } : { content }
  const chunk: ChatChunk = { id, object: 'chat.completion.chunk', created, model, choices: [{ index: 0, delta, finish_reason: null }] }
  if (usage) chunk.usage = null
  return chunk
}

/** Only the fields of ChatRequest, so nothing the gateway carries along (`stream`...) leaks upstream. */
function chatBody(req: ChatRequest): Record<string, unknown> {
  const body: Record<string, unknown> = { model: req.model, messages: req.messages }
  for (const k of ['temperature', 'max_tokens', 'tools', 'tool_choice', 'stop', 'top_p', 'user', 'response_format'] as const) {
    if (req[k] !== undefined) body[k] = req[k]
  }
  return body
}

function completionText(m: { content: string | null; tool_calls?: { function: { name: string; arguments: string } }[] }): string {
  return (m.content ?? '') + (m.tool_calls ?? []).map((t) => t.function.name + t.function.arguments).join('')
}

/** The upstream's usage when it has the two counts; else counted (prompt from the request). */
export function usageOf(reported: Partial<Usage> | null | undefined, req: ChatRequest, completion: () => string): Usage {
  if (typeof reported?.prompt_tokens === 'number' && typeof reported.completion_tokens === 'number') {
    return { ...reported, prompt_tokens: reported.prompt_tokens, completion_tokens: reported.completion_tokens, total_tokens: reported.total_tokens ?? reported.prompt_tokens + reported.completion_tokens }
  }
  const prompt = countChatTokens(req.messages)
  const out = countTokens(completion())
  return { prompt_tokens: prompt, completion_tokens: out, total_tokens: prompt + out }
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
