import type { Deps } from '../../deps'
import { AppError } from '../../lib/errors'
import { newId } from '../../lib/ids'
import { countChatTokens, countTokens } from '../../lib/tokens'
import { round6 } from '../../lib/usage'
import { capped, captureContent, markError, tracingOn, withSpan } from '../../lib/tracing'
import * as store from '../../store/agents'
import { accessCommitted, spendId } from '../../store/access-generation'
import type { Charge } from '../../store/credits'
import type { Caller } from '../access'
import { chargeIn } from '../credits'
import type { CallContext } from '../models/gateway'
import type { ChatMessage, FinishReason, ToolCall, ToolDefinition } from '../models/types'
import { createRun, waitForRun } from '../workflows/runs'
import { agentTools, parseArguments, runTool, searchPassages, type Tool, type ToolContext } from './tools'
import type { ChatInput, HistoryMessage, TurnEvent, TurnResult } from './turn'

/**
 * A prepared turn run (chat.ts prepares it): an agent's model rounds and tool calls, or a chatflow's
 * run, then the answer stored with its usage and credits.
 */

/** Model rounds of one turn: each round may call tools; the last must answer. */
export const MAX_TOOL_ROUNDS = 8
/** Kept free of the context for the answer when the request names no max_tokens. */
const ANSWER_RESERVE_TOKENS = 1024
/** Passages put in the context of an agent with knowledge bases and no knowledge_search tool. */
const CONTEXT_PASSAGES = 5

export class TurnRunner {
  private readonly charges: Charge[] = []
  private readonly toolCalls: store.StoredToolCall[] = []
  private readonly usage: store.MessageUsage = { tokens_in: 0, tokens_out: 0, credits: 0 }
  private content = ''
  private runId: string | null = null
  private stored = false

  constructor(
    private readonly deps: Deps,
    private readonly caller: Caller,
    private readonly agent: store.AgentRow,
    private readonly conversation: store.ConversationRow,
    private readonly input: ChatInput,
    private readonly history: HistoryMessage[],
    private readonly requestId: string,
    private readonly onEvent: (e: TurnEvent) => void,
    private readonly signal: AbortSignal,
  ) {}

  /**
   * Type `agent`: the model with the instructions, the history that fits its context and the tools;
   * tool calls run (in parallel) and their results go back, until it answers or MAX_TOOL_ROUNDS.
   * Whatever happened is stored at the end, with the credits, also when it failed or the client left.
   */
  async agentLoop(): Promise<TurnResult> {
    try {
      const model = this.deps.models.model(this.agent.model, 'llm')
      const tools = await agentTools(this.deps, this.agent)
      const definitions = [...tools.values()].map((t) => t.definition)
      const system = await this.systemMessage()
      const messages = [...(system ? [system] : []), ...trimHistory(this.history, model.context_length, system, definitions, this.input.message), { role: 'user' as const, content: this.input.message }]
      const ctx: CallContext = { workspaceId: this.agent.workspace_id, requestId: this.requestId, budgetChecked: true, deferredCharges: this.charges }
      for (let round = 1; ; round++) {
        const reply = await this.callModel(ctx, model, messages, definitions)
        if (reply.toolCalls.length === 0 || definitions.length === 0) {
          return await this.finish(reply.finish === 'tool_calls' || !reply.finish ? 'stop' : reply.finish)
        }
        if (round >= MAX_TOOL_ROUNDS) {
          throw new AppError('upstream_error', `model ${model.id} asked for tools ${MAX_TOOL_ROUNDS} rounds in a row without answering; the turn was stopped`)
        }
        messages.push({ role: 'assistant', content: reply.content || null, tool_calls: reply.toolCalls })
        await this.runTools(tools, reply.toolCalls, messages)
      }
    } catch (err) {
      await this.store(this.signal.aborted ? 'client_closed' : 'error').catch((e) => this.deps.log.error({ err: e }, 'could not store an interrupted turn'))
      throw err
    }
  }

  /** Runs the round's calls side by side; their results follow, in the calls' order. */
  private async runTools(tools: Map<string, Tool>, calls: ToolCall[], messages: ChatMessage[]) {
    const ctx = this.toolContext()
    for (const call of calls) {
      const raw = call.function.arguments
      this.onEvent({ event: 'tool_call', data: { tool: call.function.name, input: parseArguments(raw) ?? { _raw: raw.slice(0, 2000) } } })
    }
    const results = await Promise.all(
      calls.map(async (call) => {
        const t0 = performance.now()
        const r = tracingOn ? await this.tracedTool(tools, call, ctx) : await runTool(tools, call.function.name, call.function.arguments, ctx)
        return { ...r, duration_ms: Math.round(performance.now() - t0) }
      }),
    )
    for (const [i, call] of calls.entries()) {
      const r = results[i]!
      messages.push({ role: 'tool', tool_call_id: call.id, content: JSON.stringify(r.output) })
      this.toolCalls.push({ tool: call.function.name, input: r.input, output: r.output, duration_ms: r.duration_ms })
      this.onEvent({ event: 'tool_result', data: { output: r.output, duration_ms: r.duration_ms } })
    }
  }

