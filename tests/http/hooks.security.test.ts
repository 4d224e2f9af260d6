import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { createHmac, randomBytes } from 'node:crypto'
import { Webhook } from 'standardwebhooks'
import { keyFor, startHarness, workspaceOf, type Answer, type Harness } from '../helpers/harness'
import { chain, end, start } from '../helpers/runs'

/**
 * Hook URLs as an attacker without a key sees them (docs/triggers.md, "Webhooks"): ids that cannot be
 * derived from the `req_` ids every answer shows, a token of the URL's own, rotation, wrong tokens
 * refused per address before any lookup, signed triggers that read only what is signed and refuse
 * replays (X-Signature-256 with a delivery id, Standard Webhooks signed by its own npm package), and
 * credential headers that never reach a run. No workers run: a hook's run is inserted and stays there.
 */
// Hundreds of calls a test on a busy machine: this file's own limit (the preload's may not reach it).
setDefaultTimeout(120_000)

let h: Harness
let flood: Harness
let owner: string
let ws: string
let wf: string
let objectWf: string

const graphOf = (inputs: unknown[]) => chain(start(inputs), end({}))

async function workspaceWorkflow(harness: Harness, key: string, workspaceId: string, inputs: unknown[]): Promise<string> {
  const res = await harness.call('POST', '/v1/workflows', { key, body: { workspace_id: workspaceId, name: 'Hooks', graph: graphOf(inputs) } })
  expect(res.status).toBe(201)
  return res.body.data.id
}

async function webhook(body: Record<string, unknown>, workflowId = wf, harness = h, key = owner): Promise<{ id: string; path: string }> {
  const res = await harness.call('POST', `/v1/workflows/${workflowId}/triggers`, { key, body: { type: 'webhook', ...body } })
  expect(res.status).toBe(201)
  return { id: res.body.data.id, path: new URL(res.body.data.url).pathname }
}

const post = (path: string, raw: string, headers: Record<string, string> = {}, harness = h) =>
  harness.call('POST', path, { key: null, raw, headers: { 'content-type': 'application/json', ...headers } })

const runsOf = async (triggerId: string) =>
  (await h.deps.db.sql<{ id: string; inputs: Record<string, unknown> }[]>`select id, inputs from runs where user_id = ${`webhook:${triggerId}`} order by created_at`).map((r) => ({ ...r }))

