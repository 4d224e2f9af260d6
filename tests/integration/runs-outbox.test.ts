import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { waitFor, type Answer } from '../helpers/harness'
import { chain, end, start, startRunsEnv, wait, type RunsEnv } from '../helpers/runs'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Runs end to end in-process (tests/helpers/runs.ts): the outbox events of finished runs, the runs
 * list, the roles of the workspace's readonly member and of an outsider, and a webhook delivered to the
 * loopback receiver.
 */

let env: RunsEnv

beforeAll(async () => {
  env = await startRunsEnv()
})

afterAll(async () => {
  await env?.close()
})

describe('outbox, lists, roles, webhooks', () => {
  let wf: string
  beforeAll(async () => {
    wf = await env.workflow(
      chain(
        start([{ name: 'fail', type: 'boolean', default: false }]),
        { id: 'check', type: 'code', config: { source: 'function main(vars) { if (vars.inputs.fail) throw new Error("asked to fail"); return { ok: true } }' } },
        end({ ok: '{{nodes.check.output.ok}}' }),
      ),
    )
  })

  test('a completed run writes one workflow.run.completed event; a failed one workflow.run.failed', async () => {
    const ok = await env.trigger(wf)
    expect(ok.body.status).toBe('completed')
    const completed = await env.outboxOf(ok.body.run_id)
    expect(completed.length).toBe(1)
    expect(completed[0]!.type).toBe('workflow.run.completed')
    const run = await env.runOf(ok.body.run_id)
    expect(completed[0]!.data).toEqual({ workflow_id: wf, run_id: ok.body.run_id, status: 'completed', duration_ms: run.duration_ms, outputs: { ok: true } })

    const bad = await env.trigger(wf, { fail: true })
    expect(bad.body.status).toBe('failed')
    const failed = await env.outboxOf(bad.body.run_id)
    expect(failed.map((e) => e.type)).toEqual(['workflow.run.failed'])
    expect(failed[0]!.data).toEqual({ workflow_id: wf, run_id: bad.body.run_id, status: 'failed', duration_ms: expect.any(Number), error: bad.body.error })
    expect(bad.body.error).toMatchObject({ code: 'code_error', node: 'check' })
  })

  test('runs list: status filters and pagination', async () => {
    const list = await env.workflow(chain(start([{ name: 'fail', type: 'boolean', default: false }]), { id: 'check', type: 'code', config: { source: 'function main(vars) { if (vars.inputs.fail) throw new Error("no"); return {} }' } }, end({})))
    const ids: string[] = []
    for (const fail of [false, true, false, false, true]) ids.push((await env.trigger(list, { fail })).body.run_id)
    const get = (q: string) => env.h.call('GET', `/v1/workflows/${list}/runs?${q}`, { key: env.owner })
    const completed = await get('status=completed')
    expect(completed.status).toBe(200)
    expect(completed.body.data.map((r: any) => r.status)).toEqual(['completed', 'completed', 'completed'])
    expect((await get('status=failed')).body.data.length).toBe(2)
    expect((await get('status_in=completed,failed')).body.data.length).toBe(5)
    expect((await get('status=running')).body.data.length).toBe(0)
    // Pages of two, newest first by default.
    const seen: string[] = []
    let cursor: string | null = null
    do {
      const page: Answer = await get(`limit=2${cursor ? `&cursor=${cursor}` : ''}`)
      expect(page.status).toBe(200)
      expect(page.body.data.length).toBeLessThanOrEqual(2)
      expect(page.body.has_more).toBe(page.body.next_cursor !== null)
      seen.push(...page.body.data.map((r: any) => r.run_id))
      cursor = page.body.next_cursor
    } while (cursor)
    expect(seen).toEqual([...ids].reverse())
    const oldest = await get('sort=created_at&limit=1')
    expect(oldest.body.data[0].run_id).toBe(ids[0])
  })

  test('runs list: time and user_id filters (the console filters runs by start time)', async () => {
    const list = await env.workflow(chain(start([]), end({})))
    const first = (await env.trigger(list)).body.run_id as string
    const between = (await env.runOf(first)).created_at as string
    // The second run created strictly later (timestamps in ms): wait for the clock, not a fixed time.
    await waitFor(() => Date.now() > Date.parse(between) + 1, { what: 'the clock to pass the first run' })
    const second = (await env.trigger(list)).body.run_id as string
    const get = async (q: string) => {
      const res = await env.h.call('GET', `/v1/workflows/${list}/runs?${q}`, { key: env.owner })
      expect(res.status).toBe(200)
      return res.body.data.map((r: any) => r.run_id)
    }
    expect(await get(`created_at_after=${encodeURIComponent(between)}`)).toEqual([second])
    expect(await get(`created_at_before=${encodeURIComponent(new Date(Date.parse(between) + 1).toISOString())}`)).toEqual([first])
    expect(await get('created_at_after=2999-01-01T00:00:00.000Z')).toEqual([])
    const bad = await env.h.call('GET', `/v1/workflows/${list}/runs?created_at_after=yesterday`, { key: env.owner })
    expect(bad.status).toBe(400)
    expect(bad.body.error.param).toBe('created_at_after')
    const users = new Set((await env.h.call('GET', `/v1/workflows/${list}/runs`, { key: env.owner })).body.data.map((r: any) => r.user_id))
    expect(users.size).toBe(1)
    const [user] = [...users] as [string]
    // Runs triggered without a user_id carry the caller's.
    expect(typeof user).toBe('string')
    expect(await get(`user_id=${encodeURIComponent(user)}`)).toEqual([second, first])
    expect(await get('user_id=nobody-at-all')).toEqual([])
  })

  test('roles: a readonly member reads runs but may not trigger or cancel (403); a non-member gets 404', async () => {
    const ok = await env.trigger(wf)
    const runId = ok.body.run_id
    expect((await env.h.call('GET', `/v1/runs/${runId}`, { key: env.reader })).status).toBe(200)
    expect((await env.h.call('GET', `/v1/runs/${runId}/events`, { key: env.reader })).status).toBe(200)
    expect((await env.h.call('GET', `/v1/workflows/${wf}/runs`, { key: env.reader })).status).toBe(200)
    const denied = await env.trigger(wf, {}, { key: env.reader })
    expect(denied.status).toBe(403)
    expect(denied.body.error.code).toBe('forbidden')
    const waiting = await env.workflow(chain(start(), wait('pause', 30), end({})))
    const running = (await env.trigger(waiting, {}, { async: true })).body.run_id
    const cancel = await env.h.call('POST', `/v1/runs/${running}/cancel`, { key: env.reader })
    expect(cancel.status).toBe(403)
    expect((await env.runOf(running)).status).toBe('running')
    for (const [method, path] of [
      ['GET', `/v1/runs/${runId}`],
      ['GET', `/v1/runs/${runId}/events`],
      ['GET', `/v1/workflows/${wf}/runs`],
      ['POST', `/v1/workflows/${wf}/runs`],
      ['POST', `/v1/runs/${running}/cancel`],
    ] as const) {
      const res = await env.h.call(method, path, { key: env.outsider, body: method === 'POST' ? {} : undefined })
      expect([method, path, res.status]).toEqual([method, path, 404])
      expect(res.body.error.code).toBe('not_found')
    }
    // Leave nothing running.
    expect((await env.h.call('POST', `/v1/runs/${running}/cancel`, { key: env.owner })).status).toBe(200)
  })

  test('a webhook for workflow.run.completed receives the run with the published payload', async () => {
    const hook = await env.h.call('POST', '/v1/webhooks', {
      key: env.owner,
      body: { url: `http://127.0.0.1:${env.hooks.port}/runs-hook`, events: ['workflow.run.completed'], secret: 'a-secret-of-runs', workspace_id: env.ws },
    })
    expect(hook.status).toBe(201)
    const ok = await env.trigger(wf)
    expect(ok.body.status).toBe('completed')
    const got = (await waitFor(() => env.hookRequests.find((r) => r.path === '/runs-hook' && r.json?.data?.run_id === ok.body.run_id), { timeoutMs: 10_000, what: 'the webhook delivery' }))!
    expect(got.headers['x-service-event']).toBe('workflow.run.completed')
    expect(got.json.event).toBe('workflow.run.completed')
    const run = await env.runOf(ok.body.run_id)
    expect(got.json.data).toEqual({ workflow_id: wf, run_id: ok.body.run_id, status: 'completed', duration_ms: run.duration_ms, outputs: { ok: true } })
    // A failed run is not this webhook's event.
    const bad = await env.trigger(wf, { fail: true })
    const ok2 = await env.trigger(wf)
    await waitFor(() => env.hookRequests.some((r) => r.json?.data?.run_id === ok2.body.run_id), { what: 'the second delivery' })
    expect(env.hookRequests.some((r) => r.json?.data?.run_id === bad.body.run_id)).toBe(false)
    expect(env.hookRequests.filter((r) => r.json?.data?.run_id === ok.body.run_id).length).toBe(1)
  })
})
