import { Elysia } from 'elysia'
import type { Deps } from '../deps'
import { prepareTurn } from '../domain/agents/chat'
import * as agents from '../domain/agents/service'
import { prepareAudit, recordAudit } from '../domain/audit'
import * as bases from '../domain/knowledge/bases'
import { searchKnowledgeBase } from '../domain/knowledge/search'
import type { McpCall, McpTool, ToolContext } from '../domain/mcp/server'
import * as runs from '../domain/workflows/runs'
import * as workflows from '../domain/workflows/service'
import { AppError, invalid, type ErrorCode } from '../lib/errors'
import { parseListQuery, toPage, type ListSpec } from '../lib/lists'
import { toAgent, toolView } from './agents.model'
import { errors } from './common.model'
import { toKnowledgeBase } from './knowledge.model'
import { ChatWithAgentInput, jsonSchemaOf, JsonRpcAnswer, JsonRpcMessage, LIST_DEFAULT_LIMIT, ListResourcesInput, RunWorkflowInput, SearchKnowledgeInput } from './mcp.model'
import { authenticated } from './plugins/auth'
import { stateOf } from './plugins/request-state'
import { toSync } from './runs.model'
import { toWorkflow } from './workflows.model'

let mcpServer: Promise<typeof import('../domain/mcp/server')> | undefined

/** list_resources pages newest first, as the REST lists do by default; no filters. */
const newestFirst: ListSpec = { sortable: { created_at: 'time' }, filters: {} }

/**
 * The four tools (docs/mcp.md). Each calls the domain function of the REST route it stands for, with
 * the same caller, so that the same role checks apply, and answers that route's body.
 */
const TOOLS: readonly McpTool[] = [
  {
    name: 'search_knowledge',
    title: 'Search a knowledge base',
    description: 'Search a knowledge base for the passages closest to a query (vector, full-text or hybrid per the base; filters on metadata; optional rerank), as POST /v1/knowledge-bases/{id}/search. Retrieval only. Role: readonly or above.',
    input: SearchKnowledgeInput,
    inputSchema: jsonSchemaOf(SearchKnowledgeInput),
    creates: false,
    async run(args: typeof SearchKnowledgeInput.static, ctx) {
      const { knowledge_base_id, ...body } = args
      return { data: { results: await searchKnowledgeBase(ctx.deps, ctx.caller, knowledge_base_id, body, ctx.requestId, ctx.signal) } }
    },
  },
  {
    name: 'run_workflow',
    title: 'Run a workflow',
    description:
      'Run a workflow with its start inputs and wait for its outputs, as POST /v1/workflows/{id}/runs (synchronous): at most SYNC_RUN_TIMEOUT_MS, after which the answer has status running and the run_id to follow with GET /v1/runs/{run_id}. ' +
      'A failed run answers isError with the run\'s error. Role: user or above (below developer, as the key\'s own user_id). Retrying with the same JSON-RPC id starts no second run.',
    input: RunWorkflowInput,
    inputSchema: jsonSchemaOf(RunWorkflowInput),
    creates: true,
    async run(args: typeof RunWorkflowInput.static, ctx) {
      const { workflow_id, ...body } = args
      const run = await runs.createRun(ctx.deps, ctx.caller, workflow_id, body, ctx.requestId)
      await auditRun(ctx, workflow_id, run.id)
      const done = await runs.waitForRun(ctx.deps, run.id, ctx.deps.config.syncRunTimeoutMs)
      const { request_id: _, ...answer } = toSync(ctx.requestId, done)
      return { data: answer, failed: done.status === 'failed' || done.status === 'cancelled' }
    },
  },
  {
    name: 'chat_with_agent',
    title: 'Chat with an agent',
    description:
      'Send one message to an agent and get its answer, as POST /v1/agents/{id}/chat (not streamed). Omit conversation_id to start a conversation; pass the answer\'s conversation_id to continue it. ' +
      'user_id defaults to the API key\'s own user. Role: user or above. Retrying with the same JSON-RPC id stores no second turn.',
    input: ChatWithAgentInput,
    inputSchema: jsonSchemaOf(ChatWithAgentInput),
    creates: true,
    async run(args: typeof ChatWithAgentInput.static, ctx) {
      const { agent_id, user_id, ...rest } = args
      const turn = await prepareTurn(ctx.deps, ctx.caller, agent_id, { ...rest, user_id: user_id ?? ctx.caller.userId }, ctx.requestId)
      // Not the request's signal: a client that leaves gets this answer on its retry (same id), so the turn finishes.
      const r = await turn.run(() => {}, new AbortController().signal)
      return { data: { agent_id: r.agent_id, conversation_id: r.conversation_id, message: r.message, tool_calls: r.tool_calls.map(toolView), usage: r.usage } }
    },
  },
  {
    name: 'list_resources',
    title: 'List agents, workflows or knowledge bases',
    description:
      `List the agents, workflows or knowledge bases the caller can read, newest first, ${LIST_DEFAULT_LIMIT} at a time unless limit says otherwise (at most 100); next_cursor fetches the next page. ` +
      'As GET /v1/agents, /v1/workflows and /v1/knowledge-bases. Role: readonly or above.',
    input: ListResourcesInput,
    inputSchema: jsonSchemaOf(ListResourcesInput),
    creates: false,
    async run(args: typeof ListResourcesInput.static, ctx) {
      const q = parseListQuery({ limit: String(args.limit ?? LIST_DEFAULT_LIMIT), cursor: args.cursor }, newestFirst)
      const workspaceId = args.workspace_id ?? ctx.workspaceHeader
      const { deps, caller } = ctx
      const page =
        args.type === 'agents' ? toPage(await agents.listAgents(deps, caller, workspaceId, q), q, toAgent)
        : args.type === 'workflows' ? toPage(await workflows.listWorkflows(deps, caller, workspaceId, q), q, toWorkflow)
        : toPage(await bases.listKnowledgeBases(deps, caller, workspaceId, q), q, toKnowledgeBase)
      return { data: { type: args.type, ...page } }
    },
  },
] as McpTool[]

