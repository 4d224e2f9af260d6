import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { createHmac } from 'node:crypto'
import { nextTick } from '../../src/domain/workflows/schedules'
import { waitFor } from '../helpers/harness'
import { chain, end, start, startRunsEnv, tpl, type RunsEnv } from '../helpers/runs'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Triggers through the real app and workers (docs/triggers.md): create, list, get, change and delete;
 * a schedule firing for real (its next_run_at set to now in the database: cron has minute
 * resolution), and hook calls starting runs with inputs mapped from the call.
 */

let env: RunsEnv
let wf: string

beforeAll(async () => {
  env = await startRunsEnv()
  wf = await env.workflow(chain(
    start([{ name: 'who', type: 'string' }, { name: 'count', type: 'number', required: false }, { name: 'tags', type: 'array', required: false }, { name: 'agent', type: 'string', required: false }]),
    tpl('greet', 'hi {{inputs.who}}'),
    end({ text: '{{nodes.greet.output.text}}' }),
  ))
}, 60_000)
afterAll(() => env.close())

/** Once fired, the schedule's own next tick is months away: the only ticks are the ones a test makes due. */
const YEARLY = '0 0 1 1 *'
const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/
const META = { version: 'v1', deprecated_warnings: [] }
const FIELDS = ['created_at', 'cron', 'enabled', 'id', 'inputs', 'last_run_at', 'last_run_id', 'next_run_at', 'timezone', 'type', 'updated_at', 'url', 'workflow_id', 'workspace_id']

const create = (body: Record<string, unknown>, workflow = wf) => env.h.call('POST', `/v1/workflows/${workflow}/triggers`, { key: env.owner, body })
/** A call to a webhook trigger's url (its id and token). */
const hook = (t: { url: string }, opts: { body?: unknown; raw?: string; query?: string; headers?: Record<string, string> } = {}) =>
  env.h.call('POST', `${t.url.slice(env.h.base.length)}${opts.query ?? ''}`, { key: null, body: opts.body, raw: opts.raw, headers: opts.raw !== undefined ? { 'content-type': 'application/json', ...opts.headers } : opts.headers })

/** Ticks and runs of a trigger, from the database. */
const ticksOf = (id: string) => env.h.deps.db.sql<{ tick_at: Date; run_id: string | null }[]>`select tick_at, run_id from trigger_ticks where trigger_id = ${id} order by tick_at`
const runsOf = (id: string) => env.h.deps.db.sql<{ id: string }[]>`select id from runs where user_id = ${`schedule:${id}`}`

