import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { DELIVERY_MACHINE_VERSION } from '../../src/machines/webhook-delivery.machine'
import { emit } from '../../src/store/events'
import { FanOut } from '../../src/workers/fanout'
import { keyFor, startHarness, workspaceOf, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

// The fan-out worker driven by hand (`tick()`), over the real database and Redis of the harness; the
// harness runs no workers, so deliveries stay `pending` and their timers stay in Redis.
let h: Harness
let keyA: string
let keyB: string
let wsA: string
let wsB: string

beforeAll(async () => {
  h = await startHarness({ RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000', WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' })
  keyA = await keyFor(h, 'fo-alice')
  keyB = await keyFor(h, 'fo-bob')
  wsA = await workspaceOf(h, keyA, 'A')
  wsB = await workspaceOf(h, keyB, 'B')
})
afterAll(() => h.close())

const fanOut = () => new FanOut({ sql: h.deps.db.sql, config: h.deps.config, timers: h.deps.timers, log: h.deps.log })

async function hook(key: string, workspaceId: string, events: string[]): Promise<string> {
  const res = await h.call('POST', '/v1/webhooks', {
    key,
    body: { url: 'https://localhost:9/hook', events, secret: `secret-${crypto.randomUUID()}`, workspace_id: workspaceId },
  })
  expect(res.status).toBe(201)
  return res.body.data.id
}

async function emitOne(workspaceId: string, type: string, data: Record<string, unknown> = {}): Promise<string> {
  const event = await h.deps.db.sql.begin((tx) => emit(tx, workspaceId, type, data))
  return event.id
}

/** Ticks until the outbox is drained (every instance got nothing). */
async function drain(...workers: FanOut[]): Promise<void> {
  for (let round = 0; round < 100; round++) {
    const taken = await Promise.all(workers.map((w) => w.tick()))
    if (taken.every((n) => n === 0)) return
  }
  throw new Error('the outbox did not drain in 100 rounds')
}

interface Row {
  id: string
  webhook_id: string
  /** The webhook's workspace (deliveries belong to their webhook's workspace). */
  workspace_id: string
  event_id: string
  event_type: string
  data: Record<string, unknown>
  status: string
  snapshot: { value: string; context: Record<string, unknown> }
  machine_version: number
  next_attempt_at: Date | null
  attempts_count: number
}

async function deliveriesOfEvent(eventId: string): Promise<Row[]> {
  return h.deps.db.sql<Row[]>`
    select d.*, w.workspace_id from webhook_deliveries d join webhooks w on w.id = d.webhook_id
    where d.event_id = ${eventId} order by d.webhook_id`
}

/** Claims every due timer of the harness' Redis namespace (the harness runs no timer loop). */
async function claimAllTimers(): Promise<Set<string>> {
  const ids = new Set<string>()
  for (;;) {
    const due = await h.deps.redis.claimDueTimers(Date.now() + 1000, 1000)
    for (const t of due) ids.add(t.id)
    if (due.length < 1000) return ids
  }
}

describe('fan-out of outbox events', () => {
  test('one delivery per enabled, subscribed webhook of the event\'s workspace, and no other', async () => {
    const subscribed = await hook(keyA, wsA, ['workflow.run.completed', 'workflow.run.failed'])
    const alsoSubscribed = await hook(keyA, wsA, ['workflow.run.completed'])
    const unsubscribed = await hook(keyA, wsA, ['knowledge.document.ready'])
    const disabled = await hook(keyA, wsA, ['workflow.run.completed'])
    expect((await h.call('PATCH', `/v1/webhooks/${disabled}`, { key: keyA, body: { enabled: false } })).status).toBe(200)
    const otherTenant = await hook(keyB, wsB, ['workflow.run.completed', 'workflow.run.failed', 'knowledge.document.ready'])
    await drain(fanOut())
    await claimAllTimers()

    const data = { workflow_id: 'wf_1', run_id: 'run_1', status: 'succeeded', duration_ms: 12, outputs: { answer: 42 } }
    const eventId = await emitOne(wsA, 'workflow.run.completed', data)
    const worker = fanOut()
    expect(await worker.tick()).toBe(1)
    expect(await worker.tick()).toBe(0)

    const rows = await deliveriesOfEvent(eventId)
    expect(rows.map((r) => r.webhook_id).sort()).toEqual([subscribed, alsoSubscribed].sort())
    for (const r of rows) {
      expect(r.id).toMatch(/^dlv_[0-9a-z]{26}$/)
      expect(r.workspace_id).toBe(wsA)
      expect(r.event_type).toBe('workflow.run.completed')
      expect(r.data).toEqual(data)
      expect(r.status).toBe('pending')
      expect(r.snapshot.value).toBe('pending')
      expect(r.machine_version).toBe(DELIVERY_MACHINE_VERSION)
      expect(r.machine_version).toBe(1)
      expect(r.attempts_count).toBe(0)
      expect(r.next_attempt_at).toBeInstanceOf(Date)
    }
    for (const id of [unsubscribed, disabled, otherTenant]) {
      const [n] = await h.deps.db.sql<{ n: number }[]>`select count(*)::int as n from webhook_deliveries where webhook_id = ${id}`
      expect(n!.n).toBe(0)
    }

    // The event is marked dispatched.
    const [event] = await h.deps.db.sql<{ dispatched_at: Date | null }[]>`select dispatched_at from events where id = ${eventId}`
    expect(event!.dispatched_at).toBeInstanceOf(Date)

    // Each created delivery has its timer in Redis, due now.
    const timers = await claimAllTimers()
    for (const r of rows) expect(timers.has(`delivery:${r.id}`)).toBe(true)

    // The API shows it as the receiver would get it.
    const listed = await h.call('GET', `/v1/webhooks/${subscribed}/deliveries`, { key: keyA })
    expect(listed.status).toBe(200)
    expect(listed.body.data).toHaveLength(1)
    expect(listed.body.data[0]).toMatchObject({ event_id: eventId, event: 'workflow.run.completed', status: 'pending', data, attempts: [] })
  })

  test('a re-enabled webhook receives events again; a disabled one misses those emitted meanwhile', async () => {
    const id = await hook(keyA, wsA, ['agent.message.received'])
    expect((await h.call('PATCH', `/v1/webhooks/${id}`, { key: keyA, body: { enabled: false } })).status).toBe(200)
    const missed = await emitOne(wsA, 'agent.message.received', { content: 'while disabled' })
    await drain(fanOut())
    expect((await h.call('PATCH', `/v1/webhooks/${id}`, { key: keyA, body: { enabled: true } })).status).toBe(200)
    const received = await emitOne(wsA, 'agent.message.received', { content: 'after' })
    await drain(fanOut())
    const rows = await h.deps.db.sql<{ event_id: string }[]>`select event_id from webhook_deliveries where webhook_id = ${id}`
    expect(rows.map((r) => r.event_id)).toEqual([received])
    expect(missed).not.toBe(received)
  })

  test('tenant isolation: A\'s events never reach B\'s webhooks, and B cannot list A\'s deliveries', async () => {
    const hookA = await hook(keyA, wsA, ['model.failover.triggered'])
    const hookB = await hook(keyB, wsB, ['model.failover.triggered'])
    const fromA: string[] = []
    for (let i = 0; i < 5; i++) fromA.push(await emitOne(wsA, 'model.failover.triggered', { model: 'm', from: 'a', to: 'b', reason: `r${i}` }))
    const fromB = await emitOne(wsB, 'model.failover.triggered', { model: 'm', from: 'a', to: 'b', reason: 'b' })
    await drain(fanOut())

    const ofA = await h.deps.db.sql<{ event_id: string }[]>`select event_id from webhook_deliveries where webhook_id = ${hookA}`
    const ofB = await h.deps.db.sql<{ event_id: string }[]>`select event_id from webhook_deliveries where webhook_id = ${hookB}`
    expect(ofA.map((r) => r.event_id).sort()).toEqual([...fromA].sort())
    expect(ofB.map((r) => r.event_id)).toEqual([fromB])
    // No delivery of any of A's events belongs to a webhook of B, whatever it subscribes to.
    const [leak] = await h.deps.db.sql<{ n: number }[]>`
      select count(*)::int as n from webhook_deliveries d join webhooks w on w.id = d.webhook_id
      join events e on e.id = d.event_id where e.workspace_id <> w.workspace_id`
    expect(leak!.n).toBe(0)

    const sneak = await h.call('GET', `/v1/webhooks/${hookA}/deliveries`, { key: keyB })
    expect(sneak.status).toBe(404)
    expect(sneak.body.error.code).toBe('not_found')
    const one = (await h.call('GET', `/v1/webhooks/${hookA}/deliveries`, { key: keyA })).body.data[0]
    expect((await h.call('GET', `/v1/webhooks/${hookA}/deliveries/${one.id}`, { key: keyB })).status).toBe(404)
    // Not under B's own webhook either.
    expect((await h.call('GET', `/v1/webhooks/${hookB}/deliveries/${one.id}`, { key: keyB })).status).toBe(404)
    const own = await h.call('GET', `/v1/webhooks/${hookB}/deliveries`, { key: keyB })
    expect(own.body.data.map((d: { event_id: string }) => d.event_id)).toEqual([fromB])
  })

  test('webhook.test events from the outbox are not fanned out, but are marked dispatched', async () => {
    const id = await hook(keyA, wsA, ['webhook.test'])
    const eventId = await emitOne(wsA, 'webhook.test', { webhook_id: id, message: 'from the outbox' })
    await drain(fanOut())
    expect(await deliveriesOfEvent(eventId)).toEqual([])
    const [event] = await h.deps.db.sql<{ dispatched_at: Date | null }[]>`select dispatched_at from events where id = ${eventId}`
    expect(event!.dispatched_at).toBeInstanceOf(Date)
    // A ping makes exactly its one delivery, and the fan-out adds none.
    const ping = await h.call('POST', `/v1/webhooks/${id}/ping`, { key: keyA })
    expect(ping.status).toBe(202)
    await drain(fanOut())
    const rows = await h.deps.db.sql<{ id: string }[]>`select id from webhook_deliveries where webhook_id = ${id}`
    expect(rows.map((r) => r.id)).toEqual([ping.body.data.id])
  })

  test('an event of a workspace without subscribers, or without a workspace, is dispatched with no delivery', async () => {
    const lonely = await workspaceOf(h, keyA, 'Lonely')
    const a = await emitOne(lonely, 'workflow.run.completed')
    const b = await h.deps.db.sql.begin((tx) => emit(tx, null, 'workflow.run.completed', {}))
    await drain(fanOut())
    expect(await deliveriesOfEvent(a)).toEqual([])
    expect(await deliveriesOfEvent(b.id)).toEqual([])
    const rows = await h.deps.db.sql<{ dispatched_at: Date | null }[]>`select dispatched_at from events where id in ${h.deps.db.sql([a, b.id])}`
    expect(rows.every((r) => r.dispatched_at instanceof Date)).toBe(true)
  })
})

describe('never two deliveries per (event, webhook)', () => {
  test('two FanOut instances over 200 events, then again after every event is reset to undispatched', async () => {
    const concurrencyWs = await workspaceOf(h, keyA, 'Concurrency')
    const hooks = [
      await hook(keyA, concurrencyWs, ['credit.budget.threshold']),
      await hook(keyA, concurrencyWs, ['credit.budget.threshold', 'workflow.run.failed']),
      await hook(keyA, concurrencyWs, ['workflow.run.failed']),
    ]
    await drain(fanOut())
    await claimAllTimers()

    const eventIds: string[] = []
    await h.deps.db.sql.begin(async (tx) => {
      for (let i = 0; i < 200; i++) {
        const type = i % 2 === 0 ? 'credit.budget.threshold' : 'workflow.run.failed'
        eventIds.push((await emit(tx, concurrencyWs, type, { i })).id)
      }
    })
    // 100 of each type: credit → hooks 0 and 1, failed → hooks 1 and 2.
    const expected = 200 * 2

    const one = fanOut()
    const two = fanOut()
    await Promise.all([one.tick(), two.tick()])
    await drain(one, two)

    const count = async () => {
      const [row] = await h.deps.db.sql<{ n: number }[]>`select count(*)::int as n from webhook_deliveries where event_id in ${h.deps.db.sql(eventIds)}`
      return row!.n
    }
    const duplicates = async () =>
      [...(await h.deps.db.sql<{ event_id: string; webhook_id: string; n: number }[]>`select event_id, webhook_id, count(*)::int as n from webhook_deliveries group by event_id, webhook_id having count(*) > 1`)]
    expect(await count()).toBe(expected)
    expect(await duplicates()).toEqual([])
    const [undispatched] = await h.deps.db.sql<{ n: number }[]>`select count(*)::int as n from events where dispatched_at is null`
    expect(undispatched!.n).toBe(0)

    // Each of the 400 has its timer.
    const created = await h.deps.db.sql<{ id: string }[]>`select id from webhook_deliveries where event_id in ${h.deps.db.sql(eventIds)}`
    const timers = await claimAllTimers()
    expect(created.filter((r) => !timers.has(`delivery:${r.id}`))).toEqual([])
    const perHook = await h.deps.db.sql<{ webhook_id: string; n: number }[]>`
      select webhook_id, count(*)::int as n from webhook_deliveries where event_id in ${h.deps.db.sql(eventIds)} group by webhook_id`
    expect(Object.fromEntries(perHook.map((r) => [r.webhook_id, r.n]))).toEqual({ [hooks[0]!]: 100, [hooks[1]!]: 200, [hooks[2]!]: 100 })

    // As if every worker crashed before marking: every event is undispatched again, and two workers
    // race over the whole outbox once more. The unique (event_id, webhook_id) keeps one delivery each.
    const prior = await h.deps.db.sql<{ id: string; event_id: string; webhook_id: string }[]>`select id, event_id, webhook_id from webhook_deliveries`
    await h.deps.db.sql`update events set dispatched_at = null`
    await Promise.all([one.tick(), two.tick(), fanOut().tick()])
    await drain(one, two)
    expect(await count()).toBe(expected)
    expect(await duplicates()).toEqual([])
    const after = await h.deps.db.sql<{ id: string; event_id: string; webhook_id: string }[]>`select id, event_id, webhook_id from webhook_deliveries`
    const afterIds = new Set(after.map((r) => r.id))
    // Every delivery made before is still there, under the same id.
    expect(prior.filter((r) => !afterIds.has(r.id))).toEqual([])
    // Nothing was added for these 200 events. (An earlier event of this file may gain a delivery
    // legitimately: a webhook re-enabled since its first dispatch subscribes to it now.)
    const priorIds = new Set(prior.map((r) => r.id))
    expect(after.filter((r) => !priorIds.has(r.id) && eventIds.includes(r.event_id))).toEqual([])
    // No delivery of these events had its timer armed again.
    const rearmed = await claimAllTimers()
    expect(created.filter((r) => rearmed.has(`delivery:${r.id}`))).toEqual([])
  })
})
