import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { createHmac, randomBytes } from 'node:crypto'
import { serviceSignature, standardKey, standardSignature } from '../../src/lib/signing'
import { USER_AGENT, buildRequest, parseRetryAfter } from '../../src/workers/webhook-sender'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The signatures of docs/webhooks.md, checked against HMACs computed here with node:crypto
 * alone, and the request the sender builds from them.
 */
const hmac = (key: Buffer | string, message: string, encoding: 'hex' | 'base64') =>
  createHmac('sha256', typeof key === 'string' ? Buffer.from(key, 'utf8') : key)
    .update(Buffer.from(message, 'utf8'))
    .digest(encoding)

describe('serviceSignature', () => {
  test.each([
    ['plain', 'my-secret', '{"event":"webhook.test","data":{}}'],
    ['unicode secret and body', 'clé-秘密-🔑', '{"msg":"héllo 世界 🎉"}'],
    ['whsec_ secret is used as utf8 text here', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', '{}'],
    ['empty body', 's', ''],
  ])('%s: sha256=<hex HMAC of the raw body keyed by the utf8 secret>', (_name, secret, body) => {
    const sig = serviceSignature(secret, body)
    expect(sig).toBe(`sha256=${hmac(secret, body, 'hex')}`)
    expect(sig).toMatch(/^sha256=[0-9a-f]{64}$/)
  })

  test('one changed byte of the body changes the signature', () => {
    expect(serviceSignature('s', '{"a":1}')).not.toBe(serviceSignature('s', '{"a":2}'))
  })
})

describe('standardSignature', () => {
  test('the Standard Webhooks reference vector', () => {
    // From the Standard Webhooks libraries' own tests.
    expect(standardSignature(['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'], 'msg_p5jXN8AQM9LWM0D4loKWxJek', 1614265330, '{"test": 2432232314}')).toBe(
      'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
    )
  })

  test('a whsec_ secret signs with its base64-decoded bytes', () => {
    const key = randomBytes(32)
    const secret = `whsec_${key.toString('base64')}`
    expect(standardKey(secret).equals(key)).toBe(true)
    expect(standardSignature([secret], 'dlv_1', 1_700_000_000, '{"x":1}')).toBe(`v1,${hmac(key, 'dlv_1.1700000000.{"x":1}', 'base64')}`)
  })

  test('any other secret signs with its utf8 bytes', () => {
    const secret = 'plain-sécret'
    expect(standardKey(secret).equals(Buffer.from(secret, 'utf8'))).toBe(true)
    expect(standardSignature([secret], 'dlv_2', 42, 'body')).toBe(`v1,${hmac(secret, 'dlv_2.42.body', 'base64')}`)
  })

  test('several secrets: space-separated v1 signatures, in the order given', () => {
    const a = `whsec_${randomBytes(24).toString('base64')}`
    const b = 'old-plain-secret'
    const sig = standardSignature([a, b], 'dlv_3', 7, '{}')
    expect(sig.split(' ')).toEqual([`v1,${hmac(standardKey(a), 'dlv_3.7.{}', 'base64')}`, `v1,${hmac(b, 'dlv_3.7.{}', 'base64')}`])
  })
})

describe('buildRequest', () => {
  const now = Date.UTC(2025, 0, 2, 3, 4, 5, 678)
  const data = { webhook_id: 'whk_1', message: 'héllo 🎉', nested: { n: [1, 2, 3] } }
  const SECRET = 'current-secret'
  const OLD = `whsec_${randomBytes(32).toString('base64')}`

  test('every header of docs/webhooks.md and Standard Webhooks, and nothing else', () => {
    const { body, headers } = buildRequest({ deliveryId: 'dlv_abc', event: 'webhook.test', data, secrets: [SECRET] }, now)
    const ts = String(Math.floor(now / 1000))
    expect(headers).toEqual({
      'content-type': 'application/json',
      'user-agent': 'agent-platform-api-webhooks/0.1.0',
      'x-service-signature': `sha256=${hmac(SECRET, body, 'hex')}`,
      'x-service-event': 'webhook.test',
      'x-service-delivery-id': 'dlv_abc',
      'webhook-id': 'dlv_abc',
      'webhook-timestamp': ts,
      'webhook-signature': `v1,${hmac(SECRET, `dlv_abc.${ts}.${body}`, 'base64')}`,
    })
    expect(USER_AGENT).toBe('agent-platform-api-webhooks/0.1.0')
    expect(headers['webhook-timestamp']).toBe('1735787045')
  })

  test('the body is {event, delivered_at, data} with delivered_at in ISO 8601', () => {
    const { body } = buildRequest({ deliveryId: 'dlv_abc', event: 'agent.created', data, secrets: [SECRET] }, now)
    const parsed = JSON.parse(body)
    expect(Object.keys(parsed)).toEqual(['event', 'delivered_at', 'data'])
    expect(parsed).toEqual({ event: 'agent.created', delivered_at: '2025-01-02T03:04:05.678Z', data })
    expect(new Date(parsed.delivered_at).toISOString()).toBe(parsed.delivered_at)
  })

  test('delivered_at defaults to the current time', () => {
    const before = Date.now()
    const { body, headers } = buildRequest({ deliveryId: 'dlv_abc', event: 'e', data: {}, secrets: [SECRET] })
    const after = Date.now()
    const at = Date.parse(JSON.parse(body).delivered_at)
    expect(at).toBeGreaterThanOrEqual(before)
    expect(at).toBeLessThanOrEqual(after)
    expect(Number(headers['webhook-timestamp'])).toBe(Math.floor(at / 1000))
  })

  test('two secrets (a rotation): two v1 signatures, the current first; x-service-signature uses the current only', () => {
    const { body, headers } = buildRequest({ deliveryId: 'dlv_rot', event: 'webhook.test', data, secrets: [SECRET, OLD] }, now)
    const ts = Math.floor(now / 1000)
    const signed = `dlv_rot.${ts}.${body}`
    const sigs = headers['webhook-signature']!.split(' ')
    expect(sigs).toEqual([`v1,${hmac(SECRET, signed, 'base64')}`, `v1,${hmac(Buffer.from(OLD.slice(6), 'base64'), signed, 'base64')}`])
    expect(headers['x-service-signature']).toBe(`sha256=${hmac(SECRET, body, 'hex')}`)
  })

  test('the same delivery id in every header that carries it', () => {
    const { headers } = buildRequest({ deliveryId: 'dlv_same', event: 'e', data: {}, secrets: [SECRET] }, now)
    expect(headers['x-service-delivery-id']).toBe('dlv_same')
    expect(headers['webhook-id']).toBe('dlv_same')
  })
})

describe('parseRetryAfter', () => {
  const now = Date.parse('Wed, 21 Oct 2015 07:28:00 GMT')
  test.each([
    ['0', 0],
    ['7', 7_000],
    ['120', 120_000],
    [' 30 ', 30_000],
    ['Wed, 21 Oct 2015 07:28:30 GMT', 30_000],
    ['Wed, 21 Oct 2015 08:28:00 GMT', 3_600_000],
    ['Wed, 21 Oct 2015 07:28:00 GMT', 0],
    ['Wed, 21 Oct 2015 07:00:00 GMT', 0],
  ])('%p → %p ms', (value, ms) => {
    expect(parseRetryAfter(value, now)).toBe(ms)
  })

  test.each([[null], [''], ['soon'], ['12abc'], ['1e3'], ['0x10'], ['NaN']])('%p → undefined', (value) => {
    expect(parseRetryAfter(value, now)).toBeUndefined()
  })

  // RFC 9110 10.2.3: neither delay-seconds nor an IMF-fixdate HTTP-date is ignored, not read as a time.
  test.each([['-5'], ['1.5'], ['10 20'], ['12/31/2099']])('%p (neither delay-seconds nor an HTTP-date) → undefined', (value) => {
    expect(parseRetryAfter(value, now)).toBeUndefined()
  })
})
