import { randomUUID } from 'node:crypto'
import type { Server as BunServer } from 'bun'
import { Server } from '@modelcontextprotocol/sdk/server/index.js'
import { WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js'
import { CallToolRequestSchema, ListToolsRequestSchema, type CallToolResult, type Tool } from '@modelcontextprotocol/sdk/types.js'

/**
 * A loopback MCP server (Streamable HTTP, the SDK's own server side, served by Bun.serve) for agent
 * tests and bench/mcp.ts. Stateful: each `initialize` opens a session of its own (an SDK `Server`
 * with its transport), as most real servers do. Its tools:
 *   lookup  { id }      text: `record <id>: status open`
 *   echo    { text }    text: the text, as is
 *   stats   { region? } structuredContent `{ region, orders, revenue }` (with an outputSchema)
 *   slow    { ms? }     waits `ms` (default 10 s) or until the client cancels, then text `slept`
 *   explode { reveal? } throws: a JSON-RPC error answers (with the request's headers in it, if `reveal`)
 *   refuse  { reason? } a result with `isError: true` and the reason as text
 * Every HTTP request is recorded with its headers and JSON-RPC methods, so tests can assert that
 * credentials and traceparent arrived and count `tools/list` round trips.
 */

export interface McpRequest {
  method: string
  path: string
  /** Lower-cased names. */
  headers: Record<string, string>
  /** The JSON-RPC methods of a POST body (`initialize`, `tools/list`, `tools/call`...). */
  rpc: string[]
  /** `params.name` of a `tools/call`. */
  tool?: string
}

export interface McpTestServer {
  url: string
  requests: McpRequest[]
  /** Requests carrying this JSON-RPC method. */
  count(rpc: string): number
  /** Sessions opened (initialize handshakes) and still open. */
  sessions(): number
  /** Forgets every session, as a restarted server does: their next request answers 404. */
  dropSessions(): Promise<void>
  close(): Promise<void>
}

export const TOOLS: Tool[] = [
  { name: 'lookup', description: 'Looks a record up by id', inputSchema: { type: 'object', properties: { id: { type: 'string' } }, required: ['id'] } },
  { name: 'echo', description: 'Answers the text it is given', inputSchema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] } },
  {
    name: 'stats',
    description: 'Order statistics of a region, as structured data',
    inputSchema: { type: 'object', properties: { region: { type: 'string' } } },
    outputSchema: { type: 'object', properties: { region: { type: 'string' }, orders: { type: 'integer' }, revenue: { type: 'number' } }, required: ['region', 'orders', 'revenue'] },
  },
  { name: 'slow', description: 'Takes its time', inputSchema: { type: 'object', properties: { ms: { type: 'integer' } } } },
  { name: 'explode', description: 'Always fails', inputSchema: { type: 'object', properties: { reveal: { type: 'boolean', description: 'Echo the request\'s headers in the error, as a careless server does' } } } },
  { name: 'refuse', description: 'Answers an error result', inputSchema: { type: 'object', properties: { reason: { type: 'string' } } } },
]

async function callTool(name: string, args: Record<string, unknown>, signal: AbortSignal, headers: Record<string, unknown> = {}): Promise<CallToolResult> {
  switch (name) {
    case 'lookup':
      return { content: [{ type: 'text', text: `record ${String(args.id)}: status open` }] }
    case 'echo':
      return { content: [{ type: 'text', text: String(args.text ?? '') }] }
    case 'stats': {
      const data = { region: String(args.region ?? 'north'), orders: 42, revenue: 1234.5 }
      return { content: [{ type: 'text', text: JSON.stringify(data) }], structuredContent: data }
    }
    case 'slow': {
      const ms = typeof args.ms === 'number' ? args.ms : 10_000
      // The tool's own pace, ended early by the client's cancellation (not a wait in a test).
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, ms)
        signal.addEventListener('abort', () => (clearTimeout(timer), resolve()), { once: true })
      })
      return { content: [{ type: 'text', text: 'slept' }] }
    }
    case 'explode':
      throw new Error(args.reveal ? `the lookup table is on fire; the request had ${JSON.stringify(headers)}` : 'the lookup table is on fire')
    case 'refuse':
      return { content: [{ type: 'text', text: `refused: ${String(args.reason ?? 'no reason')}` }], isError: true }
    default:
      throw new Error(`no tool ${name}`)
  }
}

function newSession(): { server: Server; transport: WebStandardStreamableHTTPServerTransport } {
  const server = new Server({ name: 'test-mcp', version: '1.0.0' }, { capabilities: { tools: {} } })
  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: TOOLS }))
  server.setRequestHandler(CallToolRequestSchema, async (req, extra) => callTool(req.params.name, req.params.arguments ?? {}, extra.signal, extra.requestInfo?.headers))
  const transport = new WebStandardStreamableHTTPServerTransport({ sessionIdGenerator: () => randomUUID() })
  return { server, transport }
}

export async function startMcpServer(opts: { path?: string } = {}): Promise<McpTestServer> {
  const path = opts.path ?? '/mcp'
  const requests: McpRequest[] = []
  const sessions = new Map<string, { server: Server; transport: WebStandardStreamableHTTPServerTransport }>()

  const http: BunServer<undefined> = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    // A slow call's stream stays open longer than Bun's default 10 s idle time-out allows.
    idleTimeout: 0,
    async fetch(req) {
      const url = new URL(req.url)
      const rec: McpRequest = { method: req.method, path: url.pathname, headers: Object.fromEntries(req.headers), rpc: [] }
      requests.push(rec)
      if (url.pathname !== path) return new Response('not found', { status: 404 })
      let body: unknown
      if (req.method === 'POST') {
        try {
          body = await req.json()
        } catch {
          return Response.json({ jsonrpc: '2.0', error: { code: -32700, message: 'parse error' }, id: null }, { status: 400 })
        }
        for (const m of Array.isArray(body) ? body : [body]) {
          if (typeof m?.method === 'string') rec.rpc.push(m.method)
          if (m?.method === 'tools/call') rec.tool = m.params?.name
        }
      }
      const sid = req.headers.get('mcp-session-id')
      let session = sid ? sessions.get(sid) : undefined
      if (sid && !session) return Response.json({ jsonrpc: '2.0', error: { code: -32001, message: 'session not found' }, id: null }, { status: 404 })
      if (!session) {
        if (!rec.rpc.includes('initialize')) return Response.json({ jsonrpc: '2.0', error: { code: -32000, message: 'no session' }, id: null }, { status: 400 })
        session = newSession()
        const opened = session
        opened.transport.onclose = () => {
          if (opened.transport.sessionId) sessions.delete(opened.transport.sessionId)
        }
        await opened.server.connect(opened.transport)
        const res = await opened.transport.handleRequest(req, { parsedBody: body })
        if (opened.transport.sessionId) sessions.set(opened.transport.sessionId, opened)
        return res
      }
      return session.transport.handleRequest(req, { parsedBody: body })
    },
  })

  return {
    url: `http://127.0.0.1:${http.port}${path}`,
    requests,
    count: (rpc) => requests.filter((r) => r.rpc.includes(rpc)).length,
    sessions: () => sessions.size,
    async dropSessions() {
      for (const s of [...sessions.values()]) await s.server.close().catch(() => {})
      sessions.clear()
    },
    async close() {
      for (const s of [...sessions.values()]) await s.server.close().catch(() => {})
      sessions.clear()
      await http.stop(true)
    },
  }
}