beforeAll(async () => {
  ;[h, flood] = await Promise.all([
    startHarness({ RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000' }),
    startHarness({ RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000' }),
  ])
  owner = await keyFor(h, 'hook-owner')
  ws = await workspaceOf(h, owner, 'Hooks')
  wf = await workspaceWorkflow(h, owner, ws, [{ name: 'who', type: 'string' }])
  objectWf = await workspaceWorkflow(h, owner, ws, [{ name: 'all', type: 'object', required: false }, { name: 'who', type: 'string', required: false }])
}, 120_000)
afterAll(async () => {
  await Promise.all([h?.close(), flood?.close()])
})

const CROCKFORD = '0123456789abcdefghjkmnpqrstvwxyz'
const randomOf = (id: string) => [...id.slice(id.indexOf('_') + 11)].reduce((n, c) => n * 32n + BigInt(CROCKFORD.indexOf(c)), 0n)
const msOf = (id: string) => id.slice(id.indexOf('_') + 1, id.indexOf('_') + 11)

describe('ids cannot be derived from the req_ ids an attacker sees', () => {
  test('trigger ids made in the same millisecond as the attacker\'s own req_ ids are nowhere near them', async () => {
    const seen: string[] = []
    const made: string[] = []
    let stop = false
    // The attacker: no key, a 401 each time, and its X-Request-Id.
    const watcher = (async () => {
      while (!stop) {
        const res = await h.call('GET', '/v1/workspaces', { key: null })
        seen.push(res.headers.get('x-request-id')!)
        // A 401 touches no socket: without a turn of the event loop this loop would starve the database's.
        await new Promise((resolve) => setImmediate(resolve))
      }
    })()
    const deadline = Date.now() + 60_000
    let shared: string[] = []
    while (Date.now() < deadline) {
      made.push((await webhook({ inputs: { who: '{{body.who}}' } })).id)
      const attackerMs = new Set(seen.map(msOf))
      shared = made.filter((id) => attackerMs.has(msOf(id)))
      if (shared.length >= 5) break
    }
    stop = true
    await watcher
    expect(shared.length).toBeGreaterThanOrEqual(5)
    for (const id of shared) {
      // Monotonic ids put the trigger a few increments after the req_ id before it (±4 found 9 of 13).
      const near = seen.filter((r) => msOf(r) === msOf(id)).filter((r) => {
        const d = randomOf(id) - randomOf(r)
        return d >= -1_000_000n && d <= 1_000_000n
      })
      expect({ id, near }).toEqual({ id, near: [] })
    }
  }, 120_000)

  test('even with the trigger id, its hook cannot be called: the old URL and guessed tokens are 404, and start nothing', async () => {
    const t = await webhook({ inputs: { who: '{{body.who}}' } })
    const old = await post(`/v1/hooks/${t.id}`, '{"who":"eve"}')
    expect(old.status).toBe(404)
    expect(old.body.error.message).toContain('/v1/hooks/{trigger_id}/{token}')
    for (const token of [randomBytes(32).toString('hex'), 'a'.repeat(43), t.path.split('/').pop()!.slice(0, -1) + 'x']) {
      const res = await post(`/v1/hooks/${t.id}/${token}`, '{"who":"eve"}')
      expect({ token, status: res.status, code: res.body.error?.code }).toEqual({ token, status: 404, code: 'not_found' })
    }
    expect(await runsOf(t.id)).toEqual([])
    expect((await post(t.path, '{"who":"ada"}')).status).toBe(202)
  })

  test('the token is 256 random bits of base62, and is not logged in the access log', async () => {
    const t = await webhook({ inputs: { who: '{{body.who}}' } })
    expect(t.path).toMatch(new RegExp(`^/v1/hooks/${t.id}/[A-Za-z0-9]{43}$`))
    const { loggedPath } = await import('../../src/routes/plugins/request-state')
    expect(loggedPath(t.path)).toBe(`/v1/hooks/${t.id}/***`)
  })
})

describe('POST /v1/workflows/{id}/triggers/{trigger_id}/rotate', () => {
  test('a new URL at once; the old one is 404; audited', async () => {
    const t = await webhook({ inputs: { who: '{{body.who}}' } })
    expect((await post(t.path, '{"who":"before"}')).status).toBe(202)
    const res = await h.call('POST', `/v1/workflows/${wf}/triggers/${t.id}/rotate`, { key: owner })
    expect(res.status).toBe(200)
    expect(res.body.data).toMatchObject({ id: t.id, type: 'webhook' })
    const next = new URL(res.body.data.url).pathname
    expect(next).not.toBe(t.path)
    expect(next.startsWith(`/v1/hooks/${t.id}/`)).toBe(true)
    expect((await post(t.path, '{"who":"old"}')).status).toBe(404)
    expect((await post(next, '{"who":"new"}')).status).toBe(202)
    expect((await h.call('GET', `/v1/triggers/${t.id}`, { key: owner })).body.data.url).toBe(res.body.data.url)
    expect((await runsOf(t.id)).map((r) => r.inputs.who)).toEqual(['before', 'new'])
    const audit = await h.call('GET', `/v1/workspaces/${ws}/audit-log?resource_id=${t.id}&sort=created_at`, { key: owner })
    expect(audit.body.data.map((e: any) => e.action)).toContain('POST /v1/workflows/{id}/triggers/{trigger_id}/rotate')
  })

  test('roles as for changing a trigger; a schedule 409; another workflow\'s trigger or a stranger 404', async () => {
    const t = await webhook({ inputs: { who: '{{body.who}}' } })
    const [member, reader, outsider] = await Promise.all(['rot-user', 'rot-reader', 'rot-outsider'].map((u) => keyFor(h, u)))
    await h.call('POST', `/v1/workspaces/${ws}/members`, { key: owner, body: { user_id: 'rot-user', role: 'user' } })
    await h.call('POST', `/v1/workspaces/${ws}/members`, { key: owner, body: { user_id: 'rot-reader', role: 'readonly' } })
    for (const key of [member!, reader!]) {
      const res = await h.call('POST', `/v1/workflows/${wf}/triggers/${t.id}/rotate`, { key })
      expect({ status: res.status, code: res.body.error?.code }).toEqual({ status: 403, code: 'forbidden' })
    }
    expect((await h.call('POST', `/v1/workflows/${wf}/triggers/${t.id}/rotate`, { key: outsider! })).status).toBe(404)
    expect((await h.call('POST', `/v1/workflows/${objectWf}/triggers/${t.id}/rotate`, { key: owner })).status).toBe(404)
    const schedule = await h.call('POST', `/v1/workflows/${wf}/triggers`, { key: owner, body: { type: 'schedule', cron: '0 0 1 1 *', inputs: { who: 's' } } })
    const res = await h.call('POST', `/v1/workflows/${wf}/triggers/${schedule.body.data.id}/rotate`, { key: owner })
    expect({ status: res.status, code: res.body.error?.code }).toEqual({ status: 409, code: 'conflict' })
    // The URL did not change for any of them.
    expect((await post(t.path, '{"who":"still"}')).status).toBe(202)
  })
})

describe('wrong tokens are refused per address before any lookup', () => {
  test('20 wrong URLs are 404, then 429 with Retry-After; after that no call reaches the database', async () => {
    const key = await keyFor(flood, 'flood-owner')
    const space = await workspaceOf(flood, key, 'Flood')
    const flow = await workspaceWorkflow(flood, key, space, [{ name: 'who', type: 'string' }])
    const good = await webhook({ inputs: { who: '{{body.who}}' } }, flow, flood, key)
    // Every statement of the hook route goes through deps.db.sql (store/triggers.ts): counted here
    // as it passes to the real database, unchanged.
    let queries = 0
    const real = flood.deps.db.sql
    flood.deps.db.sql = new Proxy(real, {
      apply(target, self, args) {
        queries++
        return Reflect.apply(target as never, self, args)
      },
      get(target, prop, receiver) {
        if (prop === 'begin' || prop === 'unsafe' || prop === 'reserve') queries++
        return Reflect.get(target, prop, receiver)
      },
    })
    try {
      const statuses: number[] = []
      let limited: Answer | undefined
      for (let i = 0; i < 21; i++) {
        const res = await post(`/v1/hooks/${good.id}/${randomBytes(32).toString('hex')}`, '{"who":"eve"}', {}, flood)
        statuses.push(res.status)
        if (res.status === 429) limited ??= res
      }
      expect(statuses.slice(0, 20)).toEqual(new Array(20).fill(404))
      expect(statuses[20]).toBe(429)
      expect(limited!.body.error.code).toBe('rate_limited')
      expect(Number(limited!.headers.get('retry-after'))).toBeGreaterThanOrEqual(1)

      queries = 0
      const flooded: number[] = []
      for (let i = 0; i < 200; i++) {
        const path = i % 4 === 0 ? `/v1/hooks/${good.id}` : i % 4 === 1 ? `/v1/hooks/trg_${'0'.repeat(26)}/short` : `/v1/hooks/${good.id}/${randomBytes(32).toString('hex')}`
        flooded.push((await post(path, '{"who":"eve"}', {}, flood)).status)
      }
      expect(new Set(flooded)).toEqual(new Set([429]))
      expect(queries).toBe(0)
      // The address is refused as a whole until the block ends, the right URL included: still no query.
      expect((await post(good.path, '{"who":"ada"}', {}, flood)).status).toBe(429)
      expect(queries).toBe(0)
    } finally {
      flood.deps.db.sql = real
    }
  })
})

describe('signed triggers', () => {
  const sign = (secret: string, raw: string) => `sha256=${createHmac('sha256', secret).update(raw).digest('hex')}`

  test.each([
    ['the query', { who: '{{query.who}}' }],
    ['a header', { who: '{{headers.x-who}}' }],
    ['every header', { all: '{{headers}}' }],
    ['the query, inside text', { who: 'from {{body.who}} and {{query.ref}}' }],
  ])('saving a secret with inputs from %s: 400 naming the input', async (_, inputs) => {
    const res = await h.call('POST', `/v1/workflows/${objectWf}/triggers`, { key: owner, body: { type: 'webhook', secret: 'a-long-random-secret', inputs } })
    expect(res.status).toBe(400)
    expect(res.body.error).toMatchObject({ code: 'validation_error', param: `inputs.${Object.keys(inputs)[0]}` })
    expect(res.body.error.message).toContain('body')
  })

  test('adding a secret to a trigger that reads the query, or a query input to a signed one: 400, nothing changed', async () => {
    const plain = await webhook({ inputs: { who: '{{query.who}}' } })
    const res = await h.call('PATCH', `/v1/triggers/${plain.id}`, { key: owner, body: { secret: 'a-long-random-secret' } })
    expect(res.status).toBe(400)
    expect(res.body.error.param).toBe('inputs.who')
    expect((await post(`${plain.path}?who=q`, '')).status).toBe(202)
    const signed = await webhook({ inputs: { who: '{{body.who}}' }, secret: 'a-long-random-secret' })
    const change = await h.call('PATCH', `/v1/triggers/${signed.id}`, { key: owner, body: { inputs: { who: '{{headers.x-who}}' } } })
    expect(change.status).toBe(400)
    expect(change.body.error.param).toBe('inputs.who')
  })

  test.each([['X-GitHub-Delivery'], ['X-Hook-Delivery']])('X-Signature-256 with %s: the same delivery again is a replay, 200, nothing starts', async (header) => {
    const secret = `s-${crypto.randomUUID()}`
    const t = await webhook({ inputs: { who: '{{body.who}}' }, secret })
    const raw = JSON.stringify({ who: 'ada' })
    const delivery = crypto.randomUUID()
    const first = await post(t.path, raw, { 'X-Signature-256': sign(secret, raw), [header]: delivery })
    expect(first.status).toBe(202)
    const again = await post(t.path, raw, { 'X-Signature-256': sign(secret, raw), [header]: delivery })
    expect(again.status).toBe(200)
    expect(again.body).toEqual({ request_id: again.headers.get('x-request-id'), run_id: first.body.run_id, status: 'replayed' })
    expect((await runsOf(t.id)).map((r) => r.id)).toEqual([first.body.run_id])
    // Another delivery id is another delivery.
    expect((await post(t.path, raw, { 'X-Signature-256': sign(secret, raw), [header]: crypto.randomUUID() })).status).toBe(202)
  })

  describe('Standard Webhooks, signed by the standardwebhooks package', () => {
    const secret = `whsec_${randomBytes(32).toString('base64')}`
    const sender = new Webhook(secret)
    let t: { id: string; path: string }
    beforeAll(async () => {
      t = await webhook({ inputs: { who: '{{body.who}}' }, secret })
    })
    const headersFor = (id: string, at: Date, raw: string, by = sender) => ({ 'webhook-id': id, 'webhook-timestamp': String(Math.floor(at.getTime() / 1000)), 'webhook-signature': by.sign(id, at, raw) })

    test('a signed call starts a run; the same webhook-id again is a replay', async () => {
      const raw = JSON.stringify({ who: 'standard' })
      const headers = headersFor(`msg_${crypto.randomUUID()}`, new Date(), raw)
      const first = await post(t.path, raw, headers)
      expect(first.status).toBe(202)
      const again = await post(t.path, raw, headers)
      expect(again.status).toBe(200)
      expect(again.body).toMatchObject({ run_id: first.body.run_id, status: 'replayed' })
      expect((await runsOf(t.id)).map((r) => r.inputs)).toEqual([{ who: 'standard' }])
    })

    test('several signatures (a secret being rotated): any one that matches', async () => {
      const raw = JSON.stringify({ who: 'two' })
      const id = `msg_${crypto.randomUUID()}`
      const at = new Date()
      const other = new Webhook(`whsec_${randomBytes(32).toString('base64')}`)
      const headers = { ...headersFor(id, at, raw), 'webhook-signature': `${other.sign(id, at, raw)} ${sender.sign(id, at, raw)}` }
      expect((await post(t.path, raw, headers)).status).toBe(202)
    })

    test.each<[string, (raw: string) => Record<string, string>]>([
      ['a timestamp 6 minutes old', (raw) => headersFor(`msg_${crypto.randomUUID()}`, new Date(Date.now() - 6 * 60_000), raw)],
      ['a timestamp 6 minutes ahead', (raw) => headersFor(`msg_${crypto.randomUUID()}`, new Date(Date.now() + 6 * 60_000), raw)],
      ['another secret', (raw) => headersFor(`msg_${crypto.randomUUID()}`, new Date(), raw, new Webhook(`whsec_${randomBytes(32).toString('base64')}`))],
      ['another body', (raw) => headersFor(`msg_${crypto.randomUUID()}`, new Date(), `${raw} `)],
      ['a captured call replayed under a fresh webhook-id', (raw) => ({ ...headersFor('msg_captured', new Date(), raw), 'webhook-id': `msg_${crypto.randomUUID()}` })],
      ['no webhook-timestamp', (raw) => { const { 'webhook-timestamp': _, ...rest } = headersFor(`msg_${crypto.randomUUID()}`, new Date(), raw); return rest }],
    ])('%s: 401, nothing starts', async (_, headersOf) => {
      const raw = JSON.stringify({ who: 'eve' })
      const before = (await runsOf(t.id)).length
      const res = await post(t.path, raw, headersOf(raw))
      expect({ status: res.status, code: res.body.error?.code }).toEqual({ status: 401, code: 'unauthenticated' })
      expect((await runsOf(t.id)).length).toBe(before)
    })

    test('a whsec_ secret that is not the base64 of 24 to 64 bytes: 400 naming secret', async () => {
      for (const bad of ['whsec_not*base64*at*all', `whsec_${randomBytes(8).toString('base64')}`]) {
        const res = await h.call('POST', `/v1/workflows/${wf}/triggers`, { key: owner, body: { type: 'webhook', secret: bad, inputs: {} } })
        expect({ bad, status: res.status, param: res.body.error?.param }).toEqual({ bad, status: 400, param: 'secret' })
      }
    })
  })
})

describe('credentials sent to a hook never reach a run', () => {
  test('every header mapped: no Authorization, Proxy-Authorization, Cookie or X-Api-Key in the run\'s inputs', async () => {
    const t = await webhook({ inputs: { all: '{{headers}}' } }, objectWf)
    const res = await post(t.path, '{}', {
      Authorization: `Bearer ${owner}`,
      'Proxy-Authorization': 'Basic cHJveHk6c2VjcmV0',
      Cookie: 'session=cookie-secret',
      'X-Api-Key': owner,
      'X-Shop': 'berlin',
    })
    expect(res.status).toBe(202)
    const [run] = await runsOf(t.id)
    const text = JSON.stringify(run!.inputs)
    expect(run!.inputs.all).toMatchObject({ 'x-shop': 'berlin' })
    for (const leaked of [owner, 'cookie-secret', 'cHJveHk6c2VjcmV0', 'authorization', 'cookie', 'x-api-key']) expect(text).not.toContain(leaked)
  })

  test.each([['authorization'], ['Authorization'], ['cookie'], ['x-api-key'], ['proxy-authorization']])('a template naming the %s header: 400 naming the input', async (name) => {
    const res = await h.call('POST', `/v1/workflows/${objectWf}/triggers`, { key: owner, body: { type: 'webhook', inputs: { who: `{{headers.${name}}}` } } })
    expect(res.status).toBe(400)
    expect(res.body.error).toMatchObject({ code: 'validation_error', param: 'inputs.who' })
  })
})
