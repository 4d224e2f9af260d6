import { Elysia, t } from 'elysia'
import type { Deps } from '../deps'
import { relayText, type CallContext, type Relayed } from '../domain/models/gateway'
import { checkAccessAndBudget } from '../domain/budgets'
import { checkChatParams, shortenEmbeddings } from '../domain/models/openai-params'
import { resolveWorkspaceId } from '../domain/ownership'
import type { Caller } from '../domain/access'
import { notFound } from '../lib/errors'
import { Described, errors } from './common.model'
import {
  ChatBody, ChatCompletionView, EmbeddingsBody, EmbeddingsView, ModelView, OpenAIChatBody, OpenAIEmbeddingsBody, RerankBody, RerankView,
  toMessages, toModel,
} from './models.model'
import { agentIdOf } from '../domain/agents/completions'
import { agentCompletion } from './agent-completions'
import { authenticated } from './plugins/auth'
import { errorEvent, sseResponse, type SseEvent } from './plugins/sse'
import { ChatCompletionStream } from './streams.model'

const tags = ['models']

const encoder = new TextEncoder()

/**
 * The SSE write of a batch of relayed chunks (null: nothing to write); the usage chunk
 * (`choices: []`) only when asked for. Runs of chunks relayed as bytes go as they are.
 */
function writeOf(batch: Relayed[], model: string, includeUsage: boolean): SseEvent | null {
  if (batch.length === 1 && batch[0]!.run) return { bytes: [batch[0]!.run.wire] }
  let raw = ''
  let bytes: Uint8Array[] | null = null
  for (const r of batch) {
    if (r.run) {
      bytes ??= []
      if (raw) bytes.push(encoder.encode(raw))
      raw = ''
      bytes.push(r.run.wire)
      continue
    }
    if (r.chunk.choices.length === 0 && !includeUsage) continue
    raw += `data: ${relayText(r, model)}\n\n`
  }
  if (bytes === null) return raw ? { raw } : null
  if (raw) bytes.push(encoder.encode(raw))
  return { bytes }
}

type ChatInput = typeof ChatBody.static | typeof OpenAIChatBody.static

/**
 * The model endpoints and the OpenAI drop-ins (docs/models.md). Every call is charged to the resolved
 * workspace (docs/models.md, "Credits and budgets"), which the caller must be allowed to `use`.
 */
