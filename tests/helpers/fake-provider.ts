import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Server } from 'bun'
import type { ResolvedProvider } from '../../src/domain/models/catalog'
import { waitFor } from './harness'

/**
 * A loopback model provider that speaks the OpenAI and Anthropic wire formats, scripted per upstream
 * model name, so one server can stand for several routes:
 *   POST /v1/chat/completions, /v1/embeddings, /v1/rerank   OpenAI-compatible (rerank: Jina/Cohere)
 *   POST /v1/messages                                        Anthropic
 * Streams are real SSE with the vendors' exact event shapes. Unscripted models get a deterministic
 * success: chat echoes the last user message, embeddings are vectors seeded by the text, rerank
 * scores are word overlap with the query.
 */

export interface FakeToolCall {
  id?: string
  name: string
  /** An object is sent JSON-encoded (OpenAI) or as is (Anthropic's `input`). */
  arguments: string | Record<string, unknown>
}

/** A successful answer; each path reads the fields that concern it. */
export interface Reply {
  /** Chat: the assistant's text (default: `echo: <last user message>`). */
  text?: string
  /** Chat: the text's stream pieces (default: the text cut after each run of spaces, one per chunk). */
  chunks?: string[]
  toolCalls?: FakeToolCall[]
  /** OpenAI finish_reason (default `tool_calls` with tool calls, else `stop`). */
  finish?: 'stop' | 'length' | 'tool_calls' | 'content_filter'
  /** Anthropic stop_reason as sent, overriding the one derived from `finish`. */
  stopReason?: string
  /** false: no usage at all (and no usage chunk in a stream); an object: these counts. */
  usage?: false | { prompt_tokens?: number; completion_tokens?: number }
  /** Stream: wait this long before each chunk after the first (default: the server's `delayMs`). */
  delayMs?: number
  /** Wait this long before answering at all (default: the server's `latencyMs`): an upstream's own pace. */
  latencyMs?: number
  /** Stream: after the text, an error event of this type (`overloaded_error`...) ends the stream. */
  streamError?: string
  /** Send this many SSE events, then reset the connection (0: before the status line, streamed or not). */
  drop?: number
  /** Embeddings: the length of each vector (default: the request's `dimensions`, else 8). */
  dimensions?: number
  /** Embeddings: list `data` in reverse order (each item keeps its `index`). */
  reverse?: boolean
  /** Rerank: a score per document (default: word overlap with the query). */
  scores?: number[]
  /** Rerank: Jina's answer (`usage.total_tokens`, the default) or Cohere's (`meta.billed_units`). */
  shape?: 'jina' | 'cohere'
}

export interface ErrorStep {
  status: number
  /** JSON-encoded unless a string (default: the vendor's error object). */
  body?: unknown
  /** The `retry-after` header. */
  retryAfter?: number | string
  headers?: Record<string, string>
  /** Wait this long before answering (default: the server's `latencyMs`). */
  latencyMs?: number
}

/** 'hang' never answers (until the client leaves or `close()`). */
export type Step = Reply | ErrorStep | 'hang'

export interface FakeRequest {
  at: number
  method: string
  path: string
  /** Lower-cased names. */
  headers: Record<string, string>
  json: any
  model: string
  stream: boolean
  step: Step
  /** The client went away before the whole answer was sent. */
  closed: boolean
  /** When the answer's status line left (performance.now()), null until then. */
  answeredAt: number | null
}

export interface FakeProvider {
  url: string
  /** What a provider's base_url is: `${url}/v1`. */
  baseUrl: string
  requests: FakeRequest[]
  /** Answers for `model`, one per request in order; the last repeats. The model `*` covers all unscripted ones. */
  script(model: string, steps: Step[]): void
  /** The default wait between stream chunks (0). */
  delayMs: number
  /** The default wait before any answer (0). */
  latencyMs: number
  /** Requests received whose status line has not left yet (hanging ones included). */
  inFlight(): number
  /** The most requests ever in flight at once; tests set it back to 0 between cases. */
  maxInFlight: number
  /** A ResolvedProvider pointing here. */
  provider(over?: Partial<ResolvedProvider>): ResolvedProvider
  /** Requests still being answered (hanging or streaming). */
  open(): number
  waitForRequests(count: number, timeoutMs?: number): Promise<FakeRequest[]>
  /** The last request received for upstream model `model` (throws when there is none). */
  sentFor(model: string): FakeRequest
  /** MODELS_FILE providers pointing here: `oa` of kind openai and `an` of kind anthropic. */
  catalogProviders(): unknown[]
  close(): Promise<void>
}

