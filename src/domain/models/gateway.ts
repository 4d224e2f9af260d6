import type { Logger } from 'pino'
import { AppError } from '../../lib/errors'
import { countChatTokens, countTokens } from '../../lib/tokens'
import type { Pool } from '../../store/db'
import type { Charge } from '../../store/credits'
import { emit } from '../../store/events'
import { checkBudget, price } from '../credits'
import type { ChargeOutbox } from '../charge-outbox'
import type { AccessCache } from '../access-cache'
import type { Catalog, ModelSpec, ModelType } from './catalog'
import { CircuitBreaker } from './circuit-breaker'
import { embedBatches } from './embed-batches'
import { ProviderError, type ChatChunk, type ChatCompletion, type ChatRequest, type Provider, type RawChunk, type Usage } from './types'
import { capped, captureContent, contextWith, endAfter, endAfterStream, runIn, SpanKind, startSpan, tracingOn, type Attributes, type Span } from '../../lib/tracing'
import { refusedChatParam } from './openai-params'

/** Who a call is for: the workspace charged and the request that made it. */
export interface CallContext {
  workspaceId: string
  requestId: string
  /** The caller already ran `checkBudget` for this call (beside its access check, to save a round trip). */
  budgetChecked?: boolean
  /**
   * When given, the credits of each call are collected here instead of charged at once, for the
   * caller to charge (`chargeIn`) in the transaction that stores what the calls produced.
   */
  deferredCharges?: Charge[]
  /**
   * Nobody is waiting on the answer (document ingestion): an embeddings call's requests queue at the
   * provider behind those of calls that someone is (a search's query, an API call).
   */
  background?: boolean
}

type Route = ModelSpec['routes'][number]

/**
 * The one way to call a model: catalogue lookup, hard-limit check, routes tried in order with
 * failover (429, 5xx, time-out, network error; not 400/401), a circuit breaker per route, the
 * `model.failover.triggered` event at each switch, and the credits charged for what was used.
 * Embeddings batches are also retried on their route first (embed-batches.ts).
 */
export class Gateway {
  readonly breaker = new CircuitBreaker()

  constructor(
    private readonly d: { sql: Pool; log: Logger; catalog: Catalog; providers: Map<string, Provider>; nudgeEvents: () => void; charges: ChargeOutbox; access: AccessCache },
  ) {}

  /** The write-behind every call outside an agent's transaction is charged through (charge-outbox.ts). */
  get charges(): ChargeOutbox {
    return this.d.charges
  }

  /** The answers of the check before a call, kept while nothing they depend on changes (access-cache.ts). */
  get access(): AccessCache {
    return this.d.access
  }

  /** The model `id` of `type`; unknown → 404, another type → 400. */
  model(id: string, type: ModelType): ModelSpec {
    const m = this.d.catalog.models.get(id)
    if (!m) throw new AppError('not_found', `model ${id} not found`, { param: 'model' })
    if (m.type !== type) throw new AppError('validation_error', `model ${id} is of type ${m.type}, not ${type}`, { param: 'model' })
    return m
  }

  list(): ModelSpec[] {
    return [...this.d.catalog.models.values()]
  }

  async chat(ctx: CallContext, model: ModelSpec, req: Omit<ChatRequest, 'model'>, signal: AbortSignal): Promise<ChatCompletion & { credits: number }> {
    const span = tracingOn ? callSpan('chat', ctx, model, chatAttributes(req)) : null
    return endAfter(span, async () => {
      await this.budget(ctx)
      const call = () => this.failover(ctx, this.taking(model, req), signal, (provider, route) => provider.chat({ ...req, model: route.model }, signal), span)
      const completion = await (span ? runIn(contextWith(span), call) : call())
      const credits = await this.charge(ctx, model, 'chat', completion.usage.prompt_tokens, completion.usage.completion_tokens)
      if (span) {
        span.setAttributes({
          'gen_ai.response.id': completion.id,
          'gen_ai.response.model': completion.model,
          'gen_ai.response.finish_reasons': completion.choices.map((c) => c.finish_reason ?? 'unknown'),
          'gen_ai.usage.input_tokens': completion.usage.prompt_tokens,
          'gen_ai.usage.output_tokens': completion.usage.completion_tokens,
          credits,
        })
        if (captureContent) span.setAttribute('gen_ai.output.messages', capped(completion.choices.map((c) => ({ ...c.message, finish_reason: c.finish_reason }))))
      }
      return { ...completion, model: model.id, credits }
    })
  }