/** A run started through MCP is in the audit trail as the REST trigger it stands for (docs/audit.md). */
async function auditRun(ctx: ToolContext, workflowId: string, runId: string) {
  const params = { id: workflowId }
  const audit = await prepareAudit(ctx.deps, 'POST', '/v1/workflows/:id/runs', params)
  await recordAudit(ctx.deps, { audit, caller: ctx.caller, id: ctx.requestId }, 200, { run_id: runId })
}

const SESSION = /^[\x21-\x7e]{1,128}$/

/** The transport's own refusals (a message that is not JSON-RPC, an unsupported protocol version), in the error shape. */
const TRANSPORT_ERRORS: Record<number, ErrorCode> = { 400: 'validation_error', 404: 'not_found', 413: 'payload_too_large', 415: 'unsupported_media_type' }

/**
 * POST /v1/mcp: the service as an MCP server (docs/mcp.md). Authentication, the rate limit and the
 * body's parsing are the conventions' (src/routes/plugins/); the JSON-RPC message goes to a fresh
 * stateless SDK server whose tools call the domain as the REST routes do. GET (the SSE stream) and
 * DELETE (a session's end) are 405: the server keeps no session and never streams.
 */
export function mcpRoutes(deps: Deps) {
  const path = `${deps.config.basePath}/v1/mcp`
  return new Elysia({ name: 'routes.mcp' })
    .use(authenticated(deps))
    .onRequest(({ request }) => {
      if ((request.method === 'GET' || request.method === 'DELETE') && stateOf(request).path === path) {
        throw new AppError('method_not_allowed', `${request.method} ${path} is not served: this MCP server is stateless (no SSE stream, no session to end); send JSON-RPC with POST`, {
          headers: { allow: 'POST' },
        })
      }
    })
    .post('/mcp', async ({ request, body, caller, requestId, headers, set }) => {
      const state = stateOf(request)
      // Not audited as "POST /v1/mcp": a tool call that writes is recorded as its REST twin (auditRun).
      state.audit = undefined
      const sessionHeader = headers['mcp-session-id']
      if (sessionHeader !== undefined && !SESSION.test(sessionHeader)) throw invalid('Mcp-Session-Id', 'must be 1-128 visible ASCII characters')
      const ctx: ToolContext = { deps, caller, requestId, workspaceHeader: headers['x-workspace-id'], signal: request.signal }
      const call: McpCall = { ctx, session: sessionHeader ?? null }
      // The MCP server's SDK is loaded by the first call, not at start-up (~20 MB resident, bench/README.memory.md).
      const { handleMcpRequest } = await (mcpServer ??= import('../domain/mcp/server'))
      const answer = await handleMcpRequest(TOOLS, call, forTransport(request), body)
      if (call.failure) throw call.failure
      // Cast: Elysia types an async handler as a Promise of one answer type (a Response, or a declared body), not of their union.
      if (answer.status === 202) return accepted(deps, request, set) as never
      const text = await answer.text()
      const json = JSON.parse(text) as typeof JsonRpcAnswer.static & { error?: { message: string } }
      if (answer.status >= 400) {
        throw new AppError(TRANSPORT_ERRORS[answer.status] ?? 'validation_error', json.error?.message ?? `the MCP transport answered ${answer.status}`, { param: 'body' })
      }
      // A session id handed out at initialize scopes the retries of the connection's calls (src/domain/mcp/idempotency.ts).
      if (body.method === 'initialize' && sessionHeader === undefined) set.headers['mcp-session-id'] = `mcp-${crypto.randomUUID()}`
      return json
    }, {
      body: JsonRpcMessage,
      parse: 'json',
      response: { 200: JsonRpcAnswer, ...errors(405, 413) },
      detail: {
        operationId: 'postMcpMessage',
        tags: ['mcp'],
        summary: 'The service as an MCP server: JSON-RPC over Streamable HTTP (stateless, JSON answers)',
        description:
          'Model Context Protocol (protocol versions up to 2025-11-25) for MCP clients (Claude Desktop, Cursor, the MCP Inspector, the official SDKs): initialize, tools/list, tools/call, ping. ' +
          'Tools: search_knowledge, run_workflow, chat_with_agent, list_resources, each with the roles and answers of its REST route. ' +
          'A refusal (not found, forbidden, bad arguments, budget) is a tool result with isError: true and the REST error body as structuredContent; an unknown tool is JSON-RPC error -32602. ' +
          'run_workflow and chat_with_agent are idempotent per API key, Mcp-Session-Id and JSON-RPC id for 24 h. A notification is answered 202 with no body. GET and DELETE answer 405 (Allow: POST). See docs/mcp.md.',
      },
    })
}

