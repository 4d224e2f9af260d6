import { recordAudit } from './audit'
import type { Deps } from '../../deps'
import { AppError, errorBody } from '../../lib/errors'
import { completeIdempotency } from './idempotency'
import { stateOf } from './request-state'

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

/**
 * A server-sent events answer. Pulled, not pushed: the next event is produced only when the client
 * has taken the previous one, so a slow client slows the upstream instead of filling memory. The
 * client going away (`cancel`, or the request's own signal) aborts `abort`, which the producer passes
 * to the upstream call. The conventions' headers (request id, rate limit, security) are kept. A
 * streamed answer cannot be replayed byte for byte: its Idempotency-Key either replays `idempotent`
 * (a JSON answer naming what the stream created, e.g. a run) or is released at the end, guarding
 * against a concurrent duplicate only.
 */
export function sseResponse(
  deps: Deps,
  request: Request,
  set: { headers: Record<string, string | number> },
  route: string,
  events: AsyncIterable<SseEvent>,
  abort: AbortController,
  /** What a retry with the same Idempotency-Key replays (JSON), instead of releasing the key. */
  idempotent?: { status: number; body: unknown },
  /**
   * Instead: the stream itself is what a retry replays (byte for byte, stored when it ended), unless
   * `ok()` says it failed; a stream whose client left is not stored.
   */
  replay?: { ok: () => boolean },
  /** An event already produced (a relay's first chunks): the body's first write, ahead of `events`. */
  head?: SseEvent,
): Response {
  const state = stateOf(request)
  // Recorded at once: the side effect (a run) exists now, however long the stream lasts.
  if (state.idem && idempotent) {
    completeIdempotency(deps, state, idempotent.status, JSON.stringify(idempotent.body), { 'content-type': 'application/json' }).catch(() => {})
  }
  // A streamed write (a run triggered with Accept: text/event-stream) is in the audit trail too.
  void recordAudit(deps, state, 200, idempotent?.body)
  // The answer's headers: moved into the Response below (left in `set`, they would make Elysia wrap
  // the Response in a second one around the same body).
  const own = set.headers as Record<string, string>
  set.headers = {}
  const iterator = events[Symbol.asyncIterator]()
  const onAbort = () => abort.abort()
  request.signal?.addEventListener('abort', onAbort, { once: true })
  let ended = false
  // Kept only for a request with an Idempotency-Key (what its retries replay).
  let sent = replay && state.idem ? '' : null
  // A stream quiet for longer than the server's idle time-out (Bun's, 30 s) or a proxy's would be cut
  // (a run waiting in a `wait` node sends nothing for minutes): a comment goes out whenever nothing
  // did for a whole interval. Not part of a replay.
  let quiet = true
  /** true until the first event is enqueued, false until the turn after it, then null. */
  let first: boolean | null = true
  let heartbeat: ReturnType<typeof setInterval> | undefined
  const end = (complete = false) => {
    if (ended) return
    ended = true
    clearInterval(heartbeat)
    request.signal?.removeEventListener('abort', onAbort)
    const seconds = (performance.now() - state.start) / 1000
    deps.metrics.observe(request.method, route, 200, seconds)
    deps.access({ request_id: state.id, method: request.method, path: state.path, route, status: 200, ms: Math.round(seconds * 10000) / 10 })
    if (state.idem && sent !== null && complete && replay!.ok()) {
      completeIdempotency(deps, state, 200, sent, { ...own, 'content-type': 'text/event-stream; charset=utf-8' }).catch(() => {})
    } else if (state.idem) {
      const key = state.idem.key
      state.idem = undefined
      deps.redis.del(key).catch(() => {})
    }
  }
  const put = (controller: ReadableStreamDefaultController<Uint8Array>, value: SseEvent) => {
    quiet = false
    first &&= false
    if ('bytes' in value) {
      for (const b of value.bytes) {
        if (sent !== null) sent += decoder.decode(b)
        controller.enqueue(b)
      }
      return
    }
    const text = 'raw' in value ? value.raw : `${value.id ? `id: ${value.id}\n` : ''}${value.event ? `event: ${value.event}\n` : ''}data: ${value.data}\n\n`
    if (sent !== null) sent += text
    controller.enqueue(encoder.encode(text))
  }
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      if (deps.config.sseHeartbeatMs <= 0) return
      heartbeat = setInterval(() => {
        try {
          if (quiet && !ended) controller.enqueue(HEARTBEAT)
        } catch {
          // Closed under us (the client left between two ticks): end() clears the interval.
          clearInterval(heartbeat)
        }
        quiet = true
      }, deps.config.sseHeartbeatMs)
    },
    async pull(controller) {
      try {
        if (head) {
          // Enqueued by the first pull, not by start(): a stream that holds data before Bun first
          // reads it has its headers written later (~0.3 ms, measured).
          const h = head
          head = undefined
          return put(controller, h)
        }
        // Bun writes what was enqueued only when the event loop turns: a producer whose next events
        // are ready at once (an upstream read holding the whole answer) would hold the first one back
        // until all of them were produced. One turn of the loop (a timer: setImmediate is not enough)
        // after the first event sends it on its own.
        if (first === false) {
          first = null
          await Bun.sleep(0)
        }
        const { value, done } = await iterator.next()
        if (done) {
          end(true)
          controller.close()
          return
        }
        put(controller, value)
      } catch (err) {
        end()
        controller.error(err)
      }
    },
    async cancel() {
      abort.abort()
      end()
      await iterator.return?.(undefined)
    },
  })
  const headers = new Headers(own)
  headers.set('content-type', 'text/event-stream; charset=utf-8')
  headers.set('cache-control', 'no-cache')
  headers.set('x-accel-buffering', 'no')
  return new Response(body, { status: 200, headers })
}

/** An error after the first byte: the stream's last event (the JSON error body in an `error` event). */
export function errorEvent(requestId: string, err: unknown): SseEvent {
  const e = err instanceof AppError ? err : new AppError('upstream_error', 'the model stream failed')
  return { event: 'error', data: JSON.stringify(errorBody(requestId, e)) }
}
