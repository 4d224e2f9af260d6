import type * as store from '../../store/agents'

/** A turn of a conversation (docs/agents.md, "A turn"): what it is given, what it tells, what it answers. */

export interface ChatInput {
  message: string
  user_id: string
  conversation_id?: string
  inputs?: Record<string, unknown>
  /**
   * Earlier turns the client holds itself (the OpenAI drop-in without X-Conversation-Id): the history
   * of a new conversation's first turn, not stored. Ignored when `conversation_id` continues one.
   */
  history?: HistoryMessage[]
  /** The workspace the client named (the OpenAI drop-in's workspace_id / X-Workspace-Id): an agent of another is not found. */
  workspace_id?: string
  /** The client's sampling parameters, passed to each model round of an `agent` (the OpenAI drop-in). */
  sampling?: Sampling
}

export type HistoryMessage = Pick<store.MessageRow, 'role' | 'content'>
export interface Sampling {
  temperature?: number
  max_tokens?: number
  top_p?: number
  stop?: string | string[]
}

/** What a turn tells its stream, in the order it happens (docs/agents.md, "A turn"). */
export type TurnEvent =
  | { event: 'message'; data: { delta: string } }
  | { event: 'tool_call'; data: { tool: string; input: Record<string, unknown> } }
  | { event: 'tool_result'; data: { output: Record<string, unknown>; duration_ms: number } }
  | { event: 'usage'; data: store.MessageUsage }
  | { event: 'done'; data: { finish_reason: string } }

export interface TurnResult {
  agent_id: string
  conversation_id: string
  message_id: string
  message: { role: 'assistant'; content: string }
  tool_calls: store.StoredToolCall[]
  usage: store.MessageUsage
  finish_reason: string
}

/**
 * One turn of a conversation, prepared: the caller may chat with the agent, the conversation is the
 * user's (or new), the user's message is stored and `agent.message.received` is in the outbox. `run`
 * answers it.
 */
export interface Turn {
  agent: store.AgentRow
  conversation: store.ConversationRow
  run(onEvent: (e: TurnEvent) => void, signal: AbortSignal): Promise<TurnResult>
}

/**
 * A turn's events as an async iterator, in order, ending when the turn does (its failure is thrown
 * after the events that came before it). `run` starts on the first `next()`.
 */
export async function* turnEvents(turn: Turn, signal: AbortSignal): AsyncGenerator<TurnEvent, TurnResult> {
  const queue: TurnEvent[] = []
  let wake: (() => void) | null = null
  const state: { outcome: { ok: true; result: TurnResult } | { ok: false; error: unknown } | null } = { outcome: null }
  void turn
    .run((e) => {
      queue.push(e)
      wake?.()
    }, signal)
    .then(
      (result) => (state.outcome = { ok: true, result }),
      (error) => (state.outcome = { ok: false, error }),
    )
    .finally(() => wake?.())
  for (;;) {
    const next = queue.shift()
    if (next) {
      yield next
      continue
    }
    const done = state.outcome
    if (done) {
      if (!done.ok) throw done.error
      return done.result
    }
    await new Promise<void>((resolve) => (wake = resolve))
    wake = null
  }
}