/**
 * The request as the SDK transport reads it. It wants an Accept of both JSON and SSE and a plain
 * application/json type; we always answer JSON and the conventions have checked the body, so a client
 * that accepts only JSON is served too. The key stays out of what the transport hands to handlers.
 */
function forTransport(request: Request): Request {
  const headers = new Headers(request.headers)
  headers.set('accept', 'application/json, text/event-stream')
  headers.set('content-type', 'application/json')
  headers.delete('authorization')
  return new Request(request.url, { method: 'POST', headers })
}

/**
 * 202 with no body (MCP: a notification accepted), outside the one JSON exit (plugins/respond.ts):
 * its headers, metrics and access log as that exit writes them. An Idempotency-Key sent with it is
 * released: there is nothing to replay.
 */
function accepted(deps: Deps, request: Request, set: { headers: Record<string, string | number>; status?: number | string }): Response {
  const state = stateOf(request)
  if (state.idem) {
    deps.redis.del(state.idem.key).catch(() => {})
    state.idem = undefined
  }
  const seconds = (performance.now() - state.start) / 1000
  deps.metrics.observe(request.method, `${deps.config.basePath}/v1/mcp`, 202, seconds)
  deps.access({ request_id: state.id, method: request.method, path: state.path, route: `${deps.config.basePath}/v1/mcp`, status: 202, ms: Math.round(seconds * 10000) / 10 })
  const response = new Response(null, { status: 202, headers: set.headers as Record<string, string> })
  set.headers = {}
  return response
}