describe('schedules', () => {
  test('201 in the envelope with every field; `* * * * *` is due at the next minute', async () => {
    const before = Date.now()
    const res = await create({ type: 'schedule', cron: '* * * * *', inputs: { who: 'cron' } })
    expect(res.status).toBe(201)
    expect(res.body).toEqual({ request_id: res.headers.get('x-request-id'), data: expect.any(Object), meta: META })
    const t = res.body.data
    expect(Object.keys(t).sort()).toEqual(FIELDS)
    expect(t).toMatchObject({ id: expect.stringMatching(/^trg_[0-9a-z]{26}$/), workflow_id: wf, type: 'schedule', enabled: true, cron: '* * * * *', timezone: 'UTC', inputs: { who: 'cron' }, last_run_at: null, last_run_id: null, url: null })
    expect(t.created_at).toMatch(ISO_MS)
    const next = Date.parse(t.next_run_at)
    const minute = Math.floor(before / 60_000) * 60_000 + 60_000
    // The next whole minute after the request (or the one after, if the minute turned meanwhile).
    expect(next % 60_000).toBe(0)
    expect([minute, minute + 60_000]).toContain(next)
    await env.h.call('DELETE', `/v1/triggers/${t.id}`, { key: env.owner })
  })

  test('a time zone: the next tick is computed in it', async () => {
    const res = await create({ type: 'schedule', cron: '0 9 * * *', timezone: 'America/New_York', inputs: { who: 'ny' } })
    expect(res.status).toBe(201)
    expect(res.body.data.timezone).toBe('America/New_York')
    const hour = new Intl.DateTimeFormat('en-US', { timeZone: 'America/New_York', hour: 'numeric', hourCycle: 'h23' }).format(new Date(res.body.data.next_run_at))
    expect(Number(hour)).toBe(9)
  })

  test('a due tick runs once, as schedule:<id>, and the next tick is after now; a replayed tick starts nothing', async () => {
    const t = (await create({ type: 'schedule', cron: YEARLY, inputs: { who: 'tick' } })).body.data
    const due = new Date(Date.now() - 5)
    await env.h.deps.db.sql`update triggers set next_run_at = ${due} where id = ${t.id}`
    env.workers.schedules.nudge()
    const got = await waitFor(async () => {
      const r = (await env.h.call('GET', `/v1/triggers/${t.id}`, { key: env.owner })).body.data
      return r.last_run_id ? r : null
    }, { what: 'the tick to start a run' })
    expect(Date.parse(got.next_run_at)).toBeGreaterThan(due.getTime())
    expect(got.last_run_at).toMatch(ISO_MS)
    const run = await env.finished(got.last_run_id)
    expect(run).toMatchObject({ status: 'completed', user_id: `schedule:${t.id}`, inputs: { who: 'tick' }, outputs: { text: 'hi tick' } })
    expect((await ticksOf(t.id)).map((k) => k.run_id)).toEqual([got.last_run_id])

    // The same tick made due again (a clock set back, a restored backup): its record says it ran.
    await env.h.deps.db.sql`update triggers set next_run_at = ${due} where id = ${t.id}`
    env.workers.schedules.nudge()
    await waitFor(async () => {
      const [row] = await env.h.deps.db.sql<{ next_run_at: Date }[]>`select next_run_at from triggers where id = ${t.id}`
      return row!.next_run_at.getTime() > Date.now()
    }, { what: 'the schedule to move past the replayed tick' })
    expect(await runsOf(t.id)).toHaveLength(1)
    expect(await ticksOf(t.id)).toHaveLength(1)
  })

  test('three ticks in a row: one run each', async () => {
    const t = (await create({ type: 'schedule', cron: YEARLY, inputs: { who: 'row' } })).body.data
    for (let i = 1; i <= 3; i++) {
      // Distinct tick times, each due: a second apart in the past.
      await env.h.deps.db.sql`update triggers set next_run_at = ${new Date(Date.now() - 10_000 + i * 1000)} where id = ${t.id}`
      env.workers.schedules.nudge()
      await waitFor(async () => (await ticksOf(t.id)).length === i, { what: `tick ${i}` })
    }
    const ticks = await ticksOf(t.id)
    const runs = await runsOf(t.id)
    expect(runs).toHaveLength(3)
    expect(new Set(ticks.map((k) => k.run_id))).toEqual(new Set(runs.map((r) => r.id)))
  })

  test('disabled: no next tick; enabled again: the next tick from now', async () => {
    const t = (await create({ type: 'schedule', cron: '*/5 * * * *', inputs: { who: 'x' }, enabled: false })).body.data
    expect(t).toMatchObject({ enabled: false, next_run_at: null })
    const on = await env.h.call('PATCH', `/v1/triggers/${t.id}`, { key: env.owner, body: { enabled: true } })
    expect(on.status).toBe(200)
    expect(on.body.data.enabled).toBe(true)
    expect(Date.parse(on.body.data.next_run_at) % 300_000).toBe(0)
    const moved = await env.h.call('PATCH', `/v1/triggers/${t.id}`, { key: env.owner, body: { cron: '0 0 1 1 *', timezone: 'Europe/Berlin', inputs: { who: 'y' } } })
    expect(moved.status).toBe(200)
    expect(moved.body.data).toMatchObject({ cron: '0 0 1 1 *', timezone: 'Europe/Berlin', inputs: { who: 'y' } })
    // Midnight of 1 January in Berlin is 23:00 UTC on 31 December.
    expect(moved.body.data.next_run_at).toMatch(/-12-31T23:00:00\.000Z$/)
    const off = await env.h.call('PATCH', `/v1/triggers/${t.id}`, { key: env.owner, body: { enabled: false } })
    expect(off.body.data).toMatchObject({ enabled: false, next_run_at: null })
  })
})

