import { createParser, type EventSourceMessage } from 'eventsource-parser'
import type { ResolvedProvider } from '../catalog'
import { failoverFor, ProviderError } from '../types'
import { injectTraceRecord, tracingOn } from '../../../lib/tracing'
import { scrubUrl } from '../../../lib/redact-url'

/**
 * The HTTP plumbing both remote adapters share: one POST under a deadline, the status → ProviderError
 * mapping, and an SSE reader. Errors are classified so the gateway can fail over:
 * - the caller's signal aborted (client gone): its own reason is rethrown, never a ProviderError, so
 *   nothing fails over for a client that left;
 * - the deadline fired: ProviderError(…, null, 'timeout');
 * - fetch threw otherwise (refused, reset, DNS): ProviderError(…, null, 'network_error');
 * - an HTTP status ≥ 400: ProviderError(upstream message, status, failoverFor(status), retry-after).
 * The API key is scrubbed from every message: some upstreams echo what they were sent; so is the
 * base URL's path and query (src/lib/redact-url.ts).
 */

export const DEFAULT_TIMEOUT_MS = 60_000
/** Enough of an upstream's error message to act on; some send whole HTML pages with a 502. */
const MAX_MESSAGE = 300
/** One SSE event's ceiling: a chunk is a few hundred bytes, a whole tool call's arguments at most a few MB. */
export const MAX_EVENT = 8 * 1024 * 1024

export interface Upstream {
  provider: ResolvedProvider
  path: string
  headers: Record<string, string>
  body: unknown
  signal: AbortSignal
}

/**
 * A time-out that can be re-armed: a plain `AbortSignal.timeout` cannot, and streams need an idle
 * time-out that restarts with every piece the upstream sends.
 */
class Deadline {
  private readonly ctl = new AbortController()
  private timer: ReturnType<typeof setTimeout> | undefined
  fired = false
  constructor(private readonly ms: number) {
    this.arm()
  }
  get signal(): AbortSignal {
    return this.ctl.signal
  }
  arm(): void {
    clearTimeout(this.timer)
    this.timer = setTimeout(() => {
      this.fired = true
      this.ctl.abort(new DOMException(`no answer within ${this.ms} ms`, 'TimeoutError'))
    }, this.ms)
  }
  clear(): void {
    clearTimeout(this.timer)
  }
}

/** The caller's reason when it aborted, else the ProviderError the failure stands for. */
function classify(err: unknown, p: ResolvedProvider, caller: AbortSignal, deadline: Deadline, what: string): unknown {
  // The caller first: once it has left, nothing it is told may trigger a failover.
  if (caller.aborted) return caller.reason instanceof Error ? caller.reason : new DOMException('The operation was aborted.', 'AbortError')
  if (err instanceof ProviderError) return err
  const ms = p.timeout_ms ?? DEFAULT_TIMEOUT_MS
  if (deadline.fired) return new ProviderError(`${p.id}: ${what} timed out after ${ms} ms`, null, 'timeout')
  const code = (err as { code?: string } | null)?.code
  const detail = scrubUrl(scrub(code ?? (err as Error)?.message ?? String(err), p.key), p.base_url ?? '')
  return new ProviderError(`${p.id}: ${what} failed: ${detail}`, null, 'network_error')
}

export function scrub(text: string, key: string | null): string {
  return key ? text.split(key).join('***') : text
}

/** `retry-after-ms` (OpenAI's) first, then `retry-after` as seconds or an HTTP date. */
export function retryAfterMs(headers: Headers): number | undefined {
  const ms = Number(headers.get('retry-after-ms'))
  if (headers.has('retry-after-ms') && Number.isFinite(ms) && ms >= 0) return ms
  const value = headers.get('retry-after')
  if (!value) return undefined
  const seconds = Number(value)
  if (Number.isFinite(seconds) && seconds >= 0) return seconds * 1000
  const at = Date.parse(value)
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now())
}

/**
 * OpenAI `{error:{message}}`, Anthropic `{type:'error', error:{type, message}}`, Ollama and friends
 * `{error:"..."}`, Cohere `{message}`; anything else is quoted raw.
 */
