import type { Client } from '@modelcontextprotocol/sdk/client/index.js'
import type { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import type { FetchLike } from '@modelcontextprotocol/sdk/shared/transport.js'
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js'
import ipaddr from 'ipaddr.js'
import { sha256Hex } from '../../lib/crypto'
import { checkUrlShape, isPublicAddress, pinnedFetch, resolveDestination, UnsafeUrlError, type Destination, type UrlPolicy } from '../../lib/net-guard'
import { scrubUrl, shownUrl } from '../../lib/redact-url'
import { injectTrace } from '../../lib/tracing'

/**
 * The client side of agents' `mcp` tools (docs/agents.md, "MCP tools"): one connection per MCP
 * server (Streamable HTTP, the official SDK's `Client`), cached with the tools it lists for
 * MCP_TOOLS_TTL_MS, so a turn pays neither the `initialize` handshake nor a `tools/list` round trip,
 * and a call is one POST on a kept-alive connection (bench/README.md, "MCP tools").
 *
 * Every connection is made under the webhook SSRF rules: the host is resolved and checked when the
 * connection is opened, and every request of that connection goes to the checked address (Host
 * header and TLS server name keep the name), so DNS that changes later cannot send it inside. A
 * connection lives at most the TTL: the next use opens a new one, resolved again.
 */

/** How long a server's tool list (and the connection it came on) is used before asking again. */
export const MCP_TOOLS_TTL_MS = 60_000
/** Listing (resolve, connect, `initialize`, `tools/list`) gets at most this of the call time-out. */
const LIST_TIMEOUT_MS = 10_000
/** A server that could not be reached is not asked again for this long (each turn would wait for it). */
const FAILURE_TTL_MS = 5_000
/** A stuck request's HTTP stream is cut this long after the call gave up on it. */
const STREAM_GRACE_MS = 5_000
/** Tools taken from one server, and `tools/list` pages read. */
const MAX_TOOLS = 128
const MAX_LIST_PAGES = 10
/** What goes back to the model (and into the stored tool call) of one result. */
export const MAX_RESULT_CHARS = 64_000
const USER_AGENT = 'agent-platform-api-agents/0.1.0'

/** What answers show for each header value, and what a PATCH sends back to keep it. */
export const HEADER_KEPT = '***'

/**
 * The save-time check of a server_url (the address is checked again, resolved, at every connection):
 * the SSRF rules' shape, and no loopback, private or otherwise non-public address literal, nor
 * `localhost`, unless WEBHOOK_ALLOW_PRIVATE_NETWORKS. Answers why it is refused, or null.
 */
export function checkServerUrl(raw: string, policy: UrlPolicy): string | null {
  let url: URL
  try {
    url = checkUrlShape(raw, policy)
  } catch (err) {
    if (err instanceof UnsafeUrlError) return err.message
    throw err
  }
  if (policy.allowPrivate) return null
  const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname
  const local = host === 'localhost' || host.endsWith('.localhost')
  if (local || (ipaddr.isValid(host) && !isPublicAddress(host))) {
    return `host ${host} is a loopback, private, link-local or otherwise non-public address (WEBHOOK_ALLOW_PRIVATE_NETWORKS=true allows it)`
  }
  return null
}

export interface McpServerSpec {
  url: string
  /** The headers as stored (sealed): part of the cache key, opened only to connect. */
  sealedHeaders: Record<string, string>
  open(sealed: string): string
  policy: UrlPolicy
}

export interface McpToolInfo {
  name: string
  description: string
  inputSchema: Record<string, unknown>
}

export class McpFailure extends Error {
  override name = 'McpFailure'
  constructor(readonly code: 'ssrf_refused' | 'mcp_unavailable' | 'mcp_timeout' | 'mcp_error', message: string) {
    super(message)
  }
}

interface Connection {
  client: Client
  transport: StreamableHTTPClientTransport
  tools: McpToolInfo[]
  /** Plain header values, scrubbed from error messages. */
  secrets: string[]
  active: number
  retired: boolean
}

interface Entry {
  conn: Promise<Connection>
  /** The connection once open (evicting one compares it without waiting). */
  open?: Connection
  expiresAt: number
}

/**
 * The SDK's client, loaded with the first connection rather than at start-up: ~20 MB resident that a
 * process whose agents use no MCP server never needs (bench/README.memory.md). Every error test below
 * follows a connection attempt, so the SDK is loaded by then.
 */
interface Sdk {
  Client: typeof import('@modelcontextprotocol/sdk/client/index.js').Client
  StreamableHTTPClientTransport: typeof import('@modelcontextprotocol/sdk/client/streamableHttp.js').StreamableHTTPClientTransport
  StreamableHTTPError: typeof import('@modelcontextprotocol/sdk/client/streamableHttp.js').StreamableHTTPError
  McpError: typeof import('@modelcontextprotocol/sdk/types.js').McpError
  RequestTimeout: number
}
let sdk: Sdk | undefined

async function loadSdk(): Promise<Sdk> {
  if (!sdk) {
    const [client, http, types] = await Promise.all([
      import('@modelcontextprotocol/sdk/client/index.js'),
      import('@modelcontextprotocol/sdk/client/streamableHttp.js'),
      import('@modelcontextprotocol/sdk/types.js'),
    ])
    sdk = { Client: client.Client, StreamableHTTPClientTransport: http.StreamableHTTPClientTransport, StreamableHTTPError: http.StreamableHTTPError, McpError: types.McpError, RequestTimeout: types.ErrorCode.RequestTimeout }
  }
  return sdk
}

const isHttpError = (err: unknown): err is InstanceType<Sdk['StreamableHTTPError']> => sdk !== undefined && err instanceof sdk.StreamableHTTPError
const isMcpError = (err: unknown): err is InstanceType<Sdk['McpError']> => sdk !== undefined && err instanceof sdk.McpError

/** One pool per process: connections are keyed by what they are (URL, sealed headers, SSRF policy). */
const pool = new Map<string, Entry>()

const keyOf = (s: McpServerSpec) =>
  sha256Hex(JSON.stringify([s.url, Object.entries(s.sealedHeaders).sort(), s.policy.allowHttp, s.policy.allowPrivate]))

/** The URL for messages and logs: scheme, host and port (its path or query may carry a token). */
export const redactUrl = shownUrl

/** The server's tools (from the cache when fresh). Fails with McpFailure when it cannot be listed. */
export async function listMcpTools(spec: McpServerSpec, callTimeoutMs: number): Promise<McpToolInfo[]> {
  return (await acquire(spec, callTimeoutMs)).tools
}

/**
 * Calls one tool and shapes its result for the model: `{ text }`, or `{ result }` for structured
 * content (or text that is JSON), `isError` results as `{ error: { code: "tool_error", message } }`.
 * A server that cannot be reached, times out or answers a protocol error is `{ error }` too; only
 * the turn's own abort throws.
 */
export async function callMcpTool(
  spec: McpServerSpec,
  tool: string,
  args: Record<string, unknown>,
  opts: { timeoutMs: number; signal: AbortSignal },
): Promise<Record<string, unknown>> {
  const where = `tool ${tool} of ${redactUrl(spec.url)}`
  for (let attempt = 0; ; attempt++) {
    let conn: Connection
    try {
      conn = await acquire(spec, opts.timeoutMs)
    } catch (err) {
      if (opts.signal.aborted) throw opts.signal.reason
      const f = err instanceof McpFailure ? err : new McpFailure('mcp_unavailable', String(err))
      return failure(f.code, f.message)
    }
    conn.active++
    try {
      const result = (await conn.client.callTool({ name: tool, arguments: args }, undefined, { timeout: opts.timeoutMs, signal: opts.signal })) as CallToolResult
      return toOutput(result)
    } catch (err) {
      if (opts.signal.aborted) throw err
      // A session the server forgot (restarted, expired) answers 404: nothing ran, so one retry on a new one.
      if (isHttpError(err) && err.code === 404 && attempt === 0) {
        evict(spec, conn)
        continue
      }
      if (isMcpError(err) && err.code === sdk!.RequestTimeout) return failure('mcp_timeout', `${where} gave no answer within ${opts.timeoutMs} ms`)
      if (isMcpError(err)) return failure('mcp_error', scrub(`${where} failed: ${scrubUrl(err.message, spec.url)}`, conn.secrets))
      // The connection itself failed (reset, refused, an HTTP error): the next call opens a new one.
      evict(spec, conn)
      return failure(isHttpError(err) ? 'mcp_error' : 'mcp_unavailable', scrub(`${where} failed: ${scrubUrl(describe(err), spec.url)}`, conn.secrets))
    } finally {
      release(conn)
    }
  }
}

const failure = (code: string, message: string) => ({ error: { code, message: message.slice(0, 1000) } })

/** Closes every connection (tests and shutdown); the next use opens new ones. */
export async function closeMcpClients(): Promise<void> {
  const entries = [...pool.values()]
  pool.clear()
  await Promise.all(entries.map(async (e) => {
    const conn = await e.conn.catch(() => null)
    if (conn) await shut(conn)
  }))
}

function acquire(spec: McpServerSpec, callTimeoutMs: number): Promise<Connection> {
  const key = keyOf(spec)
  const now = Date.now()
  const current = pool.get(key)
  if (current && current.expiresAt > now) return current.conn
  if (current) {
    pool.delete(key)
    void current.conn.then(retire, () => {})
  }
  const entry: Entry = { conn: connect(spec, Math.min(LIST_TIMEOUT_MS, callTimeoutMs), callTimeoutMs), expiresAt: now + MCP_TOOLS_TTL_MS }
  pool.set(key, entry)
  entry.conn.then(
    (conn) => {
      entry.open = conn
      // Retired when stale even if never used again, so no connection outlives the TTL for long.
      const timer = setTimeout(() => {
        if (pool.get(key) === entry) pool.delete(key)
        retire(conn)
      }, MCP_TOOLS_TTL_MS + 1_000)
      timer.unref?.()
    },
    () => {
      entry.expiresAt = Math.min(entry.expiresAt, Date.now() + FAILURE_TTL_MS)
    },
  )
  return entry.conn
}

function evict(spec: McpServerSpec, conn: Connection) {
  const key = keyOf(spec)
  if (pool.get(key)?.open === conn) pool.delete(key)
  retire(conn)
}

function retire(conn: Connection) {
  conn.retired = true
  if (conn.active === 0) void shut(conn)
}

function release(conn: Connection) {
  conn.active--
  if (conn.retired && conn.active === 0) void shut(conn)
}

/** Ends the session politely (DELETE), then the transport; failures are of no consequence. */
async function shut(conn: Connection): Promise<void> {
  if (conn.active < 0) return
  conn.active = -1
  await conn.transport.terminateSession().catch(() => {})
  await conn.client.close().catch(() => {})
}

async function connect(spec: McpServerSpec, listTimeoutMs: number, callTimeoutMs: number): Promise<Connection> {
  const shown = redactUrl(spec.url)
  let dest: Destination
  try {
    dest = await resolveDestination(spec.url, spec.policy, AbortSignal.timeout(listTimeoutMs))
  } catch (err) {
    if (!(err instanceof UnsafeUrlError)) throw err
    // A name that does not resolve may resolve later: unavailable, not refused.
    throw new McpFailure(err.transient ? 'mcp_unavailable' : 'ssrf_refused', `server_url ${shown} ${err.message}`)
  }
  const headers: Record<string, string> = {}
  for (const [name, sealed] of Object.entries(spec.sealedHeaders)) headers[name] = spec.open(sealed)
  // Every value, however short (a 3-character key is still a key), and as JSON writes it; longest
  // first, so a value holding another is masked whole.
  const secrets = [...new Set(Object.values(headers).flatMap((v) => [v, JSON.stringify(v).slice(1, -1)]))]
    .filter((v) => v.length > 0)
    .sort((a, b) => b.length - a.length)
  const { Client, StreamableHTTPClientTransport } = await loadSdk()
  const transport = new StreamableHTTPClientTransport(dest.url, {
    fetch: transportFetch(dest, headers, callTimeoutMs + STREAM_GRACE_MS),
    // Server-initiated streams are not listened for (transportFetch answers their GET 405), so nothing reconnects.
    reconnectionOptions: { maxRetries: 0, initialReconnectionDelay: 1_000, maxReconnectionDelay: 1_000, reconnectionDelayGrowFactor: 1 },
  })
  const client = new Client({ name: 'agent-platform-api', version: '0.1.0' }, { capabilities: {} })
  const conn: Connection = { client, transport, tools: [], secrets, active: 0, retired: false }
  try {
    const deadline = AbortSignal.timeout(listTimeoutMs)
    await client.connect(transport, { timeout: listTimeoutMs, signal: deadline })
    let cursor: string | undefined
    for (let page = 0; page < MAX_LIST_PAGES && conn.tools.length < MAX_TOOLS; page++) {
      const listed = await client.listTools(cursor ? { cursor } : undefined, { timeout: listTimeoutMs, signal: deadline })
      for (const t of listed.tools) {
        if (conn.tools.length >= MAX_TOOLS) break
        conn.tools.push({ name: t.name, description: (t.description || t.title || `Tool ${t.name} of the MCP server ${shown}`).slice(0, 2000), inputSchema: t.inputSchema as Record<string, unknown> })
      }
      cursor = listed.nextCursor
      if (!cursor) break
    }
    return conn
  } catch (err) {
    void shut(conn)
    const timedOut = (isMcpError(err) && err.code === sdk!.RequestTimeout) || (err as Error)?.name === 'TimeoutError'
    if (timedOut) throw new McpFailure('mcp_timeout', `listing the tools of ${shown} took more than ${listTimeoutMs} ms`)
    throw new McpFailure(isMcpError(err) || isHttpError(err) ? 'mcp_error' : 'mcp_unavailable', scrub(`listing the tools of ${shown} failed: ${scrubUrl(describe(err), spec.url)}`, secrets))
  }
}

/**
 * The transport's fetch: every request goes to the pinned address (src/lib/net-guard.ts: the server's
 * own origin only, no redirect followed) with the configured headers and W3C trace context. A stuck
 * request is cut STREAM_GRACE_MS after its call gave up (the SDK's time-out leaves the HTTP stream open).
 */
function transportFetch(dest: Destination, configured: Record<string, string>, requestTimeoutMs: number): FetchLike {
  return async (input, init) => {
    const target = new URL(typeof input === 'string' ? input : input.href)
    // The server's own stream of requests and notifications: not needed for tools, not opened.
    if ((init?.method ?? 'GET') === 'GET') return new Response(null, { status: 405 })
    const headers = new Headers(configured)
    for (const [k, v] of new Headers(init?.headers)) headers.set(k, v)
    headers.set('user-agent', USER_AGENT)
    injectTrace(headers)
    const timeout = AbortSignal.timeout(requestTimeoutMs)
    return pinnedFetch(dest, { ...init, headers, signal: init?.signal ? AbortSignal.any([init.signal, timeout]) : timeout }, target)
  }
}

/** A result as the model reads it, within MAX_RESULT_CHARS. */
export function toOutput(result: CallToolResult): Record<string, unknown> {
  const texts: string[] = []
  const other: Record<string, unknown>[] = []
  for (const c of result.content ?? []) {
    if (c.type === 'text') texts.push(c.text)
    else if (c.type === 'resource') other.push({ type: 'resource', uri: c.resource.uri, ...('text' in c.resource ? { text: c.resource.text } : { mime_type: c.resource.mimeType ?? null }) })
    else if (c.type === 'resource_link') other.push({ type: 'resource_link', uri: c.uri, name: c.name })
    // Images and audio are base64 the model cannot use in a tool message: named, not sent.
    else other.push({ type: c.type, mime_type: (c as { mimeType?: string }).mimeType ?? null })
  }
  const text = texts.join('\n')
  if (result.isError) return { error: { code: 'tool_error', message: capText(text || 'the tool reported an error without a message') } }
  let out: Record<string, unknown>
  if (result.structuredContent) out = { result: result.structuredContent }
  else {
    const json = parseJson(text)
    out = json !== undefined ? { result: json } : { text }
  }
  if (other.length > 0) out.content = other
  const size = JSON.stringify(out).length
  if (size <= MAX_RESULT_CHARS) return out
  // Too long as JSON: its beginning as text, marked.
  const whole = 'text' in out ? text : JSON.stringify(out.result)
  return { text: capText(whole), truncated: true }
}

const capText = (s: string) => (s.length <= MAX_RESULT_CHARS ? s : `${s.slice(0, MAX_RESULT_CHARS)}…`)

function parseJson(text: string): unknown {
  const t = text.trim()
  if (!(t.startsWith('{') || t.startsWith('['))) return undefined
  try {
    return JSON.parse(t)
  } catch {
    return undefined
  }
}

function describe(err: unknown): string {
  const e = err as Error & { code?: string | number; cause?: { code?: string } }
  const code = e?.cause?.code ?? (typeof e?.code === 'string' ? e.code : undefined)
  return `${code ? `${code}: ` : ''}${e?.message ?? String(err)}`.slice(0, 500)
}

/** A server may echo a request's credentials in its error; they never reach a message or a log. */
function scrub(message: string, secrets: string[]): string {
  let out = message
  for (const s of secrets) out = out.split(s).join('***')
  return out
}
