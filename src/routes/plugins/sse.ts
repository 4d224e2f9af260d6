import { recordAudit } from './audit'
import type { Deps } from '../../deps'
import { AppError, errorBody } from '../../lib/errors'
import { completeIdempotency } from './idempotency'
import { stateOf, type RequestState } from './request-state'

export type SseEvent = {
  /** The `id:` line (a run's event sequence number, for Last-Event-ID). */
  id?: string
  /** The `event:` line; omitted for plain `data:` messages (OpenAI's stream format). */
  event?: string
  data: string
} | {
  /** Several events already in the wire format (`data: ...\n\n` each), written at once. */
  raw: string
} | {
  /** The same as bytes (UTF-8), in pieces written one after the other (each whole events). */
  bytes: Uint8Array[]
}

const encoder = new TextEncoder()
const decoder = new TextDecoder()
/** An SSE comment: clients ignore it (the SSE spec; OpenAI's SDKs and eventsource-parser alike). */
const HEARTBEAT = encoder.encode(': keep-alive\n\n')

/** What a server-sent events answer is made of. */
export interface SseAnswer {
  request: Request
  set: { headers: Record<string, string | number> }
  route: string
  events: AsyncIterable<SseEvent>
  /** Aborted when the client goes away; the producer passes it to the upstream call. */
  abort: AbortController
  /** What a retry with the same Idempotency-Key replays (JSON), instead of releasing the key. */
  idempotent?: { status: number; body: unknown }
  /**
   * Instead: the stream itself is what a retry replays (byte for byte, stored when it ended), unless
   * `ok()` says it failed; a stream whose client left is not stored.
   */
  replay?: { ok: () => boolean }
  /** An event already produced (a relay's first chunks): the body's first write, ahead of `events`. */
  head?: SseEvent
}

/**
 * A server-sent events answer. Pulled, not pushed: the next event is produced only when the client
 * has taken the previous one, so a slow client slows the upstream instead of filling memory. The
 * client going away (`cancel`, or the request's own signal) aborts `abort`. The conventions' headers
 * (request id, rate limit, security) are kept. A streamed answer cannot be replayed byte for byte:
 * its Idempotency-Key either replays `idempotent` (a JSON answer naming what the stream created, e.g.
 * a run) or is released at the end, guarding against a concurrent duplicate only.
 */
export function sseResponse(deps: Deps, answer: SseAnswer): Response {
  const state = stateOf(answer.request)
  // Recorded at once: the side effect (a run) exists now, however long the stream lasts.
  if (state.idem && answer.idempotent) {
    completeIdempotency(deps, state, answer.idempotent.status, JSON.stringify(answer.idempotent.body), { 'content-type': 'application/json' }).catch(() => {})
  }
  // A streamed write (a run triggered with Accept: text/event-stream) is in the audit trail too.
  void recordAudit(deps, state, 200, answer.idempotent?.body)
  // The answer's headers: moved into the Response below (left in `set`, they would make Elysia wrap
  // the Response in a second one around the same body).
  const own = answer.set.headers as Record<string, string>
  answer.set.headers = {}
  const stream = new SseStream(deps, answer, state, own)
  const body = new ReadableStream<Uint8Array>({
    start: (controller) => stream.start(controller),
    pull: (controller) => stream.pull(controller),
    cancel: () => stream.cancel(),
  })
  const headers = new Headers(own)
  headers.set('content-type', 'text/event-stream; charset=utf-8')
  headers.set('cache-control', 'no-cache')
  headers.set('x-accel-buffering', 'no')
  return new Response(body, { status: 200, headers })
}

/** One answer's body as it is pulled: its writes, its heartbeat, and its end (metrics, access log, Idempotency-Key). */
class SseStream {
  private readonly iterator: AsyncIterator<SseEvent>
  private readonly onAbort: () => void
  private head: SseEvent | undefined
  private ended = false
  // Kept only for a request with an Idempotency-Key (what its retries replay).
  private sent: string | null
  // A stream quiet for longer than the server's idle time-out (Bun's, 30 s) or a proxy's would be cut
  // (a run waiting in a `wait` node sends nothing for minutes): a comment goes out whenever nothing
  // did for a whole interval. Not part of a replay.
  private quiet = true
  /** true until the first event is enqueued, false until the turn after it, then null. */
  private first: boolean | null = true
  private heartbeat: ReturnType<typeof setInterval> | undefined

  constructor(private readonly deps: Deps, private readonly answer: SseAnswer, private readonly state: RequestState, private readonly own: Record<string, string>) {
    this.iterator = answer.events[Symbol.asyncIterator]()
    this.head = answer.head
    this.sent = answer.replay && state.idem ? '' : null
    const abort = answer.abort
    this.onAbort = () => abort.abort()
    answer.request.signal?.addEventListener('abort', this.onAbort, { once: true })
  }

