import { pinnedFetch, resolveDestination, UnsafeUrlError, type Destination, type UrlPolicy } from '../lib/net-guard'
import { scrubUrl } from '../lib/redact-url'
import { serviceSignature, standardSignature } from '../lib/signing'
import type { AttemptRecord } from '../store/deliveries'
import { injectTraceRecord, tracingOn } from '../lib/tracing'

export const USER_AGENT = 'agent-platform-api-webhooks/0.1.0'
const EXCERPT_BYTES = 1024

export interface SendInput {
  deliveryId: string
  url: string
  event: string
  data: Record<string, unknown>
  /** Current secret first; during a rotation the previous one follows. */
  secrets: string[]
  timeoutMs: number
  policy: UrlPolicy
}

export interface SendResult {
  ok: boolean
  /** 5xx, 3xx, 429, time-out, network error: worth another attempt. */
  retryable: boolean
  retryAfterMs?: number
  record: Omit<AttemptRecord, 'attempt'>
}

/** The request of docs/webhooks.md ("A delivery"), exactly: body, the `X-Service-*` headers and Standard Webhooks'. */
export function buildRequest(input: Pick<SendInput, 'deliveryId' | 'event' | 'data' | 'secrets'>, now = Date.now()) {
  const body = JSON.stringify({ event: input.event, delivered_at: new Date(now).toISOString(), data: input.data })
  const timestamp = Math.floor(now / 1000)
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    'user-agent': USER_AGENT,
    'x-service-signature': serviceSignature(input.secrets[0]!, body),
    'x-service-event': input.event,
    'x-service-delivery-id': input.deliveryId,
    'webhook-id': input.deliveryId,
    'webhook-timestamp': String(timestamp),
    'webhook-signature': standardSignature(input.secrets, input.deliveryId, timestamp, body),
  }
  return { body, headers }
}

/**
 * One attempt. The host is resolved and checked again here and the connection pinned to the checked
 * address (src/lib/net-guard.ts), so a DNS answer that changed since registration cannot reach the inside.
 */
export async function sendDelivery(input: SendInput): Promise<SendResult> {
  const started = performance.now()
  const at = new Date().toISOString()
  const done = (r: { ok: boolean; retryable: boolean; status?: number; error?: string; excerpt?: string; retryAfterMs?: number }): SendResult => ({
    ok: r.ok,
    retryable: r.retryable,
    retryAfterMs: r.retryAfterMs,
    record: {
      at,
      status_code: r.status ?? null,
      duration_ms: Math.round(performance.now() - started),
      error: r.error ?? null,
      response_excerpt: r.excerpt ?? null,
    },
  })
  // One deadline for the whole attempt, the lookup included: a slow resolver must not stretch an
  // attempt past its time-out (and past the lease, which would count a live attempt as abandoned).
  const signal = AbortSignal.timeout(input.timeoutMs)
  let dest: Destination
  try {
    dest = await resolveDestination(input.url, input.policy, signal)
  } catch (err) {
    if (!(err instanceof UnsafeUrlError)) throw err
    return done({ ok: false, retryable: err.transient, error: scrubUrl(`refused: ${err.message}`, input.url) })
  }
  const { body, headers } = buildRequest(input)
  // The attempt's span (src/workers/webhook-deliveries.ts) is the receiver's parent.
  if (tracingOn) injectTraceRecord(headers)
  let res: Response
  try {
    res = await pinnedFetch(dest, { method: 'POST', headers, body, signal })
  } catch (err) {
    return done({ ok: false, retryable: true, error: scrubUrl(describeError(err, input.timeoutMs), input.url) })
  }
  let excerpt: string | undefined
  try {
    excerpt = await readExcerpt(res)
  } catch (err) {
    excerpt = undefined
    if (!(res.status >= 200 && res.status < 300)) return done({ ok: false, retryable: true, status: res.status, error: scrubUrl(describeError(err, input.timeoutMs), input.url) })
  }
  const status = res.status
  if (status >= 200 && status < 300) return done({ ok: true, retryable: false, status, excerpt })
  const retryAfterMs = status === 429 || status === 503 ? parseRetryAfter(res.headers.get('retry-after')) : undefined
  const permanent = status >= 400 && status < 500 && status !== 429
  return done({ ok: false, retryable: !permanent, status, excerpt, retryAfterMs, error: `receiver answered ${status}` })
}

async function readExcerpt(res: Response): Promise<string | undefined> {
  if (!res.body) return undefined
  const reader = res.body.getReader()
  const chunks: Uint8Array[] = []
  let size = 0
  while (size < EXCERPT_BYTES) {
    const { done, value } = await reader.read()
    if (done) break
    chunks.push(value)
    size += value.byteLength
  }
  if (size >= EXCERPT_BYTES) void reader.cancel().catch(() => {})
  if (size === 0) return undefined
  const bytes = Buffer.concat(chunks).subarray(0, EXCERPT_BYTES)
  // Cut at a character boundary: a split UTF-8 sequence decodes to U+FFFD, dropped at the end.
  return new TextDecoder().decode(bytes).replace(/\uFFFD+$/, '')
}

/** Retry-After as seconds or an HTTP date, in ms; undefined when absent or unreadable. */
export function parseRetryAfter(value: string | null, now = Date.now()): number | undefined {
  if (!value) return undefined
  const v = value.trim()
  if (/^\d+$/.test(v)) return Number(v) * 1000
  // RFC 9110: delay-seconds or an HTTP-date (IMF-fixdate); anything else Date.parse would accept
  // ("-5", "12/31/2099") is ignored.
  if (!/^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT$/.test(v)) return undefined
  const at = Date.parse(v)
  return Number.isNaN(at) ? undefined : Math.max(0, at - now)
}

function describeError(err: unknown, timeoutMs: number): string {
  const e = err as Error & { code?: string }
  if (e?.name === 'TimeoutError' || e?.name === 'AbortError') return `timed out after ${timeoutMs} ms`
  return `network error: ${e?.code ?? e?.name ?? 'error'}${e?.message ? ` (${e.message})` : ''}`.slice(0, 500)
}