const enc = new TextEncoder()
const DROP_FLUSH_MS = 20

export async function startFakeProvider(opts: { delayMs?: number; latencyMs?: number } = {}): Promise<FakeProvider> {
  const requests: FakeRequest[] = []
  const scripts = new Map<string, Step[]>()
  const releases = new Set<() => void>()
  let open = 0
  let inFlight = 0

  const next = (model: string): Step => {
    const script = scripts.get(model) ?? scripts.get('*')
    if (!script) return {}
    return script.length > 1 ? script.shift()! : script[0]!
  }

  const server: Server<undefined> = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    // A hanging request must outlive the client's time-out; Bun's default idle time-out is 10 s.
    idleTimeout: 0,
    async fetch(req) {
      inFlight++
      fake.maxInFlight = Math.max(fake.maxInFlight, inFlight)
      const rec: { current: FakeRequest | null } = { current: null }
      try {
        return await answer(req, rec)
      } finally {
        inFlight--
        if (rec.current) rec.current.answeredAt = performance.now()
      }
    },
  })

  async function answer(req: Request, out: { current: FakeRequest | null }): Promise<Response> {
    const path = new URL(req.url).pathname
    let json: any = null
    try {
      json = await req.json()
    } catch {}
    const model = typeof json?.model === 'string' ? json.model : ''
    const step = next(model)
    const rec: FakeRequest = { at: performance.now(), method: req.method, path, headers: Object.fromEntries(req.headers), json, model, stream: json?.stream === true, step, closed: false, answeredAt: null }
    requests.push(rec)
    out.current = rec
    // The upstream's own pace (the fake's behaviour, not a wait in a test).
    const latency = step === 'hang' ? 0 : (step.latencyMs ?? fake.latencyMs)
    if (latency > 0) await Bun.sleep(latency)
    const anthropic = path === '/v1/messages'
    if (step === 'hang') {
      open++
      return new Promise<Response>((resolve) => {
        const release = () => {
          if (!releases.delete(release)) return
          open--
          resolve(new Response(null, { status: 503 }))
        }
        releases.add(release)
        req.signal.addEventListener('abort', () => ((rec.closed = true), release()), { once: true })
      })
    }
    if ('status' in step) return errorResponse(step, anthropic)
    if (step.drop === 0) return new Response(new ReadableStream({ pull: (c) => c.error() }))
    let events: string[]
    let body: unknown
    if (path === '/v1/chat/completions') rec.stream ? (events = openaiStream(json, step)) : (body = openaiCompletion(json, step))
    else if (anthropic) rec.stream ? (events = anthropicStream(json, step)) : (body = anthropicMessage(json, step))
    else if (path === '/v1/embeddings') body = embeddings(json, step)
    else if (path === '/v1/rerank') body = rerank(json, step)
    else return Response.json({ error: { message: `no route ${path}`, type: 'invalid_request_error' } }, { status: 404 })
    if (!rec.stream) return Response.json(body)
    return sse(events!, step.delayMs ?? fake.delayMs, step.drop, rec)
  }

  /** One SSE event per pull, so each chunk is its own write and the client sees them arrive apart. */
  function sse(events: string[], delayMs: number, drop: number | undefined, rec: FakeRequest): Response {
    const headers = { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' }
    // No delay, no drop: one write is all a fast upstream would cost, which is what a benchmark wants.
    if (delayMs === 0 && drop === undefined) return new Response(events.join(''), { headers })
    let i = 0
    let ended = false
    open++
    const end = () => {
      if (!ended) open--
      ended = true
    }
    return new Response(
      new ReadableStream({
        async pull(c) {
          // The pace between chunks that the test asked for (the fake's behaviour, not a wait in a test).
          if (i > 0 && delayMs > 0) await Bun.sleep(delayMs)
          if (ended) return
          if (i === drop) {
            // Bun resets the connection without flushing what was enqueued just before: give the
            // chunks already sent a moment to leave first (without it the client sees 0 of them).
            if (delayMs === 0) await Bun.sleep(DROP_FLUSH_MS)
            end()
            return c.error()
          }
          if (i === events.length) {
            end()
            return c.close()
          }
          c.enqueue(enc.encode(events[i++]!))
        },
        cancel() {
          rec.closed = true
          end()
        },
      }),
      { headers },
    )
  }

  const url = `http://127.0.0.1:${server.port}`
  const fake: FakeProvider = {
    url,
    baseUrl: `${url}/v1`,
    requests,
    delayMs: opts.delayMs ?? 0,
    latencyMs: opts.latencyMs ?? 0,
    inFlight: () => inFlight,
    maxInFlight: 0,
    script(model, steps) {
      if (steps.length === 0) throw new Error('a script needs at least one step')
      scripts.set(model, [...steps])
    },
    provider: (over = {}) => ({ id: 'fake', kind: 'openai', base_url: `${url}/v1`, key: 'sk-fake-test-key', timeout_ms: 5_000, ...over }),
    open: () => open,
    sentFor(model) {
      const req = requests.filter((r) => r.model === model).at(-1)
      if (!req) throw new Error(`the fake received nothing for ${model}`)
      return req
    },
    catalogProviders: () => [
      { id: 'oa', kind: 'openai', base_url: `${url}/v1`, api_key: 'sk-fake', timeout_ms: 5_000 },
      { id: 'an', kind: 'anthropic', base_url: `${url}/v1`, api_key: 'sk-ant-fake', timeout_ms: 5_000 },
    ],
    async waitForRequests(count, timeoutMs = 5_000) {
      await waitFor(() => requests.length >= count, { timeoutMs, what: `${count} request(s) to the fake provider (got ${requests.length})` })
      return requests
    },
    async close() {
      for (const release of [...releases]) release()
      await server.stop(true)
    },
  }
  return fake
}

