import type { Deps } from '../../deps'
import { sha256Hex } from '../../lib/crypto'
import { AppError } from '../../lib/errors'
import { urlPolicy } from '../../lib/net-guard'
import type { AgentRow, AgentTool } from '../../store/agents'
import type { Charge } from '../../store/credits'
import { findWorkflow } from '../../store/workflows'
import { searchBases } from '../knowledge/search'
import type { ToolDefinition } from '../models/types'
import type { Caller } from '../access'
import type { InputSpec } from '../workflows/graph'
import { inputSpec } from '../workflows/graph'
import { createRun, waitForRun } from '../workflows/runs'
import { sendHttp } from '../workflows/nodes/http-request'
import { NodeError } from '../workflows/types'
import { callMcpTool, listMcpTools, redactUrl, type McpServerSpec, type McpToolInfo } from './mcp-client'

/**
 * The name the model and `tool_calls[].tool` see: `name`, else `knowledge_search`, else `workflow_<id>`
 * (docs/agents.md, "Definitions").
 */
export function toolName(tool: AgentTool): string {
  if (tool.name) return tool.name
  return tool.type === 'workflow' ? `workflow_${tool.workflow_id}` : tool.type
}

const HTTP_TIMEOUT_MS = 15_000
/** Results of a knowledge_search call, unless the model asks for another number (1..20). */
const SEARCH_TOP_K = 5

/** What a turn's tools need: who called, for which workspace and request, and the turn's abort. */
export interface ToolContext {
  deps: Deps
  caller: Caller
  agent: AgentRow
  userId: string
  requestId: string
  signal: AbortSignal
  /** The turn's model charges (the query embeddings of searches), committed with its answer. */
  charges: Charge[]
}

export interface Tool {
  definition: ToolDefinition
  run(args: Record<string, unknown>, ctx: ToolContext): Promise<Record<string, unknown>>
}

const JSON_TYPES: Record<InputSpec['type'], string> = { string: 'string', number: 'number', boolean: 'boolean', array: 'array', object: 'object' }

/**
 * The agent's tools as the model sees them, each with what runs it. Workflows are read at each turn
 * (they change); MCP servers' tool lists come from their cache (src/domain/agents/mcp-client.ts), all asked
 * at once. A server that cannot list its tools is left out of this turn (logged), not a failed turn.
 */
export async function agentTools(deps: Deps, agent: AgentRow): Promise<Map<string, Tool>> {
  const tools = new Map<string, Tool>()
  const servers = agent.tools.map((t) => (t.type === 'mcp' ? mcpServer(deps, t) : null))
  const listings = servers.map((server) => (server ? listMcpTools(server, deps.config.mcpCallTimeoutMs).catch((err: Error) => err) : null))
  for (const [i, t] of agent.tools.entries()) {
    const name = toolName(t)
    if (t.type === 'mcp') {
      const listed = await listings[i]!
      if (listed instanceof Error) {
        deps.log.warn({ agent_id: agent.id, tool: t.name, server_url: redactUrl(t.server_url), reason: listed.message }, 'an MCP server\'s tools could not be listed; they are left out of this turn')
        continue
      }
      addMcpTools(tools, servers[i]!, t, listed)
    } else if (t.type === 'knowledge_search') {
      tools.set(name, {
        definition: fn(name, t.description ?? 'Searches the knowledge bases of this assistant; answers the passages most relevant to the query.', {
          type: 'object',
          properties: {
            query: { type: 'string', description: 'What to look for, in words likely to appear in the passages' },
            top_k: { type: 'integer', minimum: 1, maximum: 20, description: `How many passages (default ${SEARCH_TOP_K})` },
          },
          required: ['query'],
        }),
        run: (args, ctx) => knowledgeSearch(args, ctx),
      })
    } else if (t.type === 'workflow') {
      const wf = await findWorkflow(deps.db.sql, t.workflow_id)
      if (!wf || wf.workspace_id !== agent.workspace_id) continue // deleted since: the model is not offered it
      const specs = inputSpec(wf.graph)
      tools.set(name, {
        definition: fn(name, t.description ?? (wf.description || `Runs the workflow "${wf.name}" and answers its outputs.`), {
          type: 'object',
          properties: Object.fromEntries(specs.map((s) => [s.name, { type: JSON_TYPES[s.type] }])),
          required: specs.filter((s) => s.required).map((s) => s.name),
        }),
        run: (args, ctx) => workflowRun(t.workflow_id, args, ctx),
      })
    } else {
      tools.set(name, { definition: fn(name, t.description, t.parameters), run: (args, ctx) => httpCall(t, args, ctx) })
    }
  }
  return tools
}

