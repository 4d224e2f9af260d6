import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { createHmac } from 'node:crypto'
import { keyFor, startHarness, workspaceOf, type Answer, type CallOptions, type Harness } from '../helpers/harness'
import { chain, end, start } from '../helpers/runs'

setDefaultTimeout(TEST_TIMEOUT_MS)

// Two harnesses: rate limits out of the way, and one with a small bucket (burst 5, 1/s) for the
// flood. No workers run: a hook call's run is inserted and stays `running`.
let h: Harness
let tight: Harness
let owner: string
let ws: string
let wf: string

/** Every answer of this file, scanned for the secrets at the end. */
const answers: { what: string; text: string; headers: string }[] = []
const secrets: string[] = []
let seq = 0
const newSecret = () => {
  const s = `trigger-secret-${++seq}-${crypto.randomUUID()}`
  secrets.push(s)
  return s
}

async function call(harness: Harness, method: string, path: string, opts: CallOptions = {}): Promise<Answer> {
  const res = await harness.call(method, path, opts)
  answers.push({ what: `${method} ${path} → ${res.status}`, text: res.text, headers: JSON.stringify([...res.headers]) })
  return res
}

async function workspaceWorkflow(harness: Harness, key: string, workspaceId: string): Promise<string> {
  const res = await call(harness, 'POST', '/v1/workflows', { key, body: { workspace_id: workspaceId, name: 'Secure', graph: chain(start([{ name: 'who', type: 'string' }]), end({})) } })
  expect(res.status).toBe(201)
  return res.body.data.id
}

/** The hook URL path of each webhook trigger made here (its id and token). */
const paths = new Map<string, string>()

async function trigger(harness: Harness, key: string, workflowId: string, body: Record<string, unknown>): Promise<string> {
  const res = await call(harness, 'POST', `/v1/workflows/${workflowId}/triggers`, { key, body })
  expect(res.status).toBe(201)
  if (res.body.data.url) paths.set(res.body.data.id, new URL(res.body.data.url).pathname)
  return res.body.data.id
}

const sign = (secret: string, raw: string) => `sha256=${createHmac('sha256', secret).update(raw).digest('hex')}`
const hook = (harness: Harness, id: string, raw: string, headers: Record<string, string> = {}) =>
  call(harness, 'POST', paths.get(id)!, { key: null, raw, headers: { 'content-type': 'application/json', ...headers } })