describe('daylight-saving changes (Europe/Berlin), from fixed dates', () => {
  const at = (iso: string) => new Date(iso)
  test.each([
    ['09:00 daily across the March change: 08:00Z in winter, 07:00Z in summer', '0 9 * * *', '2026-03-28T12:00:00Z', '2026-03-29T07:00:00.000Z'],
    ['09:00 the day before the March change', '0 9 * * *', '2026-03-27T12:00:00Z', '2026-03-28T08:00:00.000Z'],
    ['02:30 does not exist on 29 March: it fires when the gap ends (03:00 CEST)', '30 2 * * *', '2026-03-28T12:00:00Z', '2026-03-29T01:00:00.000Z'],
    ['02:30 the day after the March change', '30 2 * * *', '2026-03-29T12:00:00Z', '2026-03-30T00:30:00.000Z'],
    ['02:30 happens twice on 25 October: it fires once, the first time (CEST)', '30 2 * * *', '2026-10-24T12:00:00Z', '2026-10-25T00:30:00.000Z'],
    ['after the first 02:30 of 25 October, the next is the 26th (not the second 02:30)', '30 2 * * *', '2026-10-25T00:30:00Z', '2026-10-26T01:30:00.000Z'],
    ['09:00 daily across the October change: 07:00Z in summer, 08:00Z in winter', '0 9 * * *', '2026-10-25T06:00:00Z', '2026-10-25T08:00:00.000Z'],
  ])('%s', (_, cron, from, expected) => {
    expect(nextTick(cron, 'Europe/Berlin', at(from))!.toISOString()).toBe(expected)
  })

  test('hourly across the October change: every real hour once, none twice', () => {
    const ticks: string[] = []
    let t = at('2026-10-24T22:30:00Z')
    for (let i = 0; i < 5; i++) {
      t = nextTick('0 * * * *', 'Europe/Berlin', t)!
      ticks.push(t.toISOString())
    }
    expect(ticks).toEqual(['2026-10-24T23:00:00.000Z', '2026-10-25T00:00:00.000Z', '2026-10-25T01:00:00.000Z', '2026-10-25T02:00:00.000Z', '2026-10-25T03:00:00.000Z'])
  })
})

