import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import type { Server } from 'bun'
import { createHmac } from 'node:crypto'
import type { UrlPolicy } from '../../src/lib/net-guard'
import { USER_AGENT, sendDelivery, type SendInput } from '../../src/workers/webhook-sender'
import { freePort } from '../helpers/process'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * One attempt of sendDelivery against a real receiver: Bun.serve over plain HTTP on loopback, which
 * the policy below allows. Each test sends to its own `?case=` so what reached the server can be told
 * apart.
 */
const LOCAL: UrlPolicy = { allowHttp: true, allowPrivate: true }
const SECRET = 'sender-test-secret'

interface Seen {
  path: string
  caseId: string | null
  host: string | null
  ip: string | undefined
  headers: Record<string, string>
  body: string
}

const seen: Seen[] = []
/** Requests of /hang and /stall are held open until the end. */
const held: (() => void)[] = []
let server: Server<unknown>
let base: string
/** 'ab' then 1800 three-byte characters: byte 1024 falls inside the 341st '€' (bytes 1022..1024). */
const BIG = 'ab' + '€'.repeat(1800)

beforeAll(() => {
  server = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    idleTimeout: 0,
    async fetch(req, srv) {
      const url = new URL(req.url)
      const body = await req.text()
      seen.push({
        path: url.pathname,
        caseId: url.searchParams.get('case'),
        host: req.headers.get('host'),
        ip: srv.requestIP(req)?.address,
        headers: Object.fromEntries(req.headers.entries()),
        body,
      })
      switch (url.pathname) {
        case '/ok':
          return new Response('thanks')
        case '/empty':
          return new Response(null, { status: 204 })
        case '/big':
          return new Response(BIG, { headers: { 'content-type': 'text/plain; charset=utf-8' } })
        case '/404':
          return new Response('no such hook', { status: 404 })
        case '/410':
          return new Response('gone', { status: 410 })
        case '/500':
          return new Response('boom', { status: 500, headers: { 'retry-after': '7' } })
        case '/302':
          return new Response(null, { status: 302, headers: { location: `/ok?case=followed-${url.searchParams.get('case')}` } })
        case '/429':
          return new Response('slow down', { status: 429, headers: { 'retry-after': '7' } })
        case '/503':
          return new Response('later', { status: 503, headers: { 'retry-after': url.searchParams.get('at')! } })
        case '/hang':
          return new Promise<Response>((resolve) => held.push(() => resolve(new Response('late'))))
        case '/stall': {
          // Headers and a first chunk, then nothing: the body never ends.
          const stream = new ReadableStream<Uint8Array>({
            start(c) {
              c.enqueue(new TextEncoder().encode('partial'))
              held.push(() => {
                try {
                  c.close()
                } catch {}
              })
            },
          })
          return new Response(stream, { status: Number(url.searchParams.get('status') ?? 200) })
        }
        default:
          return new Response('unexpected path', { status: 418 })
      }
    },
  })
  base = `http://127.0.0.1:${server.port}`
})

afterAll(async () => {
  for (const release of held) release()
  await server.stop(true)
})

let n = 0
/** sendDelivery to `path` on the test server under a fresh case id; returns the result and the case id. */
async function send(path: string, extra: Partial<SendInput> & { query?: string; origin?: string } = {}) {
  const caseId = `c${++n}`
  const { query, origin, ...rest } = extra
  const result = await sendDelivery({
    deliveryId: `dlv_case_${caseId}`,
    url: `${origin ?? base}${path}?case=${caseId}${query ? `&${query}` : ''}`,
    event: 'webhook.test',
    data: { webhook_id: 'whk_1', message: 'hello' },
    secrets: [SECRET],
    timeoutMs: 5_000,
    policy: LOCAL,
    ...rest,
  })
  return { result, caseId, requests: () => seen.filter((s) => s.caseId === caseId) }
}

function expectRecordShape(record: { at: string; duration_ms: number }) {
  expect(new Date(record.at).toISOString()).toBe(record.at)
  expect(Number.isInteger(record.duration_ms)).toBe(true)
  expect(record.duration_ms).toBeGreaterThanOrEqual(0)
}

