import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { createHmac, randomBytes } from 'node:crypto'
import { createCertificate, type Certificate } from '../helpers/certificate'
import { waitFor } from '../helpers/harness'
import { killAll } from '../helpers/process'
import { startReferenceReceiver, type ReferenceReceiver } from '../helpers/receiver'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * examples/webhook-receiver.ts as a real subprocess over HTTPS (a self-signed certificate made here),
 * fed deliveries signed in this file with node:crypto alone, not with the receiver's own helpers.
 */
let certificate: Certificate
const started: ReferenceReceiver[] = []

/** The main receiver: one plain secret. */
const SECRET = 'receiver-test-secret-' + randomBytes(12).toString('hex')
let main: ReferenceReceiver
/** The rotation receiver: a new `whsec_` secret (raw key bytes NEW_KEY) and the old plain one. */
const NEW_KEY = randomBytes(24)
const NEW_SECRET = 'whsec_' + NEW_KEY.toString('base64')
const OLD_SECRET = 'old-plain-secret-' + randomBytes(8).toString('hex')
let rotating: ReferenceReceiver

async function startReceiver(secret: string | string[]): Promise<ReferenceReceiver> {
  const r = await startReferenceReceiver({ secret, certificate })
  started.push(r)
  return r
}

beforeAll(async () => {
  certificate = createCertificate()
  ;[main, rotating] = await Promise.all([startReceiver(SECRET), startReceiver([NEW_SECRET, OLD_SECRET])])
})

afterAll(async () => {
  await Promise.all(started.map((r) => r.stop()))
  for (const r of started) expect(r.proc.exitCode !== null || r.proc.signalCode !== null).toBe(true)
  // Any receiver that started while another failed to.
  await killAll()
  certificate?.remove()
})

// --- signing, independently of the receiver -------------------------------------------------------

const hmacHex = (key: string, body: string) => createHmac('sha256', Buffer.from(key, 'utf8')).update(Buffer.from(body, 'utf8')).digest('hex')
const hmacB64 = (key: Buffer, id: string, ts: number, body: string) => createHmac('sha256', key).update(Buffer.from(`${id}.${ts}.${body}`, 'utf8')).digest('base64')
const nowSeconds = () => Math.floor(Date.now() / 1000)
let counter = 0
const newId = () => `dlv_test${Date.now().toString(36)}${(counter++).toString(36).padStart(4, '0')}`

interface Delivery {
  id?: string
  event?: string
  /** The body to sign (also sent, unless `sent` is given). */
  body?: string
  /** Sent instead of `body`, after signing `body`. */
  sent?: string
  /** Key for X-Service-Signature; `null` leaves the header out. */
  secret?: string | null
  /** Overrides X-Service-Signature. */
  signature?: string
  /** Raw keys for webhook-signature, one `v1,` entry each; absent: no Standard Webhooks headers. */
  standardKeys?: Buffer[]
  timestamp?: number
}

function deliver(port: number, d: Delivery = {}) {
  const id = d.id ?? newId()
  const event = d.event ?? 'workflow.run.completed'
  const body = d.body ?? JSON.stringify({ event, delivered_at: new Date().toISOString(), data: { run_id: 'run_1', status: 'succeeded', note: 'héllo ✓' } })
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    'x-service-event': event,
    'x-service-delivery-id': id,
    'user-agent': 'agent-platform-api-webhooks/0.1.0',
  }
  const secret = d.secret === undefined ? SECRET : d.secret
  if (d.signature !== undefined) headers['x-service-signature'] = d.signature
  else if (secret !== null) headers['x-service-signature'] = `sha256=${hmacHex(secret, body)}`
  if (d.standardKeys) {
    const ts = d.timestamp ?? nowSeconds()
    headers['webhook-id'] = id
    headers['webhook-timestamp'] = String(ts)
    headers['webhook-signature'] = d.standardKeys.map((k) => `v1,${hmacB64(k, id, ts, body)}`).join(' ')
  }
  return post(port, { headers, body: d.sent ?? body }).then((res) => ({ ...res, id }))
}