  /**
   * Streams a chat. Failover happens only before the first chunk: once a byte went to the client the
   * answer cannot be restarted elsewhere, so a later failure ends the stream with an error. The last
   * chunk carries the usage with its credits (`choices: []`, as OpenAI's `include_usage` does).
   * Whatever was produced is charged, also when the client went away or the upstream failed.
   */
  chatStream(ctx: CallContext, model: ModelSpec, req: Omit<ChatRequest, 'model'>, signal: AbortSignal): AsyncGenerator<ChatChunk> {
    return this.chunksOf(model, this.chatStreamBatches(ctx, model, req, signal))
  }

  private async *chunksOf(model: ModelSpec, batches: AsyncGenerator<Relayed[]>): AsyncGenerator<ChatChunk> {
    for await (const batch of batches) for (const r of batch) yield r.final ? r.chunk : { ...r.chunk, model: model.id, usage: undefined }
  }

  /**
   * `chatStream`, a read of the upstream's at a time, each chunk as the upstream sent it with its
   * JSON text where there is one: a relay rewrites what it must (`relayText`) instead of serialising
   * every chunk again. The last batch holds the usage chunk (`final`), already in its answer's form.
   * `wire`: chunks may also come as `run`s, several content chunks already relayed, as bytes.
   */
  chatStreamBatches(ctx: CallContext, model: ModelSpec, req: Omit<ChatRequest, 'model'>, signal: AbortSignal, wire = false): AsyncGenerator<Relayed[]> {
    // With tracing off the stream is the generator itself: no delegating layer per batch.
    if (!tracingOn) return this.stream(ctx, model, req, signal, null, wire)
    const span = callSpan('chat', ctx, model, { ...chatAttributes(req), 'gen_ai.request.stream': true })
    return endAfterStream(span, this.stream(ctx, model, req, signal, span, wire))
  }

  private async *stream(ctx: CallContext, model: ModelSpec, req: Omit<ChatRequest, 'model'>, signal: AbortSignal, span: Span | null, wire: boolean): AsyncGenerator<Relayed[]> {
    await this.budget(ctx)
    let first: IteratorResult<RawChunk[]> | null = null
    // `wire`: the caller writes `relayText` of each chunk, which the provider may do itself, as bytes.
    const relay = wire ? (r: RawChunk) => relayText(r, model.id) : undefined
    const call = () => this.failover(ctx, this.taking(model, req), signal, async (provider, route) => {
      const r = { ...req, model: route.model }
      const source = provider.chatStreamBatches ? provider.chatStreamBatches(r, signal, relay) : oneByOne(provider.chatStream(r, signal))
      const it = source[Symbol.asyncIterator]()
      first = await it.next()
      return it
    }, span)
    const iterator = await (span ? runIn(contextWith(span), call) : call())
    const finishes: string[] = []
    let usage: Usage | null = null
    let produced = ''
    let last: ChatChunk | null = null
    let charged = false
    const settle = async () => {
      charged = true
      usage ??= { prompt_tokens: countChatTokens(req.messages), completion_tokens: countTokens(produced), total_tokens: 0 }
      usage.total_tokens = usage.prompt_tokens + usage.completion_tokens
      if (span) {
        span.setAttributes({
          'gen_ai.usage.input_tokens': usage.prompt_tokens,
          'gen_ai.usage.output_tokens': usage.completion_tokens,
          'gen_ai.response.finish_reasons': finishes,
          ...(last ? { 'gen_ai.response.id': last.id, 'gen_ai.response.model': last.model } : {}),
        })
        if (captureContent) span.setAttribute('gen_ai.output.messages', capped([{ role: 'assistant', content: produced, finish_reason: finishes[0] ?? null }]))
      }
      return this.charge(ctx, model, 'chat', usage.prompt_tokens, usage.completion_tokens)
    }
    try {
      for (let step = first as IteratorResult<RawChunk[]> | null; step && !step.done; step = await iterator.next()) {
        const out: Relayed[] = []
        for (const r of step.value) {
          const chunk = r.chunk
          if (chunk.usage) usage = { ...chunk.usage }
          if (chunk.choices.length === 0) continue
          for (const c of chunk.choices) {
            const content = c.delta.content
            if (content) produced += content
            if (span && c.finish_reason) finishes.push(c.finish_reason)
          }
          last = chunk
          out.push(r)
        }
        if (out.length > 0) yield out
      }
      const credits = await settle()
      const chunk: ChatChunk = { id: last?.id ?? `chatcmpl-${ctx.requestId}`, object: 'chat.completion.chunk', created: last?.created ?? Math.floor(Date.now() / 1000), model: model.id, choices: [], usage: { ...usage!, credits } as Usage }
      yield [{ chunk, data: null, final: true }]
    } finally {
      if (!charged) await settle().catch((err) => this.d.log.error({ err }, 'charging an interrupted stream failed'))
    }
  }