function upstreamMessage(text: string): string {
  try {
    const json: unknown = JSON.parse(text)
    if (!isObject(json)) return text.trim() || '(empty body)'
    const error = json.error
    const m = (isObject(error) ? error.message : typeof error === 'string' ? error : undefined) ?? json.message ?? json.detail
    if (typeof m === 'string' && m) return m
  } catch {}
  return text.trim() || '(empty body)'
}

async function errorFor(res: Response, p: ResolvedProvider): Promise<ProviderError> {
  const text = await res.text().catch(() => '')
  // The base URL's path is the operator's, and may hold a token (a proxy's): an echo of it is cut out.
  let message = scrubUrl(scrub(upstreamMessage(text), p.key), p.base_url ?? '')
  if (message.length > MAX_MESSAGE) message = `${message.slice(0, MAX_MESSAGE)}…`
  return new ProviderError(`${p.id}: upstream answered ${res.status}: ${message}`, res.status, failoverFor(res.status), retryAfterMs(res.headers))
}

function send(u: Upstream, signal: AbortSignal): Promise<Response> {
  const headers: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json', ...u.headers }
  // The gateway's GenAI span is the upstream's parent (docs/observability.md).
  if (tracingOn) injectTraceRecord(headers)
  return fetch(`${u.provider.base_url}${u.path}`, {
    method: 'POST',
    headers,
    body: JSON.stringify(u.body),
    signal,
  })
}

/** One JSON request; the time-out covers the whole exchange, body included. */
export async function postJson(u: Upstream): Promise<unknown> {
  const deadline = new Deadline(u.provider.timeout_ms ?? DEFAULT_TIMEOUT_MS)
  try {
    const res = await send(u, AbortSignal.any([u.signal, deadline.signal]))
    if (!res.ok) throw await errorFor(res, u.provider)
    const text = await res.text()
    try {
      return JSON.parse(text)
    } catch {
      throw malformed(u.provider, 'the answer is not JSON')
    }
  } catch (err) {
    throw classify(err, u.provider, u.signal, deadline, `POST ${u.path}`)
  } finally {
    deadline.clear()
  }
}

/** A 200 whose body is not what the protocol promises: the upstream is broken, try another route. */
export function malformed(p: ResolvedProvider, what: string): ProviderError {
  return new ProviderError(`${p.id}: malformed upstream answer: ${what}`, null, 'server_error')
}

/**
 * The events of an SSE answer. `timeout_ms` bounds the wait for the response headers and then each
 * gap between two pieces of the body (an idle time-out), not the whole stream: a long answer that
 * keeps flowing must not be cut at 60 s, but one that stalls mid-way must end. Stopping early (the
 * consumer's `return()`) aborts the request, which closes the upstream connection.
 */
export async function* postSse(u: Upstream): AsyncGenerator<EventSourceMessage> {
  for await (const batch of postSseBatches(u)) yield* batch
}

/**
 * `postSse`, the events of each read of the body together (never an empty batch): a relay handles a
 * read's worth at once (one write to its client, one step of each generator) instead of one by one.
 */
export async function* postSseBatches(u: Upstream): AsyncGenerator<EventSourceMessage[]> {
  yield* readSse(u, (onEvent, onError) => createParser({ maxBufferSize: MAX_EVENT, onEvent, onError: (e) => onError(e.type === 'max-buffer-size-exceeded') }))
}

/**
 * The `data` of each event of an SSE answer, those of one read together: for upstreams whose events
 * carry nothing else that matters (OpenAI's chat streams: no `event:` names, no ids). Read with
 * `DataSplitter`, which does only that: a fraction of a general parser's work per event.
 */
export async function* postSseData(u: Upstream): AsyncGenerator<EventSourceMessage[]> {
  yield* readSse(u, (onEvent, onError) => new DataSplitter(MAX_EVENT, onEvent, () => onError(true)))
}

/**
 * The body of an SSE answer as it comes, one piece per read of the connection (never an empty one),
 * under the same idle time-out and error mapping as `postSseData`: for a relay that splits the events
 * itself, at the byte level (`WireEvents`).
 */