type McpTool = Extract<AgentTool, { type: 'mcp' }>

const mcpServer = (deps: Deps, t: McpTool): McpServerSpec => ({
  url: t.server_url,
  sealedHeaders: t.headers_sealed ?? {},
  open: (sealed) => deps.secretBox.open(sealed),
  policy: urlPolicy(deps.config),
})

/** The server's tools (those of `allowed_tools` when given) as `<name>__<tool>`. */
function addMcpTools(tools: Map<string, Tool>, server: McpServerSpec, t: McpTool, listed: McpToolInfo[]) {
  const allowed = t.allowed_tools ? new Set(t.allowed_tools) : null
  for (const m of listed) {
    if (allowed && !allowed.has(m.name)) continue
    const name = mcpToolName(t.name, m.name, tools)
    const parameters = m.inputSchema.type === 'object' ? m.inputSchema : { type: 'object', properties: {} }
    tools.set(name, {
      definition: fn(name, m.description, parameters),
      run: (args, ctx) => callMcpTool(server, m.name, args, { timeoutMs: ctx.deps.config.mcpCallTimeoutMs, signal: ctx.signal }),
    })
  }
}

/**
 * `<prefix>__<tool>` within the function-name rule (64 characters of [A-Za-z0-9_-]): other characters
 * become `_`; a name too long, or taken, is cut and ends with 8 hex of the tool's own name's hash.
 */
export function mcpToolName(prefix: string, tool: string, taken: { has(name: string): boolean }): string {
  const head = `${prefix}__`
  const plain = head + tool.replace(/[^A-Za-z0-9_-]/g, '_')
  if (plain.length <= 64 && !taken.has(plain)) return plain
  const hash = sha256Hex(tool).slice(0, 8)
  return `${plain.slice(0, 64 - 9)}_${hash}`
}

const fn = (name: string, description: string, parameters: Record<string, unknown>): ToolDefinition => ({
  type: 'function',
  function: { name, description, parameters },
})

async function knowledgeSearch(args: Record<string, unknown>, ctx: ToolContext): Promise<Record<string, unknown>> {
  const query = typeof args.query === 'string' ? args.query.trim() : ''
  if (!query) return toolError('invalid_arguments', 'query must be a non-empty string')
  const topK = Number.isInteger(args.top_k) ? Math.min(20, Math.max(1, args.top_k as number)) : SEARCH_TOP_K
  return searchPassages(ctx, query, topK)
}

/** The agent's bases searched for `query` (each in its own mode), as a knowledge_search output. */
export async function searchPassages(ctx: ToolContext, query: string, topK: number): Promise<{ results: Record<string, unknown>[] }> {
  const call = { workspaceId: ctx.agent.workspace_id, requestId: ctx.requestId, deferredCharges: ctx.charges }
  const results = await searchBases(ctx.deps, ctx.agent.workspace_id, ctx.agent.knowledge_base_ids, { query, top_k: topK }, call, ctx.signal)
  return { results: results.map((r) => ({ content: r.content, document_name: r.document_name, score: r.score, knowledge_base_id: r.knowledge_base_id, metadata: r.metadata })) }
}