  /** A tool call in its `execute_tool` span, a child of the turn's (docs/observability.md); the tool's own HTTP call carries its traceparent. */
  private tracedTool(tools: Map<string, Tool>, call: ToolCall, ctx: ToolContext) {
    const name = call.function.name
    return withSpan(`execute_tool ${name}`, () => ({
      'gen_ai.operation.name': 'execute_tool',
      'gen_ai.tool.name': name,
      'gen_ai.tool.call.id': call.id,
      ...(tools.has(name) ? { 'gen_ai.tool.type': tools.get(name)!.definition.type } : {}),
      agent_id: this.agent.id,
      workspace_id: this.agent.workspace_id,
      ...(captureContent ? { 'gen_ai.tool.call.arguments': capped(call.function.arguments) } : {}),
    }), async (span) => {
      const r = await runTool(tools, name, call.function.arguments, ctx)
      const error = (r.output as { error?: { code?: string; message?: string } }).error
      if (error && typeof error === 'object') {
        span.setAttribute('error.type', String(error.code ?? 'tool_error'))
        markError(span, String(error.message ?? 'the tool failed'))
      }
      if (captureContent) span.setAttribute('gen_ai.tool.call.result', capped(r.output))
      return r
    })
  }

  private toolContext(): ToolContext {
    return { deps: this.deps, caller: this.caller, agent: this.agent, userId: this.input.user_id, requestId: this.requestId, signal: this.signal, charges: this.charges }
  }

  /**
   * The instructions; for an agent with knowledge bases but no knowledge_search tool, the passages
   * found for the message are added as context (retrieval without tool calling, for any model).
   */
  private async systemMessage(): Promise<ChatMessage | null> {
    let text = this.agent.instructions
    const searchable = this.agent.knowledge_base_ids.length > 0 && !this.agent.tools.some((t) => t.type === 'knowledge_search')
    if (searchable) {
      const input = { query: this.input.message }
      this.onEvent({ event: 'tool_call', data: { tool: 'knowledge_search', input } })
      const t0 = performance.now()
      const output = await searchPassages(this.toolContext(), this.input.message, CONTEXT_PASSAGES)
      const duration = Math.round(performance.now() - t0)
      this.toolCalls.push({ tool: 'knowledge_search', input, output, duration_ms: duration })
      this.onEvent({ event: 'tool_result', data: { output, duration_ms: duration } })
      if (output.results.length > 0) text += `${text ? '\n\n' : ''}Context from the knowledge base:\n${output.results.map((r) => r.content).join('\n\n')}`
    }
    return text ? { role: 'system', content: text } : null
  }

