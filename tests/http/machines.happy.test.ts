import { afterAll, beforeAll, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { describeMachine } from '../../src/machines/describe'
import { machines } from '../../src/machines/registry'
import { keyFor, startHarness, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

let h: Harness
beforeAll(async () => {
  h = await startHarness()
})
afterAll(() => h.close())

const META = { version: 'v1', deprecated_warnings: [] }
const FIELDS = ['delays', 'description', 'events', 'final_states', 'guards', 'initial', 'mermaid', 'name', 'states', 'transitions', 'version']

test('GET /v1/machines: every registry machine, described from its definition, in the general envelope', async () => {
  const res = await h.call('GET', '/v1/machines')
  expect(res.status).toBe(200)
  expect(res.body).toEqual({ request_id: res.headers.get('x-request-id')!, data: expect.any(Array), meta: META })
  expect(res.body.data.map((m: { name: string }) => m.name)).toEqual(machines.map((m) => m.name))
  const delivery = res.body.data.find((m: { name: string }) => m.name === 'webhook-delivery')
  expect(Object.keys(delivery).sort()).toEqual(FIELDS)
  expect(delivery.initial).toBe('pending')
  expect(delivery.mermaid).toStartWith('stateDiagram-v2\n')
  expect(delivery.mermaid).toContain('[*] --> pending')
  // Exactly what the generated docs are made of (JSON drops nothing: no undefined fields).
  expect(delivery).toEqual(JSON.parse(JSON.stringify(describeMachine(machines.find((m) => m.name === 'webhook-delivery')!))))
})

test('GET /v1/machines/webhook-delivery: the one machine', async () => {
  const res = await h.call('GET', '/v1/machines/webhook-delivery')
  expect(res.status).toBe(200)
  expect(res.body.meta).toEqual(META)
  expect(res.body.data.name).toBe('webhook-delivery')
  expect(res.body.data.states.map((s: { name: string }) => s.name)).toEqual(['pending', 'sending', 'retrying', 'succeeded', 'failed'])
  expect(res.body.data.transitions).toContainEqual({
    source: 'sending',
    event: 'attempt.failed',
    target: 'failed',
    guard: 'isPermanent',
    actions: [],
    description: '4xx other than 429: no retry',
  })
  expect(res.body.data.events).toEqual(expect.arrayContaining(['timer.fired', 'redelivery.requested']))
})

test('any authenticated caller may read, not only root', async () => {
  const key = await keyFor(h, 'machines-reader')
  expect((await h.call('GET', '/v1/machines', { key })).status).toBe(200)
  expect((await h.call('GET', '/v1/machines/webhook-delivery', { key })).status).toBe(200)
})

test('an unknown machine is 404 not_found', async () => {
  const res = await h.call('GET', '/v1/machines/nope')
  expect(res.status).toBe(404)
  expect(res.body).toEqual({ request_id: res.headers.get('x-request-id')!, error: { code: 'not_found', message: 'machine nope not found' } })
})

test('a name that is no machine name is a 400 validation error', async () => {
  const res = await h.call('GET', '/v1/machines/Not_A_Name')
  expect(res.status).toBe(400)
  expect(res.body.error.code).toBe('validation_error')
})

test('without a key: 401', async () => {
  for (const path of ['/v1/machines', '/v1/machines/webhook-delivery']) {
    const res = await h.call('GET', path, { key: null })
    expect(res.status).toBe(401)
    expect(res.body.error.code).toBe('unauthenticated')
  }
})