beforeAll(async () => {
  ;[h, tight] = await Promise.all([
    startHarness({ RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000' }),
    startHarness({ RATE_LIMIT_BURST: '5', RATE_LIMIT_PER_SECOND: '1' }),
  ])
  owner = await keyFor(h, 'sec-owner')
  ws = await workspaceOf(h, owner, 'Secure')
  wf = await workspaceWorkflow(h, owner, ws)
}, 120_000)
afterAll(async () => {
  await Promise.all([h?.close(), tight?.close()])
})

describe('signed hooks (X-Signature-256)', () => {
  let id: string
  let secret: string
  const raw = JSON.stringify({ who: 'Ada' })
  beforeAll(async () => {
    secret = newSecret()
    id = await trigger(h, owner, wf, { type: 'webhook', inputs: { who: '{{body.who}}' }, secret })
  })

  test('the right signature: 202', async () => {
    expect((await hook(h, id, raw, { 'X-Signature-256': sign(secret, raw) })).status).toBe(202)
  })

  test.each<[string, (() => string) | undefined]>([
    ['missing', undefined],
    ['of another body', () => sign(secret, JSON.stringify({ who: 'Eve' }))],
    ['under another secret', () => sign('some-other-secret', raw)],
    ['without its sha256= prefix', () => sign(secret, raw).slice(7)],
    ['empty', () => ''],
    ['truncated', () => sign(secret, raw).slice(0, -2)],
  ])('a signature %s: 401, no run', async (_, signature) => {
    const before = await runCount(id)
    const res = await hook(h, id, raw, signature ? { 'X-Signature-256': signature() } : {})
    expect(res.status).toBe(401)
    expect(res.body.error.code).toBe('unauthenticated')
    expect(await runCount(id)).toBe(before)
  })

  test('a body changed by one byte after signing: 401', async () => {
    const res = await hook(h, id, `${raw} `, { 'X-Signature-256': sign(secret, raw) })
    expect(res.status).toBe(401)
  })

  test('the secret removed: unsigned calls are accepted again', async () => {
    const other = await trigger(h, owner, wf, { type: 'webhook', inputs: { who: '{{body.who}}' }, secret: newSecret() })
    expect((await hook(h, other, raw)).status).toBe(401)
    expect((await call(h, 'PATCH', `/v1/triggers/${other}`, { key: owner, body: { secret: null } })).status).toBe(200)
    expect((await hook(h, other, raw)).status).toBe(202)
  })

  test('a rotated secret: the old one no longer signs', async () => {
    const old = newSecret()
    const other = await trigger(h, owner, wf, { type: 'webhook', inputs: { who: '{{body.who}}' }, secret: old })
    const next = newSecret()
    expect((await call(h, 'PATCH', `/v1/triggers/${other}`, { key: owner, body: { secret: next } })).status).toBe(200)
    expect((await hook(h, other, raw, { 'X-Signature-256': sign(old, raw) })).status).toBe(401)
    expect((await hook(h, other, raw, { 'X-Signature-256': sign(next, raw) })).status).toBe(202)
  })

  test('stored sealed, never in plain', async () => {
    const [row] = await h.deps.db.sql<{ secret_encrypted: string }[]>`select secret_encrypted from triggers where id = ${id}`
    expect(row!.secret_encrypted).toStartWith('v1.')
    expect(row!.secret_encrypted).not.toContain(secret)
  })
})

const runCount = async (id: string) => {
  const [row] = await h.deps.db.sql<{ n: number }[]>`select count(*)::int as n from runs where user_id = ${`webhook:${id}`}`
  return row!.n
}

describe('no API key, only on that one path', () => {
  test('a hook call needs none, and a bogus one is ignored', async () => {
    const id = await trigger(h, owner, wf, { type: 'webhook', inputs: { who: '{{body.who}}' } })
    expect((await hook(h, id, '{"who":"a"}')).status).toBe(202)
    expect((await hook(h, id, '{"who":"a"}', { authorization: 'Bearer nope' })).status).toBe(202)
  })

  test.each([
    ['GET', '/v1/hooks/trg_x'],
    ['POST', '/v1/hooks/trg_x/token/more'],
    ['POST', '/v1/hooks'],
    ['GET', '/v1/triggers/trg_x'],
    ['POST', `/v1/workflows/wf_x/triggers`],
  ])('%s %s without a key: 401', async (method, path) => {
    const res = await call(h, method, path, { key: null })
    expect(res.status).toBe(401)
    expect(res.body.error.code).toBe('unauthenticated')
  })
})

describe('rate limit per trigger', () => {
  test('a flood gets 429 with Retry-After; another trigger is not affected', async () => {
    const key = await keyFor(tight, 'flood-owner')
    const space = await workspaceOf(tight, key, 'Flood')
    const flow = await workspaceWorkflow(tight, key, space)
    const [a, b] = [await trigger(tight, key, flow, { type: 'webhook', inputs: { who: '{{body.who}}' } }), await trigger(tight, key, flow, { type: 'webhook', inputs: { who: '{{body.who}}' } })]
    const statuses: number[] = []
    let limited: Answer | undefined
    for (let i = 0; i < 12; i++) {
      const res = await hook(tight, a, '{"who":"x"}')
      statuses.push(res.status)
      if (res.status === 429) limited ??= res
    }
    expect(statuses.filter((s) => s === 202).length).toBeGreaterThanOrEqual(5)
    expect(statuses.filter((s) => s === 202).length).toBeLessThan(12)
    expect(limited!.body.error.code).toBe('rate_limited')
    expect(Number(limited!.headers.get('retry-after'))).toBeGreaterThanOrEqual(1)
    expect((await hook(tight, b, '{"who":"y"}')).status).toBe(202)
  })
})

describe('roles', () => {
  let member: string
  let reader: string
  let outsider: string
  let id: string
  beforeAll(async () => {
    ;[member, reader, outsider] = await Promise.all(['sec-user', 'sec-reader', 'sec-outsider'].map((u) => keyFor(h, u))) as [string, string, string]
    await call(h, 'POST', `/v1/workspaces/${ws}/members`, { key: owner, body: { user_id: 'sec-user', role: 'user' } })
    await call(h, 'POST', `/v1/workspaces/${ws}/members`, { key: owner, body: { user_id: 'sec-reader', role: 'readonly' } })
    await workspaceOf(h, outsider, 'Elsewhere')
    id = await trigger(h, owner, wf, { type: 'schedule', cron: '0 * * * *', inputs: { who: 'x' } })
  })

  test.each([
    ['user', () => member],
    ['readonly', () => reader],
  ])('a %s member reads triggers but cannot create, change or delete them: 403', async (_, key) => {
    expect((await call(h, 'GET', `/v1/workflows/${wf}/triggers`, { key: key() })).status).toBe(200)
    expect((await call(h, 'GET', `/v1/triggers/${id}`, { key: key() })).status).toBe(200)
    for (const [method, path, body] of [
      ['POST', `/v1/workflows/${wf}/triggers`, { type: 'webhook' }],
      ['PATCH', `/v1/triggers/${id}`, { enabled: false }],
      ['DELETE', `/v1/triggers/${id}`, undefined],
    ] as const) {
      const res = await call(h, method, path, { key: key(), body })
      expect({ method, status: res.status, code: res.body.error?.code }).toEqual({ method, status: 403, code: 'forbidden' })
    }
  })

  test('a developer key limited below developer: 403', async () => {
    const limited = await keyFor(h, 'sec-owner', { role_limit: 'user' })
    const res = await call(h, 'POST', `/v1/workflows/${wf}/triggers`, { key: limited, body: { type: 'webhook' } })
    expect(res.status).toBe(403)
  })

  test('another workspace\'s trigger and workflow: 404, existence never leaks', async () => {
    for (const [method, path, body] of [
      ['GET', `/v1/triggers/${id}`, undefined],
      ['PATCH', `/v1/triggers/${id}`, { enabled: false }],
      ['DELETE', `/v1/triggers/${id}`, undefined],
      ['GET', `/v1/workflows/${wf}/triggers`, undefined],
      ['POST', `/v1/workflows/${wf}/triggers`, { type: 'webhook' }],
    ] as const) {
      expect((await call(h, method, path, { key: outsider, body })).status).toBe(404)
    }
  })
})

test('no answer of this file carries a secret or its sealed form', async () => {
  // Every trigger read back by every route, to be sure the scan covers them.
  await call(h, 'GET', `/v1/workflows/${wf}/triggers?limit=100`, { key: owner })
  const sealed = (await h.deps.db.sql<{ secret_encrypted: string }[]>`select secret_encrypted from triggers where secret_encrypted is not null`).map((r) => r.secret_encrypted)
  expect(secrets.length).toBeGreaterThan(3)
  for (const a of answers) {
    for (const s of [...secrets, ...sealed]) {
      expect({ what: a.what, leaked: a.text.includes(s) || a.headers.includes(s) }).toEqual({ what: a.what, leaked: false })
    }
    expect(a.text).not.toContain('secret_encrypted')
  }
})