describe('answers', () => {
  test('200: ok, with the body as excerpt; the request is signed and carries every header', async () => {
    const { result, requests } = await send('/ok')
    expect(result).toMatchObject({ ok: true, retryable: false, retryAfterMs: undefined })
    expect(result.record).toMatchObject({ status_code: 200, error: null, response_excerpt: 'thanks' })
    expectRecordShape(result.record)

    const [req] = requests()
    expect(requests()).toHaveLength(1)
    const { headers, body } = req!
    expect(JSON.parse(body)).toMatchObject({ event: 'webhook.test', data: { webhook_id: 'whk_1', message: 'hello' } })
    expect(headers['content-type']).toBe('application/json')
    expect(headers['user-agent']).toBe(USER_AGENT)
    expect(headers['x-service-event']).toBe('webhook.test')
    expect(headers['x-service-delivery-id']).toBe(headers['webhook-id']!)
    expect(headers['x-service-signature']).toBe(`sha256=${createHmac('sha256', SECRET).update(body).digest('hex')}`)
    const signed = `${headers['webhook-id']}.${headers['webhook-timestamp']}.${body}`
    expect(headers['webhook-signature']).toBe(`v1,${createHmac('sha256', SECRET).update(signed).digest('base64')}`)
  })

  test('204 with no body: ok, excerpt null', async () => {
    const { result } = await send('/empty')
    expect(result).toMatchObject({ ok: true, retryable: false })
    expect(result.record).toMatchObject({ status_code: 204, error: null, response_excerpt: null })
  })

  test('a 5 KiB answer is cut to at most 1024 bytes, at a character boundary', async () => {
    const { result } = await send('/big')
    expect(result.ok).toBe(true)
    const excerpt = result.record.response_excerpt!
    expect(Buffer.byteLength(BIG)).toBeGreaterThan(5 * 1024)
    expect(Buffer.byteLength(excerpt)).toBeLessThanOrEqual(1024)
    expect(excerpt).not.toContain('\uFFFD')
    expect(excerpt).toBe('ab' + '€'.repeat(340))
  })

  test.each([
    ['/404', 404, 'no such hook'],
    ['/410', 410, 'gone'],
  ])('%s: permanent (not retryable)', async (path, status, excerpt) => {
    const { result } = await send(path)
    expect(result).toMatchObject({ ok: false, retryable: false, retryAfterMs: undefined })
    expect(result.record).toMatchObject({ status_code: status, error: `receiver answered ${status}`, response_excerpt: excerpt })
  })

  test('500: retryable; its Retry-After is not read (only 429 and 503)', async () => {
    const { result } = await send('/500')
    expect(result).toMatchObject({ ok: false, retryable: true, retryAfterMs: undefined })
    expect(result.record).toMatchObject({ status_code: 500, error: 'receiver answered 500', response_excerpt: 'boom' })
  })

  test('302: not followed, retryable', async () => {
    const { result, caseId } = await send('/302')
    expect(result).toMatchObject({ ok: false, retryable: true })
    expect(result.record).toMatchObject({ status_code: 302, error: 'receiver answered 302' })
    expect(seen.filter((s) => s.caseId === `followed-${caseId}`)).toHaveLength(0)
  })

  test('429 with retry-after: 7 → retryable, retryAfterMs 7000', async () => {
    const { result } = await send('/429')
    expect(result).toMatchObject({ ok: false, retryable: true, retryAfterMs: 7_000 })
    expect(result.record).toMatchObject({ status_code: 429, response_excerpt: 'slow down' })
  })

  test('503 with retry-after as an HTTP date an hour ahead → retryAfterMs of about an hour', async () => {
    const at = new Date(Date.now() + 3_600_000).toUTCString()
    const { result } = await send('/503', { query: `at=${encodeURIComponent(at)}` })
    expect(result).toMatchObject({ ok: false, retryable: true })
    expect(result.record.status_code).toBe(503)
    // The date has whole seconds; the bound below leaves minutes for a slow machine.
    expect(result.retryAfterMs!).toBeLessThanOrEqual(3_600_000)
    expect(result.retryAfterMs!).toBeGreaterThan(3_300_000)
  })
})