  async embed(ctx: CallContext, model: ModelSpec, inputs: string[], signal: AbortSignal): Promise<{ vectors: number[][]; tokens: number; credits: number }> {
    if (!tracingOn) return this.embedding(ctx, model, inputs, signal, null)
    const span = callSpan('embeddings', ctx, model, { 'gen_ai.embeddings.input_count': inputs.length })
    return endAfter(span, async () => {
      const result = await runIn(contextWith(span), () => this.embedding(ctx, model, inputs, signal, span))
      span.setAttributes({ 'gen_ai.usage.input_tokens': result.tokens, credits: result.credits })
      return result
    })
  }

  private async embedding(ctx: CallContext, model: ModelSpec, inputs: string[], signal: AbortSignal, span: Span | null): Promise<{ vectors: number[][]; tokens: number; credits: number }> {
    await this.budget(ctx)
    const result = await this.failover(ctx, model, signal, (provider, route) =>
      // Batches of the provider's max_batch, through its limiter, retried, in input order (embed-batches.ts).
      embedBatches(provider, route.model, inputs, signal, ctx.background === true, (r) => {
        span?.addEvent('gen_ai.retry', { provider: route.provider, attempt: r.attempt, delay_ms: r.delayMs, reason: r.error.failover!, ...(r.error.status !== null ? { status: r.error.status } : {}) })
        this.d.log.warn({ model: model.id, provider: route.provider, reason: r.error.failover, status: r.error.status, attempt: r.attempt, delay_ms: r.delayMs }, 'embedding batch failed; retrying')
      }), span)
    const credits = await this.charge(ctx, model, 'embedding', result.tokens, 0)
    return { ...result, credits }
  }

  /**
   * Whether `model` is the built-in local-embed on its first route (which never fails over): its
   * vectors are the same wherever in this service they are computed, so ingestion computes them in
   * the document process, beside the chunker, and only charges them here (`embeddedLocally`).
   */
  isLocalEmbedding(model: ModelSpec): boolean {
    const route = model.type === 'embedding' ? model.routes[0] : undefined
    return route !== undefined && route.model === 'local-embed' && this.d.providers.get(route.provider)?.kind === 'local'
  }

  /**
   * What an `embed` call of local-embed does besides computing (the budget check, the charge for
   * `tokens`, its span), for vectors computed elsewhere in this service (`isLocalEmbedding`).
   */
  async embeddedLocally(ctx: CallContext, model: ModelSpec, inputs: number, tokens: number): Promise<number> {
    const span = tracingOn ? callSpan('embeddings', ctx, model, { 'gen_ai.embeddings.input_count': inputs, 'gen_ai.provider.name': 'local' }) : null
    return endAfter(span, async () => {
      await this.budget(ctx)
      const credits = await this.charge(ctx, model, 'embedding', tokens, 0)
      span?.setAttributes({ 'gen_ai.usage.input_tokens': tokens, credits })
      return credits
    })
  }

