import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { newDelivery } from '../../src/domain/deliveries'
import { idFloor } from '../../src/lib/ids'
import { insertDeliveries, type NewDelivery } from '../../src/store/deliveries'
import { applyRetention, rebuildDeliveryTimers, RETENTION_MS } from '../../src/workers/maintenance'
import { startHarness, workspaceOf, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

/** Retention and the timer rebuild, against the real store and Redis port. */
describe('webhook maintenance', () => {
  let h: Harness
  let hook: string

  beforeAll(async () => {
    h = await startHarness({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' })
    const ws = await workspaceOf(h, h.rootKey)
    const res = await h.call('POST', '/v1/webhooks', { body: { workspace_id: ws, url: 'https://localhost:9/hook', events: ['workflow.run.completed'], secret: 'maintenance-secret' } })
    expect(res.status).toBe(201)
    hook = res.body.data.id
  })
  afterAll(() => h.close())

  /** A delivery created at `ms` (its id carries the time, as a real one would). */
  function deliveryAt(ms: number, n: number, settled: boolean): NewDelivery {
    const d = newDelivery(h.deps.config, { webhook_id: hook, event_id: `evt_old_${ms}_${n}`, event_type: 'workflow.run.completed', data: { n } }, { manual: false, now: ms })
    const id = idFloor('dlv', ms).slice(0, -4) + String(n).padStart(4, '0')
    return { ...d, id, ...(settled ? { status: 'succeeded' as const } : {}) }
  }

  test('deletes settled deliveries and dispatched events older than 7 days, nothing else', async () => {
    const sql = h.deps.db.sql
    const now = Date.now()
    const old = now - RETENTION_MS - 3_600_000
    const recent = now - RETENTION_MS + 3_600_000
    const rows = [deliveryAt(old, 1, true), deliveryAt(old, 2, false), deliveryAt(recent, 3, true)]
    await sql.begin((tx) => insertDeliveries(tx, rows))
    // Settled = no next attempt; the second old one is still open (a retry pending) and must stay.
    await sql`update webhook_deliveries set next_attempt_at = null where id in ${sql([rows[0]!.id, rows[2]!.id])}`
    const oldEvent = idFloor('evt', old).slice(0, -4) + '0001'
    const oldPending = idFloor('evt', old).slice(0, -4) + '0002'
    await sql`insert into events (id, workspace_id, type, data, dispatched_at) values
      (${oldEvent}, null, 'workflow.run.completed', '{}', now()), (${oldPending}, null, 'workflow.run.completed', '{}', null)`

    const removed = await applyRetention(sql, now)
    expect(removed.deliveries).toBe(1)
    expect(removed.events).toBe(1)
    const left = (await sql<{ id: string }[]>`select id from webhook_deliveries order by id`).map((r) => r.id)
    expect(left).toEqual([rows[1]!.id, rows[2]!.id])
    const events = (await sql<{ id: string }[]>`select id from events where id in ${sql([oldEvent, oldPending])}`).map((r) => r.id)
    expect(events).toEqual([oldPending])
  })

  test('rebuilds a timer for every open delivery at its next_attempt_at, and only overdue ones when asked', async () => {
    const sql = h.deps.db.sql
    await sql`delete from webhook_deliveries`
    const now = Date.now()
    const rows = [1, 2, 3].map((n) => newDelivery(h.deps.config, { webhook_id: hook, event_id: `evt_rebuild_${n}`, event_type: 'workflow.run.completed', data: { n } }, { manual: false, now }))
    await sql.begin((tx) => insertDeliveries(tx, rows))
    await sql`update webhook_deliveries set next_attempt_at = ${new Date(now + 60_000)} where id = ${rows[1]!.id}`
    await sql`update webhook_deliveries set next_attempt_at = null where id = ${rows[2]!.id}`
    // Redis forgot everything (the in-process adapter after a restart; a claimed timer whose worker died).
    await h.deps.redis.claimDueTimers(now + 86_400_000, 10_000)

    expect(await rebuildDeliveryTimers(sql, h.deps.timers, new Date(now + 1))).toBe(1)
    let due = await h.deps.redis.claimDueTimers(now + 86_400_000, 100)
    expect(due.map((t) => t.id)).toEqual([`delivery:${rows[0]!.id}`])

    expect(await rebuildDeliveryTimers(sql, h.deps.timers)).toBe(2)
    due = await h.deps.redis.claimDueTimers(now + 86_400_000, 100)
    expect(due.map((t) => t.id).sort()).toEqual([`delivery:${rows[0]!.id}`, `delivery:${rows[1]!.id}`].sort())
    const second = due.find((t) => t.id === `delivery:${rows[1]!.id}`)!
    expect(Math.abs(second.dueAt - (now + 60_000))).toBeLessThan(2)
    expect(second.payload).toBe('delivery')
  })
})