/** Runs the workflow (as the calling key, with the turn's user) and waits for its end, up to SYNC_RUN_TIMEOUT_MS. */
async function workflowRun(workflowId: string, args: Record<string, unknown>, ctx: ToolContext): Promise<Record<string, unknown>> {
  const run = await createRun(ctx.deps, ctx.caller, workflowId, { inputs: args, user_id: ctx.userId }, ctx.requestId)
  const done = await waitForRun(ctx.deps, run.id, ctx.deps.config.syncRunTimeoutMs)
  if (done.status === 'running') return { run_id: done.id, status: 'running', error: { code: 'timeout', message: `the run did not finish within ${ctx.deps.config.syncRunTimeoutMs} ms` } }
  return { run_id: done.id, status: done.status, outputs: done.outputs ?? {}, ...(done.error ? { error: done.error } : {}) }
}

/**
 * The declared request with the model's arguments: `{name}` placeholders of the URL take their
 * argument (URL-encoded); the rest go in the query string (GET, DELETE, HEAD) or as a JSON body. The
 * SSRF rules of webhooks apply at each call.
 */
async function httpCall(tool: Extract<AgentTool, { type: 'http' }>, args: Record<string, unknown>, ctx: ToolContext): Promise<Record<string, unknown>> {
  const rest = { ...args }
  const raw = tool.url.replace(/\{([A-Za-z_][A-Za-z0-9_]*)\}/g, (_, key: string) => {
    const value = rest[key]
    delete rest[key]
    return encodeURIComponent(value === undefined || value === null ? '' : typeof value === 'string' ? value : JSON.stringify(value))
  })
  const headers = new Headers({ 'user-agent': 'agent-platform-api-agents/0.1.0', accept: 'application/json' })
  let target = raw
  let body: string | undefined
  if (tool.method === 'GET' || tool.method === 'DELETE') {
    const url = new URL(raw)
    for (const [k, v] of Object.entries(rest)) url.searchParams.set(k, typeof v === 'string' ? v : JSON.stringify(v))
    target = url.toString()
  } else {
    headers.set('content-type', 'application/json')
    body = JSON.stringify(rest)
  }
  const policy = urlPolicy(ctx.deps.config)
  return sendHttp({ method: tool.method, raw: target, headers, body, timeoutMs: HTTP_TIMEOUT_MS, policy, signal: ctx.signal })
}

export const toolError = (code: string, message: string) => ({ error: { code, message } })

/**
 * Runs one call of the model's. A failure the model can act on (bad arguments, a refused URL, a run
 * that failed, a base gone) is the tool's output `{ error: { code, message } }`, fed back to it; the
 * client going away, or a bug, is not caught here.
 */
export async function runTool(tools: Map<string, Tool>, name: string, rawArgs: string, ctx: ToolContext): Promise<{ input: Record<string, unknown>; output: Record<string, unknown> }> {
  const input = parseArguments(rawArgs)
  if (!input) return { input: { _raw: rawArgs.slice(0, 2000) }, output: toolError('invalid_arguments', 'the arguments are not a JSON object') }
  const tool = tools.get(name)
  if (!tool) return { input, output: toolError('unknown_tool', `no tool is named ${name}; the tools are ${[...tools.keys()].join(', ') || 'none'}`) }
  try {
    return { input, output: await tool.run(input, ctx) }
  } catch (err) {
    if (ctx.signal.aborted) throw err
    if (err instanceof NodeError || err instanceof AppError) return { input, output: toolError(err.code, err.message) }
    throw err
  }
}

/** A call's arguments as the JSON object they should be (empty means none); null when they are not one. */
export function parseArguments(raw: string): Record<string, unknown> | null {
  try {
    const parsed = raw.trim() === '' ? {} : JSON.parse(raw)
    return typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed) ? (parsed as Record<string, unknown>) : null
  } catch {
    return null
  }
}
