import { Elysia, t } from 'elysia'
import type { Deps } from '../deps'
import * as agents from '../domain/agents/service'
import * as conversations from '../domain/agents/conversations'
import { prepareTurn } from '../domain/agents/chat'
import { turnEvents, type Turn } from '../domain/agents/turn'
import { resolveWorkspaceId } from '../domain/ownership'
import { AppError } from '../lib/errors'
import { parseListQuery, toPage, type ListSpec } from '../lib/lists'
import {
  Agent, AgentParams, ChatAnswer, ChatBody, Conversation, ConversationHistory, ConversationParams, CreateAgent, PatchAgent,
  toAgent, toConversation, toMessage, toolView,
} from './agents.model'
import { Envelope, envelope, errors, ListOf, ListQuery } from './common.model'
import { authenticated } from './plugins/auth'
import { writeKey } from './plugins/idempotency'
import { errorEvent, sseResponse, type SseEvent } from './plugins/sse'
import { AgentChatStream } from './streams.model'

const agentList: ListSpec = {
  sortable: { created_at: 'time', updated_at: 'time', name: 'text' },
  filters: { created_at: { type: 'time' }, name: { type: 'text' }, type: { type: 'text', values: ['agent', 'chatflow'] }, status: { type: 'text', values: ['active', 'disabled'] } },
  extra: ['workspace_id'],
}
const conversationList: ListSpec = {
  sortable: { created_at: 'time', updated_at: 'time' },
  filters: { created_at: { type: 'time' }, updated_at: { type: 'time' } },
  extra: ['user_id'],
}
const messageList: ListSpec = { sortable: { created_at: 'time' }, filters: { role: { type: 'text', values: ['user', 'assistant'] } } }
const tags = ['agents']

/** The turn's events as SSE, in order; an `error` event ends a turn that failed after the first byte. */
async function* turnStream(deps: Deps, turn: Turn, requestId: string, abort: AbortController, outcome: { failed: boolean }): AsyncGenerator<SseEvent> {
  try {
    for await (const e of turnEvents(turn, abort.signal)) yield { event: e.event, data: JSON.stringify(e.data) }
  } catch (failure) {
    outcome.failed = true
    // An AppError is the client's to read; anything else is a bug, logged with the request's id.
    if (!(failure instanceof AppError) && !abort.signal.aborted) deps.log.error({ request_id: requestId, err: failure }, 'a streamed chat turn failed')
    yield errorEvent(requestId, failure)
  }
}

/** The agents (docs/agents.md), in this order: the agents themselves, a turn of chat, their conversations. */
export function agentRoutes(deps: Deps) {
  return new Elysia({ name: 'routes.agents' }).use(agentCrudRoutes(deps)).use(agentChatRoutes(deps)).use(conversationRoutes(deps))
}

function agentCrudRoutes(deps: Deps) {
  return new Elysia({ name: 'routes.agents.crud' })
    .use(authenticated(deps))
    .post('/agents', async ({ caller, requestId, body, headers, set, request }) => {
      const workspaceId = await resolveWorkspaceId(deps, caller, body.workspace_id, headers['x-workspace-id'])
      const { workspace_id: _, ...input } = body
      set.status = 201
      return envelope(requestId, toAgent(await agents.createAgent(deps, caller, workspaceId, input as agents.AgentInput, writeKey(request))))
    }, {
      body: CreateAgent,
      parse: 'json',
      response: { 201: Envelope(Agent, 'The agent created'), ...errors(403, 404, 409, 422) },
      detail: { operationId: 'createAgent', tags, summary: 'Create an agent (developer)', description: 'The model must be an llm of the catalogue; knowledge bases and workflows must be of the same workspace; a chatflow\'s workflow must declare a string input "message". New agents are active at version 1.' },
    })
    .get('/agents', async ({ caller, requestId, query, headers }) => {
      const q = parseListQuery(query, agentList)
      const workspaceId = (query as { workspace_id?: string }).workspace_id ?? headers['x-workspace-id']
      return { request_id: requestId, ...toPage(await agents.listAgents(deps, caller, workspaceId, q), q, toAgent) }
    }, {
      query: ListQuery('created_at, updated_at, name', {
        workspace_id: t.Optional(t.String({ description: 'Only this workspace (else X-Workspace-Id); without either, every workspace the caller can read. One the caller cannot read is 404' })),
        type: t.Optional(t.String({ description: 'agent or chatflow; type_in for both' })),
        status: t.Optional(t.String({ description: 'active or disabled' })),
        name: t.Optional(t.String({ description: 'Exactly this name' })),
      }),
      response: { 200: ListOf(Agent, 'A page of agents'), ...errors(403, 404) },
      detail: { operationId: 'listAgents', tags, summary: 'List the agents of every workspace the caller can read (workspace_id: of one)' },
    })
    .get('/agents/:id', async ({ caller, requestId, params }) => envelope(requestId, toAgent(await agents.loadAgent(deps, caller, params.id, 'read'))), {
      params: AgentParams,
      response: { 200: Envelope(Agent, 'The agent'), ...errors(404) },
      detail: { operationId: 'getAgent', tags, summary: 'Get an agent' },
    })
    .patch('/agents/:id', async ({ caller, requestId, params, body }) => envelope(requestId, toAgent(await agents.updateAgent(deps, caller, params.id, body as agents.AgentPatch))), {
      params: AgentParams,
      body: PatchAgent,
      parse: 'json',
      response: { 200: Envelope(Agent, 'The agent as changed, its version one up'), ...errors(403, 404, 409, 422) },
      detail: { operationId: 'updateAgent', tags, summary: 'Change an agent (developer); its version goes up by one', description: 'The fields given replace the stored ones; the result is checked as at creation. Messages record the version that answered them.' },
    })
    .delete('/agents/:id', async ({ caller, requestId, params }) => {
      await agents.deleteAgent(deps, caller, params.id)
      return envelope(requestId, { id: params.id, deleted: true as const })
    }, {
      params: AgentParams,
      response: { 200: Envelope(t.Object({ id: t.String(), deleted: t.Literal(true) }), 'The agent was deleted'), ...errors(403, 404, 409, 422) },
      detail: { operationId: 'deleteAgent', tags, summary: 'Delete an agent with its conversations (developer)' },
    })
}

