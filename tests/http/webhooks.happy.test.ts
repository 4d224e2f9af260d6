import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { keyFor, startHarness, workspaceOf, type Answer, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

// Registration only: the receiver URLs point at localhost (allowed by the flag) and nothing is ever
// delivered, because the harness runs no workers; deliveries stay `pending`.
let h: Harness
let owner: string
let ws: string

beforeAll(async () => {
  h = await startHarness({ RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000', WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' })
  owner = await keyFor(h, 'wh-owner')
  ws = await workspaceOf(h, owner, 'Hooks')
})
afterAll(() => h.close())

const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/
const META = { version: 'v1', deprecated_warnings: [] }
const WEBHOOK_FIELDS = ['created_at', 'created_by', 'disabled_reason', 'enabled', 'events', 'id', 'previous_secret_expires_at', 'updated_at', 'url', 'workspace_id']
const DELIVERY_FIELDS = ['attempts', 'attempts_count', 'created_at', 'data', 'event', 'event_id', 'id', 'next_attempt_at', 'status', 'updated_at', 'webhook_id']
const DAY_MS = 86_400_000

let seq = 0
const secretOf = () => `s3cret-value-${++seq}-${Math.random().toString(36).slice(2)}`

async function register(opts: { key?: string; body?: Record<string, unknown>; headers?: Record<string, string> } = {}) {
  const secret = secretOf()
  const res = await h.call('POST', '/v1/webhooks', {
    key: opts.key ?? owner,
    headers: opts.headers,
    body: { url: 'https://localhost:9/hook', events: ['workflow.run.completed'], secret, workspace_id: ws, ...opts.body },
  })
  expect(res.status).toBe(201)
  return { res, secret, id: res.body.data.id as string }
}

function expectNoSecret(res: Answer, secret: string) {
  expect(res.text).not.toContain(secret)
  expect(res.text).not.toContain('secret_encrypted')
}

describe('register', () => {
  test('201 in the general envelope with every field, and the secret absent from the answer', async () => {
    const { res, secret } = await register({ body: { url: 'https://localhost:9/hook', events: ['workflow.run.completed', 'workflow.run.failed'] } })
    expect(res.headers.get('x-request-id')).toBe(res.body.request_id)
    expect(res.body).toEqual({
      request_id: expect.stringMatching(/^req_/),
      data: {
        id: expect.stringMatching(/^whk_[0-9a-z]{26}$/),
        workspace_id: ws,
        url: 'https://localhost:9/hook',
        events: ['workflow.run.completed', 'workflow.run.failed'],
        enabled: true,
        disabled_reason: null,
        previous_secret_expires_at: null,
        created_by: 'wh-owner',
        created_at: expect.stringMatching(ISO_MS),
        updated_at: expect.stringMatching(ISO_MS),
      },
      meta: META,
    })
    expect(Object.keys(res.body.data).sort()).toEqual(WEBHOOK_FIELDS)
    expectNoSecret(res, secret)
  })

  test('duplicate events in the body are deduplicated, order of first appearance kept', async () => {
    const { res, id } = await register({
      body: { events: ['workflow.run.failed', 'webhook.test', 'workflow.run.failed', 'webhook.test', 'agent.message.received'] },
    })
    expect(res.body.data.events).toEqual(['workflow.run.failed', 'webhook.test', 'agent.message.received'])
    expect((await h.call('GET', `/v1/webhooks/${id}`, { key: owner })).body.data.events).toEqual(['workflow.run.failed', 'webhook.test', 'agent.message.received'])
    const patched = await h.call('PATCH', `/v1/webhooks/${id}`, { key: owner, body: { events: ['credit.budget.threshold', 'credit.budget.threshold'] } })
    expect(patched.status).toBe(200)
    expect(patched.body.data.events).toEqual(['credit.budget.threshold'])
  })

  test('the workspace comes from X-Workspace-Id, else the caller\'s only workspace', async () => {
    const solo = await keyFor(h, 'wh-solo')
    const soloWs = await workspaceOf(h, solo, 'Solo')
    const implicit = await h.call('POST', '/v1/webhooks', { key: solo, body: { url: 'https://localhost:9/a', events: ['webhook.test'], secret: secretOf() } })
    expect(implicit.status).toBe(201)
    expect(implicit.body.data.workspace_id).toBe(soloWs)

    const second = await workspaceOf(h, solo, 'Solo 2')
    const byHeader = await h.call('POST', '/v1/webhooks', {
      key: solo,
      headers: { 'x-workspace-id': second },
      body: { url: 'https://localhost:9/b', events: ['webhook.test'], secret: secretOf() },
    })
    expect(byHeader.status).toBe(201)
    expect(byHeader.body.data.workspace_id).toBe(second)
  })
})

describe('list', () => {
  let listWs: string
  let ids: string[] = []
  let lister: string

  beforeAll(async () => {
    lister = await keyFor(h, 'wh-lister')
    listWs = await workspaceOf(h, lister, 'Listed')
    // A second workspace of the same user, so that nothing resolves implicitly.
    const other = await workspaceOf(h, lister, 'Listed other')
    await h.call('POST', '/v1/webhooks', { key: lister, body: { url: 'https://localhost:9/other', events: ['webhook.test'], secret: secretOf(), workspace_id: other } })
    ids = []
    for (let i = 0; i < 5; i++) {
      const res = await h.call('POST', '/v1/webhooks', {
        key: lister,
        body: { url: `https://localhost:9/hook/${i}`, events: ['webhook.test'], secret: secretOf(), workspace_id: listWs },
      })
      expect(res.status).toBe(201)
      ids.push(res.body.data.id)
    }
  })

  test('pages of `limit` with a cursor, newest first, never repeating or skipping', async () => {
    const seen: string[] = []
    let cursor: string | null = null
    let pages = 0
    do {
      const res: Answer = await h.call('GET', `/v1/webhooks?workspace_id=${listWs}&limit=2${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, { key: lister })
      expect(res.status).toBe(200)
      expect(Object.keys(res.body).sort()).toEqual(['data', 'has_more', 'next_cursor', 'request_id'])
      expect(res.body.data.length).toBeLessThanOrEqual(2)
      for (const w of res.body.data) expect(Object.keys(w).sort()).toEqual(WEBHOOK_FIELDS)
      seen.push(...res.body.data.map((w: { id: string }) => w.id))
      expect(res.body.has_more).toBe(res.body.next_cursor !== null)
      cursor = res.body.next_cursor
      pages++
    } while (cursor && pages < 10)
    expect(pages).toBe(3)
    expect(seen).toEqual([...ids].reverse())
  })

  test('?workspace_id, the X-Workspace-Id header and a restricted key each pick the workspace', async () => {
    const byQuery = await h.call('GET', `/v1/webhooks?workspace_id=${listWs}&limit=100`, { key: lister })
    expect(byQuery.status).toBe(200)
    expect(byQuery.body.data.map((w: { id: string }) => w.id).sort()).toEqual([...ids].sort())
    expect(byQuery.body.data.every((w: { workspace_id: string }) => w.workspace_id === listWs)).toBe(true)

    const byHeader = await h.call('GET', '/v1/webhooks?limit=100', { key: lister, headers: { 'x-workspace-id': listWs } })
    expect(byHeader.status).toBe(200)
    expect(byHeader.body.data.map((w: { id: string }) => w.id).sort()).toEqual([...ids].sort())

    const restricted = await keyFor(h, 'wh-lister', { workspace_id: listWs })
    const byKey = await h.call('GET', '/v1/webhooks?limit=100', { key: restricted })
    expect(byKey.status).toBe(200)
    expect(byKey.body.data.map((w: { id: string }) => w.id).sort()).toEqual([...ids].sort())
  })
})

describe('get, patch, delete', () => {
  test('get returns the webhook as registered, never its secret', async () => {
    const { res: created, id, secret } = await register()
    const got = await h.call('GET', `/v1/webhooks/${id}`, { key: owner })
    expect(got.status).toBe(200)
    expect(got.body.data).toEqual(created.body.data)
    expect(got.body.meta).toEqual(META)
    expectNoSecret(got, secret)
  })

  test('patch url, events, enabled false then true', async () => {
    const { id, res: created } = await register()
    const url = await h.call('PATCH', `/v1/webhooks/${id}`, { key: owner, body: { url: 'https://localhost:9/moved?x=1' } })
    expect(url.status).toBe(200)
    expect(url.body.data.url).toBe('https://localhost:9/moved?x=1')
    expect(url.body.data.events).toEqual(created.body.data.events)
    expect(new Date(url.body.data.updated_at).getTime()).toBeGreaterThanOrEqual(new Date(created.body.data.updated_at).getTime())

    const events = await h.call('PATCH', `/v1/webhooks/${id}`, { key: owner, body: { events: ['knowledge.document.ready', 'knowledge.document.failed'] } })
    expect(events.status).toBe(200)
    expect(events.body.data.events).toEqual(['knowledge.document.ready', 'knowledge.document.failed'])
    expect(events.body.data.url).toBe('https://localhost:9/moved?x=1')

    const off = await h.call('PATCH', `/v1/webhooks/${id}`, { key: owner, body: { enabled: false } })
    expect(off.status).toBe(200)
    expect(off.body.data.enabled).toBe(false)
    expect((await h.call('GET', `/v1/webhooks/${id}`, { key: owner })).body.data.enabled).toBe(false)

    const on = await h.call('PATCH', `/v1/webhooks/${id}`, { key: owner, body: { enabled: true } })
    expect(on.status).toBe(200)
    expect(on.body.data.enabled).toBe(true)
    expect(on.body.data.disabled_reason).toBeNull()
    expect(on.body.data.events).toEqual(['knowledge.document.ready', 'knowledge.document.failed'])
    expect(on.body.data.previous_secret_expires_at).toBeNull()
  })

  test('a new secret starts a 24 h rotation; the same secret does not', async () => {
    const { id, secret } = await register()
    const same = await h.call('PATCH', `/v1/webhooks/${id}`, { key: owner, body: { secret } })
    expect(same.status).toBe(200)
    expect(same.body.data.previous_secret_expires_at).toBeNull()
    expectNoSecret(same, secret)

    const next = secretOf()
    const before = Date.now()
    const rotated = await h.call('PATCH', `/v1/webhooks/${id}`, { key: owner, body: { secret: next } })
    const after = Date.now()
    expect(rotated.status).toBe(200)
    expect(rotated.body.data.previous_secret_expires_at).toMatch(ISO_MS)
    const expires = new Date(rotated.body.data.previous_secret_expires_at).getTime()
    expect(expires).toBeGreaterThanOrEqual(before + DAY_MS - 1000)
    expect(expires).toBeLessThanOrEqual(after + DAY_MS + 1000)
    expectNoSecret(rotated, secret)
    expectNoSecret(rotated, next)

    const got = await h.call('GET', `/v1/webhooks/${id}`, { key: owner })
    expect(got.body.data.previous_secret_expires_at).toBe(rotated.body.data.previous_secret_expires_at)
    // The stored secret is the new one, the previous one is kept beside it.
    const [row] = await h.deps.db.sql<{ secret_encrypted: string; previous_secret_encrypted: string }[]>`
      select secret_encrypted, previous_secret_encrypted from webhooks where id = ${id}`
    expect(h.deps.secretBox.open(row!.secret_encrypted)).toBe(next)
    expect(h.deps.secretBox.open(row!.previous_secret_encrypted)).toBe(secret)
  })

  test('delete answers {id, deleted: true}; then the webhook and its deliveries are gone', async () => {
    const { id } = await register({ body: { events: ['webhook.test'] } })
    const ping = await h.call('POST', `/v1/webhooks/${id}/ping`, { key: owner })
    expect(ping.status).toBe(202)
    const [before] = await h.deps.db.sql<{ n: number }[]>`select count(*)::int as n from webhook_deliveries where webhook_id = ${id}`
    expect(before!.n).toBe(1)

    const del = await h.call('DELETE', `/v1/webhooks/${id}`, { key: owner })
    expect(del.status).toBe(200)
    expect(del.body).toEqual({ request_id: expect.stringMatching(/^req_/), data: { id, deleted: true }, meta: META })

    const got = await h.call('GET', `/v1/webhooks/${id}`, { key: owner })
    expect(got.status).toBe(404)
    expect(got.body.error.code).toBe('not_found')
    expect((await h.call('GET', `/v1/webhooks/${id}/deliveries`, { key: owner })).status).toBe(404)
    expect((await h.call('GET', `/v1/webhooks/${id}/deliveries/${ping.body.data.id}`, { key: owner })).status).toBe(404)
    const [after] = await h.deps.db.sql<{ n: number }[]>`select count(*)::int as n from webhook_deliveries where webhook_id = ${id}`
    expect(after!.n).toBe(0)
    const list = await h.call('GET', `/v1/webhooks?workspace_id=${ws}&limit=100`, { key: owner })
    expect(list.body.data.map((w: { id: string }) => w.id)).not.toContain(id)
    // A second delete: the webhook no longer exists.
    expect((await h.call('DELETE', `/v1/webhooks/${id}`, { key: owner })).status).toBe(404)
  })
})

describe('ping and deliveries', () => {
  test('ping answers 202 with a pending webhook.test delivery, listed and fetchable (no worker runs)', async () => {
    const { id, secret } = await register({ body: { events: ['workflow.run.completed'] } })
    const ping = await h.call('POST', `/v1/webhooks/${id}/ping`, { key: owner })
    expect(ping.status).toBe(202)
    expectNoSecret(ping, secret)
    const d = ping.body.data
    expect(ping.body).toEqual({
      request_id: expect.stringMatching(/^req_/),
      data: {
        id: expect.stringMatching(/^dlv_[0-9a-z]{26}$/),
        webhook_id: id,
        event_id: expect.stringMatching(/^evt_[0-9a-z]{26}$/),
        event: 'webhook.test',
        status: 'pending',
        attempts_count: 0,
        attempts: [],
        next_attempt_at: expect.stringMatching(ISO_MS),
        data: { webhook_id: id, message: expect.any(String) },
        created_at: expect.stringMatching(ISO_MS),
        updated_at: expect.stringMatching(ISO_MS),
      },
      meta: META,
    })
    expect(Object.keys(d).sort()).toEqual(DELIVERY_FIELDS)

    const list = await h.call('GET', `/v1/webhooks/${id}/deliveries`, { key: owner })
    expect(list.status).toBe(200)
    expect(list.body).toEqual({ request_id: expect.stringMatching(/^req_/), data: [d], next_cursor: null, has_more: false })

    const pending = await h.call('GET', `/v1/webhooks/${id}/deliveries?status=pending`, { key: owner })
    expect(pending.body.data.map((x: { id: string }) => x.id)).toEqual([d.id])
    expect((await h.call('GET', `/v1/webhooks/${id}/deliveries?status=succeeded`, { key: owner })).body.data).toEqual([])
    expect((await h.call('GET', `/v1/webhooks/${id}/deliveries?event_type=webhook.test`, { key: owner })).body.data).toHaveLength(1)
    expect((await h.call('GET', `/v1/webhooks/${id}/deliveries?event_type=workflow.run.failed`, { key: owner })).body.data).toEqual([])

    const one = await h.call('GET', `/v1/webhooks/${id}/deliveries/${d.id}`, { key: owner })
    expect(one.status).toBe(200)
    expect(one.body.data).toEqual(d)
    expect(one.body.data.status).toBe('pending')
  })

  test('ping reaches a disabled webhook too; deliveries page with limit and cursor', async () => {
    const { id } = await register()
    expect((await h.call('PATCH', `/v1/webhooks/${id}`, { key: owner, body: { enabled: false } })).status).toBe(200)
    const made: string[] = []
    for (let i = 0; i < 3; i++) {
      const ping = await h.call('POST', `/v1/webhooks/${id}/ping`, { key: owner })
      expect(ping.status).toBe(202)
      made.push(ping.body.data.id)
    }
    const first = await h.call('GET', `/v1/webhooks/${id}/deliveries?limit=2`, { key: owner })
    expect(first.body.data).toHaveLength(2)
    expect(first.body.has_more).toBe(true)
    const second = await h.call('GET', `/v1/webhooks/${id}/deliveries?limit=2&cursor=${encodeURIComponent(first.body.next_cursor)}`, { key: owner })
    expect(second.body.data).toHaveLength(1)
    expect(second.body.has_more).toBe(false)
    expect([...first.body.data, ...second.body.data].map((x: { id: string }) => x.id)).toEqual([...made].reverse())
  })
})
