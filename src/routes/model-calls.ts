import type { Deps } from '../deps'
import type { Caller } from '../domain/access'
import { agentIdOf } from '../domain/agents/completions'
import { checkAccessAndBudget } from '../domain/budgets'
import { relayText, type CallContext, type Relayed } from '../domain/models/gateway'
import type { ModelSpec } from '../domain/models/catalog'
import { passedChatParams } from '../domain/models/openai-params'
import { invalid } from '../lib/errors'
import { isObject } from '../domain/models/providers/upstream'
import { resolveWorkspaceId } from '../domain/ownership'
import { agentCompletion } from './agent-completions'
import { toMessages, type ChatBody, type ChatCompletionView, type OpenAIChatBody } from './models.model'
import { afterFirst, errorEvent, sseResponse, type SseEvent } from './plugins/sse'

/**
 * What the model endpoints and the OpenAI drop-ins do between the request and the gateway (docs/models.md):
 * every call is charged to the resolved workspace ("Credits and budgets"), which the caller must be
 * allowed to `use`; a chat answers as JSON or relays the upstream's stream.
 */

type ChatInput = typeof ChatBody.static | typeof OpenAIChatBody.static

export interface ChatCall {
  caller: Caller
  requestId: string
  body: ChatInput
  headers: Record<string, string | undefined>
  request: Request
  set: { headers: Record<string, string | number> }
  route: string
  /** Whether a stream ends with the usage chunk when `stream_options` does not say. */
  includeUsageDefault: boolean
}

const encoder = new TextEncoder()

/** The workspace a call is charged to, once the caller may use it and its budget is not spent. */
export async function callContext(deps: Deps, caller: Caller, requestId: string, explicit: string | undefined, header: string | undefined): Promise<CallContext> {
  const gateway = deps.models
  const workspaceId = await resolveWorkspaceId(deps, caller, explicit, header)
  // Both before any provider is called, in one query; a refused access (403/404) wins over an
  // exhausted budget (402).
  await checkAccessAndBudget(deps, caller, workspaceId)
  return { workspaceId, requestId, budgetChecked: true }
}

export async function embedTexts(deps: Deps, caller: Caller, requestId: string, model: string, input: string[], workspace: string | undefined, header: string | undefined, signal: AbortSignal) {
  const spec = deps.models.model(model, 'embedding')
  const ctx = await callContext(deps, caller, requestId, workspace, header)
  return { spec, ...(await deps.models.embed(ctx, spec, input, signal)) }
}

/** Typed as the JSON answer for the schema; with `stream: true` it is the SSE Response itself. */
export async function chat(deps: Deps, call: ChatCall): Promise<typeof ChatCompletionView.static> {
  const { body, headers, requestId } = call
  const agentId = agentIdOf(body.model)
  if (agentId !== null) {
    // An agent's model rounds take the sampling parameters only; the others are not dropped silently.
    const passed = Object.keys(passedChatParams(body) ?? {})[0]
    if (passed !== undefined) throw invalid(passed, `an agent turn (model ${body.model}) does not take ${passed}; send it to a model (docs/agents.md, "Agents from any OpenAI client")`)
    // Cast: a stream is the SSE Response itself (see below).
    return agentCompletion(deps, { ...call, agentId, model: body.model, body: { ...body, messages: toMessages(body.messages) } }) as never
  }
  const model = deps.models.model(body.model, 'llm')
  const ctx = await callContext(deps, call.caller, requestId, body.workspace_id, headers['x-workspace-id'])
  // Cast: Elysia types an async handler as a Promise of one answer type (a Response, or a declared body), not of their union.
  if (body.stream) return (await chatStream(deps, call, ctx, model)) as never
  const c = await deps.models.chat(ctx, model, chatRequest(body), call.request.signal ?? new AbortController().signal)
  // OpenAI's fields, those an upstream adds (logprobs, system_fingerprint, token details) as it sent them.
  return {
    request_id: requestId,
    id: c.id,
    object: 'chat.completion',
    created: c.created,
    model: c.model,
    choices: c.choices.map((ch) => ({ index: ch.index, message: { ...ch.message }, finish_reason: ch.finish_reason, ...(ch.logprobs === null || isObject(ch.logprobs) ? { logprobs: ch.logprobs } : {}) })),
    usage: {
      prompt_tokens: c.usage.prompt_tokens,
      completion_tokens: c.usage.completion_tokens,
      total_tokens: c.usage.total_tokens,
      credits: c.credits,
      ...(isObject(c.usage.prompt_tokens_details) ? { prompt_tokens_details: c.usage.prompt_tokens_details } : {}),
      ...(isObject(c.usage.completion_tokens_details) ? { completion_tokens_details: c.usage.completion_tokens_details } : {}),
    },
    ...(typeof c.system_fingerprint === 'string' || c.system_fingerprint === null ? { system_fingerprint: c.system_fingerprint } : {}),
    ...(typeof c.service_tier === 'string' || c.service_tier === null ? { service_tier: c.service_tier } : {}),
  }
}

async function chatStream(deps: Deps, call: ChatCall, ctx: CallContext, model: ModelSpec): Promise<Response> {
  const abort = new AbortController()
  const stream = deps.models.chatStreamBatches(ctx, model, chatRequest(call.body), abort.signal, true)
  const includeUsage = call.body.stream_options?.include_usage ?? call.includeUsageDefault
  const { first, events } = await afterFirst(stream, () => relayed(ctx, model.id, stream, includeUsage))
  // The first batch's text now: the answer's first write, with no generator step before it.
  const head = first.done ? undefined : (writeOf(first.value, model.id, includeUsage) ?? undefined)
  return sseResponse(deps, { request: call.request, set: call.set, route: call.route, events, abort, head })
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
    openai: passedChatParams(body),
  }
}

/**
 * OpenAI's stream format: `data: <chunk>` lines, `data: [DONE]` at the end, an `error` event on
 * failure. The chunks of one upstream read go out as one write, each the upstream's own JSON text
 * where only the model's name needs changing (`relayText`), the usual content chunks as bytes.
 */
async function* relayed(ctx: CallContext, model: string, source: AsyncIterable<Relayed[]>, includeUsage: boolean): AsyncGenerator<SseEvent> {
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