describe('webhooks', () => {
  test('201 with the url; a call starts a run with inputs from body, query and headers, types kept', async () => {
    const res = await create({
      type: 'webhook',
      inputs: { who: '{{body.user.name}}', count: '{{body.n}}', tags: '{{body.tags}}', agent: '{{headers.x-agent}} via {{query.src}}' },
    })
    expect(res.status).toBe(201)
    const t = res.body.data
    expect(Object.keys(t).sort()).toEqual(FIELDS)
    expect(t.url).toMatch(new RegExp(`^${env.h.base}/v1/hooks/${t.id}/[A-Za-z0-9]{43}$`))
    expect(t).toMatchObject({ type: 'webhook', enabled: true, cron: null, timezone: null, next_run_at: null })
    const call = await hook(t, { body: { user: { name: 'Ada' }, n: 3, tags: ['a', 'b'] }, query: '?src=shop', headers: { 'X-Agent': 'curl' } })
    expect(call.status).toBe(202)
    expect(call.body).toEqual({ request_id: call.headers.get('x-request-id'), run_id: expect.stringMatching(/^run_/), status: 'running' })
    const run = await env.finished(call.body.run_id)
    expect(run).toMatchObject({ status: 'completed', user_id: `webhook:${t.id}`, inputs: { who: 'Ada', count: 3, tags: ['a', 'b'], agent: 'curl via shop' }, outputs: { text: 'hi Ada' } })
    const after = (await env.h.call('GET', `/v1/triggers/${t.id}`, { key: env.owner })).body.data
    expect(after).toMatchObject({ last_run_id: call.body.run_id, last_run_at: expect.stringMatching(ISO_MS) })
  })

  test('signed: a good X-Signature-256 is 202', async () => {
    const secret = 'a-long-random-secret'
    const t = (await create({ type: 'webhook', inputs: { who: '{{body.who}}' }, secret })).body.data
    const raw = JSON.stringify({ who: 'Signed' })
    const sig = `sha256=${createHmac('sha256', secret).update(raw).digest('hex')}`
    const call = await hook(t, { raw, headers: { 'X-Signature-256': sig } })
    expect(call.status).toBe(202)
    expect((await env.finished(call.body.run_id)).inputs).toEqual({ who: 'Signed' })
  })

  test('Idempotency-Key: the same run_id again, one run', async () => {
    const t = (await create({ type: 'webhook', inputs: { who: '{{body.who}}' } })).body.data
    const first = await hook(t, { body: { who: 'Once' }, headers: { 'Idempotency-Key': 'order-1' } })
    const again = await hook(t, { body: { who: 'Once' }, headers: { 'Idempotency-Key': 'order-1' } })
    expect(first.status).toBe(202)
    expect(again.status).toBe(202)
    expect(again.body.run_id).toBe(first.body.run_id)
    expect(again.headers.get('idempotent-replayed')).toBe('true')
    const [row] = await env.h.deps.db.sql<{ n: number }[]>`select count(*)::int as n from runs where user_id = ${`webhook:${t.id}`}`
    expect(row!.n).toBe(1)
  })

  test('list, get, change and delete; a deleted workflow takes its triggers', async () => {
    const other = await env.workflow(chain(start([{ name: 'who', type: 'string' }]), end({})))
    const a = (await create({ type: 'webhook', inputs: {} }, other)).body.data
    const b = (await create({ type: 'schedule', cron: '0 * * * *', inputs: { who: 'b' } }, other)).body.data
    const list = await env.h.call('GET', `/v1/workflows/${other}/triggers`, { key: env.owner })
    expect(list.status).toBe(200)
    expect(list.body).toMatchObject({ request_id: expect.any(String), has_more: false, next_cursor: null })
    expect(list.body.data.map((x: any) => x.id)).toEqual([b.id, a.id])
    const page = await env.h.call('GET', `/v1/workflows/${other}/triggers?limit=1&sort=created_at`, { key: env.owner })
    expect(page.body.data.map((x: any) => x.id)).toEqual([a.id])
    expect(page.body.has_more).toBe(true)
    const got = await env.h.call('GET', `/v1/triggers/${a.id}`, { key: env.owner })
    expect(got.body.data).toEqual(a)
    const changed = await env.h.call('PATCH', `/v1/triggers/${a.id}`, { key: env.owner, body: { inputs: { who: '{{body.who}}' }, secret: 'now-signed-secret' } })
    expect(changed.status).toBe(200)
    expect(changed.body.data.inputs).toEqual({ who: '{{body.who}}' })
    const deleted = await env.h.call('DELETE', `/v1/triggers/${a.id}`, { key: env.owner })
    expect(deleted.body).toMatchObject({ data: { id: a.id, deleted: true }, meta: META })
    expect((await env.h.call('GET', `/v1/triggers/${a.id}`, { key: env.owner })).status).toBe(404)
    expect((await env.h.call('DELETE', `/v1/workflows/${other}`, { key: env.owner })).status).toBe(200)
    expect((await env.h.call('GET', `/v1/triggers/${b.id}`, { key: env.owner })).status).toBe(404)
    const [row] = await env.h.deps.db.sql<{ n: number }[]>`select count(*)::int as n from triggers where workflow_id = ${other}`
    expect(row!.n).toBe(0)
    // Every write is in the workspace's audit trail, the delete included (its workspace read first).
    const audit = await env.h.call('GET', `/v1/workspaces/${env.ws}/audit-log?resource_id=${a.id}&sort=created_at`, { key: env.owner })
    expect(audit.body.data.map((e: any) => e.action)).toEqual(['POST /v1/workflows/{id}/triggers', 'PATCH /v1/triggers/{id}', 'DELETE /v1/triggers/{id}'])
  })
})
