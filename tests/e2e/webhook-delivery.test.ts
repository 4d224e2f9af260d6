import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { createHmac, randomBytes } from 'node:crypto'
import { lookup } from 'node:dns/promises'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { generateKey } from '../../src/domain/api-keys'
import { createCertificate, type Certificate } from '../helpers/certificate'
import { waitFor } from '../helpers/harness'
import { apiCall, EMBEDDED, killAll, spawnService, type ServiceProcess } from '../helpers/process'
import { startReceiver, startReferenceReceiver, type Answer, type ReceivedRequest, type Receiver, type ReferenceReceiver } from '../helpers/receiver'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Webhook deliveries end to end: the real service (`bun run src/main.ts`, embedded default) as a
 * subprocess sending to real HTTPS receivers on loopback (a scripted one in this process, and the
 * reference receiver examples/webhook-receiver.ts as a subprocess), trusted through
 * NODE_EXTRA_CA_CERTS. Signatures are checked here with node:crypto alone. The scenarios run side by
 * side on one service and one receiver (a path each); the SSRF check restarts the service last.
 */
const DELAYS = [150, 300, 600, 1200, 2400]

let tmp: string
let dataDir: string
let certificate: Certificate
let receiver: Receiver
/** Where `localhost` resolves first: the service pins that address, so the receivers listen there. */
let loopback: string
const rootKey = generateKey()
let sp: ServiceProcess
let workspaceId: string
let reference: ReferenceReceiver | undefined
/** Registered while private networks were allowed; pinged after a restart without the flag. */
let ssrfHook: { id: string }
/** Pinged in beforeAll (see there). */
let always500: { hook: Hook; queued: { id: string } }

function serviceEnv(extra: Record<string, string | undefined> = {}) {
  return {
    ...EMBEDDED,
    DATA_DIR: dataDir,
    BOOTSTRAP_API_KEY: rootKey,
    NODE_EXTRA_CA_CERTS: certificate.certFile,
    WEBHOOK_RETRY_DELAYS_MS: DELAYS.join(','),
    WEBHOOK_TIMEOUT_MS: '1000',
    // Every polling test shares the root key: keep the rate limit out of the way.
    RATE_LIMIT_PER_SECOND: '10000',
    RATE_LIMIT_BURST: '10000',
    WEBHOOK_ALLOW_HTTP: undefined,
    WEBHOOK_ALLOW_PRIVATE_NETWORKS: undefined,
    WEBHOOK_DISABLE_AFTER_MS: undefined,
    SECRET_KEY: undefined,
    TLS_CERT_FILE: undefined,
    TLS_KEY_FILE: undefined,
    ...extra,
  }
}

/** The API of the service running now (`sp`), as root. */
const call = (method: string, path: string, body?: unknown) => apiCall(sp, rootKey, method, path, body)

