import { invalid } from '../../lib/errors'
import type { Caller } from '../access'
import type { ChatMessage } from '../models/types'
import type { ChatInput, HistoryMessage, Sampling } from './turn'

/**
 * Agents as models of the OpenAI drop-in (docs/agents.md, "Agents from any OpenAI client"):
 * `model: "agent:<agent id>"` on POST /v1/chat/completions runs one turn of that agent.
 */
export const AGENT_MODEL_PREFIX = 'agent:'

/** The agent id of an `agent:<id>` model, else null (an ordinary model of the catalogue). */
export function agentIdOf(model: string): string | null {
  return model.startsWith(AGENT_MODEL_PREFIX) ? model.slice(AGENT_MODEL_PREFIX.length) : null
}

/** The longest user message of a turn, as on POST /v1/agents/{id}/chat. */
const MESSAGE_MAX_CHARS = 32_000
const USER_ID = /^[^\u0000-\u001f]{1,128}$/

export interface AgentCompletionRequest {
  messages: ChatMessage[]
  user?: string
  tools?: unknown[]
  tool_choice?: unknown
  response_format?: { type: string } | null
  temperature?: number
  max_tokens?: number
  top_p?: number
  stop?: string | string[]
  workspace_id?: string
}

/**
 * The turn an OpenAI chat request asks for. The last message is the user's new one. With
 * `X-Conversation-Id` the conversation's stored history is used and the earlier messages of the
 * request are not; without it a new conversation starts, and the earlier user and assistant messages
 * of the request are its history (the way stateless chat clients send it). System and developer
 * messages are not taken: the agent's instructions are its own. So are its tools: a request's `tools`,
 * a forced `tool_choice` or a `response_format` other than text are 400s, not silently dropped.
 */
export function toChatInput(caller: Caller, req: AgentCompletionRequest, conversationId: string | undefined, workspaceId: string | undefined): ChatInput {
  if (req.tools && req.tools.length > 0) throw invalid('tools', 'an agent calls its own tools (set on the agent); a request to an agent model takes none')
  if (req.tool_choice !== undefined && req.tool_choice !== 'auto' && req.tool_choice !== 'none') {
    throw invalid('tool_choice', 'an agent decides its own tool calls; only "auto" or "none" are accepted')
  }
  if (req.response_format && req.response_format.type !== 'text') throw invalid('response_format', 'an agent answers in text; response_format is not supported for agent models')
  const last = req.messages.at(-1)!
  const at = `messages.${req.messages.length - 1}`
  if (last.role !== 'user') throw invalid(at, `the last message must be the user's (role "user"), not "${last.role}": it is the agent's new message`)
  if (!last.content) throw invalid(`${at}.content`, 'the user message is empty')
  if (last.content.length > MESSAGE_MAX_CHARS) throw invalid(`${at}.content`, `is longer than ${MESSAGE_MAX_CHARS} characters`)
  if (req.user !== undefined && !USER_ID.test(req.user)) throw invalid('user', 'must be 1-128 characters without control characters (it is the conversation\'s user_id)')
  const history: HistoryMessage[] = []
  for (const m of req.messages.slice(0, -1)) {
    // Client-side tool rounds (assistant tool_calls, tool results) are not the agent's: only text turns count.
    if ((m.role === 'user' || m.role === 'assistant') && m.content) history.push({ role: m.role, content: m.content })
  }
  const sampling: Sampling = { temperature: req.temperature, max_tokens: req.max_tokens, top_p: req.top_p, stop: req.stop }
  return {
    message: last.content,
    user_id: req.user ?? caller.userId,
    ...(conversationId !== undefined ? { conversation_id: conversationId } : { history }),
    ...(workspaceId !== undefined ? { workspace_id: workspaceId } : {}),
    sampling,
  }
}

/** OpenAI's finish reasons; a turn's others (a failure stored as `error`) are not sent as one. */
export function finishReasonOf(reason: string): 'stop' | 'length' | 'content_filter' {
  return reason === 'length' || reason === 'content_filter' ? reason : 'stop'
}
