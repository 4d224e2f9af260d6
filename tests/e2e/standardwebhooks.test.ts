import { afterAll, beforeAll, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { Webhook as StandardWebhook } from 'standardwebhooks'
import { Webhook as SvixWebhook } from 'svix'
import { waitFor } from '../helpers/harness'
import { chain, end, start, startRunsEnv, tpl, type RunsEnv } from '../helpers/runs'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Real deliveries verified by the two libraries receivers use for the Standard Webhooks scheme,
 * `standardwebhooks` and `svix`, with the secret given at registration (`whsec_` + base64, as they
 * expect it): what they accept, and that they refuse a tampered body or a stale timestamp.
 */
let env: RunsEnv
let receiver: ReturnType<typeof Bun.serve>
const received: { body: string; headers: Record<string, string> }[] = []
const SECRET = `whsec_${Buffer.from('a secret of at least some length, for the test').toString('base64')}`

beforeAll(async () => {
  env = await startRunsEnv()
  receiver = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    async fetch(req) {
      received.push({ body: await req.text(), headers: Object.fromEntries(req.headers) })
      return new Response('ok')
    },
  })
  const made = await env.h.call('POST', '/v1/webhooks', {
    key: env.owner,
    body: { workspace_id: env.ws, url: `http://127.0.0.1:${receiver.port}/hooks`, events: ['workflow.run.completed'], secret: SECRET },
  })
  expect(made.status).toBe(201)
  const wf = await env.workflow(chain(start([{ name: 'who', type: 'string' }]), tpl('greet', 'hi {{inputs.who}}'), end({ text: '{{nodes.greet.output.text}}' })))
  for (const who of ['Ada', 'Bo']) expect((await env.trigger(wf, { who })).status).toBe(200)
  await waitFor(() => received.length >= 2, { timeoutMs: 20_000, what: 'two deliveries' })
}, 60_000)

afterAll(async () => {
  receiver?.stop(true)
  await env?.close()
})

test('every delivery verifies with standardwebhooks and with svix, and the payload is the event', () => {
  for (const d of received) {
    const payload = new StandardWebhook(SECRET).verify(d.body, d.headers) as { event: string }
    expect(payload.event).toBe('workflow.run.completed')
    expect(() => new SvixWebhook(SECRET).verify(d.body, d.headers)).not.toThrow()
  }
})

test('a tampered body, a stale timestamp and a wrong secret are refused by both', () => {
  const d = received[0]!
  const tampered = d.body.replace('completed', 'failed')
  const stale = { ...d.headers, 'webhook-timestamp': String(Math.floor(Date.now() / 1000) - 3600) }
  const other = `whsec_${Buffer.from('another secret entirely, same length or so').toString('base64')}`
  for (const verify of [(s: string, b: string, h: Record<string, string>) => new StandardWebhook(s).verify(b, h), (s: string, b: string, h: Record<string, string>) => new SvixWebhook(s).verify(b, h)]) {
    expect(() => verify(SECRET, tampered, d.headers)).toThrow()
    expect(() => verify(SECRET, d.body, stale)).toThrow()
    expect(() => verify(other, d.body, d.headers)).toThrow()
  }
})
