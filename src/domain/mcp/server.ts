import { Server } from '@modelcontextprotocol/sdk/server/index.js'
import { WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js'
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/ajv'
import {
  CallToolRequestSchema, ErrorCode, InitializeRequestSchema, ListToolsRequestSchema, McpError, PingRequestSchema, type JSONRPCMessage, type RequestId, type Tool,
} from '@modelcontextprotocol/sdk/types.js'
import type { Static, TSchema } from '@sinclair/typebox'
import { Value } from '@sinclair/typebox/value'
import type { Deps } from '../../deps'
import { AppError, errorBody, type ErrorDetail } from '../../lib/errors'
import type { Caller } from '../access'
import { oncePerId, type ToolResult } from './idempotency'

/**
 * The service as an MCP server (docs/mcp.md): the Streamable HTTP transport of the official SDK in
 * stateless mode, one Server and one transport per HTTP request. A stateless transport refuses a
 * second request, and a ping through a fresh pair costs 0.26 ms (docs/mcp.md, "Cost"), so there is
 * no pool to keep; the one costly part, the SDK's Ajv validator, is built once and shared.
 */

/** What a tool runs with: the caller as authenticated for this HTTP request, as a REST route has. */
export interface ToolContext {
  deps: Deps
  caller: Caller
  requestId: string
  /** The request's X-Workspace-Id header, for tools that resolve a workspace as REST does. */
  workspaceHeader: string | undefined
  /** Aborted when the client goes away (a search stops; a write finishes, for the retry). */
  signal: AbortSignal
}

export interface McpTool<S extends TSchema = TSchema> {
  name: string
  title: string
  description: string
  /** TypeBox: what arguments are checked against. */
  input: S
  /** The same as JSON Schema, as tools/list announces it. */
  inputSchema: { type: 'object'; properties?: Record<string, object>; required?: string[] }
  /** Creates something (a run, a chat turn): a retry under the same JSON-RPC id answers the first result. */
  creates: boolean
  /**
   * The answer, as the REST twin's body without its request_id. `failed`: the call ran but did not
   * succeed (a run that failed): answered with isError so that a model reads it as a failure.
   */
  run(args: Static<S>, ctx: ToolContext): Promise<{ data: Record<string, unknown>; failed?: boolean }>
}

export interface McpCall {
  ctx: ToolContext
  /** The Mcp-Session-Id the client sent (src/domain/mcp/idempotency.ts, CallScope.session). */
  session: string | null
  /**
   * Set when a tool failed with what is not a refusal (an unreachable database or Redis, a bug): the
   * route answers the HTTP request with it, through the API's error mapping (503 with Retry-After,
   * or a 500 logged with the request id), instead of a JSON-RPC error.
   */
  failure?: unknown
}

const SERVER_INFO = { name: 'agent-platform-api', title: 'Agent Platform API', version: '1.0.0' }
const INSTRUCTIONS =
  'Tools of an agent platform: search a knowledge base, run a workflow, chat with an agent, list agents, workflows and knowledge bases. ' +
  'Call list_resources first to learn the ids the other tools take.'
/** Built once: a Server building its own costs 0.3-0.6 ms, sharing it 0.01 ms. Tool arguments are checked with TypeBox. */
const validator = new AjvJsonSchemaValidator()

/** The tools/list answer of a tool set, built once per set. */
const listings = new WeakMap<readonly McpTool[], Tool[]>()

function listingOf(tools: readonly McpTool[]): Tool[] {
  let listed = listings.get(tools)
  if (!listed) {
    listed = tools.map((tool) => ({
      name: tool.name,
      title: tool.title,
      description: tool.description,
      inputSchema: tool.inputSchema,
      annotations: { title: tool.title, readOnlyHint: !tool.creates, destructiveHint: false, idempotentHint: !tool.creates, openWorldHint: false },
    }))
    listings.set(tools, listed)
  }
  return listed
}

/**
 * Answers one HTTP request of the MCP client: `request` with the JSON-RPC message already parsed
 * (`body`) by the conventions (src/routes/plugins/bodies.ts). Answers JSON, never a stream.
 */
export async function handleMcpRequest(tools: readonly McpTool[], call: McpCall, request: Request, body: unknown): Promise<Response> {
  const server = new Server(SERVER_INFO, { capabilities: { tools: { listChanged: false } }, instructions: INSTRUCTIONS, jsonSchemaValidator: validator })
  server.setRequestHandler(ListToolsRequestSchema, () => ({ tools: listingOf(tools) }))
  server.setRequestHandler(CallToolRequestSchema, async (req, extra) => {
    const tool = tools.find((t) => t.name === req.params.name)
    // An unknown tool is a protocol error (MCP, "Tools", error handling); bad arguments are not.
    if (!tool) throw new McpError(ErrorCode.InvalidParams, `unknown tool ${JSON.stringify(req.params.name)}; tools/list names ${tools.map((t) => t.name).join(', ')}`)
    return callTool(tool, req.params.arguments ?? {}, call, extra.requestId) as Promise<ToolResult & Record<string, unknown>>
  })
  // Errors reach the JSON-RPC answer, or the route as call.failure; the SDK's console output is not wanted.
  server.onerror = () => {}
  const refused = invalidParams(body)
  if (refused) return Response.json(refused)
  const transport = new JsonRpcTransport({ sessionIdGenerator: undefined, enableJsonResponse: true })
  await server.connect(transport)
  try {
    return await transport.handleRequest(request, { parsedBody: body })
  } finally {
    await server.close()
  }
}

/** The requests this server answers, by method, as the SDK's own schemas define their params. */
const REQUESTS = { initialize: InitializeRequestSchema, ping: PingRequestSchema, 'tools/list': ListToolsRequestSchema, 'tools/call': CallToolRequestSchema } as const

/**
 * A request whose params do not match its method's schema: JSON-RPC -32602 naming the first field
 * wrong. Left to the SDK, its schema's failure went out as -32603 (an internal error) with the
 * validator's issues as a JSON dump for a message.
 */
function invalidParams(body: unknown): JSONRPCMessage | null {
  const message = body as { id?: string | number; method?: unknown }
  if (message.id === undefined || typeof message.method !== 'string' || !Object.hasOwn(REQUESTS, message.method)) return null
  const checked = REQUESTS[message.method as keyof typeof REQUESTS].safeParse(body)
  if (checked.success) return null
  const issue = checked.error.issues[0]!
  return { jsonrpc: '2.0', id: message.id, error: { code: ErrorCode.InvalidParams, message: `${issue.path.join('.') || 'params'}: ${issue.message}` } }
}

/**
 * The SDK's transport, with each JSON-RPC error's message stated once. An McpError's message already
 * reads "MCP error <code>: <text>", and the SDK sends that message as it is beside the code, so the
 * client's SDK, which prefixes the code itself, showed "MCP error -32602: MCP error -32602: <text>".
 * The wire carries the text alone, as JSON-RPC means `message` (the code has its own field).
 */
class JsonRpcTransport extends WebStandardStreamableHTTPServerTransport {
  override send(message: JSONRPCMessage, options?: { relatedRequestId?: RequestId }): Promise<void> {
    return super.send(withPlainError(message), options)
  }
}

export function withPlainError(message: JSONRPCMessage): JSONRPCMessage {
  if (!('error' in message) || !message.error) return message
  const prefix = `MCP error ${message.error.code}: `
  if (!message.error.message.startsWith(prefix)) return message
  return { ...message, error: { ...message.error, message: message.error.message.slice(prefix.length) } }
}

/**
 * One tools/call: the arguments checked against the tool's TypeBox schema, then the tool, once per
 * JSON-RPC id if it creates something. Bad arguments and every refusal of the service (not found,
 * forbidden, budget...) are a tool result with isError: true whose structuredContent is the REST
 * error body, so that a model can read what to fix (MCP 2025-11-25, "Tools", error handling).
 */
async function callTool(tool: McpTool, args: unknown, call: McpCall, id: string | number): Promise<ToolResult> {
  const { ctx } = call
  const invalid = argumentsError(tool.input, args)
  if (invalid) return errorResult(ctx.requestId, invalid)
  const execute = async () => {
    try {
      const out = await tool.run(args as Static<typeof tool.input>, ctx)
      const result: ToolResult = { content: [{ type: 'text', text: JSON.stringify(out.data) }], structuredContent: out.data }
      if (out.failed) result.isError = true
      return { result, status: 200 }
    } catch (err) {
      if (err instanceof AppError) return { result: errorResult(ctx.requestId, err), status: err.status }
      throw err
    }
  }
  try {
    if (!tool.creates) return (await execute()).result
    return await oncePerId(ctx.deps, { keyId: ctx.caller.keyId, session: call.session, id }, tool.name, args, execute)
  } catch (err) {
    // The record's own refusals (the id reused, or still in flight).
    if (err instanceof AppError) return errorResult(ctx.requestId, err)
    call.failure = err
    throw new McpError(ErrorCode.InternalError, `internal error; quote the request_id ${ctx.requestId} when reporting it`)
  }
}

/** The arguments' failures as a validation_error naming the first field (every field in details). */
function argumentsError(schema: TSchema, args: unknown): AppError | null {
  const details: ErrorDetail[] = []
  const seen = new Set<string>()
  for (const e of Value.Errors(schema, args)) {
    const path = e.path.slice(1).replaceAll('/', '.') || 'arguments'
    if (seen.has(path)) continue
    seen.add(path)
    details.push({ path, message: e.message })
    if (details.length === 20) break
  }
  if (details.length === 0) return null
  const first = details[0]!
  return new AppError('validation_error', `${first.path}: ${first.message}`, { param: first.path, details })
}

function errorResult(requestId: string, err: AppError): ToolResult {
  const body = errorBody(requestId, err)
  return { content: [{ type: 'text', text: `${err.code}: ${err.message}` }], structuredContent: body as unknown as Record<string, unknown>, isError: true }
}