beforeAll(async () => {
  tmp = mkdtempSync(join(tmpdir(), 'ap-e2e-webhook-delivery-'))
  dataDir = join(tmp, 'data')
  certificate = createCertificate()
  loopback = (await lookup('localhost', { all: true, verbatim: true }))[0]!.address
  receiver = await startReceiver({ certificate, hostname: loopback })
  sp = spawnService({ env: serviceEnv({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true', WEBHOOK_DISABLE_AFTER_MS: '1' }) })
  await sp.ready(45_000)
  const ws = await call('POST', '/v1/workspaces', { name: 'Webhook deliveries' })
  expect(ws.status).toBe(201)
  workspaceId = ws.body.data.id
  receiver.script('/ssrf', [200])
  ssrfHook = await register('/ssrf', 'ssrf-secret-0123456789')
  // The always-500 delivery starts alone: its first waits (150 and 300 ms) are short enough that the
  // other scenarios' start-up (registrations, pings, a receiver subprocess) would add a large share
  // to them and skew the ratios its test checks. Its later waits overlap the rest.
  const hook = await scripted('/always-500', [500])
  always500 = { hook, queued: await ping(hook) }
  await receiver.waitForRequests('/always-500', 3)
}, 60_000)

afterAll(async () => {
  await killAll()
  await reference?.stop()
  await receiver?.close()
  certificate?.remove()
  if (tmp) rmSync(tmp, { recursive: true, force: true })
})

// --- helpers ---------------------------------------------------------------------------------------

interface Hook {
  id: string
  secret: string
  path: string
}

async function register(path: string, secret: string, url = receiver.url(path)): Promise<Hook> {
  const res = await call('POST', '/v1/webhooks', { url, events: ['webhook.test'], secret, workspace_id: workspaceId })
  if (res.status !== 201) throw new Error(`registering ${url}: ${res.status} ${JSON.stringify(res.body)}`)
  return { id: res.body.data.id, secret, path }
}

async function scripted(path: string, answers: Answer[], secret = `secret-${path.slice(1)}-${randomBytes(8).toString('hex')}`): Promise<Hook> {
  receiver.script(path, answers)
  return register(path, secret)
}

async function ping(hook: { id: string }) {
  const res = await call('POST', `/v1/webhooks/${hook.id}/ping`)
  expect(res.status).toBe(202)
  expect(res.body.data).toMatchObject({ webhook_id: hook.id, event: 'webhook.test', status: 'pending' })
  expect(res.body.data.id).toMatch(/^dlv_/)
  return res.body.data as { id: string; event_id: string; data: Record<string, unknown> }
}

/** Scripts `path`, registers a webhook there, pings it, and waits until the delivery settles with `attempts` attempts or more. */
async function pingScripted(path: string, answers: Answer[], attempts = 1) {
  const hook = await scripted(path, answers)
  const queued = await ping(hook)
  return { hook, queued, d: await settled(hook, queued.id, { attempts }) }
}

interface Attempt {
  attempt: number
  at: string
  status_code: number | null
  duration_ms: number
  error: string | null
  response_excerpt: string | null
}
interface Delivery {
  id: string
  webhook_id: string
  event_id: string
  event: string
  status: 'pending' | 'retrying' | 'succeeded' | 'failed'
  attempts_count: number
  attempts: Attempt[]
  next_attempt_at: string | null
  data: Record<string, unknown>
}

/** Polls GET .../deliveries/:id until it is settled (and has at least `attempts` attempts). */
async function settled(hook: { id: string }, deliveryId: string, { attempts = 1, timeoutMs = 20_000 } = {}): Promise<Delivery> {
  let last: Delivery | undefined
  try {
    return (await waitFor(
      async () => {
        const res = await call('GET', `/v1/webhooks/${hook.id}/deliveries/${deliveryId}`)
        if (res.status !== 200) throw new Error(`GET delivery: ${res.status} ${JSON.stringify(res.body)}`)
        last = res.body.data
        return (last!.status === 'succeeded' || last!.status === 'failed') && last!.attempts_count >= attempts ? last : null
      },
      { timeoutMs, intervalMs: 100, what: `delivery ${deliveryId} to settle` },
    ))!
  } catch (err) {
    throw new Error(`${(err as Error).message}\nlast seen: ${JSON.stringify(last)}\n--- service output (tail) ---\n${sp.output().slice(-4000)}`)
  }
}

const hmacHex = (secret: string, body: string) => createHmac('sha256', Buffer.from(secret, 'utf8')).update(Buffer.from(body, 'utf8')).digest('hex')
const standardKey = (secret: string) => (secret.startsWith('whsec_') ? Buffer.from(secret.slice(6), 'base64') : Buffer.from(secret, 'utf8'))
const standardSig = (secret: string, id: string, ts: string, body: string) =>
  createHmac('sha256', standardKey(secret)).update(Buffer.from(`${id}.${ts}.${body}`, 'utf8')).digest('base64')

/** The `v1,` signatures of a request's webhook-signature header. */
function v1Signatures(r: ReceivedRequest): string[] {
  const entries = r.headers['webhook-signature']!.trim().split(/\s+/)
  for (const e of entries) expect(e.startsWith('v1,')).toBe(true)
  return entries.map((e) => e.slice(3))
}

/** Both signatures of a request verify with `secret` (X-Service-Signature: the current secret only). */
function expectSignedWith(r: ReceivedRequest, secret: string) {
  expect(r.headers['x-service-signature']).toBe(`sha256=${hmacHex(secret, r.body)}`)
  const id = r.headers['webhook-id']!
  const ts = r.headers['webhook-timestamp']!
  expect(ts).toMatch(/^\d+$/)
  expect(v1Signatures(r)).toContain(standardSig(secret, id, ts, r.body))
}

function gaps(reqs: ReceivedRequest[]): number[] {
  return reqs.slice(1).map((r, i) => r.at - reqs[i]!.at)
}

const ISO_Z = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/

// --- scenarios -------------------------------------------------------------------------------------

describe.concurrent('webhook deliveries to HTTPS receivers (service subprocess)', () => {
  test('200: one attempt, succeeded; the request is exactly the documented one and both signatures verify', async () => {
    const { hook, queued, d } = await pingScripted('/ok', [200])
    expect(d.status).toBe('succeeded')
    expect(d.attempts_count).toBe(1)
    expect(d.next_attempt_at).toBeNull()
    expect(d.attempts).toHaveLength(1)
    expect(d.attempts[0]).toMatchObject({ attempt: 1, status_code: 200, error: null })
    expect(d.attempts[0]!.response_excerpt).toContain('"ok":true')
    expect(d.attempts[0]!.at).toMatch(ISO_Z)

    const reqs = receiver.requestsTo('/ok')
    expect(reqs).toHaveLength(1)
    const r = reqs[0]!
    expect(r.method).toBe('POST')
    expect(r.headers['content-type']).toBe('application/json')
    expect(r.headers['user-agent']!.startsWith('agent-platform-api-webhooks')).toBe(true)
    expect(r.headers['x-service-event']).toBe('webhook.test')
    expect(r.headers['x-service-delivery-id']).toBe(d.id)
    expect(r.headers['webhook-id']).toBe(d.id)
    expect(r.headers['host']).toBe(`localhost:${receiver.port}`)
    // The signatures, recomputed here from the raw body.
    expect(r.headers['x-service-signature']).toBe(`sha256=${hmacHex(hook.secret, r.body)}`)
    const ts = r.headers['webhook-timestamp']!
    expect(ts).toMatch(/^\d+$/)
    expect(Math.abs(Number(ts) - Date.now() / 1000)).toBeLessThan(300)
    expect(v1Signatures(r)).toEqual([standardSig(hook.secret, d.id, ts, r.body)])
    // A signature made with another secret does not match (the check above is not vacuous).
    expect(r.headers['x-service-signature']).not.toBe(`sha256=${hmacHex(hook.secret + 'x', r.body)}`)

    const body = JSON.parse(r.body)
    expect(Object.keys(body).sort()).toEqual(['data', 'delivered_at', 'event'])
    expect(body.event).toBe('webhook.test')
    expect(body.delivered_at).toMatch(ISO_Z)
    expect(body.data).toEqual({ webhook_id: hook.id, message: expect.any(String) })
    expect(body.data).toEqual(d.data)
    expect(body.data).toEqual(queued.data)
  })

  test('500 every time: 6 attempts under one delivery id, the waits doubling, then failed', async () => {
    const { hook, queued } = always500
    const reqs = await receiver.waitForRequests('/always-500', 6, 25_000)
    const d = await settled(hook, queued.id, { attempts: 6 })
    expect(d.status).toBe('failed')
    expect(d.attempts_count).toBe(6)
    expect(d.next_attempt_at).toBeNull()
    expect(d.attempts.map((a) => a.attempt)).toEqual([1, 2, 3, 4, 5, 6])
    for (const a of d.attempts) {
      expect(a.status_code).toBe(500)
      expect(a.error).toBe('receiver answered 500')
      expect(a.response_excerpt).toContain('scripted 500')
    }
    // No seventh attempt: the delivery is settled and its timer gone.
    expect(receiver.requestsTo('/always-500')).toHaveLength(6)
    for (const r of reqs) {
      expect(r.headers['x-service-delivery-id']).toBe(d.id)
      expect(r.headers['webhook-id']).toBe(d.id)
      expectSignedWith(r, hook.secret)
    }
    // Each attempt is signed afresh (its own delivered_at and timestamp), under the same id.
    expect(new Set(reqs.map((r) => r.body)).size).toBe(6)
    // The waits follow WEBHOOK_RETRY_DELAYS_MS: never shorter than planned, each about twice the one
    // before (ratios, not absolute times: the loaded machine only adds a little to each).
    const g = gaps(reqs)
    g.forEach((gap, i) => expect(gap).toBeGreaterThanOrEqual(DELAYS[i]! * 0.95))
    const ratios = g.slice(1).map((gap, i) => gap / g[i]!)
    for (const ratio of ratios) {
      expect(ratio).toBeGreaterThan(1.3)
      expect(ratio).toBeLessThan(3.5)
    }
  }, 40_000)

  test('404: one attempt, failed at once', async () => {
    const { d } = await pingScripted('/gone', [404])
    expect(d.status).toBe('failed')
    expect(d.attempts_count).toBe(1)
    expect(d.attempts).toHaveLength(1)
    expect(d.attempts[0]).toMatchObject({ attempt: 1, status_code: 404, error: 'receiver answered 404' })
    expect(d.attempts[0]!.response_excerpt).toContain('scripted 404')
    expect(d.next_attempt_at).toBeNull()
    expect(receiver.requestsTo('/gone')).toHaveLength(1)
  })

  test('a receiver that never answers: the attempt times out (WEBHOOK_TIMEOUT_MS) and is retried', async () => {
    const { d } = await pingScripted('/hang', ['hang', 200], 2)
    expect(d.status).toBe('succeeded')
    expect(d.attempts_count).toBe(2)
    expect(d.attempts[0]!.status_code).toBeNull()
    expect(d.attempts[0]!.error).toContain('timed out')
    expect(d.attempts[0]!.error).toContain('1000 ms')
    expect(d.attempts[1]).toMatchObject({ attempt: 2, status_code: 200, error: null })
    const reqs = receiver.requestsTo('/hang')
    expect(reqs).toHaveLength(2)
    expect(reqs.map((r) => r.headers['x-service-delivery-id'])).toEqual([d.id, d.id])
    // The service closed the connection it gave up on, which released the hanging answer.
    await waitFor(() => receiver.hanging() === 0, { timeoutMs: 5_000, what: 'the hanging request to be released' })
  })

  test('a connection dropped without an answer: recorded as a network error and retried', async () => {
    const { d } = await pingScripted('/drop', ['close', 200], 2)
    expect(d.status).toBe('succeeded')
    expect(d.attempts_count).toBe(2)
    expect(d.attempts[0]!.status_code).toBeNull()
    expect(d.attempts[0]!.error!.startsWith('network error')).toBe(true)
    expect(d.attempts[0]!.response_excerpt).toBeNull()
    expect(d.attempts[1]).toMatchObject({ attempt: 2, status_code: 200, error: null })
    expect(receiver.requestsTo('/drop')).toHaveLength(2)
  })

  test('302: the redirect is not followed, the attempt is retried', async () => {
    const { d } = await pingScripted('/moved', [{ status: 302, headers: { location: receiver.url('/moved-here') } }, 200], 2)
    expect(d.status).toBe('succeeded')
    expect(d.attempts[0]).toMatchObject({ attempt: 1, status_code: 302, error: 'receiver answered 302' })
    expect(d.attempts[1]).toMatchObject({ attempt: 2, status_code: 200 })
    expect(receiver.requestsTo('/moved')).toHaveLength(2)
    expect(receiver.requestsTo('/moved-here')).toHaveLength(0)
  })

  test('429 with Retry-After: 2: the next attempt waits the 2 s asked, not the planned 150 ms', async () => {
    const { d } = await pingScripted('/busy', [{ status: 429, headers: { 'retry-after': '2' } }, 200], 2)
    expect(d.status).toBe('succeeded')
    expect(d.attempts[0]).toMatchObject({ attempt: 1, status_code: 429, error: 'receiver answered 429' })
    expect(d.attempts[1]).toMatchObject({ attempt: 2, status_code: 200 })
    const reqs = receiver.requestsTo('/busy')
    expect(reqs).toHaveLength(2)
    expect(gaps(reqs)[0]!).toBeGreaterThanOrEqual(1950)
    expect(Date.parse(d.attempts[1]!.at) - Date.parse(d.attempts[0]!.at)).toBeGreaterThanOrEqual(1950)
  })

  test('redelivery of a failed delivery: 202, sent again under the same delivery id, attempts numbered on', async () => {
    const { hook, queued, d: failed } = await pingScripted('/redeliver', [404])
    expect(failed.status).toBe('failed')
    expect(failed.attempts_count).toBe(1)

    receiver.script('/redeliver', [200])
    const res = await call('POST', `/v1/webhooks/${hook.id}/deliveries/${queued.id}/redeliver`)
    expect(res.status).toBe(202)
    expect(res.body.data).toMatchObject({ id: queued.id, webhook_id: hook.id, status: 'pending', event_id: queued.event_id })
    const d = await settled(hook, queued.id, { attempts: 2 })
    expect(d.status).toBe('succeeded')
    expect(d.attempts_count).toBe(2)
    expect(d.attempts.map((a) => [a.attempt, a.status_code])).toEqual([
      [1, 404],
      [2, 200],
    ])
    const reqs = receiver.requestsTo('/redeliver')
    expect(reqs).toHaveLength(2)
    for (const r of reqs) {
      expect(r.headers['x-service-delivery-id']).toBe(queued.id)
      expect(r.headers['webhook-id']).toBe(queued.id)
      expectSignedWith(r, hook.secret)
    }
    expect(JSON.parse(reqs[1]!.body).data).toEqual(JSON.parse(reqs[0]!.body).data)
  })

  test('secret rotation: X-Service-Signature uses the new secret, webhook-signature carries the new and the old', async () => {
    const oldSecret = `old-plain-secret-${randomBytes(8).toString('hex')}`
    const newSecret = `whsec_${randomBytes(24).toString('base64')}`
    const hook = await scripted('/rotate', [200], oldSecret)
    const before = await settled(hook, (await ping(hook)).id)
    expect(before.status).toBe('succeeded')
    const first = receiver.requestsTo('/rotate')[0]!
    expectSignedWith(first, oldSecret)
    expect(v1Signatures(first)).toHaveLength(1)

    const patched = await call('PATCH', `/v1/webhooks/${hook.id}`, { secret: newSecret })
    expect(patched.status).toBe(200)
    expect(patched.body.data.previous_secret_expires_at).toMatch(ISO_Z)
    expect(JSON.stringify(patched.body)).not.toContain(newSecret)
    expect(JSON.stringify(patched.body)).not.toContain(oldSecret)

    const d = await settled(hook, (await ping(hook)).id)
    expect(d.status).toBe('succeeded')
    const reqs = receiver.requestsTo('/rotate')
    expect(reqs).toHaveLength(2)
    const r = reqs[1]!
    expect(r.headers['x-service-signature']).toBe(`sha256=${hmacHex(newSecret, r.body)}`)
    expect(r.headers['x-service-signature']).not.toBe(`sha256=${hmacHex(oldSecret, r.body)}`)
    const id = r.headers['webhook-id']!
    const ts = r.headers['webhook-timestamp']!
    // The new secret's signature first, then the old one's.
    expect(v1Signatures(r)).toEqual([standardSig(newSecret, id, ts, r.body), standardSig(oldSecret, id, ts, r.body)])
  })

  test('auto-disable (WEBHOOK_DISABLE_AFTER_MS=1): failing deliveries disable the webhook; a ping is still sent; PATCH re-enables', async () => {
    const hook = await scripted('/disable', [404])
    let webhook: any
    // The failure streak starts with the first failed delivery; the next one, over 1 ms later, ends it.
    for (let i = 1; i <= 3; i++) {
      const d = await settled(hook, (await ping(hook)).id)
      expect(d.status).toBe('failed')
      webhook = (await call('GET', `/v1/webhooks/${hook.id}`)).body.data
      if (!webhook.enabled) break
    }
    expect(webhook.enabled).toBe(false)
    expect(typeof webhook.disabled_reason).toBe('string')
    expect(webhook.disabled_reason.length).toBeGreaterThan(0)
    const sentWhileEnabled = receiver.requestsTo('/disable').length

    // A ping is asked for by a person: it goes out even to a disabled webhook.
    receiver.script('/disable', [200])
    const manual = await settled(hook, (await ping(hook)).id)
    expect(manual.status).toBe('succeeded')
    expect(manual.attempts[0]).toMatchObject({ status_code: 200, error: null })
    expect(receiver.requestsTo('/disable')).toHaveLength(sentWhileEnabled + 1)

    const enabled = await call('PATCH', `/v1/webhooks/${hook.id}`, { enabled: true })
    expect(enabled.status).toBe(200)
    expect(enabled.body.data).toMatchObject({ id: hook.id, enabled: true, disabled_reason: null })
    expect((await call('GET', `/v1/webhooks/${hook.id}`)).body.data).toMatchObject({ enabled: true, disabled_reason: null })
  })

  test('the reference receiver (examples/webhook-receiver.ts) over HTTPS: processes the ping once, answers a redelivery as a duplicate', async () => {
    const secret = `reference-secret-${randomBytes(12).toString('hex')}`
    const ref = (reference = await startReferenceReceiver({ secret, certificate, hostname: loopback }))
    const hook = await register('/hooks/agent-platform', secret, `https://localhost:${ref.port}/hooks/agent-platform`)
    const queued = await ping(hook)
    const first = await settled(hook, queued.id)
    expect(first.status).toBe('succeeded')
    expect(first.attempts[0]!.status_code).toBe(200)
    expect(JSON.parse(first.attempts[0]!.response_excerpt!)).toEqual({ ok: true, duplicate: false })
    await waitFor(() => ref.received().some((l) => l.received === queued.id), { timeoutMs: 5_000, what: `the receiver's line for ${queued.id}` })
    expect(ref.stdout()).toContain(`{"received":"${queued.id}"`)
    expect(ref.received().filter((l) => l.received === queued.id)).toEqual([{ received: queued.id, event: 'webhook.test' }])

    const res = await call('POST', `/v1/webhooks/${hook.id}/deliveries/${queued.id}/redeliver`)
    expect(res.status).toBe(202)
    const again = await settled(hook, queued.id, { attempts: 2 })
    expect(again.status).toBe('succeeded')
    expect(again.attempts[1]!.status_code).toBe(200)
    expect(again.attempts[1]!.response_excerpt).toContain('"duplicate":true')
    // Not processed a second time.
    expect(ref.received().filter((l) => l.received === queued.id)).toHaveLength(1)
  })
})

describe('SSRF rules at delivery time', () => {
  test('registered while private networks were allowed, pinged after a restart without the flag: refused, nothing sent', async () => {
    expect(await sp.stop('SIGTERM')).toBe(0)
    sp = spawnService({ env: serviceEnv() })
    await sp.ready(45_000)
    // The webhook survived the restart unchanged; registering the same URL now is refused.
    const got = await call('GET', `/v1/webhooks/${ssrfHook.id}`)
    expect(got.status).toBe(200)
    expect(got.body.data.url).toBe(receiver.url('/ssrf'))
    const again = await call('POST', '/v1/webhooks', { url: receiver.url('/ssrf'), events: ['webhook.test'], secret: 'ssrf-secret-0123456789', workspace_id: workspaceId })
    expect(again.status).toBe(400)
    expect(again.body.error).toMatchObject({ code: 'validation_error', param: 'url' })

    const queued = await ping(ssrfHook)
    const d = await settled(ssrfHook, queued.id)
    expect(d.status).toBe('failed')
    expect(d.attempts_count).toBe(1)
    expect(d.attempts[0]!.status_code).toBeNull()
    expect(d.attempts[0]!.error!.startsWith('refused')).toBe(true)
    expect(d.attempts[0]!.error).toContain('WEBHOOK_ALLOW_PRIVATE_NETWORKS')
    expect(receiver.requestsTo('/ssrf')).toHaveLength(0)
  }, 60_000)
})