// ---- the wire formats ----

const now = () => Math.floor(Date.now() / 1000)
const words = (s: string) => s.split(/\s+/).filter(Boolean).length
const contentText = (c: unknown): string =>
  typeof c === 'string' ? c : Array.isArray(c) ? c.map((b) => (typeof b?.text === 'string' ? b.text : typeof b?.content === 'string' ? b.content : '')).join(' ') : ''

/** Deterministic "tokens": a word each, so tests can tell reported usage from counted usage. */
function promptTokens(json: any, step: Reply): number {
  if (step.usage && step.usage.prompt_tokens !== undefined) return step.usage.prompt_tokens
  const messages: any[] = Array.isArray(json?.messages) ? json.messages : []
  return messages.reduce((n, m) => n + words(contentText(m?.content)), words(contentText(json?.system)))
}

interface Answer {
  text: string
  chunks: string[]
  tools: { id: string; name: string; args: string; input: Record<string, unknown> }[]
  finish: NonNullable<Reply['finish']>
  prompt: number
  completion: number
}

function answerOf(json: any, step: Reply): Answer {
  const messages: any[] = Array.isArray(json?.messages) ? json.messages : []
  const lastUser = [...messages].reverse().find((m) => m?.role === 'user')
  const text = step.text ?? (step.toolCalls ? '' : `echo: ${contentText(lastUser?.content) || 'ok'}`)
  const chunks = step.chunks ?? text.match(/\S+\s*|\s+/g) ?? []
  const tools = (step.toolCalls ?? []).map((t, i) => {
    const args = typeof t.arguments === 'string' ? t.arguments : JSON.stringify(t.arguments)
    let input: Record<string, unknown> = {}
    try {
      input = typeof t.arguments === 'string' ? JSON.parse(t.arguments) : t.arguments
    } catch {}
    return { id: t.id ?? `call_fake_${i}`, name: t.name, args, input }
  })
  const finish = step.finish ?? (tools.length > 0 ? 'tool_calls' : 'stop')
  const completion = step.usage && step.usage.completion_tokens !== undefined ? step.usage.completion_tokens : chunks.length + tools.length
  return { text, chunks, tools, finish, prompt: promptTokens(json, step), completion }
}

/** Tool arguments arrive in pieces of this many characters, as real vendors cut them. */
const ARG_PIECE = 8
const pieces = (s: string) => s.match(new RegExp(`[\\s\\S]{1,${ARG_PIECE}}`, 'g')) ?? []

