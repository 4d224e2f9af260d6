import type { Deps } from '../../deps'
import { notFound } from '../../lib/errors'
import type { ListQuery } from '../../lib/lists'
import * as store from '../../store/agents'
import { onlyUserOf, type Action, type Caller } from '../access'
import { loadOwnedWithRole } from '../ownership'

export async function loadConversation(deps: Deps, caller: Caller, id: string, action: Action): Promise<store.ConversationRow> {
  const { row: conv, role } = await loadOwnedWithRole(deps, caller, 'conversation', id, action, store.findConversation)
  const onlyUser = onlyUserOf(caller, role)
  if (onlyUser !== null && conv.user_id !== onlyUser) throw notFound('conversation', id)
  return conv
}

/** An agent's conversations, newest activity first by default; `user_id` narrows them to one user. */
export async function listConversations(deps: Deps, caller: Caller, agentId: string, userId: string | undefined, q: ListQuery): Promise<store.ConversationRow[]> {
  const { row: agent, role } = await loadOwnedWithRole(deps, caller, 'agent', agentId, 'read', store.findAgent)
  const onlyUser = onlyUserOf(caller, role)
  if (onlyUser !== null && userId !== undefined && userId !== onlyUser) return []
  return store.listConversations(deps.db.sql, agent.id, onlyUser ?? userId ?? null, q)
}

export async function conversationHistory(deps: Deps, caller: Caller, id: string, q: ListQuery) {
  const conv = await loadConversation(deps, caller, id, 'read')
  return { conversation: conv, messages: await store.listMessages(deps.db.sql, conv.id, q) }
}

/** Deletes the conversation with its messages (role `use`, and the caller's own unless developer or above). */
export async function deleteConversation(deps: Deps, caller: Caller, id: string): Promise<void> {
  await loadConversation(deps, caller, id, 'use')
  await store.deleteConversation(deps.db.sql, id)
}
