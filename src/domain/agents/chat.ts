import type { Deps } from '../../deps'
import { AppError, invalid, notFound } from '../../lib/errors'
import { newId } from '../../lib/ids'
import { activeContext, tracingOn, withSpan } from '../../lib/tracing'
import * as store from '../../store/agents'
import { emit } from '../../store/events'
import { findWorkflow } from '../../store/workflows'
import { onlyUserOf, type Caller } from '../access'
import { checkBudget } from '../credits'
import { inputSpec, validateInputs } from '../workflows/graph'
import { loadOwnedWithRole } from '../ownership'
import type { ChatInput, HistoryMessage, Turn } from './turn'
import { TurnRunner } from './turn-runner'

/** History messages read for a turn, before trimming to the model's context. */
const HISTORY_LIMIT = 200
const TITLE_CHARS = 80

/**
 * One turn of a conversation, prepared (the `Turn` of turn.ts): the caller may chat with the agent,
 * the conversation is the user's (or new), the user's message is stored and
 * `agent.message.received` is in the outbox. turn-runner.ts answers it.
 */
export async function prepareTurn(deps: Deps, caller: Caller, agentId: string, input: ChatInput, requestId: string): Promise<Turn> {
  const sql = deps.db.sql
  const { row: agent, role } = await loadOwnedWithRole(deps, caller, 'agent', agentId, 'use', store.findAgent)
  // Below developer, a caller's conversations are those of its own user_id.
  const ownOnly = onlyUserOf(caller, role) !== null
  if (input.workspace_id !== undefined && input.workspace_id !== agent.workspace_id) throw notFound('agent', agentId)
  if (agent.status !== 'active') throw new AppError('conflict', `agent ${agent.id} is ${agent.status}; set its status to active to chat with it`)
  let chatflowInputs: Record<string, unknown> | null = null
  if (agent.type === 'chatflow') {
    const sampling = Object.entries(input.sampling ?? {}).find(([, v]) => v !== undefined)
    if (sampling) throw invalid(sampling[0], `chatflow agent ${agent.id} answers with its workflow, whose nodes choose their own ${sampling[0]}; leave it out`)
    chatflowInputs = await checkChatflowInputs(deps, agent, input)
  }
  else deps.models.model(agent.model, 'llm')
  await checkBudget(sql, agent.workspace_id, deps.models.charges)

  let existing: store.ConversationRow | null = null
  if (input.conversation_id !== undefined) {
    existing = await store.findConversation(sql, input.conversation_id)
    // Another agent's conversation, or another user's, is not found: it is not this user's to continue.
    if (!existing || existing.agent_id !== agent.id || existing.user_id !== input.user_id || (ownOnly && existing.user_id !== caller.userId)) {
      throw notFound('conversation', input.conversation_id)
    }
  }
  if (ownOnly && input.user_id !== caller.userId) {
    throw new AppError('forbidden', `below the developer role a key chats as its own user_id (${caller.userId}), not ${input.user_id}`, { param: 'user_id' })
  }
  const history: HistoryMessage[] = existing ? await store.recentMessages(sql, existing.id, HISTORY_LIMIT) : (input.history ?? []).slice(-HISTORY_LIMIT)
  const userMessageId = newId('msg')
  const conversation = await sql.begin(async (tx) => {
    const conv = existing ?? (await store.insertConversation(tx, { id: newId('conv'), agent_id: agent.id, workspace_id: agent.workspace_id, user_id: input.user_id, title: titleOf(input.message) }))
    await store.appendMessages(tx, conv.id, [{ id: userMessageId, conversation_id: conv.id, role: 'user', content: input.message, agent_version: agent.version, finish_reason: null, run_id: null, request_id: requestId }])
    await emit(tx, agent.workspace_id, 'agent.message.received', { agent_id: agent.id, conversation_id: conv.id, user_id: input.user_id, message_id: userMessageId, content: input.message })
    return conv
  })
  deps.wake.nudge('events')
  // The request's span, captured here: a streamed turn runs after the route has answered.
  const parent = tracingOn ? activeContext() : undefined

  return {
    agent,
    conversation,
    run: (onEvent, signal) => {
      const turn = new TurnRunner(deps, caller, agent, conversation, input, history, requestId, onEvent, signal)
      const go = () => (chatflowInputs ? turn.chatflow(chatflowInputs) : turn.agentLoop())
      if (!tracingOn) return go()
      return withSpan(`invoke_agent ${agent.name}`, () => ({
        'gen_ai.operation.name': 'invoke_agent',
        'gen_ai.agent.id': agent.id,
        'gen_ai.agent.name': agent.name,
        'gen_ai.conversation.id': conversation.id,
        agent_id: agent.id,
        workspace_id: agent.workspace_id,
        request_id: requestId,
      }), go, { parent })
    },
  }
}

/** A chatflow's inputs: the request's `inputs`, the message, and the history when the workflow declares it; checked before anything is stored. */
async function checkChatflowInputs(deps: Deps, agent: store.AgentRow, input: ChatInput): Promise<Record<string, unknown>> {
  const wf = agent.workflow_id ? await findWorkflow(deps.db.sql, agent.workflow_id) : null
  if (!wf) throw new AppError('conflict', `the workflow of chatflow agent ${agent.id} was deleted; give it another workflow_id`)
  const declared = new Set(inputSpec(wf.graph).map((s) => s.name))
  const inputs: Record<string, unknown> = { ...(input.inputs ?? {}), message: input.message }
  if (declared.has('history')) inputs.history = [] // filled with the real history at run time
  validateInputs(wf.graph, inputs)
  return inputs
}

function titleOf(message: string): string {
  const line = message.replace(/\s+/g, ' ').trim()
  const chars = [...line]
  return chars.length <= TITLE_CHARS ? line : `${chars.slice(0, TITLE_CHARS - 1).join('')}…`
}
