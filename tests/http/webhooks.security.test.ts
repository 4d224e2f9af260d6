import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { advanceDelivery } from '../../src/domain/deliveries'
import { sha256Hex } from '../../src/lib/crypto'
import { lockDelivery, saveDeliveries } from '../../src/store/deliveries'
import { keyFor, startHarness, workspaceOf, type Answer, type CallOptions, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

// Two harnesses: the default SSRF policy, and one with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true. No
// workers run, so nothing is ever delivered; registration is what is checked.
let h: Harness
let open: Harness
let owner: string
let ws: string

const LIMITS = { RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000' }

/** Every answer text of this file, scanned for secrets at the end. */
const answers: { what: string; text: string; headers: string }[] = []
/** Every plain secret sent in this file. */
const secrets: string[] = []

async function call(harness: Harness, method: string, path: string, opts: CallOptions = {}): Promise<Answer> {
  const res = await harness.call(method, path, opts)
  answers.push({ what: `${method} ${path} → ${res.status}`, text: res.text, headers: JSON.stringify([...res.headers]) })
  return res
}

let seq = 0
function newSecret(): string {
  const s = `top-secret-${++seq}-${crypto.randomUUID()}`
  secrets.push(s)
  return s
}

beforeAll(async () => {
  ;[h, open] = await Promise.all([startHarness(LIMITS), startHarness({ ...LIMITS, WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' })])
  owner = await keyFor(h, 'ws-owner')
  ws = await workspaceOf(h, owner, 'Secure')
})
afterAll(async () => {
  await Promise.all([h?.close(), open?.close()])
})

const PUBLIC_URL = 'https://1.1.1.1/hook'

async function register(harness: Harness, key: string, workspaceId: string, body: Record<string, unknown> = {}, headers?: Record<string, string>) {
  return call(harness, 'POST', '/v1/webhooks', {
    key,
    headers,
    body: { url: PUBLIC_URL, events: ['workflow.run.completed', 'webhook.test'], secret: newSecret(), workspace_id: workspaceId, ...body },
  })
}

async function registered(harness: Harness, key: string, workspaceId: string, body: Record<string, unknown> = {}): Promise<string> {
  const res = await register(harness, key, workspaceId, body)
  expect(res.status).toBe(201)
  return res.body.data.id
}

/** Settles a delivery as `failed` through the delivery machine (there is no worker to send it). */
async function failDelivery(harness: Harness, webhookId: string, deliveryId: string) {
  await harness.deps.db.sql.begin(async (tx) => {
    let row = await lockDelivery(tx, webhookId, deliveryId)
    const sending = advanceDelivery(row, { type: 'timer.fired' }, Date.now())
    expect(sending).not.toBeNull()
    await saveDeliveries(tx, [sending!.update])
    row = await lockDelivery(tx, webhookId, deliveryId)
    const failed = advanceDelivery(row, { type: 'attempt.failed', retryable: false }, Date.now())
    expect(failed).not.toBeNull()
    await saveDeliveries(tx, [failed!.update])
  })
  const got = await call(harness, 'GET', `/v1/webhooks/${webhookId}/deliveries/${deliveryId}`)
  expect(got.body.data.status).toBe('failed')
}

async function pingedAndFailed(webhookId: string): Promise<string> {
  const ping = await call(h, 'POST', `/v1/webhooks/${webhookId}/ping`)
  expect(ping.status).toBe(202)
  await failDelivery(h, webhookId, ping.body.data.id)
  return ping.body.data.id
}

describe('SSRF at registration (default policy)', () => {
  const refused = [
    'https://127.0.0.1/',
    'https://127.1.2.3:8443/x',
    'https://10.0.0.1/',
    'https://172.16.5.4/',
    'https://172.31.255.255/',
    'https://192.168.1.1/',
    'https://169.254.169.254/latest',
    'https://[::1]/',
    'https://[fc00::1]/',
    'https://[fd12:3456::1]/',
    'https://[fe80::1]/',
    'https://[::ffff:127.0.0.1]/',
    'https://[::ffff:10.0.0.1]/',
    // IPv6 forms carrying a private, loopback or link-local IPv4 address.
    'https://[::127.0.0.1]/',
    'https://[::7f00:1]/',
    'https://[::a9fe:a9fe]/latest',
    'https://[::ffff:0:10.0.0.1]/',
    'https://[64:ff9b::169.254.169.254]/',
    'https://[64:ff9b:1::a00:1]/',
    'https://[2002:c0a8:101::1]/',
    'https://[2001:0:4136:e378:8000:63bf:80ff:fffe]/',
    'https://[2606:4700::5efe:127.0.0.1]/',
    'https://0.0.0.0/',
    'https://224.0.0.1/',
    'https://100.64.0.1/',
    'https://localhost/',
    'https://localhost:8443/hook',
  ]
  test.each(refused)('%s → 400 validation_error param url', async (url) => {
    const res = await register(h, owner, ws, { url })
    expect(res.status).toBe(400)
    expect(res.body.error.code).toBe('validation_error')
    expect(res.body.error.param).toBe('url')
    expect(res.body.error.details[0].path).toBe('url')
  })

  test('none of the refused URLs was stored', async () => {
    const [row] = await h.deps.db.sql<{ n: number }[]>`select count(*)::int as n from webhooks where url not like 'https://1.1.1.1/%'`
    expect(row!.n).toBe(0)
  })

  test('PATCH to a private URL is refused the same way, and the URL is unchanged', async () => {
    const id = await registered(h, owner, ws)
    for (const url of ['https://127.0.0.1/', 'https://[::1]/', 'https://192.168.1.1/', 'https://localhost/']) {
      const res = await call(h, 'PATCH', `/v1/webhooks/${id}`, { key: owner, body: { url } })
      expect(res.status).toBe(400)
      expect(res.body.error.param).toBe('url')
    }
    expect((await call(h, 'GET', `/v1/webhooks/${id}`, { key: owner })).body.data.url).toBe(PUBLIC_URL)
  })

  test.each(['https://172.32.0.1/', 'https://172.15.255.255/', 'https://8.8.8.8/hook', 'https://[2606:4700:4700::1111]/hook'])(
    '%s is public: 201 (an address literal needs no DNS)',
    async (url) => {
      const res = await register(h, owner, ws, { url })
      expect(res.status).toBe(201)
      expect(res.body.data.url).toBe(url)
    },
  )

  test('WEBHOOK_ALLOW_PRIVATE_NETWORKS=true accepts loopback and private receivers', async () => {
    const key = await keyFor(open, 'ws-open')
    const openWs = await workspaceOf(open, key, 'Open')
    for (const url of ['https://127.0.0.1/', 'https://[::1]/', 'https://localhost:9/hook', 'https://10.0.0.1/', 'https://192.168.1.1/', 'https://[fd12:3456::1]/']) {
      const res = await register(open, key, openWs, { url })
      expect(res.status).toBe(201)
    }
    // The scheme rule still holds.
    const http = await register(open, key, openWs, { url: 'http://127.0.0.1/' })
    expect(http.status).toBe(400)
    expect(http.body.error.param).toBe('url')
  })
})

describe('roles (docs/api.md, "Keys, roles and workspaces")', () => {
  let team: string
  const keys: Record<string, string> = {}
  let hook: string

  beforeAll(async () => {
    const teamOwner = await keyFor(h, 'ws-team-owner')
    team = await workspaceOf(h, teamOwner, 'Team')
    keys.owner = teamOwner
    for (const role of ['readonly', 'user', 'developer', 'admin']) {
      const add = await call(h, 'POST', `/v1/workspaces/${team}/members`, { key: teamOwner, body: { user_id: `ws-${role}`, role } })
      expect(add.status).toBe(201)
      keys[role] = await keyFor(h, `ws-${role}`)
    }
    keys.stranger = await keyFor(h, 'ws-stranger')
    await workspaceOf(h, keys.stranger, 'Elsewhere')
    hook = await registered(h, teamOwner, team)
  })

  test.each(['readonly', 'user'])('%s lists and gets, but may not change anything (403)', async (role) => {
    const key = keys[role]!
    const list = await call(h, 'GET', `/v1/webhooks?workspace_id=${team}`, { key })
    expect(list.status).toBe(200)
    expect(list.body.data.map((w: { id: string }) => w.id)).toContain(hook)
    expect((await call(h, 'GET', `/v1/webhooks/${hook}`, { key })).status).toBe(200)
    expect((await call(h, 'GET', `/v1/webhooks/${hook}/deliveries`, { key })).status).toBe(200)
    const delivery = await pingedAndFailed(hook)
    expect((await call(h, 'GET', `/v1/webhooks/${hook}/deliveries/${delivery}`, { key })).status).toBe(200)

    const before = (await call(h, 'GET', `/v1/webhooks/${hook}`)).body.data
    const [deliveriesBefore] = await h.deps.db.sql<{ n: number }[]>`select count(*)::int as n from webhook_deliveries where webhook_id = ${hook}`
    const writes: [string, string, unknown][] = [
      ['POST', '/v1/webhooks', { url: PUBLIC_URL, events: ['webhook.test'], secret: newSecret(), workspace_id: team }],
      ['PATCH', `/v1/webhooks/${hook}`, { enabled: false }],
      ['PATCH', `/v1/webhooks/${hook}`, { secret: newSecret() }],
      ['DELETE', `/v1/webhooks/${hook}`, undefined],
      ['POST', `/v1/webhooks/${hook}/ping`, undefined],
      ['POST', `/v1/webhooks/${hook}/deliveries/${delivery}/redeliver`, undefined],
    ]
    for (const [method, path, body] of writes) {
      const res = await call(h, method, path, { key, body })
      expect({ method, path, status: res.status, code: res.body.error?.code }).toEqual({ method, path, status: 403, code: 'forbidden' })
    }
    // Nothing changed.
    expect((await call(h, 'GET', `/v1/webhooks/${hook}`)).body.data).toEqual(before)
    const [deliveriesAfter] = await h.deps.db.sql<{ n: number }[]>`select count(*)::int as n from webhook_deliveries where webhook_id = ${hook}`
    expect(deliveriesAfter!.n).toBe(deliveriesBefore!.n)
    expect((await call(h, 'GET', `/v1/webhooks/${hook}/deliveries/${delivery}`)).body.data.status).toBe('failed')
    const [count] = await h.deps.db.sql<{ n: number }[]>`select count(*)::int as n from webhooks where workspace_id = ${team}`
    expect(count!.n).toBe(1)
  })

  test.each(['developer', 'admin', 'owner'])('%s creates, patches, pings, redelivers and deletes', async (role) => {
    const key = keys[role]!
    const created = await register(h, key, team)
    expect(created.status).toBe(201)
    expect(created.body.data.created_by).toBe(role === 'owner' ? 'ws-team-owner' : `ws-${role}`)
    const id = created.body.data.id
    expect((await call(h, 'PATCH', `/v1/webhooks/${id}`, { key, body: { enabled: false } })).status).toBe(200)
    expect((await call(h, 'PATCH', `/v1/webhooks/${id}`, { key, body: { secret: newSecret(), enabled: true } })).status).toBe(200)
    const ping = await call(h, 'POST', `/v1/webhooks/${id}/ping`, { key })
    expect(ping.status).toBe(202)
    await failDelivery(h, id, ping.body.data.id)
    const again = await call(h, 'POST', `/v1/webhooks/${id}/deliveries/${ping.body.data.id}/redeliver`, { key })
    expect(again.status).toBe(202)
    expect(again.body.data.id).toBe(ping.body.data.id)
    expect(again.body.data.status).toBe('pending')
    expect((await call(h, 'DELETE', `/v1/webhooks/${id}`, { key })).status).toBe(200)
  })

  test('a non-member gets 404 for every route of another workspace\'s webhook and its deliveries', async () => {
    const key = keys.stranger!
    const delivery = await pingedAndFailed(hook)
    const routes: [string, string, unknown][] = [
      ['GET', `/v1/webhooks/${hook}`, undefined],
      ['PATCH', `/v1/webhooks/${hook}`, { enabled: false }],
      ['DELETE', `/v1/webhooks/${hook}`, undefined],
      ['POST', `/v1/webhooks/${hook}/ping`, undefined],
      ['GET', `/v1/webhooks/${hook}/deliveries`, undefined],
      ['GET', `/v1/webhooks/${hook}/deliveries/${delivery}`, undefined],
      ['POST', `/v1/webhooks/${hook}/deliveries/${delivery}/redeliver`, undefined],
      ['GET', `/v1/webhooks?workspace_id=${team}`, undefined],
      ['POST', '/v1/webhooks', { url: PUBLIC_URL, events: ['webhook.test'], secret: newSecret(), workspace_id: team }],
    ]
    for (const [method, path, body] of routes) {
      const res = await call(h, method, path, { key, body })
      expect({ method, path, status: res.status, code: res.body.error?.code }).toEqual({ method, path, status: 404, code: 'not_found' })
    }
    // The answer for a hidden webhook is the answer for one that does not exist.
    const hidden = await call(h, 'GET', `/v1/webhooks/${hook}`, { key })
    const missing = await call(h, 'GET', '/v1/webhooks/whk_01jbz3k9x8q7r6s5t4v3w2y1z0', { key })
    expect(hidden.body.error.message.replace(hook, 'X')).toBe(missing.body.error.message.replace('whk_01jbz3k9x8q7r6s5t4v3w2y1z0', 'X'))
    expect((await call(h, 'GET', `/v1/webhooks/${hook}`)).body.data.enabled).toBe(true)
  })

  test('a key restricted to workspace A cannot see or touch B\'s webhooks, even of its own user', async () => {
    const both = await keyFor(h, 'ws-both')
    const a = await workspaceOf(h, both, 'A')
    const b = await workspaceOf(h, both, 'B')
    const hookA = await registered(h, both, a)
    const hookB = await registered(h, both, b)
    const restricted = await keyFor(h, 'ws-both', { workspace_id: a })

    const listA = await call(h, 'GET', '/v1/webhooks', { key: restricted })
    expect(listA.status).toBe(200)
    expect(listA.body.data.map((w: { id: string }) => w.id)).toEqual([hookA])
    expect((await call(h, 'GET', `/v1/webhooks/${hookA}`, { key: restricted })).status).toBe(200)

    for (const [method, path, body] of [
      ['GET', `/v1/webhooks?workspace_id=${b}`, undefined],
      ['GET', `/v1/webhooks/${hookB}`, undefined],
      ['GET', `/v1/webhooks/${hookB}/deliveries`, undefined],
      ['PATCH', `/v1/webhooks/${hookB}`, { enabled: false }],
      ['DELETE', `/v1/webhooks/${hookB}`, undefined],
      ['POST', `/v1/webhooks/${hookB}/ping`, undefined],
      ['POST', '/v1/webhooks', { url: PUBLIC_URL, events: ['webhook.test'], secret: newSecret(), workspace_id: b }],
    ] as [string, string, unknown][]) {
      const res = await call(h, method, path, { key: restricted, body })
      expect({ method, path, status: res.status }).toEqual({ method, path, status: 404 })
    }
    const viaHeader = await call(h, 'GET', '/v1/webhooks', { key: restricted, headers: { 'x-workspace-id': b } })
    expect(viaHeader.status).toBe(404)
    expect((await call(h, 'GET', `/v1/webhooks/${hookB}`, { key: both })).body.data.enabled).toBe(true)
  })

  test('an archived workspace is read-only: writes answer 403, reads 200', async () => {
    const k = await keyFor(h, 'ws-archivist')
    const arch = await workspaceOf(h, k, 'To archive')
    const id = await registered(h, k, arch)
    const delivery = (await call(h, 'POST', `/v1/webhooks/${id}/ping`, { key: k })).body.data.id
    await failDelivery(h, id, delivery)
    expect((await call(h, 'POST', `/v1/workspaces/${arch}/archive`, { key: k })).status).toBe(200)

    for (const [method, path, body] of [
      ['POST', '/v1/webhooks', { url: PUBLIC_URL, events: ['webhook.test'], secret: newSecret(), workspace_id: arch }],
      ['PATCH', `/v1/webhooks/${id}`, { enabled: false }],
      ['DELETE', `/v1/webhooks/${id}`, undefined],
      ['POST', `/v1/webhooks/${id}/ping`, undefined],
      ['POST', `/v1/webhooks/${id}/deliveries/${delivery}/redeliver`, undefined],
    ] as [string, string, unknown][]) {
      const res = await call(h, method, path, { key: k, body })
      expect({ method, path, status: res.status, code: res.body.error?.code }).toEqual({ method, path, status: 403, code: 'forbidden' })
    }
    expect((await call(h, 'GET', `/v1/webhooks/${id}`, { key: k })).status).toBe(200)
    expect((await call(h, 'GET', `/v1/webhooks?workspace_id=${arch}`, { key: k })).body.data).toHaveLength(1)
    expect((await call(h, 'GET', `/v1/webhooks/${id}/deliveries`, { key: k })).body.data).toHaveLength(1)
  })
})

describe('the secret', () => {
  test('stored sealed: secret_encrypted never holds the plain secret, and the SecretBox opens it', async () => {
    const secret = newSecret()
    const res = await register(h, owner, ws, { secret })
    expect(res.status).toBe(201)
    const id = res.body.data.id
    const [row] = await h.deps.db.sql<{ secret_encrypted: string }[]>`select secret_encrypted from webhooks where id = ${id}`
    expect(row!.secret_encrypted).not.toContain(secret)
    expect(row!.secret_encrypted).not.toContain(Buffer.from(secret).toString('base64'))
    expect(row!.secret_encrypted).not.toContain(Buffer.from(secret).toString('base64url'))
    expect(h.deps.secretBox.open(row!.secret_encrypted)).toBe(secret)

    // No column of the row, in any form, holds it.
    const [whole] = await h.deps.db.sql<{ t: string }[]>`select row_to_json(w)::text as t from webhooks w where id = ${id}`
    expect(whole!.t).not.toContain(secret)

    // After a rotation both are sealed, and each opens to its plain value.
    const next = newSecret()
    expect((await call(h, 'PATCH', `/v1/webhooks/${id}`, { key: owner, body: { secret: next } })).status).toBe(200)
    const [rotated] = await h.deps.db.sql<{ secret_encrypted: string; previous_secret_encrypted: string; t: string }[]>`
      select secret_encrypted, previous_secret_encrypted, row_to_json(w)::text as t from webhooks w where id = ${id}`
    expect(rotated!.t).not.toContain(secret)
    expect(rotated!.t).not.toContain(next)
    expect(h.deps.secretBox.open(rotated!.secret_encrypted)).toBe(next)
    expect(h.deps.secretBox.open(rotated!.previous_secret_encrypted)).toBe(secret)
  })

  test('two webhooks with the same secret have different ciphertexts (random IV)', async () => {
    const secret = newSecret()
    const a = await registered(h, owner, ws, { secret })
    const b = await registered(h, owner, ws, { secret })
    const rows = await h.deps.db.sql<{ secret_encrypted: string }[]>`select secret_encrypted from webhooks where id in ${h.deps.db.sql([a, b])}`
    expect(rows).toHaveLength(2)
    expect(rows[0]!.secret_encrypted).not.toBe(rows[1]!.secret_encrypted)
  })

  test('Idempotency-Key on POST /webhooks replays the same webhook, once', async () => {
    const secret = newSecret()
    const body = { url: 'https://8.8.4.4/idem', events: ['webhook.test'], secret, workspace_id: ws }
    const send = () => call(h, 'POST', '/v1/webhooks', { key: owner, body, headers: { 'idempotency-key': 'create-hook-1' } })
    const first = await send()
    expect(first.status).toBe(201)
    const second = await send()
    const third = await send()
    for (const replay of [second, third]) {
      expect(replay.status).toBe(201)
      expect(replay.headers.get('idempotent-replayed')).toBe('true')
      expect(replay.text).toBe(first.text)
      expect(replay.body.data.id).toBe(first.body.data.id)
    }
    const [row] = await h.deps.db.sql<{ n: number }[]>`select count(*)::int as n from webhooks where url = 'https://8.8.4.4/idem'`
    expect(row!.n).toBe(1)
    // The record kept in Redis (a fingerprint hash and the answer) does not hold the secret either.
    const caller = await h.deps.apiKeys.authenticate(owner)
    const record = await h.deps.redis.get(`idem:${caller.keyId}:${sha256Hex('create-hook-1')}`)
    expect(record).toContain(first.body.data.id)
    expect(record).not.toContain(secret)
  })

  test('no answer of any endpoint in this file ever carried a secret', async () => {
    // Also the read paths, on every webhook of the workspace.
    const list = await call(h, 'GET', `/v1/webhooks?workspace_id=${ws}&limit=100`, { key: owner })
    for (const w of list.body.data) {
      await call(h, 'GET', `/v1/webhooks/${w.id}`, { key: owner })
      await call(h, 'GET', `/v1/webhooks/${w.id}/deliveries`, { key: owner })
    }
    await call(h, 'GET', '/docs/json', { key: null })
    expect(answers.length).toBeGreaterThan(100)
    expect(secrets.length).toBeGreaterThan(20)
    const leaks: string[] = []
    for (const a of answers) {
      for (const s of secrets) if (a.text.includes(s) || a.headers.includes(s)) leaks.push(a.what)
      if (/secret_encrypted|"secret"\s*:/.test(a.text) && !a.what.startsWith('GET /docs')) leaks.push(`${a.what} (field)`)
    }
    expect(leaks).toEqual([])
  })
})