function openaiCompletion(json: any, step: Reply): unknown {
  const a = answerOf(json, step)
  const message: Record<string, unknown> = { role: 'assistant', content: a.tools.length > 0 && !a.text ? null : a.text, refusal: null }
  if (a.tools.length > 0) message.tool_calls = a.tools.map((t) => ({ id: t.id, type: 'function', function: { name: t.name, arguments: t.args } }))
  // As OpenAI answers them: `n` choices (the second onwards marked), logprobs when asked, reasoning tokens with reasoning_effort.
  const n = Number.isInteger(json?.n) && json.n > 1 ? (json.n as number) : 1
  const logprobs = json?.logprobs === true ? { content: [{ token: 'echo', logprob: -0.25, bytes: [101, 99, 104, 111], top_logprobs: [] }], refusal: null } : null
  const out: Record<string, unknown> = {
    id: `chatcmpl-fake${Date.now()}`,
    object: 'chat.completion',
    created: now(),
    model: json?.model,
    choices: Array.from({ length: n }, (_, index) => ({
      index,
      message: index === 0 || typeof message.content !== 'string' ? message : { ...message, content: `${message.content} (choice ${index})` },
      logprobs,
      finish_reason: a.finish,
    })),
    system_fingerprint: 'fp_fake',
  }
  if (step.usage !== false) {
    const completion = a.completion * n
    out.usage = { prompt_tokens: a.prompt, completion_tokens: completion, total_tokens: a.prompt + completion }
    if (json?.reasoning_effort !== undefined) (out.usage as Record<string, unknown>).completion_tokens_details = { reasoning_tokens: 2, accepted_prediction_tokens: 0 }
  }
  if (json?.service_tier !== undefined) out.service_tier = json.service_tier
  return out
}

function openaiStream(json: any, step: Reply): string[] {
  const a = answerOf(json, step)
  const withUsage = json?.stream_options?.include_usage === true && step.usage !== false
  const base = { id: `chatcmpl-fake${Date.now()}`, object: 'chat.completion.chunk', created: now(), model: json?.model, system_fingerprint: 'fp_fake' }
  const event = (delta: unknown, finish: string | null = null) =>
    `data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], ...(withUsage ? { usage: null } : {}) })}\n\n`
  const out = [event({ role: 'assistant', content: '', refusal: null })]
  for (const c of a.chunks) out.push(event({ content: c }))
  if (step.streamError) return [...out, `data: ${JSON.stringify({ error: { message: `scripted ${step.streamError}`, type: step.streamError } })}\n\n`]
  for (const [index, t] of a.tools.entries()) {
    out.push(event({ tool_calls: [{ index, id: t.id, type: 'function', function: { name: t.name, arguments: '' } }] }))
    for (const p of pieces(t.args)) out.push(event({ tool_calls: [{ index, function: { arguments: p } }] }))
  }
  out.push(event({}, a.finish))
  if (withUsage) out.push(`data: ${JSON.stringify({ ...base, choices: [], usage: { prompt_tokens: a.prompt, completion_tokens: a.completion, total_tokens: a.prompt + a.completion } })}\n\n`)
  out.push('data: [DONE]\n\n')
  return out
}

const STOP: Record<Answer['finish'], string> = { stop: 'end_turn', length: 'max_tokens', tool_calls: 'tool_use', content_filter: 'refusal' }

function anthropicMessage(json: any, step: Reply): unknown {
  const a = answerOf(json, step)
  const content: unknown[] = []
  if (a.text) content.push({ type: 'text', text: a.text })
  for (const t of a.tools) content.push({ type: 'tool_use', id: t.id.replace(/^call_/, 'toolu_'), name: t.name, input: t.input })
  const out: Record<string, unknown> = { id: `msg_fake${Date.now()}`, type: 'message', role: 'assistant', model: json?.model, content, stop_reason: step.stopReason ?? STOP[a.finish], stop_sequence: null }
  if (step.usage !== false) out.usage = { input_tokens: a.prompt, output_tokens: a.completion }
  return out
}

