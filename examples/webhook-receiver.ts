/**
 * Reference receiver for the service's webhooks: verifies the signatures, rejects stale Standard
 * Webhooks timestamps, deduplicates by delivery id and "processes" each event once (one JSON line on
 * stdout). Copy it, or import the exported pieces. Run: `WEBHOOK_SECRET=... bun examples/webhook-receiver.ts`
 * (see docs/webhook-receiver.md). Dependency-free: node:crypto and Bun only.
 */
import { createHmac, timingSafeEqual } from 'node:crypto'

/** The body of a delivery. */
export interface WebhookPayload {
  event: string
  delivered_at: string
  data: unknown
}

export interface ReceiverOptions {
  /** Every secret accepted (several during a rotation). */
  secrets: string[]
  /** How far `webhook-timestamp` may be from now, in seconds. Default 300. */
  toleranceSeconds?: number
  /** Called once per new delivery id; throw to answer 500 and have the delivery retried. */
  onEvent?: (payload: WebhookPayload, deliveryId: string) => void | Promise<void>
  /** Unix seconds; for tests. */
  now?: () => number
}

/** Constant-time comparison of two byte strings; `false` at once only when the lengths differ (not secret). */
function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && timingSafeEqual(a, b)
}

/** `X-Service-Signature: sha256=<hex HMAC-SHA256 of the raw body, key = the secret's UTF-8 bytes>`. */
export function verifySignature(rawBody: Uint8Array, header: string | null, secrets: string[]): boolean {
  const match = /^sha256=([0-9a-f]{64})$/i.exec(header?.trim() ?? '')
  if (!match) return false
  const given = Buffer.from(match[1]!, 'hex')
  let ok = false
  // Check every secret (no early exit), so the time taken does not tell which one matched.
  for (const secret of secrets) ok = sameBytes(given, createHmac('sha256', secret).update(rawBody).digest()) || ok
  return ok
}

/** The Standard Webhooks key: the base64-decoded rest of a `whsec_` secret, else the secret's UTF-8 bytes. */
export function standardKey(secret: string): Buffer {
  return secret.startsWith('whsec_') ? Buffer.from(secret.slice(6), 'base64') : Buffer.from(secret, 'utf8')
}

/**
 * `webhook-signature: v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<raw body>">`, possibly several
 * space-separated; any `v1` entry matching any secret is enough. Does not check the timestamp's age.
 */
export function verifyStandardSignature(rawBody: Uint8Array, id: string, timestamp: string, header: string, secrets: string[]): boolean {
  const expected = secrets.map((s) => createHmac('sha256', standardKey(s)).update(`${id}.${timestamp}.`).update(rawBody).digest())
  let ok = false
  for (const entry of header.trim().split(/\s+/)) {
    if (!entry.startsWith('v1,')) continue // other schemes (e.g. v1a, asymmetric) are not ours
    const given = Buffer.from(entry.slice(3), 'base64')
    for (const e of expected) ok = sameBytes(given, e) || ok
  }
  return ok
}

const json = (status: number, body: unknown) => Response.json(body, { status })

