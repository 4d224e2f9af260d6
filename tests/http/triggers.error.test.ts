import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { keyFor, startHarness, workspaceOf, type Harness } from '../helpers/harness'
import { chain, end, start } from '../helpers/runs'
import { fireDueSchedules } from '../../src/domain/workflows/schedules'

setDefaultTimeout(TEST_TIMEOUT_MS)

// No workers run: a hook call's run is inserted and stays `running`, which these tests never need to change.
let h: Harness
let owner: string
let wf: string

beforeAll(async () => {
  h = await startHarness({ RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000' })
  owner = await keyFor(h, 'trg-owner')
  const ws = await workspaceOf(h, owner, 'Triggers')
  const res = await h.call('POST', '/v1/workflows', { key: owner, body: { workspace_id: ws, name: 'T', graph: chain(start([{ name: 'who', type: 'string', required: true }, { name: 'n', type: 'number', required: false }]), end({})) } })
  wf = res.body.data.id
})
afterAll(() => h.close())

const create = (body: unknown) => h.call('POST', `/v1/workflows/${wf}/triggers`, { key: owner, body })
const created = async (body: Record<string, unknown>) => {
  const res = await create(body)
  expect(res.status).toBe(201)
  return res.body.data.id as string
}

describe('creating: 400 validation_error naming the field', () => {
  test.each([
    ['an unknown time zone', { type: 'schedule', cron: '* * * * *', timezone: 'Mars/Olympus_Mons' }, 'timezone'],
    ['an empty-looking time zone', { type: 'schedule', cron: '* * * * *', timezone: 'not a zone' }, 'timezone'],
    ['six fields (seconds)', { type: 'schedule', cron: '* * * * * *' }, 'cron'],
    ['four fields', { type: 'schedule', cron: '* * * *' }, 'cron'],
    ['a nickname', { type: 'schedule', cron: '@hourly' }, 'cron'],
    ['a minute out of range', { type: 'schedule', cron: '61 * * * *' }, 'cron'],
    ['garbage', { type: 'schedule', cron: 'every day at 9' }, 'cron'],
    ['a date that never comes (30 February)', { type: 'schedule', cron: '0 0 30 2 *' }, 'cron'],
    ['a schedule without cron', { type: 'schedule' }, 'cron'],
    ['a schedule with a secret', { type: 'schedule', cron: '* * * * *', secret: 'long-enough-secret' }, 'secret'],
    ['a schedule input the workflow does not declare', { type: 'schedule', cron: '* * * * *', inputs: { who: 'a', nope: 1 } }, 'inputs.nope'],
    ['a schedule input of the wrong type', { type: 'schedule', cron: '* * * * *', inputs: { who: 5 } }, 'inputs.who'],
    ['a schedule missing a required input', { type: 'schedule', cron: '* * * * *', inputs: {} }, 'inputs.who'],
    ['a webhook with a cron', { type: 'webhook', cron: '* * * * *' }, 'cron'],
    ['a webhook with a time zone', { type: 'webhook', timezone: 'UTC' }, 'timezone'],
    ['a webhook template reading something else', { type: 'webhook', inputs: { who: '{{inputs.who}}' } }, 'inputs.who'],
    ['a webhook template that is not a path', { type: 'webhook', inputs: { who: '{{body..x}}' } }, 'inputs.who'],
    ['a webhook input that is not a string', { type: 'webhook', inputs: { n: 5 } }, 'inputs.n'],
  ])('%s', async (_, body, param) => {
    const res = await create(body)
    expect(res.status).toBe(400)
    expect(res.body.error).toMatchObject({ code: 'validation_error', param })
    expect(res.body.error.message).toContain(param)
  })

  test.each([
    ['an unknown type', { type: 'email' }],
    ['an unknown field', { type: 'webhook', url: 'https://example.com' }],
    ['a short secret', { type: 'webhook', secret: 'short' }],
    ['no type', { cron: '* * * * *' }],
  ])('%s: 400', async (_, body) => {
    const res = await create(body)
    expect(res.status).toBe(400)
    expect(res.body.error.code).toBe('validation_error')
  })

  test('a workflow that does not exist: 404', async () => {
    const res = await h.call('POST', '/v1/workflows/wf_missing/triggers', { key: owner, body: { type: 'webhook' } })
    expect(res.status).toBe(404)
    expect(res.body.error.code).toBe('not_found')
  })
})

describe('changing', () => {
  test('a bad cron or time zone: 400 naming it, nothing changed', async () => {
    const id = await created({ type: 'schedule', cron: '0 * * * *', inputs: { who: 'a' } })
    for (const [body, param] of [[{ cron: '* * * * * *' }, 'cron'], [{ timezone: 'Nowhere/Land' }, 'timezone'], [{ secret: 'long-enough-secret' }, 'secret'], [{ inputs: { who: 1 } }, 'inputs.who']] as const) {
      const res = await h.call('PATCH', `/v1/triggers/${id}`, { key: owner, body })
      expect(res.status).toBe(400)
      expect(res.body.error.param).toBe(param)
    }
    const got = await h.call('GET', `/v1/triggers/${id}`, { key: owner })
    expect(got.body.data).toMatchObject({ cron: '0 * * * *', timezone: 'UTC', inputs: { who: 'a' } })
  })

  test('an empty change: 400; a webhook\'s cron: 400', async () => {
    const id = await created({ type: 'webhook' })
    expect((await h.call('PATCH', `/v1/triggers/${id}`, { key: owner, body: {} })).status).toBe(400)
    const res = await h.call('PATCH', `/v1/triggers/${id}`, { key: owner, body: { cron: '* * * * *' } })
    expect(res.status).toBe(400)
    expect(res.body.error.param).toBe('cron')
  })

  test('a trigger that does not exist: 404 on get, change and delete', async () => {
    for (const method of ['GET', 'PATCH', 'DELETE']) {
      const res = await h.call(method, '/v1/triggers/trg_missing', { key: owner, body: method === 'PATCH' ? { enabled: false } : undefined })
      expect(res.status).toBe(404)
    }
  })
})

/** A trigger's hook URL path (its id and token); a made-up token for an id that has none. */
async function hookPath(id: string): Promise<string> {
  const res = await h.call('GET', `/v1/triggers/${id}`)
  const url: string | null = res.status === 200 ? res.body.data.url : null
  return url ? new URL(url).pathname : `/v1/hooks/${id}/${'x'.repeat(43)}`
}

describe('calling a hook', () => {
  const hook = async (id: string, body?: unknown, headers?: Record<string, string>) => h.call('POST', await hookPath(id), { key: null, body, headers })

  test('inputs that fail the workflow\'s checks: 400 naming the input, no run', async () => {
    const id = await created({ type: 'webhook', inputs: { who: '{{body.who}}', n: '{{body.n}}' } })
    const missing = await hook(id, { n: 1 })
    expect(missing.status).toBe(400)
    expect(missing.body.error).toMatchObject({ code: 'validation_error', param: 'inputs.who' })
    const typed = await hook(id, { who: 'a', n: 'three' })
    expect(typed.status).toBe(400)
    expect(typed.body.error.param).toBe('inputs.n')
    const [row] = await h.deps.db.sql<{ n: number }[]>`select count(*)::int as n from runs where user_id = ${`webhook:${id}`}`
    expect(row!.n).toBe(0)
  })

  test('a trigger that does not exist, or a schedule\'s id: 404', async () => {
    expect((await hook('trg_missing', {})).status).toBe(404)
    const schedule = await created({ type: 'schedule', cron: '* * * * *', inputs: { who: 'a' } })
    const res = await hook(schedule, {})
    expect(res.status).toBe(404)
    expect(res.body.error.code).toBe('not_found')
  })

  test('a disabled trigger: 409; enabled again: 202', async () => {
    const id = await created({ type: 'webhook', inputs: { who: '{{body.who}}' }, enabled: false })
    const res = await hook(id, { who: 'a' })
    expect(res.status).toBe(409)
    expect(res.body.error.code).toBe('conflict')
    await h.call('PATCH', `/v1/triggers/${id}`, { key: owner, body: { enabled: true } })
    expect((await hook(id, { who: 'a' })).status).toBe(202)
  })

  test('a body that is not JSON: 400 invalid_json; no body: the templates read nothing', async () => {
    const id = await created({ type: 'webhook', inputs: { who: '{{query.who}}' } })
    const bad = await h.call('POST', await hookPath(id), { key: null, raw: '{nope', headers: { 'content-type': 'application/json' } })
    expect(bad.status).toBe(400)
    expect(bad.body.error.code).toBe('invalid_json')
    const none = await h.call('POST', `${await hookPath(id)}?who=q`, { key: null })
    expect(none.status).toBe(202)
    const [run] = await h.deps.db.sql<{ inputs: unknown }[]>`select inputs from runs where id = ${none.body.run_id}`
    expect(run!.inputs).toEqual({ who: 'q' })
  })

  test('an Idempotency-Key reused with another body: 422', async () => {
    const id = await created({ type: 'webhook', inputs: { who: '{{body.who}}' } })
    expect((await hook(id, { who: 'a' }, { 'Idempotency-Key': 'k-1' })).status).toBe(202)
    const res = await hook(id, { who: 'b' }, { 'Idempotency-Key': 'k-1' })
    expect(res.status).toBe(422)
    expect(res.body.error.code).toBe('idempotency_key_reused')
  })
})

describe('an archived workspace is read-only', () => {
  test('its hooks answer 403 and its schedules tick without a run; restored, both run again', async () => {
    const ws = await workspaceOf(h, owner, 'Archived')
    const flow = (await h.call('POST', '/v1/workflows', { key: owner, body: { workspace_id: ws, name: 'A', graph: chain(start([{ name: 'who', type: 'string' }]), end({})) } })).body.data.id
    const hookId = (await h.call('POST', `/v1/workflows/${flow}/triggers`, { key: owner, body: { type: 'webhook', inputs: { who: '{{body.who}}' } } })).body.data.id
    const scheduleId = (await h.call('POST', `/v1/workflows/${flow}/triggers`, { key: owner, body: { type: 'schedule', cron: '0 0 1 1 *', inputs: { who: 's' } } })).body.data.id
    expect((await h.call('POST', `/v1/workspaces/${ws}/archive`, { key: owner })).status).toBe(200)

    const res = await h.call('POST', await hookPath(hookId), { key: null, body: { who: 'a' } })
    expect(res.status).toBe(403)
    expect(res.body.error.code).toBe('forbidden')
    // No workers run here: one round of the schedule worker's own step, on the real database.
    const due = new Date(Date.now() - 1000)
    await h.deps.db.sql`update triggers set next_run_at = ${due} where id = ${scheduleId}`
    await fireDueSchedules(h.deps, 10)
    const ticks = await h.deps.db.sql<{ run_id: string | null }[]>`select run_id from trigger_ticks where trigger_id = ${scheduleId}`
    expect([...ticks]).toEqual([{ run_id: null }])
    const [after] = await h.deps.db.sql<{ next_run_at: Date }[]>`select next_run_at from triggers where id = ${scheduleId}`
    expect(after!.next_run_at.getTime()).toBeGreaterThan(Date.now())

    expect((await h.call('POST', `/v1/workspaces/${ws}/restore`, { key: owner })).status).toBe(200)
    expect((await h.call('POST', await hookPath(hookId), { key: null, body: { who: 'a' } })).status).toBe(202)
    await h.deps.db.sql`update triggers set next_run_at = ${new Date(Date.now() - 500)} where id = ${scheduleId}`
    const { started } = await fireDueSchedules(h.deps, 10)
    expect(started).toHaveLength(1)
  })
})