  async rerank(ctx: CallContext, model: ModelSpec, query: string, documents: string[], topN: number | undefined, signal: AbortSignal) {
    const span = tracingOn ? callSpan('rerank', ctx, model, { 'gen_ai.rerank.document_count': documents.length, ...(captureContent ? { 'gen_ai.input.messages': capped(query) } : {}) }) : null
    return endAfter(span, async () => {
      await this.budget(ctx)
      const call = () => this.failover(ctx, model, signal, (provider, route) => provider.rerank(route.model, query, documents, topN, signal), span)
      const result = await (span ? runIn(contextWith(span), call) : call())
      const credits = await this.charge(ctx, model, 'rerank', result.tokens, 0)
      span?.setAttributes({ 'gen_ai.usage.input_tokens': result.tokens, credits })
      return { ...result, credits }
    })
  }

  /**
   * The model with the routes whose provider takes every OpenAI parameter the request passes
   * (openai-params.ts); a 400 naming the parameter when none does. Without such parameters, the model
   * as it is.
   */
  private taking(model: ModelSpec, req: Pick<ChatRequest, 'openai'>): ModelSpec {
    if (!req.openai) return model
    let refused: string | null = null
    const routes = model.routes.filter((r) => {
      const provider = this.d.providers.get(r.provider)!
      const param = refusedChatParam(provider.kind, req.openai)
      refused ??= param
      return param === null
    })
    if (routes.length > 0) return routes.length === model.routes.length ? model : { ...model, routes }
    const kinds = [...new Set(model.routes.map((r) => this.d.providers.get(r.provider)!.kind))].join(', ')
    throw new AppError('validation_error', `model ${model.id} is served by ${kinds} providers, which cannot take ${refused} (docs/models.md, "OpenAI compatibility")`, { param: refused ?? 'model' })
  }

  /**
   * Tries the model's routes in order. Routes whose breaker is open are skipped while another is
   * available; when every route is cooling down they are tried anyway (failing fast on all of them
   * would turn a brief outage into a long one).
   */
  private async failover<T>(ctx: CallContext, model: ModelSpec, signal: AbortSignal, call: (provider: Provider, route: Route) => Promise<T>, span: Span | null = null): Promise<T> {
    const open = model.routes.filter((r) => this.breaker.allows(key(r)))
    const routes = open.length > 0 ? open : model.routes
    let last: ProviderError | null = null
    for (const [i, route] of routes.entries()) {
      const provider = this.d.providers.get(route.provider)!
      // The route that answers names the provider (a failover overwrites the one that failed).
      span?.setAttributes({ 'gen_ai.provider.name': provider.kind, 'gen_ai.route.provider': route.provider, 'gen_ai.route.model': route.model })
      try {
        const result = await call(provider, route)
        this.breaker.succeeded(key(route))
        return result
      } catch (err) {
        if (signal.aborted) throw new AppError('validation_error', 'the client closed the request')
        if (!(err instanceof ProviderError)) throw err
        if (!err.failover) {
          // The request itself is at fault (400) or our configuration is (401, 403, 404): no failover.
          if (err.status === 400 || err.status === 422) throw new AppError('validation_error', `the provider refused the request: ${err.message}`, { param: err.param ?? 'messages' })
          throw new AppError('upstream_error', `provider ${route.provider} failed: ${err.message}`)
        }
        this.breaker.failed(key(route))
        span?.addEvent('gen_ai.failover', { provider: route.provider, reason: err.failover, ...(err.status !== null ? { status: err.status } : {}) })
        last = err
        const next = routes[i + 1]
        if (next) await this.announce(ctx, model, route, next, err)
        this.d.log.warn({ model: model.id, provider: route.provider, reason: err.failover, status: err.status }, 'model route failed')
      }
    }
    if (last?.failover === 'timeout') throw new AppError('upstream_timeout', `every route of model ${model.id} timed out`)
    throw new AppError('upstream_error', `every route of model ${model.id} failed: ${last?.message ?? 'no route'}`)
  }