  start(controller: ReadableStreamDefaultController<Uint8Array>): void {
    const every = this.deps.config.sseHeartbeatMs
    if (every <= 0) return
    this.heartbeat = setInterval(() => {
      try {
        if (this.quiet && !this.ended) controller.enqueue(HEARTBEAT)
      } catch {
        // Closed under us (the client left between two ticks): end() clears the interval.
        clearInterval(this.heartbeat)
      }
      this.quiet = true
    }, every)
  }

  async pull(controller: ReadableStreamDefaultController<Uint8Array>): Promise<void> {
    try {
      if (this.head) {
        // Enqueued by the first pull, not by start(): a stream that holds data before Bun first
        // reads it has its headers written later (~0.3 ms, measured).
        const h = this.head
        this.head = undefined
        return this.put(controller, h)
      }
      // Bun writes what was enqueued only when the event loop turns: a producer whose next events
      // are ready at once (an upstream read holding the whole answer) would hold the first one back
      // until all of them were produced. One turn of the loop (a timer: setImmediate is not enough)
      // after the first event sends it on its own.
      if (this.first === false) {
        this.first = null
        await Bun.sleep(0)
      }
      const { value, done } = await this.iterator.next()
      if (done) {
        this.end(true)
        controller.close()
        return
      }
      this.put(controller, value)
    } catch (err) {
      this.end()
      controller.error(err)
    }
  }

  async cancel(): Promise<void> {
    this.answer.abort.abort()
    this.end()
    await this.iterator.return?.(undefined)
  }

  private put(controller: ReadableStreamDefaultController<Uint8Array>, value: SseEvent): void {
    this.quiet = false
    this.first &&= false
    if ('bytes' in value) {
      for (const b of value.bytes) {
        if (this.sent !== null) this.sent += decoder.decode(b)
        controller.enqueue(b)
      }
      return
    }
    const text = 'raw' in value ? value.raw : `${value.id ? `id: ${value.id}\n` : ''}${value.event ? `event: ${value.event}\n` : ''}data: ${value.data}\n\n`
    if (this.sent !== null) this.sent += text
    controller.enqueue(encoder.encode(text))
  }

  private end(complete = false): void {
    if (this.ended) return
    this.ended = true
    clearInterval(this.heartbeat)
    const { deps, state, answer } = this
    const request = answer.request
    request.signal?.removeEventListener('abort', this.onAbort)
    const seconds = (performance.now() - state.start) / 1000
    deps.metrics.observe(request.method, answer.route, 200, seconds)
    deps.access({ request_id: state.id, method: request.method, path: state.path, route: answer.route, status: 200, ms: Math.round(seconds * 10000) / 10 })
    if (state.idem && this.sent !== null && complete && answer.replay!.ok()) {
      completeIdempotency(deps, state, 200, this.sent, { ...this.own, 'content-type': 'text/event-stream; charset=utf-8' }).catch(() => {})
    } else if (state.idem) {
      const key = state.idem.key
      state.idem = undefined
      deps.redis.del(key).catch(() => {})
    }
  }
}

/**
 * A stream whose first item is awaited before the answer starts: a failure before any byte (the
 * model refused, an unknown route, the budget, every route down) is then an ordinary JSON error
 * answer, not a broken stream. `toEvents` makes the SSE events of that first item and the rest of
 * `source`. The client leaving ends `source` too, even before the events took their first step: a
 * generator that never started would not reach `source`'s `finally` (the gateway's charge of what
 * was produced).
 */
export async function afterFirst<T, R>(source: AsyncGenerator<T, R>, toEvents: (first: IteratorResult<T, R>) => AsyncGenerator<SseEvent>): Promise<{ first: IteratorResult<T, R>; events: AsyncIterable<SseEvent> }> {
  const first = await source.next()
  const events = toEvents(first)
  const iterator: AsyncIterator<SseEvent> = {
    next: () => events.next(),
    return: async () => {
      await source.return(undefined as never)
      return events.return(undefined)
    },
  }
  return { first, events: { [Symbol.asyncIterator]: () => iterator } }
}

/** An error after the first byte: the stream's last event (the JSON error body in an `error` event). */
export function errorEvent(requestId: string, err: unknown): SseEvent {
  const e = err instanceof AppError ? err : new AppError('upstream_error', 'the model stream failed')
  return { event: 'error', data: JSON.stringify(errorBody(requestId, e)) }
}