describe('failures on the way', () => {
  test('a receiver that never answers: retryable, "timed out after 200 ms"', async () => {
    const { result, requests } = await send('/hang', { timeoutMs: 200 })
    expect(result).toMatchObject({ ok: false, retryable: true })
    expect(result.record).toMatchObject({ status_code: null, error: 'timed out after 200 ms', response_excerpt: null })
    expect(requests()).toHaveLength(1)
  })

  test('a 200 whose body never ends still ends within the time-out: ok, no excerpt', async () => {
    const { result } = await send('/stall', { timeoutMs: 200, query: 'status=200' })
    expect(result).toMatchObject({ ok: true, retryable: false })
    expect(result.record.status_code).toBe(200)
  })

  test('a 500 whose body never ends: retryable, timed out', async () => {
    const { result } = await send('/stall', { timeoutMs: 200, query: 'status=500' })
    expect(result).toMatchObject({ ok: false, retryable: true })
    expect(result.record).toMatchObject({ status_code: 500, error: 'timed out after 200 ms' })
  })

  test('connection refused: a retryable network error', async () => {
    const { result } = await send('/ok', { origin: `http://127.0.0.1:${freePort()}` })
    expect(result).toMatchObject({ ok: false, retryable: true })
    expect(result.record.status_code).toBeNull()
    expect(result.record.error).toStartWith('network error: ')
    expectRecordShape(result.record)
  })
})

describe('the SSRF guard at send time', () => {
  test.each([
    ['127.0.0.1', () => base],
    ['localhost', () => `http://localhost:${server.port}`],
  ])('%s with allowPrivate false: refused, not retryable, and nothing reaches the server', async (_name, origin) => {
    const { result, requests } = await send('/ok', { origin: origin(), policy: { allowHttp: true, allowPrivate: false } })
    expect(result).toMatchObject({ ok: false, retryable: false })
    expect(result.record).toMatchObject({ status_code: null, response_excerpt: null })
    expect(result.record.error).toStartWith('refused: host ')
    expect(result.record.error).toContain('WEBHOOK_ALLOW_PRIVATE_NETWORKS')
    expect(requests()).toHaveLength(0)
  })

  test('http:// without allowHttp: refused, not retryable, nothing sent', async () => {
    const { result, requests } = await send('/ok', { policy: { allowHttp: false, allowPrivate: true } })
    expect(result).toMatchObject({ ok: false, retryable: false })
    expect(result.record.error).toBe('refused: must use https://')
    expect(requests()).toHaveLength(0)
  })

  test('a name that does not resolve: refused but retryable (it may come back)', async () => {
    const { result } = await send('/ok', { origin: 'http://x.invalid' })
    expect(result).toMatchObject({ ok: false, retryable: true })
    expect(result.record.error).toStartWith('refused: host x.invalid does not resolve')
  })

  test('pinning: the server sees Host localhost:<port> while the connection went to 127.0.0.1', async () => {
    const { result, requests } = await send('/ok', { origin: `http://localhost:${server.port}` })
    expect(result.ok).toBe(true)
    const [req] = requests()
    expect(requests()).toHaveLength(1)
    expect(req!.host).toBe(`localhost:${server.port}`)
    expect(req!.ip).toBe('127.0.0.1')
  })

  test('an IPv6 literal in brackets is connected to as such, Host [::1]:<port>', async () => {
    let v6: Server<unknown>
    try {
      v6 = Bun.serve({ hostname: '::1', port: 0, fetch: (req, srv) => Response.json({ host: req.headers.get('host'), ip: srv.requestIP(req)?.address }) })
    } catch (err) {
      console.warn(`skipped: no IPv6 loopback here (${(err as Error).message})`)
      return
    }
    try {
      const { result } = await send('/', { origin: `http://[::1]:${v6.port}` })
      expect(result).toMatchObject({ ok: true, retryable: false })
      expect(JSON.parse(result.record.response_excerpt!)).toEqual({ host: `[::1]:${v6.port}`, ip: '::1' })

      const refused = await send('/', { origin: `http://[::1]:${v6.port}`, policy: { allowHttp: true, allowPrivate: false } })
      expect(refused.result).toMatchObject({ ok: false, retryable: false })
      expect(refused.result.record.error).toContain('resolves to ::1,')
    } finally {
      await v6.stop(true)
    }
  })
})