  private async announce(ctx: CallContext, model: ModelSpec, from: Route, to: Route, err: ProviderError) {
    try {
      await emit(this.d.sql, ctx.workspaceId, 'model.failover.triggered', {
        model: model.id,
        from: `${from.provider}/${from.model}`,
        to: `${to.provider}/${to.model}`,
        reason: err.failover,
      })
      this.d.nudgeEvents()
    } catch (e) {
      this.d.log.error({ err: e }, 'could not record model.failover.triggered')
    }
  }

  /** The workspace's hard limit, committed and held charges counted, unless the caller checked it beside its access. */
  private async budget(ctx: CallContext): Promise<void> {
    if (!ctx.budgetChecked) await checkBudget(this.d.sql, ctx.workspaceId, this.d.charges)
  }

  private async charge(ctx: CallContext, model: ModelSpec, kind: 'chat' | 'embedding' | 'rerank', tokensIn: number, tokensOut: number): Promise<number> {
    const credits = price(model, tokensIn, tokensOut)
    const c = { workspace_id: ctx.workspaceId, model: model.id, kind, tokens_in: tokensIn, tokens_out: tokensOut, credits, request_id: ctx.requestId }
    if (ctx.deferredCharges) ctx.deferredCharges.push(c)
    // Journaled before the answer leaves, written to the ledger with other calls' charges a few ms later.
    else this.d.charges.add(c)
    return credits
  }
}

const key = (r: Route) => `${r.provider}/${r.model}`

/** A chunk of a streamed chat on its way out; `final`: the usage chunk, already in its answer's form. */
export interface Relayed extends RawChunk {
  final?: boolean
}

/** A provider without `chatStreamBatches`: each chunk a batch of its own, with no JSON text. */
async function* oneByOne(chunks: AsyncIterable<ChatChunk>): AsyncGenerator<RawChunk[]> {
  for await (const chunk of chunks) yield [{ chunk, data: null }]
}

/**
 * A relayed chunk as the JSON text of an OpenAI stream event: the model named as the catalogue's
 * (`model`), no `usage` (it comes once, in the last chunk). The upstream's own text when the rewrite
 * is a plain substitution (the usual `"model":"<name>"` and `"usage":null` of OpenAI's servers),
 * else the chunk serialised again: the same JSON either way.
 */
export function relayText(r: Relayed, model: string): string {
  if (r.final) return JSON.stringify(r.chunk)
  let text = r.data
  const chunk = r.chunk
  if (text !== null && chunk.model !== model) {
    const needle = typeof chunk.model === 'string' ? `"model":${JSON.stringify(chunk.model)}` : null
    const found = needle ? text.indexOf(needle) : -1
    text = found < 0 ? null : `${text.slice(0, found)}"model":${JSON.stringify(model)}${text.slice(found + needle!.length)}`
  }
  if (text !== null && 'usage' in chunk) {
    if (chunk.usage !== null && chunk.usage !== undefined) text = null
    else {
      const at = text.indexOf(',"usage":null')
      text = at < 0 ? null : text.slice(0, at) + text.slice(at + 13)
    }
  }
  return text ?? JSON.stringify({ ...chunk, model, usage: undefined })
}

/** A GenAI client span (OpenTelemetry's GenAI semantic conventions: docs/observability.md). */
function callSpan(op: 'chat' | 'embeddings' | 'rerank', ctx: CallContext, model: ModelSpec, extra: Attributes): Span {
  return startSpan(`${op} ${model.id}`, {
    'gen_ai.operation.name': op,
    'gen_ai.request.model': model.id,
    workspace_id: ctx.workspaceId,
    request_id: ctx.requestId,
    ...extra,
  }, { kind: SpanKind.CLIENT })
}

/** A chat request's parameters, and its messages only when content capture is on. */
function chatAttributes(req: Omit<ChatRequest, 'model'>): Attributes {
  const a: Attributes = {}
  if (req.temperature !== undefined) a['gen_ai.request.temperature'] = req.temperature
  if (req.max_tokens !== undefined) a['gen_ai.request.max_tokens'] = req.max_tokens
  if (req.top_p !== undefined) a['gen_ai.request.top_p'] = req.top_p
  if (req.tools?.length) a['gen_ai.request.tools'] = req.tools.map((t) => t.function.name)
  if (captureContent) a['gen_ai.input.messages'] = capped(req.messages)
  return a
}