function agentChatRoutes(deps: Deps) {
  return new Elysia({ name: 'routes.agents.chat' })
    .use(authenticated(deps))
    .post('/agents/:id/chat', async ({ caller, requestId, params, body, request, set, route }) => {
      const turn = await prepareTurn(deps, caller, params.id, body, requestId)
      if (body.stream) {
        // No event names the conversation: the header does, for the next turn's conversation_id.
        set.headers['x-conversation-id'] = turn.conversation.id
        const abort = new AbortController()
        const outcome = { failed: false }
        // Cast: Elysia types an async handler as a Promise of one answer type (a Response, or a declared body), not of their union.
        return sseResponse(deps, { request, set, route, events: turnStream(deps, turn, requestId, abort, outcome), abort, replay: { ok: () => !outcome.failed } }) as never
      }
      const r = await turn.run(() => {}, request.signal ?? new AbortController().signal)
      return {
        request_id: requestId,
        agent_id: r.agent_id,
        conversation_id: r.conversation_id,
        message: r.message,
        tool_calls: r.tool_calls.map(toolView),
        usage: r.usage,
      }
    }, {
      params: AgentParams,
      body: ChatBody,
      parse: 'json',
      response: { 200: ChatAnswer, ...errors(402, 403, 404, 409, 422, 502, 504) },
      detail: {
        operationId: 'chatWithAgent',
        ...AgentChatStream,
        tags,
        summary: 'Chat with an agent; stream: true with Accept: text/event-stream for server-sent events',
        description: 'A new conversation when conversation_id is omitted; one of another agent or user_id is 404. Streams send message (delta), tool_call, tool_result, usage and done (finish_reason) events, or an error event if the turn fails after the first byte; the X-Conversation-Id header names the conversation. The answer, its tool calls, usage and credits are stored in one transaction, also what was produced when the client leaves mid-stream.',
      },
    })
}

function conversationRoutes(deps: Deps) {
  return new Elysia({ name: 'routes.agents.conversations' })
    .use(authenticated(deps))
    .get('/agents/:id/conversations', async ({ caller, requestId, params, query }) => {
      // Newest activity first unless the client sorts otherwise (the cursor then encodes updated_at).
      const q = parseListQuery({ sort: '-updated_at', ...query }, conversationList)
      const rows = await conversations.listConversations(deps, caller, params.id, (query as { user_id?: string }).user_id, q)
      return { request_id: requestId, ...toPage(rows, q, toConversation) }
    }, {
      params: AgentParams,
      query: ListQuery('created_at, updated_at (default -updated_at: newest activity first)', {
        user_id: t.Optional(t.String({ maxLength: 128, description: 'Only this end user\'s conversations' })),
      }),
      response: { 200: ListOf(Conversation, 'A page of the agent\'s conversations'), ...errors(404) },
      detail: { operationId: 'listConversations', tags, summary: 'List an agent\'s conversations, newest first', description: 'Below the developer role a caller sees only the conversations of its own user_id.' },
    })
    .get('/conversations/:conversation_id', async ({ caller, requestId, params, query }) => {
      const q = parseListQuery(query, messageList)
      const { conversation, messages } = await conversations.conversationHistory(deps, caller, params.conversation_id, q)
      const page = toPage(messages, q, toMessage)
      return envelope(requestId, { ...toConversation(conversation), messages: page.data, next_cursor: page.next_cursor, has_more: page.has_more })
    }, {
      params: ConversationParams,
      query: ListQuery('created_at', { role: t.Optional(t.String({ description: 'user or assistant' })) }),
      response: { 200: Envelope(ConversationHistory, 'The conversation with a page of its messages'), ...errors(404) },
      detail: { operationId: 'getConversation', tags, summary: 'A conversation with its messages (tool calls, usage), a page at a time (newest first by default; sort=created_at for oldest first)' },
    })
    .delete('/conversations/:conversation_id', async ({ caller, requestId, params }) => {
      await conversations.deleteConversation(deps, caller, params.conversation_id)
      return envelope(requestId, { id: params.conversation_id, deleted: true as const })
    }, {
      params: ConversationParams,
      response: { 200: Envelope(t.Object({ id: t.String(), deleted: t.Literal(true) }), 'The conversation was deleted'), ...errors(403, 404) },
      detail: { operationId: 'deleteConversation', tags, summary: 'Delete a conversation with its messages' },
    })
}
