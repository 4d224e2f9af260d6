import type { Logger } from 'pino'
import { AppError } from '../../lib/errors'
import { countChatTokens, countTokens } from '../../lib/tokens'
import type { Pool } from '../../store/db'
import type { Charge } from '../../store/credits'
import { emit } from '../../store/events'
import { charge, checkBudget, price } from '../credits'
import type { Catalog, ModelSpec, ModelType } from './catalog'
import { CircuitBreaker } from './circuit-breaker'
import { ProviderError, type ChatChunk, type ChatCompletion, type ChatRequest, type Provider, type Usage } from './types'

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
}

type Route = ModelSpec['routes'][number]

/**
 * The one way to call a model: catalogue lookup, hard-limit check, routes tried in order with
 * failover (429, 5xx, time-out, network error; not 400/401), a circuit breaker per route, the
 * `model.failover.triggered` event at each switch, and the credits charged for what was used.
 */
export class Gateway {
  readonly breaker = new CircuitBreaker()

  constructor(
    private readonly d: { sql: Pool; log: Logger; catalog: Catalog; providers: Map<string, Provider>; nudgeEvents: () => void },
  ) {}

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
    if (!ctx.budgetChecked) await checkBudget(this.d.sql, ctx.workspaceId)
    const completion = await this.failover(ctx, model, signal, (provider, route) => provider.chat({ ...req, model: route.model }, signal))
    const credits = await this.charge(ctx, model, 'chat', completion.usage.prompt_tokens, completion.usage.completion_tokens)
    return { ...completion, model: model.id, credits }
  }

  /**
   * Streams a chat. Failover happens only before the first chunk: once a byte went to the client the
   * answer cannot be restarted elsewhere, so a later failure ends the stream with an error. The last
   * chunk carries the usage with its credits (`choices: []`, as OpenAI's `include_usage` does).
   * Whatever was produced is charged, also when the client went away or the upstream failed.
   */
  async *chatStream(ctx: CallContext, model: ModelSpec, req: Omit<ChatRequest, 'model'>, signal: AbortSignal): AsyncGenerator<ChatChunk> {
    if (!ctx.budgetChecked) await checkBudget(this.d.sql, ctx.workspaceId)
    let first: IteratorResult<ChatChunk> | null = null
    const iterator = await this.failover(ctx, model, signal, async (provider, route) => {
      const it = provider.chatStream({ ...req, model: route.model }, signal)[Symbol.asyncIterator]()
      first = await it.next()
      return it
    })
    let usage: Usage | null = null
    let produced = ''
    let last: ChatChunk | null = null
    let charged = false
    const settle = async () => {
      charged = true
      usage ??= { prompt_tokens: countChatTokens(req.messages), completion_tokens: countTokens(produced), total_tokens: 0 }
      usage.total_tokens = usage.prompt_tokens + usage.completion_tokens
      return this.charge(ctx, model, 'chat', usage.prompt_tokens, usage.completion_tokens)
    }
    try {
      for (let step = first as IteratorResult<ChatChunk> | null; step && !step.done; step = await iterator.next()) {
        const chunk = step.value
        if (chunk.usage) usage = { ...chunk.usage }
        if (chunk.choices.length === 0) continue
        for (const c of chunk.choices) produced += c.delta.content ?? ''
        last = chunk
        yield { ...chunk, model: model.id, usage: undefined }
      }
      const credits = await settle()
      yield { id: last?.id ?? `chatcmpl-${ctx.requestId}`, object: 'chat.completion.chunk', created: last?.created ?? Math.floor(Date.now() / 1000), model: model.id, choices: [], usage: { ...usage!, credits } as Usage }
    } finally {
      if (!charged) await settle().catch((err) => this.d.log.error({ err }, 'charging an interrupted stream failed'))
    }
  }

  async embed(ctx: CallContext, model: ModelSpec, inputs: string[], signal: AbortSignal): Promise<{ vectors: number[][]; tokens: number; credits: number }> {
    if (!ctx.budgetChecked) await checkBudget(this.d.sql, ctx.workspaceId)
    const result = await this.failover(ctx, model, signal, async (provider, route) => {
      const vectors: number[][] = []
      let tokens = 0
      // Split to the provider's batch limit; order is kept (each batch answers in input order).
      for (let i = 0; i < inputs.length; i += provider.maxEmbedBatch) {
        const part = await provider.embed(route.model, inputs.slice(i, i + provider.maxEmbedBatch), signal)
        vectors.push(...part.vectors)
        tokens += part.tokens
      }
      return { vectors, tokens }
    })
    const credits = await this.charge(ctx, model, 'embedding', result.tokens, 0)
    return { ...result, credits }
  }

  async rerank(ctx: CallContext, model: ModelSpec, query: string, documents: string[], topN: number | undefined, signal: AbortSignal) {
    if (!ctx.budgetChecked) await checkBudget(this.d.sql, ctx.workspaceId)
    const result = await this.failover(ctx, model, signal, (provider, route) => provider.rerank(route.model, query, documents, topN, signal))
    const credits = await this.charge(ctx, model, 'rerank', result.tokens, 0)
    return { ...result, credits }
  }

  /**
   * Tries the model's routes in order. Routes whose breaker is open are skipped while another is
   * available; when every route is cooling down they are tried anyway (failing fast on all of them
   * would turn a brief outage into a long one).
   */
  private async failover<T>(ctx: CallContext, model: ModelSpec, signal: AbortSignal, call: (provider: Provider, route: Route) => Promise<T>): Promise<T> {
    const open = model.routes.filter((r) => this.breaker.allows(key(r)))
    const routes = open.length > 0 ? open : model.routes
    let last: ProviderError | null = null
    for (const [i, route] of routes.entries()) {
      const provider = this.d.providers.get(route.provider)!
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

  private async charge(ctx: CallContext, model: ModelSpec, kind: 'chat' | 'embedding' | 'rerank', tokensIn: number, tokensOut: number): Promise<number> {
    const credits = price(model, tokensIn, tokensOut)
    const c = { workspace_id: ctx.workspaceId, model: model.id, kind, tokens_in: tokensIn, tokens_out: tokensOut, credits, request_id: ctx.requestId }
    if (ctx.deferredCharges) {
      ctx.deferredCharges.push(c)
      return credits
    }
    await charge(this.d.sql, c)
    return credits
  }
}

const key = (r: Route) => `${r.provider}/${r.model}`
