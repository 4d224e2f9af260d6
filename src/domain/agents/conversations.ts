import type { Deps } from '../../deps'
import { AppError } from '../../lib/errors'
import type { ListQuery } from '../../lib/lists'
import * as store from '../../store/agents'
import { roleAtLeast, type Action, type Caller } from '../access'
import { access } from '../workspaces'
import { conversationNotFound, loadAgent } from './service'

/**
 * CONTRACT 3: below `developer`, a caller sees only the conversations of its own user_id; from
 * `developer` up, every conversation of the workspace (a backend answering for its end users).
 */
export async function seesEveryConversation(deps: Deps, caller: Caller, workspaceId: string): Promise<boolean> {
  return (await scopeOf(deps, caller, workspaceId, 'use')) === null
}

async function scopeOf(deps: Deps, caller: Caller, workspaceId: string, action: Action): Promise<string | null> {
  const ws = await access(deps.db.sql, caller, workspaceId, action)
  return roleAtLeast(ws.effective, 'developer') ? null : caller.userId
}

export async function loadConversation(deps: Deps, caller: Caller, id: string, action: Action): Promise<store.ConversationRow> {
  const conv = await store.findConversation(deps.db.sql, id)
  if (!conv) throw conversationNotFound(id)
  let onlyUser: string | null
  try {
    onlyUser = await scopeOf(deps, caller, conv.workspace_id, action)
  } catch (err) {
    if (err instanceof AppError && err.code === 'not_found') throw conversationNotFound(id)
    throw err
  }
  if (onlyUser !== null && conv.user_id !== onlyUser) throw conversationNotFound(id)
  return conv
}

/** An agent's conversations, newest activity first by default; `user_id` narrows them to one user. */
export async function listConversations(deps: Deps, caller: Caller, agentId: string, userId: string | undefined, q: ListQuery): Promise<store.ConversationRow[]> {
  const agent = await loadAgent(deps, caller, agentId, 'read')
  const onlyUser = await scopeOf(deps, caller, agent.workspace_id, 'read')
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