/** A `fetch` handler for `Bun.serve`. Accepts POST on any path. */
export function createReceiver(options: ReceiverOptions): (req: Request) => Promise<Response> {
  const { secrets, toleranceSeconds = 300, onEvent = () => {}, now = () => Date.now() / 1000 } = options
  if (secrets.length === 0) throw new Error('at least one secret is required')
  // Delivery ids already processed -> when to forget them. In memory, so a restart forgets them all:
  // fine for an example, use a unique key in your database in production. Only verified deliveries
  // are remembered, so nobody without the secret can fill it up; the TTL outlasts the service's
  // retries, and the size bound (oldest dropped first: a Map keeps insertion order) caps memory.
  const seen = new Map<string, number>()
  const inFlight = new Set<string>() // being processed right now
  const TTL_MS = 24 * 60 * 60 * 1000
  const MAX_REMEMBERED = 100_000

  return async (req) => {
    if (req.method !== 'POST') return new Response(null, { status: 405, headers: { allow: 'POST' } })
    const raw = new Uint8Array(await req.arrayBuffer()) // the exact bytes that were signed
    const h = req.headers
    if (!verifySignature(raw, h.get('x-service-signature'), secrets)) return json(403, { error: 'invalid signature' })

    const deliveryId = h.get('x-service-delivery-id')
    const [id, ts, sig] = [h.get('webhook-id'), h.get('webhook-timestamp'), h.get('webhook-signature')]
    if (sig !== null || ts !== null) {
      // The body signature alone does not cover the delivery id or the time: these do.
      if (!id || !ts || !sig || !/^\d+$/.test(ts)) return json(403, { error: 'incomplete webhook-* headers' })
      if (Math.abs(now() - Number(ts)) > toleranceSeconds) return json(403, { error: 'timestamp outside tolerance' })
      if (!verifyStandardSignature(raw, id, ts, sig, secrets)) return json(403, { error: 'invalid webhook-signature' })
      if (deliveryId !== null && deliveryId !== id) return json(403, { error: 'webhook-id differs from X-Service-Delivery-Id' })
    }
    if (!deliveryId) return json(400, { error: 'missing X-Service-Delivery-Id' })

    let payload: WebhookPayload
    try {
      payload = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(raw))
    } catch {
      return json(400, { error: 'body is not valid JSON' })
    }
    if (typeof payload !== 'object' || payload === null || typeof payload.event !== 'string') return json(400, { error: 'body has no event' })

    const nowMs = Date.now()
    for (const [key, expires] of seen) {
      if (expires > nowMs && seen.size < MAX_REMEMBERED) break // the rest are newer
      seen.delete(key)
    }
    if (seen.has(deliveryId)) return json(200, { ok: true, duplicate: true })
    // A retry racing the first attempt: not a 200 yet, since that attempt may still fail.
    if (inFlight.has(deliveryId)) return json(409, { error: 'delivery is being processed' })
    inFlight.add(deliveryId)
    try {
      await onEvent(payload, deliveryId)
      seen.set(deliveryId, Date.now() + TTL_MS)
    } catch (err) {
      console.error(`processing ${deliveryId} failed:`, err) // not remembered: a retry tries again
      return json(500, { error: 'processing failed' })
    } finally {
      inFlight.delete(deliveryId)
    }
    return json(200, { ok: true, duplicate: false })
  }
}

if (import.meta.main) {
  const env = process.env
  function fail(msg: string): never {
    console.error(msg)
    process.exit(1)
  }
  const secrets = (env.WEBHOOK_SECRET ?? '').split(',').map((s) => s.trim()).filter(Boolean)
  if (secrets.length === 0) fail('WEBHOOK_SECRET is required (several secrets: comma-separated)')
  const port = Number(env.PORT || 9000)
  if (!Number.isInteger(port) || port < 0 || port > 65535) fail(`PORT must be 0-65535, got ${env.PORT}`)
  const toleranceSeconds = Number(env.TOLERANCE_SECONDS || 300)
  if (!(toleranceSeconds >= 0)) fail(`TOLERANCE_SECONDS must be a number >= 0, got ${env.TOLERANCE_SECONDS}`)
  const { TLS_CERT_FILE: cert, TLS_KEY_FILE: key } = env
  if (!cert !== !key) fail('set both TLS_CERT_FILE and TLS_KEY_FILE, or neither')

  const server = Bun.serve({
    hostname: env.HOST ?? '127.0.0.1',
    port,
    tls: cert && key ? { cert: Bun.file(cert), key: Bun.file(key) } : undefined,
    fetch: createReceiver({
      secrets,
      toleranceSeconds,
      onEvent: (payload, deliveryId) => console.log(JSON.stringify({ received: deliveryId, event: payload.event })),
    }),
  })
  console.log(`listening on ${server.url}`)
}
