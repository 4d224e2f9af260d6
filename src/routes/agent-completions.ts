import type { Deps } from '../deps'
import type { Caller } from '../domain/access'
import { prepareTurn } from '../domain/agents/chat'
import { turnEvents, type TurnEvent } from '../domain/agents/turn'
import { finishReasonOf, toChatInput, type AgentCompletionRequest } from '../domain/agents/completions'
import type { MessageUsage } from '../store/agents'
import { afterFirst, errorEvent, sseResponse, type SseEvent } from './plugins/sse'

export interface AgentCompletionCall {
  caller: Caller
  requestId: string
  agentId: string
  /** The request's model, `agent:<id>`, echoed as OpenAI does. */
  model: string
  body: AgentCompletionRequest & { stream?: boolean; stream_options?: { include_usage?: boolean } }
  headers: Record<string, string | undefined>
  request: Request
  set: { headers: Record<string, string | number> }
  route: string
  includeUsageDefault: boolean
}

const usageOf = (u: MessageUsage) => ({ prompt_tokens: u.tokens_in, completion_tokens: u.tokens_out, total_tokens: u.tokens_in + u.tokens_out, credits: u.credits })

/**
 * One agent turn answered in OpenAI's chat.completion format, or as its chunk stream
 * (docs/agents.md, "Agents from any OpenAI client"). The conversation is named by the
 * X-Conversation-Id response header, which the client sends back to continue it. The agent's own
 * tool calls run here and are not sent as `tool_calls` (the client has nothing to execute); they are
 * in the conversation's history.
 */
export async function agentCompletion(deps: Deps, c: AgentCompletionCall) {
  const workspaceId = c.body.workspace_id ?? c.headers['x-workspace-id']
  const input = toChatInput(c.caller, c.body, c.headers['x-conversation-id'], workspaceId)
  const turn = await prepareTurn(deps, c.caller, c.agentId, input, c.requestId)
  c.set.headers['x-conversation-id'] = turn.conversation.id
  const id = `chatcmpl-${c.requestId.replace(/^req_/, '')}`
  const created = Math.floor(Date.now() / 1000)

  if (!c.body.stream) {
    const r = await turn.run(() => {}, c.request.signal ?? new AbortController().signal)
    return {
      request_id: c.requestId,
      id,
      object: 'chat.completion' as const,
      created,
      model: c.model,
      choices: [{ index: 0, message: { role: 'assistant', content: r.message.content }, finish_reason: finishReasonOf(r.finish_reason) }],
      usage: usageOf(r.usage),
    }
  }

  const abort = new AbortController()
  const turnStream = turnEvents(turn, abort.signal)
  const includeUsage = c.body.stream_options?.include_usage ?? c.includeUsageDefault
  const chunk = (choices: unknown[], extra: Record<string, unknown> = {}): SseEvent => ({
    data: JSON.stringify({ id, object: 'chat.completion.chunk', created, model: c.model, choices, ...extra }),
  })
  async function* chunks(first: IteratorResult<TurnEvent, unknown>): AsyncGenerator<SseEvent> {
    yield chunk([{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }])
    let usage: MessageUsage = { tokens_in: 0, tokens_out: 0, credits: 0 }
    let finish = 'stop'
    try {
      for (let r = first; !r.done; r = await turnStream.next()) {
        const e = r.value
        if (e.event === 'message') yield chunk([{ index: 0, delta: { content: e.data.delta }, finish_reason: null }])
        else if (e.event === 'usage') usage = e.data
        else if (e.event === 'done') finish = e.data.finish_reason
      }
      yield chunk([{ index: 0, delta: {}, finish_reason: finishReasonOf(finish) }])
      if (includeUsage) yield chunk([], { usage: usageOf(usage) })
      yield { data: '[DONE]' }
    } catch (err) {
      if (!abort.signal.aborted) yield errorEvent(c.requestId, err)
    }
  }
  const { events } = await afterFirst(turnStream, chunks)
  return sseResponse(deps, { request: c.request, set: c.set, route: c.route, events, abort })
}