export async function* postSseReads(u: Upstream): AsyncGenerator<Uint8Array> {
  const deadline = new Deadline(u.provider.timeout_ms ?? DEFAULT_TIMEOUT_MS)
  const own = new AbortController()
  const signal = AbortSignal.any([u.signal, deadline.signal, own.signal])
  let finished = false
  try {
    const res = await send({ ...u, headers: { ...u.headers, accept: 'text/event-stream' } }, signal)
    if (!res.ok) throw await errorFor(res, u.provider)
    if (!res.body) throw malformed(u.provider, 'no body')
    const reader = res.body.getReader()
    for (;;) {
      deadline.arm()
      const { done, value } = await reader.read()
      deadline.clear()
      if (done) break
      if (value.byteLength > 0) yield value
    }
    finished = true
  } catch (err) {
    throw classify(err, u.provider, u.signal, deadline, `stream from POST ${u.path}`)
  } finally {
    deadline.clear()
    if (!finished) own.abort()
  }
}

type Feeder = { feed(text: string): void }

async function* readSse(u: Upstream, parserOf: (onEvent: (e: EventSourceMessage) => void, onError: (overflow: boolean) => void) => Feeder): AsyncGenerator<EventSourceMessage[]> {
  const queue: EventSourceMessage[] = []
  let overflow = false
  const parser = parserOf((e) => queue.push(e), (o) => (overflow ||= o))
  // A TextDecoder in stream mode, not pipeThrough(TextDecoderStream): one stream stage less per
  // read (~6 µs of CPU a token with 8 streams, bench/README.md).
  const decoder = new TextDecoder()
  // The reads, their idle time-out, the upstream's errors and the abort of a request left early are
  // postSseReads'; a stop here (the consumer's or an overflow) returns it, which aborts the request.
  for await (const value of postSseReads(u)) {
    parser.feed(decoder.decode(value, { stream: true }))
    if (overflow) throw malformed(u.provider, `an event larger than ${MAX_EVENT} characters`)
    if (queue.length > 0) yield queue.splice(0)
  }
  const rest = decoder.decode()
  if (rest) parser.feed(rest)
  if (queue.length > 0) yield queue.splice(0)
}

/**
 * The SSE format (WHATWG HTML, "Server-sent events"), data only: lines end with CRLF, LF or CR; a
 * blank line dispatches the event; `data:` lines (one leading space dropped) are joined with LF;
 * comments and other fields are skipped; a byte order mark at the start is dropped. An event that
 * grows beyond `max` characters without ending is an error.
 */
export class DataSplitter {
  private buf = ''
  private data: string | null = null
  private started = false

  /** `atStart` false: the text does not begin the stream (a byte order mark there is text). */
  constructor(private readonly max: number, private readonly onEvent: (e: EventSourceMessage) => void, private readonly onOverflow: () => void, atStart = true) {
    this.started = !atStart
  }

  feed(text: string): void {
    if (!this.started && text.length > 0) {
      this.started = true
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1)
    }
    let buf = this.buf + text
    // A CR at the very end may be the first half of a CRLF: kept until the next piece.
    let end = buf.length
    if (end > 0 && buf.charCodeAt(end - 1) === 13) end--
    const cr = buf.indexOf('\r')
    if (cr >= 0 && cr < end) buf = buf.slice(0, end).replace(/\r\n?/g, '\n') + buf.slice(end)
    let at = 0
    for (;;) {
      const nl = buf.indexOf('\n', at)
      if (nl < 0) break
      this.line(buf, at, nl)
      at = nl + 1
    }
    this.buf = at === 0 ? buf : buf.slice(at)
    if (this.buf.length + (this.data?.length ?? 0) > this.max) this.onOverflow()
  }

  private line(buf: string, start: number, end: number): void {
    if (start === end) {
      if (this.data !== null) this.onEvent({ data: this.data, event: undefined, id: undefined })
      this.data = null
      return
    }
    // The usual line first: `data: ` then the value.
    if (buf.startsWith('data:', start)) {
      const from = buf.charCodeAt(start + 5) === 32 ? start + 6 : start + 5
      const value = buf.slice(from, end)
      this.data = this.data === null ? value : `${this.data}\n${value}`
      return
    }
    if (buf.charCodeAt(start) === 58) return // `:` a comment
    const colon = buf.indexOf(':', start)
    const field = colon < 0 || colon > end ? buf.slice(start, end) : buf.slice(start, colon)
    if (field === 'data') this.data = this.data === null ? '' : `${this.data}\n`
  }
}

export function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}
