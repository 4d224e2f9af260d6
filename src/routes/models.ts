import { Elysia, t } from 'elysia'
import type { Deps } from '../deps'
import { checkChatParams, shortenEmbeddings } from '../domain/models/openai-params'
import { notFound } from '../lib/errors'
import { Described, errors } from './common.model'
import { callContext, chat, embedTexts } from './model-calls'
import { ChatBody, ChatCompletionView, EmbeddingsBody, EmbeddingsView, ModelView, OpenAIChatBody, OpenAIEmbeddingsBody, RerankBody, RerankView, toModel } from './models.model'
import { authenticated } from './plugins/auth'
import { ChatCompletionStream } from './streams.model'

const tags = ['models']

/**
 * The model endpoints and the OpenAI drop-ins (docs/models.md), in this order: the catalogue, the
 * calls, the drop-ins. What a call does before the gateway is model-calls.ts'.
 */
export function modelRoutes(deps: Deps) {
  return new Elysia({ name: 'routes.models' }).use(catalogueRoutes(deps)).use(callRoutes(deps)).use(openAIRoutes(deps))
}

function catalogueRoutes(deps: Deps) {
  return new Elysia({ name: 'routes.models.catalogue' })
    .use(authenticated(deps))
    .get('/models', ({ requestId, query }) => {
      const data = deps.models.list().filter((m) => (!query.type || m.type === query.type) && (!query.vendor || m.vendor === query.vendor)).map(toModel)
      return { request_id: requestId, object: 'list' as const, data }
    }, {
      query: t.Object({ type: t.Optional(t.UnionEnum(['llm', 'embedding', 'rerank'], { default: undefined })), vendor: t.Optional(t.String({ maxLength: 64 })) }, { additionalProperties: false }),
      response: { 200: Described(t.Object({ request_id: t.String(), object: t.Literal('list'), data: t.Array(ModelView) }), 'The models of the catalogue'), ...errors() },
      detail: { operationId: 'listModels', tags, summary: 'List the models of the catalogue (MODELS_FILE merged over the built-in local models)' },
    })
    .get('/models/:id', ({ requestId, params }) => {
      const found = deps.models.list().find((m) => m.id === params.id)
      if (!found) throw notFound('model', params.id)
      return { request_id: requestId, ...toModel(found) }
    }, {
      params: t.Object({ id: t.String({ minLength: 1, maxLength: 128, description: 'A model id of GET /v1/models' }) }),
      response: { 200: Described(t.Object({ request_id: t.String(), ...ModelView.properties }), 'The model'), ...errors(404) },
      detail: { operationId: 'getModel', tags, summary: 'Get one model of the catalogue (the OpenAI SDK\'s models.retrieve)' },
    })
}

function callRoutes(deps: Deps) {
  return new Elysia({ name: 'routes.models.calls' })
    .use(authenticated(deps))
    .post('/models/llm/chat', ({ caller, requestId, body, headers, request, set, route }) =>
      chat(deps, { caller, requestId, body, headers, request, set, route, includeUsageDefault: true }), {
      body: ChatBody,
      parse: 'json',
      response: { 200: ChatCompletionView, ...errors(402, 403, 404, 502, 504) },
      detail: { operationId: 'chatWithModel', ...ChatCompletionStream, tags, summary: 'Chat with an LLM (OpenAI chat.completion; server-sent events with stream: true)' },
    })
    .post('/models/embeddings', async ({ caller, requestId, body, headers, request }) => {
      const r = await embedTexts(deps, caller, requestId, body.model, body.input, body.workspace_id, headers['x-workspace-id'], request.signal)
      return { request_id: requestId, model: r.spec.id, data: r.vectors.map((embedding, index) => ({ embedding, index })), usage: { tokens: r.tokens, credits: r.credits } }
    }, {
      body: EmbeddingsBody,
      parse: 'json',
      response: { 200: Described(EmbeddingsView, 'One vector per text, in the order given'), ...errors(402, 403, 404, 502, 504) },
      detail: { operationId: 'embedTexts', tags, summary: 'Embed texts (order kept by index; batches split to the provider\'s limit)' },
    })
    .post('/models/rerank', async ({ caller, requestId, body, headers, request }) => {
      const model = deps.models.model(body.model, 'rerank')
      const ctx = await callContext(deps, caller, requestId, body.workspace_id, headers['x-workspace-id'])
      const r = await deps.models.rerank(ctx, model, body.query, body.documents, body.top_n, request.signal)
      return { request_id: requestId, model: model.id, results: r.results, usage: { tokens: r.tokens, credits: r.credits } }
    }, {
      body: RerankBody,
      parse: 'json',
      response: { 200: Described(RerankView, 'The documents\' scores, best first'), ...errors(402, 403, 404, 502, 504) },
      detail: { operationId: 'rerankDocuments', tags, summary: 'Rerank documents against a query' },
    })
}

/** The OpenAI drop-ins: the official SDK works with baseURL set to /v1. */
function openAIRoutes(deps: Deps) {
  return new Elysia({ name: 'routes.models.openai' })
    .use(authenticated(deps))
    .post('/chat/completions', ({ caller, requestId, body, headers, request, set, route }) => {
      checkChatParams(body)
      const input = body.max_completion_tokens !== undefined && body.max_tokens === undefined ? { ...body, max_tokens: body.max_completion_tokens } : body
      return chat(deps, { caller, requestId, body: input, headers, request, set, route, includeUsageDefault: false })
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
      const r = await embedTexts(deps, caller, requestId, body.model, input, body.workspace_id, headers['x-workspace-id'], request.signal)
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