async function post(port: number, init: { method?: string; headers?: Record<string, string>; body?: string }) {
  const res = await fetch(`https://localhost:${port}/`, { method: init.method ?? 'POST', headers: init.headers, body: init.body, tls: { ca: certificate.cert } })
  const text = await res.text()
  let body: any = text
  try {
    body = JSON.parse(text)
  } catch {}
  return { status: res.status, body }
}

/**
 * Sends a fresh, valid delivery and waits for its line: everything sent before it has been handled
 * (one request at a time, in order), so `received` is then complete, with no fixed sleep.
 */
async function settle(r: ReferenceReceiver, d: Delivery = {}): Promise<void> {
  const res = await deliver(r.port, d)
  expect(res.body).toEqual({ ok: true, duplicate: false })
  await waitFor(() => r.received().some((l) => l.received === res.id), { timeoutMs: 5_000, what: `the line for ${res.id}` })
}

const forbidden = (res: { status: number; body: any }) => {
  expect(res.status).toBe(403)
  expect(typeof res.body.error).toBe('string')
}

describe('webhook receiver example as an HTTPS subprocess', () => {
  const rejected: string[] = []

  test('a correctly signed delivery: 200 duplicate:false, and the event is processed once', async () => {
    const res = await deliver(main.port, { event: 'agent.created' })
    expect(res.status).toBe(200)
    expect(res.body).toEqual({ ok: true, duplicate: false })
    // An empty list is truthy: wait for the line itself, then check it is the only one.
    await waitFor(() => main.received().some((l) => l.received === res.id), { timeoutMs: 5_000, what: 'the received line' })
    const lines = main.received().filter((l) => l.received === res.id)
    expect(lines).toEqual([{ received: res.id, event: 'agent.created' }])
  })

  test('the same delivery id again: 200 duplicate:true and not processed again', async () => {
    const id = newId()
    const first = await deliver(main.port, { id, standardKeys: [Buffer.from(SECRET)] })
    expect(first.body).toEqual({ ok: true, duplicate: false })
    // A retry: same id, a later attempt time, so new webhook-* headers.
    const again = await deliver(main.port, { id, standardKeys: [Buffer.from(SECRET)], timestamp: nowSeconds() + 1 })
    expect(again.status).toBe(200)
    expect(again.body).toEqual({ ok: true, duplicate: true })
    const legacyOnly = await deliver(main.port, { id })
    expect(legacyOnly.body).toEqual({ ok: true, duplicate: true })
    await settle(main)
    expect(main.received().filter((l) => l.received === id).length).toBe(1)
  })

  test('a wrong signature: 403', async () => {
    const wrong = await deliver(main.port, { signature: `sha256=${'0'.repeat(64)}` })
    forbidden(wrong)
    const notHex = await deliver(main.port, { signature: 'sha256=nothex' })
    forbidden(notHex)
    // Even when the webhook-signature is right, X-Service-Signature must be too.
    const withStandard = await deliver(main.port, { signature: `sha256=${hmacHex('x', 'y')}`, standardKeys: [Buffer.from(SECRET)] })
    forbidden(withStandard)
    rejected.push(wrong.id, notHex.id, withStandard.id)
  })

  test('a missing signature: 403', async () => {
    const res = await deliver(main.port, { secret: null })
    forbidden(res)
    const withStandardOnly = await deliver(main.port, { secret: null, standardKeys: [Buffer.from(SECRET)] })
    forbidden(withStandardOnly)
    rejected.push(res.id, withStandardOnly.id)
  })

  test('a signature made with another secret of the same length: 403', async () => {
    const other = SECRET.slice(0, -1) + (SECRET.endsWith('a') ? 'b' : 'a')
    expect(other.length).toBe(SECRET.length)
    const res = await deliver(main.port, { secret: other })
    forbidden(res)
    rejected.push(res.id)
  })

  test('a body altered after signing: 403', async () => {
    const body = JSON.stringify({ event: 'agent.created', delivered_at: new Date().toISOString(), data: { amount: 10 } })
    const res = await deliver(main.port, { body, sent: body.replace('10', '99') })
    forbidden(res)
    const withStandard = await deliver(main.port, { body, sent: body + ' ', standardKeys: [Buffer.from(SECRET)] })
    forbidden(withStandard)
    rejected.push(res.id, withStandard.id)
  })

  test('Standard Webhooks: a timestamp 10 minutes old (or ahead) is refused even when correctly signed', async () => {
    const old = await deliver(main.port, { standardKeys: [Buffer.from(SECRET)], timestamp: nowSeconds() - 600 })
    forbidden(old)
    const ahead = await deliver(main.port, { standardKeys: [Buffer.from(SECRET)], timestamp: nowSeconds() + 600 })
    forbidden(ahead)
    rejected.push(old.id, ahead.id)
  })

  test('Standard Webhooks: one bad and one good entry in webhook-signature is accepted; only bad ones are not', async () => {
    const ok = await deliver(main.port, { standardKeys: [randomBytes(32), Buffer.from(SECRET)] })
    expect(ok.status).toBe(200)
    expect(ok.body).toEqual({ ok: true, duplicate: false })
    const bad = await deliver(main.port, { standardKeys: [randomBytes(32), Buffer.from(SECRET + 'x')] })
    forbidden(bad)
    rejected.push(bad.id)
  })

  test('invalid JSON under a valid signature: 400', async () => {
    const res = await deliver(main.port, { body: '{"event": "agent.created", ' })
    expect(res.status).toBe(400)
    rejected.push(res.id)
  })

  test('GET: 405', async () => {
    const res = await post(main.port, { method: 'GET' })
    expect(res.status).toBe(405)
  })

  test('no rejected delivery was processed', async () => {
    await settle(main)
    const ids = new Set(main.received().map((l) => l.received))
    expect(rejected.length).toBeGreaterThan(10)
    for (const id of rejected) expect(ids.has(id)).toBe(false)
  })

  test('rotation: a receiver given two secrets accepts a signature made with either', async () => {
    const withNew = await deliver(rotating.port, { secret: NEW_SECRET, standardKeys: [NEW_KEY] })
    expect(withNew.body).toEqual({ ok: true, duplicate: false })
    const withOld = await deliver(rotating.port, { secret: OLD_SECRET, standardKeys: [Buffer.from(OLD_SECRET)] })
    expect(withOld.body).toEqual({ ok: true, duplicate: false })
    const legacyOnly = await deliver(rotating.port, { secret: OLD_SECRET })
    expect(legacyOnly.body).toEqual({ ok: true, duplicate: false })
    // As sent during a rotation: the new secret's signature first, then the old one's.
    const both = await deliver(rotating.port, { secret: NEW_SECRET, standardKeys: [NEW_KEY, Buffer.from(OLD_SECRET)] })
    expect(both.body).toEqual({ ok: true, duplicate: false })
    // The whsec_ prefix is part of the X-Service-Signature key, not of the webhook-signature key.
    const prefixKept = await deliver(rotating.port, { secret: NEW_SECRET, standardKeys: [Buffer.from(NEW_SECRET)] })
    forbidden(prefixKept)
    const neither = await deliver(rotating.port, { secret: SECRET })
    forbidden(neither)
    await settle(rotating, { secret: OLD_SECRET })
    const ids = rotating.received().map((l) => l.received)
    for (const r of [withNew, withOld, legacyOnly, both]) expect(ids.filter((id) => id === r.id).length).toBe(1)
    expect(ids).not.toContain(prefixKept.id)
    expect(ids).not.toContain(neither.id)
  })
})