  /** One model round, streamed or not; content deltas go to the stream as they come. */
  private async callModel(ctx: CallContext, model: ReturnType<Deps['models']['model']>, messages: ChatMessage[], tools: ToolDefinition[]) {
    const req = { messages, ...(tools.length > 0 ? { tools } : {}), user: this.input.user_id, ...this.input.sampling }
    let content = ''
    const calls: { id: string; name: string; arguments: string }[] = []
    let finish: FinishReason | null = null
    for await (const chunk of this.deps.models.chatStream(ctx, model, req, this.signal)) {
      if (chunk.usage) {
        const u = chunk.usage as typeof chunk.usage & { credits?: number }
        this.usage.tokens_in += u.prompt_tokens
        this.usage.tokens_out += u.completion_tokens
        this.usage.credits = round6(this.usage.credits + (u.credits ?? 0))
      }
      for (const choice of chunk.choices) {
        const delta = choice.delta
        if (delta.content) {
          content += delta.content
          this.content += delta.content
          this.onEvent({ event: 'message', data: { delta: delta.content } })
        }
        for (const tc of delta.tool_calls ?? []) {
          const slot = (calls[tc.index] ??= { id: tc.id ?? `call_${newId('msg').slice(4)}`, name: '', arguments: '' })
          if (tc.id) slot.id = tc.id
          if (tc.function?.name) slot.name += tc.function.name
          if (tc.function?.arguments) slot.arguments += tc.function.arguments
        }
        if (choice.finish_reason) finish = choice.finish_reason
      }
    }
    const toolCalls: ToolCall[] = calls.filter(Boolean).map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } }))
    return { content, toolCalls, finish }
  }

  /**
   * Type `chatflow`: the agent's workflow runs with the inputs, the message (and the history when it
   * declares a `history` input); its answer is the output `answer` (else `text`, else the only string
   * output, else the outputs as JSON). The run is linked to the answer.
   */
  async chatflow(inputs: Record<string, unknown>): Promise<TurnResult> {
    try {
      if ('history' in inputs) inputs.history = this.history.map((m) => ({ role: m.role, content: m.content }))
      const run = await createRun(this.deps, this.caller, this.agent.workflow_id!, { inputs, user_id: this.input.user_id }, this.requestId)
      this.runId = run.id
      const done = await waitForRun(this.deps, run.id, this.deps.config.syncRunTimeoutMs)
      Object.assign(this.usage, done.usage)
      if (done.status === 'running') throw new AppError('upstream_timeout', `run ${run.id} of the chatflow did not finish within ${this.deps.config.syncRunTimeoutMs} ms; GET /v1/runs/${run.id} follows it`)
      if (done.status !== 'completed') {
        throw new AppError('upstream_error', `run ${run.id} of the chatflow ${done.status}${done.error ? `: ${done.error.code}: ${done.error.message}` : ''}`)
      }
      const answer = answerOf(done.outputs ?? {})
      this.content = answer
      if (answer) this.onEvent({ event: 'message', data: { delta: answer } })
      return await this.finish('stop')
    } catch (err) {
      await this.store(this.signal.aborted ? 'client_closed' : 'error').catch((e) => this.deps.log.error({ err: e }, 'could not store an interrupted turn'))
      throw err
    }
  }

  private async finish(reason: string): Promise<TurnResult> {
    const id = await this.store(reason)
    this.onEvent({ event: 'usage', data: { ...this.usage } })
    this.onEvent({ event: 'done', data: { finish_reason: reason } })
    return {
      agent_id: this.agent.id,
      conversation_id: this.conversation.id,
      message_id: id!,
      message: { role: 'assistant', content: this.content },
      tool_calls: this.toolCalls,
      usage: { ...this.usage },
      finish_reason: reason,
    }
  }

  /**
   * The answer (or what was produced of it), its tool calls, usage and the credits of every model
   * call, in one transaction. Nothing is stored for a failed turn that produced nothing (the credits
   * of its calls still are).
   */
  private async store(reason: string): Promise<string | null> {
    if (this.stored) return null
    this.stored = true
    // The turn's credits: every deferred charge (chat rounds and search embeddings); a chatflow's are its run's.
    if (!this.runId) this.usage.credits = round6(this.charges.reduce((sum, c) => sum + c.credits, 0))
    const produced = this.content !== '' || this.toolCalls.length > 0 || reason === 'stop' || reason === 'length'
    const id = newId('msg')
    await this.deps.db.sql.begin(async (tx) => {
      if (produced) {
        await store.appendMessages(tx, this.conversation.id, [{
          id, conversation_id: this.conversation.id, role: 'assistant', content: this.content, agent_version: this.agent.version,
          tool_calls: this.toolCalls, usage: { ...this.usage }, finish_reason: reason, run_id: this.runId, request_id: this.requestId,
        }])
      }
      for (const c of this.charges) await chargeIn(tx, c)
    }).finally(() => accessCommitted([...new Set(this.charges.map((c) => spendId(c.workspace_id)))]))
    if (this.charges.length > 0) this.deps.wake.nudge('events')
    return produced ? id : null
  }
}

function answerOf(outputs: Record<string, unknown>): string {
  for (const key of ['answer', 'text']) if (typeof outputs[key] === 'string') return outputs[key] as string
  const strings = Object.values(outputs).filter((v): v is string => typeof v === 'string')
  if (strings.length === 1) return strings[0]!
  return Object.keys(outputs).length === 0 ? '' : JSON.stringify(outputs)
}

/**
 * The newest history that fits the model's context beside the system message, the tools, the new
 * message and room for the answer; older turns go first. Only the text of each message is replayed
 * (tool calls of earlier turns are not).
 */
export function trimHistory(history: HistoryMessage[], contextLength: number | undefined, system: ChatMessage | null, tools: ToolDefinition[], message: string): ChatMessage[] {
  const limit = contextLength ?? 8192
  let used = countChatTokens([...(system ? [system] : []), { role: 'user', content: message }]) + (tools.length ? countTokens(JSON.stringify(tools)) : 0) + Math.min(ANSWER_RESERVE_TOKENS, Math.floor(limit / 4))
  const kept: ChatMessage[] = []
  for (let i = history.length - 1; i >= 0; i--) {
    const m = history[i]!
    const cost = 3 + countTokens(m.content)
    if (used + cost > limit) break
    used += cost
    kept.push({ role: m.role, content: m.content })
  }
  return kept.reverse()
}
