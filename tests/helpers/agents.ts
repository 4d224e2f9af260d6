import { expect } from 'bun:test'
import type { Answer, Harness } from './harness'
import type { Node } from './runs'

/**
 * Agent test helpers (tests/http/agents.*.test.ts): creating agents and workflows through the API,
 * chatting, reading a conversation's history, and what the database holds behind them.
 */

export const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/
export const META = { version: 'v1', deprecated_warnings: [] }
/** Well-formed ids nothing has. */
export const NO_AGENT = 'agt_01jbz3k9x8q7r6s5t4v3w2y1z0'
export const NO_CONVERSATION = 'conv_01jbz3k9x8q7r6s5t4v3w2y1z0'

/** A workflow a chatflow can answer with: input `message` (string), output `answer` made by a template node. */
export function echoGraph(template = 'You said: {{inputs.message}}', inputs: unknown[] = [{ name: 'message', type: 'string', required: true }]) {
  const nodes: Node[] = [
    { id: 'start', type: 'start', config: { inputs } },
    { id: 'reply', type: 'template', config: { template } },
    { id: 'end', type: 'end', config: { outputs: { answer: '{{nodes.reply.output.text}}' } } },
  ]
  return { nodes, edges: [{ source: 'start', target: 'reply' }, { source: 'reply', target: 'end' }] }
}

let seq = 0

/** Creates a workflow; answers its id. */
export async function createWorkflow(h: Harness, key: string, workspaceId: string, graph: { nodes: Node[]; edges: unknown[] } = echoGraph()): Promise<string> {
  const res = await h.call('POST', '/v1/workflows', { key, body: { workspace_id: workspaceId, name: `Flow ${++seq}`, graph } })
  if (res.status !== 201) throw new Error(`could not create a workflow: ${res.status} ${res.text}`)
  return res.body.data.id
}

/** POST /v1/agents with defaults (a local-chat agent); the answer as is. */
export function postAgent(h: Harness, key: string, workspaceId: string, body: Record<string, unknown> = {}): Promise<Answer> {
  return h.call('POST', '/v1/agents', { key, body: { workspace_id: workspaceId, name: `Agent ${++seq}`, type: 'agent', model: 'local-chat', ...body } })
}

/** Creates an agent; answers its representation. */
export async function createAgent(h: Harness, key: string, workspaceId: string, body: Record<string, unknown> = {}): Promise<any> {
  const res = await postAgent(h, key, workspaceId, body)
  if (res.status !== 201) throw new Error(`could not create an agent: ${res.status} ${res.text}`)
  return res.body.data
}

/** POST /v1/agents/{id}/chat (synchronous). */
export function chat(h: Harness, key: string, agentId: string, body: Record<string, unknown>, headers?: Record<string, string>): Promise<Answer> {
  return h.call('POST', `/v1/agents/${agentId}/chat`, { key, body, headers })
}

/** A chat that must answer 200; answers its body. */
export async function chatOk(h: Harness, key: string, agentId: string, body: Record<string, unknown>): Promise<any> {
  const res = await chat(h, key, agentId, body)
  if (res.status !== 200) throw new Error(`chat answered ${res.status} ${res.text}`)
  return res.body
}

/** Every message of a conversation, oldest first (GET /v1/conversations/{id}?sort=created_at). */
export async function messagesOf(h: Harness, key: string, conversationId: string): Promise<any[]> {
  const res = await h.call('GET', `/v1/conversations/${conversationId}?sort=created_at&limit=100`, { key })
  expect(res.status).toBe(200)
  return res.body.data.messages
}

/** Rows behind the API: conversations of an agent, messages of a conversation. */
export async function rowCount(h: Harness, table: 'agents' | 'conversations' | 'messages', column: 'id' | 'agent_id' | 'conversation_id' | 'workspace_id', value: string): Promise<number> {
  const sql = h.deps.db.sql
  const [row] = await sql<{ n: number }[]>`select count(*)::int as n from ${sql(table)} where ${sql(column)} = ${value}`
  return row!.n
}

/** A priced test LLM routed to `<id>-up` of `provider` (a fake provider's script name). */
export const pricedLlm = (id: string, provider: string, pricing: Record<string, number>) =>
  ({ id, type: 'llm', vendor: 'test', supports_function_call: true, routes: [{ provider, model: `${id}-up` }], pricing })
