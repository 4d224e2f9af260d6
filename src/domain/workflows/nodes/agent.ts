import { renderText } from '../templates'
import type { Executor } from '../types'
import { invalidConfig, throwIfAborted } from './common'

/**
 * A turn of an agent of the run's workspace (docs/workflows.md, "agent"): its instructions, knowledge
 * and tools (MCP servers, http tools, knowledge_search), with `message` as the user's message, in a
 * conversation of its own unless `conversation_id` continues one. Its answer streams as the run's
 * `message` events. Output `{ text, conversation_id, message_id, tool_calls, usage, finish_reason }`;
 * the turn's usage is the node's.
 */
export const agent: Executor = async (node, ctx) => {
  const { agent_id: agentId, message, user_id: userId, conversation_id: conversationId } = node.config
  if (typeof agentId !== 'string' || typeof message !== 'string') throw invalidConfig('config.agent_id and config.message are required')
  if (!ctx.agents) throw invalidConfig('agent nodes run only inside a run')
  const text = renderText(message, ctx.vars)
  if (text.trim() === '') throw invalidConfig('config.message rendered to an empty message')
  const user = typeof userId === 'string' ? renderText(userId, ctx.vars) : undefined
  const conversation = typeof conversationId === 'string' ? renderText(conversationId, ctx.vars) : ''
  const end = await ctx.agents.turn(
    { agentId, message: text, ...(user ? { userId: user } : {}), ...(conversation ? { conversationId: conversation } : {}) },
    (delta) => ctx.delta(delta),
    ctx.signal,
  )
  throwIfAborted(ctx.signal)
  return { output: end, usage: end.usage }
}