export function modelRoutes(deps: Deps) {
  const gateway = deps.models

  async function context(caller: Caller, requestId: string, explicit: string | undefined, header: string | undefined): Promise<CallContext> {
    const workspaceId = await resolveWorkspaceId(deps, caller, explicit, header)
    // Both before any provider is called, in one query; a refused access (403/404) wins over an
    // exhausted budget (402).
    await checkAccessAndBudget(deps, caller, workspaceId)
    return { workspaceId, requestId, budgetChecked: true }
  }

  function chatRequest(body: ChatInput) {
    return {
      messages: toMessages(body.messages),
      temperature: body.temperature,
      max_tokens: body.max_tokens,
      tools: body.tools,
      tool_choice: body.tool_choice,
      stop: body.stop,
      top_p: body.top_p,
      user: body.user,
      response_format: body.response_format ?? undefined,
    }
  }

  /**
   * OpenAI's stream format: `data: <chunk>` lines, `data: [DONE]` at the end, an `error` event on
   * failure. The chunks of one upstream read go out as one write, each the upstream's own JSON text
   * where only the model's name needs changing (`relayText`), the usual content chunks as bytes.
   */
  async function* chunks(ctx: CallContext, model: string, source: AsyncIterable<Relayed[]>, includeUsage: boolean): AsyncGenerator<SseEvent> {
    try {
      for await (const batch of source) {
        const write = writeOf(batch, model, includeUsage)
        if (write) yield write
      }
      yield { data: '[DONE]' }
    } catch (err) {
      yield errorEvent(ctx.requestId, err)
    }
  }

  /** Typed as the JSON answer for the schema; with `stream: true` it is the SSE Response itself. */
  async function chat(caller: Caller, requestId: string, body: ChatInput, workspace: string | undefined, header: string | undefined, request: Request, set: { headers: Record<string, string | number> }, route: string, includeUsageDefault: boolean, headers: Record<string, string | undefined>): Promise<typeof ChatCompletionView.static> {
    const agentId = agentIdOf(body.model)
    if (agentId !== null) {
      const agentBody = { ...body, messages: toMessages(body.messages), workspace_id: workspace }
      // Cast: a stream is the SSE Response itself (see below).
      return agentCompletion(deps, { caller, requestId, agentId, model: body.model, body: agentBody, headers: { ...headers, 'x-workspace-id': header }, request, set, route, includeUsageDefault }) as never
    }
    const model = gateway.model(body.model, 'llm')
    const ctx = await context(caller, requestId, workspace, header)
    const req = chatRequest(body)
    if (body.stream) {
      const abort = new AbortController()
      const stream = gateway.chatStreamBatches(ctx, model, req, abort.signal, true)
      // The first chunk is awaited here, so that an error before any byte (unknown route, budget,
      // every route failed) is an ordinary JSON error answer, not a broken stream.
      const first = await stream.next()
      const includeUsage = body.stream_options?.include_usage ?? includeUsageDefault
      // The first batch's text now: the answer's first write, with no generator step before it.
      const head = first.done ? null : writeOf(first.value, model.id, includeUsage)
      const events = chunks(ctx, model.id, { [Symbol.asyncIterator]: () => stream }, includeUsage)
      const rest: AsyncIterable<SseEvent> = {
        [Symbol.asyncIterator]: () => ({
          next: () => events.next(),
          // A client gone before `events` took its first step: the gateway's stream is ended all the
          // same (its `finally` charges what was produced); ending a generator that never started
          // would not reach it.
          return: async () => {
            await stream.return(undefined as never)
            return events.return(undefined)
          },
        }),
      }
      // Cast: Elysia types an async handler as a Promise of one answer type (a Response, or a declared body), not of their union.
      return sseResponse(deps, request, set, route, rest, abort, undefined, undefined, head ?? undefined) as never
    }
    const c = await gateway.chat(ctx, model, req, request.signal ?? new AbortController().signal)
    // The known fields only: upstreams add their own (system_fingerprint, usage details...).
    return {
      request_id: requestId,
      id: c.id,
      object: 'chat.completion',
      created: c.created,
      model: c.model,
      choices: c.choices.map((ch) => ({ index: ch.index, message: { ...ch.message }, finish_reason: ch.finish_reason })),
      usage: { prompt_tokens: c.usage.prompt_tokens, completion_tokens: c.usage.completion_tokens, total_tokens: c.usage.total_tokens, credits: c.credits },
    }
  }

  async function embeddings(caller: Caller, requestId: string, model: string, input: string[], workspace: string | undefined, header: string | undefined, signal: AbortSignal) {
    const spec = gateway.model(model, 'embedding')
    const ctx = await context(caller, requestId, workspace, header)
    return { spec, ...(await gateway.embed(ctx, spec, input, signal)) }
  }

  return new Elysia({ name: 'routes.models' })
    .use(authenticated(deps))
    .get('/models', ({ requestId, query }) => {
      const data = gateway.list().filter((m) => (!query.type || m.type === query.type) && (!query.vendor || m.vendor === query.vendor)).map(toModel)
      return { request_id: requestId, object: 'list' as const, data }
    }, {
      query: t.Object({ type: t.Optional(t.UnionEnum(['llm', 'embedding', 'rerank'], { default: undefined })), vendor: t.Optional(t.String({ maxLength: 64 })) }, { additionalProperties: false }),
      response: { 200: Described(t.Object({ request_id: t.String(), object: t.Literal('list'), data: t.Array(ModelView) }), 'The models of the catalogue'), ...errors() },
      detail: { operationId: 'listModels', tags, summary: 'List the models of the catalogue (MODELS_FILE merged over the built-in local models)' },
    })
    .get('/models/:id', ({ requestId, params }) => {
      const found = gateway.list().find((m) => m.id === params.id)
      if (!found) throw notFound('model', params.id)
      return { request_id: requestId, ...toModel(found) }
    }, {
      params: t.Object({ id: t.String({ minLength: 1, maxLength: 128, description: 'A model id of GET /v1/models' }) }),
      response: { 200: Described(t.Object({ request_id: t.String(), ...ModelView.properties }), 'The model'), ...errors(404) },
      detail: { operationId: 'getModel', tags, summary: 'Get one model of the catalogue (the OpenAI SDK\'s models.retrieve)' },
    })
    .post('/models/llm/chat', ({ caller, requestId, body, headers, request, set, route }) =>
      chat(caller, requestId, body, body.workspace_id, headers['x-workspace-id'], request, set, route, true, headers), {
      body: ChatBody,
      parse: 'json',
      response: { 200: ChatCompletionView, ...errors(402, 403, 404, 502, 504) },
      detail: { operationId: 'chatWithModel', ...ChatCompletionStream, tags, summary: 'Chat with an LLM (OpenAI chat.completion; server-sent events with stream: true)' },
    })
    .post('/models/embeddings', async ({ caller, requestId, body, headers, request }) => {
      const r = await embeddings(caller, requestId, body.model, body.input, body.workspace_id, headers['x-workspace-id'], request.signal)
      return { request_id: requestId, model: r.spec.id, data: r.vectors.map((embedding, index) => ({ embedding, index })), usage: { tokens: r.tokens, credits: r.credits } }
    }, {
      body: EmbeddingsBody,
      parse: 'json',
      response: { 200: Described(EmbeddingsView, 'One vector per text, in the order given'), ...errors(402, 403, 404, 502, 504) },
      detail: { operationId: 'embedTexts', tags, summary: 'Embed texts (order kept by index; batches split to the provider\'s limit)' },
    })
    .post('/models/rerank', async ({ caller, requestId, body, headers, request }) => {
      const model = gateway.model(body.model, 'rerank')
      const ctx = await context(caller, requestId, body.workspace_id, headers['x-workspace-id'])
      const r = await gateway.rerank(ctx, model, body.query, body.documents, body.top_n, request.signal)
      return { request_id: requestId, model: model.id, results: r.results, usage: { tokens: r.tokens, credits: r.credits } }
    }, {
      body: RerankBody,
      parse: 'json',
      response: { 200: Described(RerankView, 'The documents\' scores, best first'), ...errors(402, 403, 404, 502, 504) },
      detail: { operationId: 'rerankDocuments', tags, summary: 'Rerank documents against a query' },
    })
    .post('/chat/completions', ({ caller, requestId, body, headers, request, set, route }) => {
      checkChatParams(body)
      const input = body.max_completion_tokens !== undefined && body.max_tokens === undefined ? { ...body, max_tokens: body.max_completion_tokens } : body
      return chat(caller, requestId, input, body.workspace_id, headers['x-workspace-id'], request, set, route, false, headers)
    }, {
      body: OpenAIChatBody,
      parse: 'json',
      response: { 200: ChatCompletionView, ...errors(402, 403, 404, 502, 504) },
      detail: {
        operationId: 'createChatCompletion',
        ...ChatCompletionStream,
        tags: ['openai'],
        summary: 'OpenAI drop-in: chat completions (the official SDK works with baseURL set to /v1)',
        description: 'model "agent:<agent id>" runs a turn of that agent: the last message is the user\'s, the X-Conversation-Id request header continues a conversation and the response header names it, user is the user_id (docs/agents.md, "Agents from any OpenAI client").',
        parameters: [{ name: 'X-Conversation-Id', in: 'header', required: false, schema: { type: 'string' }, description: 'With model agent:<id>: the conversation to continue (answered in the response header of the same name)' }],
      },
    })
    .post('/embeddings', async ({ caller, requestId, body, headers, request }) => {
      const input = typeof body.input === 'string' ? [body.input] : body.input
      const r = await embeddings(caller, requestId, body.model, input, body.workspace_id, headers['x-workspace-id'], request.signal)
      const vectors = shortenEmbeddings(r.spec, body.dimensions, r.vectors)
      // The SDK asks for base64 by default: little-endian float32, as OpenAI sends.
      const encode = (v: number[]) => (body.encoding_format === 'base64' ? Buffer.from(new Float32Array(v).buffer).toString('base64') : v)
      return {
        request_id: requestId,
        object: 'list' as const,
        model: r.spec.id,
        data: vectors.map((v, index) => ({ object: 'embedding' as const, embedding: encode(v), index })),
        usage: { prompt_tokens: r.tokens, total_tokens: r.tokens, credits: r.credits },
      }
    }, {
      body: OpenAIEmbeddingsBody,
      parse: 'json',
      response: {
        200: Described(t.Object({
          request_id: t.String(),
          object: t.Literal('list'),
          model: t.String(),
          data: t.Array(t.Object({ object: t.Literal('embedding'), embedding: t.Union([t.Array(t.Number()), t.String()]), index: t.Integer() })),
          usage: t.Object({ prompt_tokens: t.Integer(), total_tokens: t.Integer(), credits: t.Number() }),
        }), 'OpenAI\'s embeddings list, plus request_id and usage.credits'),
        ...errors(402, 403, 404, 502, 504),
      },
      detail: { operationId: 'createEmbedding', tags: ['openai'], summary: 'OpenAI drop-in: embeddings (float or base64)' },
    })
}