function anthropicStream(json: any, step: Reply): string[] {
  const a = answerOf(json, step)
  const event = (type: string, data: Record<string, unknown>) => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`
  const usage = step.usage !== false
  const out = [
    event('message_start', {
      message: { id: `msg_fake${Date.now()}`, type: 'message', role: 'assistant', model: json?.model, content: [], stop_reason: null, stop_sequence: null, ...(usage ? { usage: { input_tokens: a.prompt, output_tokens: 1 } } : {}) },
    }),
  ]
  let index = 0
  if (a.text) {
    out.push(event('content_block_start', { index, content_block: { type: 'text', text: '' } }), event('ping', {}))
    for (const c of a.chunks) out.push(event('content_block_delta', { index, delta: { type: 'text_delta', text: c } }))
    if (step.streamError) return [...out, event('error', { error: { type: step.streamError, message: `scripted ${step.streamError}` } })]
    out.push(event('content_block_stop', { index }))
    index++
  }
  for (const t of a.tools) {
    out.push(event('content_block_start', { index, content_block: { type: 'tool_use', id: t.id.replace(/^call_/, 'toolu_'), name: t.name, input: {} } }))
    // Anthropic opens every tool block with an empty fragment.
    for (const p of ['', ...pieces(JSON.stringify(t.input))]) out.push(event('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: p } }))
    out.push(event('content_block_stop', { index }))
    index++
  }
  out.push(event('message_delta', { delta: { stop_reason: step.stopReason ?? STOP[a.finish], stop_sequence: null }, ...(usage ? { usage: { output_tokens: a.completion } } : {}) }))
  out.push(event('message_stop', {}))
  return out
}

/** A unit vector seeded by the text (FNV-1a → xorshift32): the same input always maps to the same vector. */
export function fakeVector(text: string, dimensions: number): number[] {
  let h = 0x811c9dc5
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193) >>> 0
  let x = h || 1
  const v = Array.from({ length: dimensions }, () => {
    x ^= x << 13
    x ^= x >>> 17
    x ^= x << 5
    return ((x >>> 0) / 0xffffffff) * 2 - 1
  })
  const norm = Math.hypot(...v) || 1
  return v.map((n) => n / norm)
}

function embeddings(json: any, step: Reply): unknown {
  const inputs: string[] = Array.isArray(json?.input) ? json.input : [String(json?.input ?? '')]
  const dimensions = step.dimensions ?? json?.dimensions ?? 8
  const data = inputs.map((s, index) => ({ object: 'embedding', index, embedding: fakeVector(s, dimensions) }))
  if (step.reverse) data.reverse()
  const tokens = inputs.reduce((n, s) => n + words(s), 0)
  return { object: 'list', data, model: json?.model, ...(step.usage === false ? {} : { usage: { prompt_tokens: tokens, total_tokens: tokens } }) }
}

function rerank(json: any, step: Reply): unknown {
  const docs: string[] = Array.isArray(json?.documents) ? json.documents.map(String) : []
  const query = new Set(String(json?.query ?? '').toLowerCase().split(/\W+/).filter(Boolean))
  const overlap = (d: string) => d.toLowerCase().split(/\W+/).filter((w) => query.has(w)).length / Math.max(1, query.size)
  const results = docs.map((d, index) => ({ index, relevance_score: step.scores?.[index] ?? overlap(d) }))
  results.sort((a, b) => b.relevance_score - a.relevance_score || a.index - b.index)
  if (typeof json?.top_n === 'number') results.splice(json.top_n)
  if (step.shape === 'cohere') return { id: 'rerank-fake', results, meta: { api_version: { version: '2' }, billed_units: { search_units: 1 } } }
  const tokens = docs.reduce((n, d) => n + words(d), 0) + query.size * docs.length
  return { model: json?.model, results: results.map((r) => ({ ...r, document: { text: docs[r.index] } })), ...(step.usage === false ? {} : { usage: { total_tokens: tokens } }) }
}

const ANTHROPIC_TYPES: Record<number, string> = { 400: 'invalid_request_error', 401: 'authentication_error', 403: 'permission_error', 404: 'not_found_error', 413: 'request_too_large', 429: 'rate_limit_error', 500: 'api_error', 529: 'overloaded_error' }
const OPENAI_TYPES: Record<number, string> = { 400: 'invalid_request_error', 401: 'invalid_request_error', 429: 'rate_limit_exceeded', 500: 'server_error', 503: 'server_error' }

function errorResponse(step: ErrorStep, anthropic: boolean): Response {
  const message = `scripted ${step.status}`
  const body =
    step.body !== undefined
      ? step.body
      : anthropic
        ? { type: 'error', error: { type: ANTHROPIC_TYPES[step.status] ?? 'api_error', message } }
        : { error: { message, type: OPENAI_TYPES[step.status] ?? 'server_error', param: null, code: null } }
  const headers: Record<string, string> = { 'content-type': typeof body === 'string' ? 'text/plain' : 'application/json', ...step.headers }
  if (step.retryAfter !== undefined) headers['retry-after'] = String(step.retryAfter)
  return new Response(typeof body === 'string' ? body : JSON.stringify(body), { status: step.status, headers })
}

/** Writes a MODELS_FILE in a new temporary directory; answers both (remove `dir` after). */
export function writeModelsFile(prefix: string, catalog: { providers: unknown[]; models: unknown[] }): { dir: string; file: string } {
  const dir = mkdtempSync(join(tmpdir(), prefix))
  const file = join(dir, 'models.json')
  writeFileSync(file, JSON.stringify(catalog))
  return { dir, file }
}
