import { notFound } from '../lib/errors'
import type { ListQuery } from '../lib/lists'
import type { Sql, Tx } from './db'
import { jsonb } from './db'
import { insertKeyed, type WriteKey } from './idempotent-writes'
import { inWorkspaces, listClauses, type WorkspaceScope } from './lists'

/** A tool as stored (docs/agents.md, "Definitions"); validated by src/domain/agents/service.ts before it gets here. */
export type AgentTool =
  | { type: 'knowledge_search'; name?: string; description?: string }
  | { type: 'workflow'; workflow_id: string; name?: string; description?: string }
  | { type: 'http'; name: string; description: string; method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE'; url: string; parameters: Record<string, unknown> }
  /** `headers_sealed`: each header's value sealed by the SecretBox (never the plain value, never answered). */
  | { type: 'mcp'; name: string; server_url: string; headers_sealed?: Record<string, string>; allowed_tools?: string[] }

export interface AgentRow {
  id: string
  workspace_id: string
  name: string
  type: 'agent' | 'chatflow'
  model: string
  instructions: string
  tools: AgentTool[]
  knowledge_base_ids: string[]
  workflow_id: string | null
  status: 'active' | 'disabled'
  version: number
  created_by: string
  created_at: Date
  updated_at: Date
}

export type AgentFields = Pick<AgentRow, 'name' | 'type' | 'model' | 'instructions' | 'tools' | 'knowledge_base_ids' | 'workflow_id' | 'status'>

export interface ConversationRow {
  id: string
  agent_id: string
  workspace_id: string
  user_id: string
  title: string
  message_count: number
  created_at: Date
  updated_at: Date
}

export interface StoredToolCall {
  tool: string
  input: Record<string, unknown>
  output: Record<string, unknown>
  duration_ms: number
}

export interface MessageUsage {
  tokens_in: number
  tokens_out: number
  credits: number
}

export interface MessageRow {
  id: string
  conversation_id: string
  role: 'user' | 'assistant'
  content: string
  agent_version: number | null
  tool_calls: StoredToolCall[]
  usage: MessageUsage | null
  finish_reason: string | null
  run_id: string | null
  request_id: string | null
  created_at: Date
}

export async function insertAgent(tx: Sql, a: AgentFields & Pick<AgentRow, 'id' | 'workspace_id' | 'created_by'>, key?: WriteKey): Promise<AgentRow> {
  const [row] = await insertKeyed(tx, key, 'agent', tx<AgentRow[]>`
    insert into agents (id, workspace_id, name, type, model, instructions, tools, knowledge_base_ids, workflow_id, status, created_by)
    values (${a.id}, ${a.workspace_id}, ${a.name}, ${a.type}, ${a.model}, ${a.instructions}, ${jsonb(tx, a.tools)},
            ${a.knowledge_base_ids}, ${a.workflow_id}, ${a.status}, ${a.created_by})
    returning *`)
  return row!
}

export async function findAgent(sql: Sql, id: string): Promise<AgentRow | null> {
  const [row] = await sql<AgentRow[]>`select * from agents where id = ${id}`
  return row ?? null
}

export async function lockAgent(tx: Tx, id: string): Promise<AgentRow> {
  const [row] = await tx<AgentRow[]>`select * from agents where id = ${id} for update`
  if (!row) throw notFound('agent', id)
  return row
}

/** Writes the definition as a whole; the version goes up by one. */
export async function updateAgent(tx: Tx, id: string, a: AgentFields): Promise<AgentRow> {
  const [row] = await tx<AgentRow[]>`
    update agents set name = ${a.name}, type = ${a.type}, model = ${a.model}, instructions = ${a.instructions},
      tools = ${jsonb(tx, a.tools)}, knowledge_base_ids = ${a.knowledge_base_ids}, workflow_id = ${a.workflow_id},
      status = ${a.status}, version = version + 1, updated_at = now()
    where id = ${id}
    returning *`
  if (!row) throw notFound('agent', id)
  return row
}

export async function deleteAgent(tx: Sql, id: string): Promise<void> {
  await tx`delete from agents where id = ${id}`
}

export async function listAgents(sql: Sql, scope: WorkspaceScope, q: ListQuery): Promise<AgentRow[]> {
  const c = listClauses(sql, q)
  return sql<AgentRow[]>`
    select * from agents where ${inWorkspaces(sql, scope)} ${c.and}
    order by ${c.orderBy} limit ${c.limit}`
}

export async function insertConversation(tx: Sql, c: Pick<ConversationRow, 'id' | 'agent_id' | 'workspace_id' | 'user_id' | 'title'>): Promise<ConversationRow> {
  const [row] = await tx<ConversationRow[]>`
    insert into conversations (id, agent_id, workspace_id, user_id, title)
    values (${c.id}, ${c.agent_id}, ${c.workspace_id}, ${c.user_id}, ${c.title})
    returning *`
  return row!
}

export async function findConversation(sql: Sql, id: string): Promise<ConversationRow | null> {
  const [row] = await sql<ConversationRow[]>`select * from conversations where id = ${id}`
  return row ?? null
}

export async function listConversations(sql: Sql, agentId: string, userId: string | null, q: ListQuery): Promise<ConversationRow[]> {
  const c = listClauses(sql, q)
  const user = userId === null ? sql`` : sql`and user_id = ${userId}`
  return sql<ConversationRow[]>`
    select * from conversations where agent_id = ${agentId} ${user} ${c.and}
    order by ${c.orderBy} limit ${c.limit}`
}

export async function deleteConversation(tx: Sql, id: string): Promise<void> {
  await tx`delete from conversations where id = ${id}`
}

type NewMessage = Omit<MessageRow, 'created_at' | 'tool_calls' | 'usage'> & { tool_calls?: StoredToolCall[]; usage?: MessageUsage | null }

/**
 * Appends messages to a conversation and counts them there, in one statement (the conversation's
 * row is updated, so concurrent turns of one conversation serialise on it). Ids are in no order
 * within a millisecond (src/lib/ids.ts), so each message's created_at is made later than every
 * earlier one of its conversation, by a millisecond when they would tie: a turn's question (stored
 * first) lists before its answer, and the messages of one call in their order. A conversation
 * deleted meanwhile takes nothing (no row is answered).
 */
export async function appendMessages(tx: Sql, conversationId: string, messages: NewMessage[]): Promise<MessageRow[]> {
  const rows = messages.map((m) => ({
    id: m.id, role: m.role, content: m.content, agent_version: m.agent_version, tool_calls: m.tool_calls ?? [], usage: m.usage ?? null,
    finish_reason: m.finish_reason, run_id: m.run_id, request_id: m.request_id,
  }))
  return tx<MessageRow[]>`
    with u as (
      update conversations set message_count = message_count + ${rows.length}, updated_at = clock_timestamp()
      where id = ${conversationId} returning id
    ), l as (
      select max(created_at) as at from messages where conversation_id = ${conversationId}
    )
    insert into messages (id, conversation_id, role, content, agent_version, tool_calls, usage, finish_reason, run_id, request_id, created_at)
    select r.id, u.id, r.role, r.content, r.agent_version, r.tool_calls, r.usage, r.finish_reason, r.run_id, r.request_id,
           greatest(date_trunc('milliseconds', now()), l.at + interval '1 millisecond') + (r.n - 1) * interval '1 millisecond'
    from u, l, rows from (jsonb_to_recordset(${jsonb(tx, rows)}) as (id text, role text, content text, agent_version int, tool_calls jsonb, usage jsonb, finish_reason text, run_id text, request_id text))
      with ordinality as r(id, role, content, agent_version, tool_calls, usage, finish_reason, run_id, request_id, n)
    returning *`
}

/** The last `limit` messages, oldest first (the history a turn is answered with). */
export async function recentMessages(sql: Sql, conversationId: string, limit: number): Promise<MessageRow[]> {
  const rows = await sql<MessageRow[]>`
    select * from messages where conversation_id = ${conversationId}
    order by created_at desc, id desc limit ${limit}`
  return rows.reverse()
}

export async function listMessages(sql: Sql, conversationId: string, q: ListQuery): Promise<MessageRow[]> {
  const c = listClauses(sql, q)
  return sql<MessageRow[]>`
    select * from messages where conversation_id = ${conversationId} ${c.and}
    order by ${c.orderBy} limit ${c.limit}`
}
