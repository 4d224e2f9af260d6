import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { createHmac } from 'node:crypto'
import postgres from 'postgres'
import { generateKey } from '../../src/domain/api-keys'
import { createCertificate, type Certificate } from '../helpers/certificate'
import { startCluster, type Cluster } from '../helpers/cluster'
import { waitFor } from '../helpers/harness'
import { apiCall, killAll, type ServiceProcess } from '../helpers/process'
import { startReceiver, type ReceivedRequest, type Receiver } from '../helpers/receiver'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Several webhook workers on one server Postgres and one Redis: one API process (which runs the
 * workers too) and two worker-only processes (`bun run src/main.ts worker`), all with the same
 * SECRET_KEY so any of them can decrypt any webhook's secret. Outbox events inserted straight into
 * the database fan out to every subscribed webhook of the event's own workspace, exactly once per
 * (event, webhook), and each delivery's one retry timer fires exactly once across the processes.
 * Then one worker is SIGKILLed mid-run and the others finish its work.
 *
 * The service's Redis key prefix (`ap:`) is fixed, so this file takes a Redis logical database of
 * its own (claimed with a lock key in database 0, flushed first) instead of a prefix.
 */
const databaseUrl = process.env.DATABASE_URL
const redisUrl = process.env.REDIS_URL

const TIMEOUT_MS = 3000
/** src/domain/deliveries.ts leaseMs: an attempt without a result is abandoned this long after it started. */
const LEASE_MS = 2 * TIMEOUT_MS + 1000
/** src/workers/timers.ts: a claimed timer whose claimer died fires again this long after the claim. */
const CLAIM_LEASE_MS = 10_000
const EVENTS_PER_ROUND = 300
const A_HOOKS = 3

if (!databaseUrl || !redisUrl) {
  describe('webhook workers in several processes (server Postgres, Redis)', () => {
    test.skip('skipped: DATABASE_URL and REDIS_URL are unset (CI sets both)', () => {})
  })
} else {
  describe('webhook workers in several processes on one database and one Redis', () => {
    let cluster: Cluster
    let rootKey: string
    let db: postgres.Sql
    let certificate: Certificate
    let receiver: Receiver
    let api: ServiceProcess
    let w1: ServiceProcess
    let w2: ServiceProcess
    let wsA: string
    let wsB: string
    let keyB: string
    /** webhook id → { workspace, path on the receiver, secret } */
    const hooks = new Map<string, { ws: 'A' | 'B'; path: string; secret: string }>()
    const pathToHook = new Map<string, string>()

    beforeAll(async () => {
      certificate = createCertificate()
      // The first attempt of each delivery id gets a 500, every later one a 200.
      receiver = await startReceiver({ certificate, mode: (_req, previous) => (previous === 0 ? 500 : 200) })
      cluster = await startCluster({
        name: 'wk',
        env: {
          NODE_EXTRA_CA_CERTS: certificate.certFile,
          WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
          WEBHOOK_RETRY_DELAYS_MS: '200,200,200,200,200',
          WEBHOOK_TIMEOUT_MS: String(TIMEOUT_MS),
        },
      })
      ;({ api, db, rootKey } = cluster)
      ;[w1, w2] = cluster.workers as [ServiceProcess, ServiceProcess]

      const issue = async (user: string) => {
        const res = await apiCall(api, rootKey, 'POST', '/v1/api-keys', { user_id: user, name: `key of ${user}` })
        expect(res.status).toBe(201)
        return res.body.data.key as string
      }
      const keyA = await issue('alice')
      keyB = await issue('bob')
      const made = async (key: string, name: string) => {
        const res = await apiCall(api, key, 'POST', '/v1/workspaces', { name })
        expect(res.status).toBe(201)
        return res.body.data.id as string
      }
      wsA = await made(keyA, 'Tenant A')
      wsB = await made(keyB, 'Tenant B')
      const register = async (key: string, ws: 'A' | 'B', workspaceId: string, i: number) => {
        const path = `/${ws}-${i}`
        const secret = `secret-${ws}-${i}-${generateKey()}`
        const res = await apiCall(api, key, 'POST', '/v1/webhooks', { url: receiver.url(path), events: ['workflow.run.completed'], secret, workspace_id: workspaceId })
        expect(res.status).toBe(201)
        hooks.set(res.body.data.id, { ws, path, secret })
        pathToHook.set(path, res.body.data.id)
      }
      for (let i = 0; i < A_HOOKS; i++) await register(keyA, 'A', wsA, i)
      await register(keyB, 'B', wsB, 0)
    }, 90_000)

    afterAll(async () => {
      await killAll()
      await cluster?.close()
      await receiver?.close()
      certificate?.remove()
    })

    /** Inserts one round of outbox events: two thirds for A, one third for B. */
    async function insertEvents(round: string): Promise<Map<string, 'A' | 'B'>> {
      const rows = Array.from({ length: EVENTS_PER_ROUND }, (_, i) => {
        const ws = i % 3 === 2 ? 'B' : 'A'
        const id = `evt_${round}_${i}`
        return {
          id,
          workspace_id: ws === 'A' ? wsA : wsB,
          type: 'workflow.run.completed',
          data: db.json({ workflow_id: `wf_${ws}`, run_id: `run_${round}_${i}`, status: 'succeeded', duration_ms: i, outputs: { event: id, tenant: ws } }),
        }
      })
      await db`insert into events ${db(rows, 'id', 'workspace_id', 'type', 'data')}`
      return new Map(rows.map((r) => [r.id, r.workspace_id === wsA ? ('A' as const) : ('B' as const)]))
    }

    interface Row {
      id: string
      webhook_id: string
      /** The webhook's (deliveries belong to their webhook's workspace). */
      workspace_id: string
      event_id: string
      status: string
      attempts_count: number
      attempts: { attempt: number; at: string; status_code: number | null; error: string | null }[]
      next_attempt_at: Date | null
    }

    async function settledRows(round: string, expected: number, timeoutMs: number): Promise<Row[]> {
      let last: Row[] = []
      try {
        return (await waitFor(
          async () => {
            last = await db<Row[]>`
              select d.id, d.webhook_id, w.workspace_id, d.event_id, d.status, d.attempts_count, d.attempts, d.next_attempt_at
              from webhook_deliveries d join webhooks w on w.id = d.webhook_id
              where d.event_id like ${`evt_${round}_%`}`
            return last.length >= expected && last.every((r) => r.status === 'succeeded' || r.status === 'failed') ? last : null
          },
          { timeoutMs, intervalMs: 100, what: `the ${expected} deliveries of round ${round} to settle` },
        ))!
      } catch (err) {
        const open = last.filter((r) => r.status !== 'succeeded' && r.status !== 'failed')
        throw new Error(`${(err as Error).message}: ${last.length} rows, ${open.length} unsettled, e.g. ${JSON.stringify(open.slice(0, 3))}`)
      }
    }

    /** Requests of one round, by delivery id. */
    function requestsOf(round: string): Map<string, ReceivedRequest[]> {
      // A delivery id belongs to one event: all its requests carry the same one.
      return new Map([...receiver.byDelivery()].filter(([, reqs]) => String(reqs[0]!.json?.data?.outputs?.event ?? '').startsWith(`evt_${round}_`)))
    }

    /** What holds whether or not a worker died: exactly the right rows, each settled, tenants apart. */
    function checkRound(round: string, events: Map<string, 'A' | 'B'>, rows: Row[]) {
      // Every (event, webhook of the event's workspace) pair has exactly one delivery, and no other
      // pair has any (an A event never reaches B's webhook, and the reverse).
      const expected = new Set<string>()
      for (const [evt, ws] of events) for (const [hook, h] of hooks) if (h.ws === ws) expected.add(`${evt} ${hook}`)
      const pairs = rows.map((r) => `${r.event_id} ${r.webhook_id}`)
      expect(pairs.length).toBe(expected.size)
      expect(new Set(pairs)).toEqual(expected)
      for (const r of rows) {
        expect(r.workspace_id).toBe(hooks.get(r.webhook_id)!.ws === 'A' ? wsA : wsB)
        expect(r.status).toBe('succeeded')
        expect(r.next_attempt_at).toBeNull()
        expect(r.attempts_count).toBe(r.attempts.length)
        expect(r.attempts.at(-1)!.status_code).toBe(200)
      }
      // The receiver: each request on the path of the delivery's webhook, correctly signed with that
      // webhook's secret (whichever process sent it), carrying an event of that webhook's tenant;
      // and one delivery id per (event, webhook).
      const rowById = new Map(rows.map((r) => [r.id, r]))
      const idsPerPair = new Map<string, Set<string>>()
      for (const [id, reqs] of requestsOf(round)) {
        const row = rowById.get(id)
        expect(row).toBeDefined()
        const hook = hooks.get(row!.webhook_id)!
        for (const req of reqs) {
          expect(req.path).toBe(hook.path)
          expect(req.headers['x-service-signature']).toBe(`sha256=${createHmac('sha256', hook.secret).update(req.body).digest('hex')}`)
          const evt = req.json.data.outputs.event as string
          expect(evt).toBe(row!.event_id)
          expect(events.get(evt)).toBe(hook.ws)
          expect(req.json.data.workflow_id).toBe(`wf_${hook.ws}`)
          const pair = `${evt} ${req.path}`
          const set = idsPerPair.get(pair) ?? new Set()
          set.add(id)
          idsPerPair.set(pair, set)
        }
      }
      for (const ids of idsPerPair.values()) expect(ids.size).toBe(1)
      // B's webhook saw B's events only, all of them.
      const bPath = [...hooks.values()].find((h) => h.ws === 'B')!.path
      const seenByB = new Set(receiver.requests.filter((r) => r.path === bPath && r.json?.data?.outputs?.event?.startsWith(`evt_${round}_`)).map((r) => r.json.data.outputs.event))
      expect(seenByB).toEqual(new Set([...events].filter(([, ws]) => ws === 'B').map(([e]) => e)))
    }

    /**
     * A delivery one of whose attempts timed out: still no attempt out of nowhere. Each request the
     * receiver saw belongs to a counted attempt (a timed-out request may arrive late, or never), the
     * first one got the 500, and the last attempt is a 200.
     */
    function checkTimedOut(r: Row, seen: ReceivedRequest[]) {
      expect(r.attempts_count).toBe(r.attempts.length)
      expect(seen.length).toBeLessThanOrEqual(r.attempts_count)
      for (const a of r.attempts) expect(a.status_code === null ? a.error?.startsWith('timed out') : [500, 200].includes(a.status_code)).toBe(true)
      expect(seen.filter((q) => q.answer === 500).length).toBe(1)
      expect(r.attempts.at(-1)!.status_code).toBe(200)
    }

    const DELIVERIES_PER_ROUND = (EVENTS_PER_ROUND / 3) * (2 * A_HOOKS + 1)

    test('300 events, 4 webhooks in 2 workspaces, 3 worker processes: one delivery per pair, each retried exactly once', async () => {
      const events = await insertEvents('r1')
      const rows = await settledRows('r1', DELIVERIES_PER_ROUND, 30_000)
      checkRound('r1', events, rows)
      // The 500 of the first attempt armed one retry timer, which fired in exactly one process: two
      // attempts, two requests, never a third. (On an overloaded machine an attempt may time out
      // before its request reaches the receiver; such a delivery shows the time-out as an extra
      // attempt of its own and is checked in checkTimedOut.)
      const reqs = requestsOf('r1')
      let strict = 0
      for (const r of rows) {
        const seen = reqs.get(r.id) ?? []
        if (r.attempts.some((a) => a.error?.startsWith('timed out'))) {
          checkTimedOut(r, seen)
          continue
        }
        strict++
        expect(r.attempts_count).toBe(2)
        expect(r.attempts.map((a) => a.status_code)).toEqual([500, 200])
        expect(seen.map((q) => q.answer)).toEqual([500, 200])
      }
      if (strict < rows.length) console.log(`round 1: ${rows.length - strict} of ${rows.length} deliveries had an attempt time out (machine under load)`)
      expect(strict).toBeGreaterThanOrEqual(rows.length / 2)
      expect(reqs.size).toBe(DELIVERIES_PER_ROUND)
      // The worker-only processes took part: the API process made only some of the attempts.
      const metrics = await (await fetch(`${api.url}/metrics`)).text()
      const byApi = [...metrics.matchAll(/^webhook_attempts_total\{[^}]*\} (\d+)$/gm)].reduce((n, m) => n + Number(m[1]), 0)
      const total = rows.reduce((n, r) => n + r.attempts_count, 0)
      expect(byApi).toBeLessThan(total)
      console.log(`round 1: the API process made ${byApi} of ${total} attempts, the two worker-only processes the rest`)
      // Every outbox event was dispatched once.
      const [undispatched] = await db<{ n: number }[]>`select count(*)::int as n from events where id like 'evt_r1_%' and dispatched_at is null`
      expect(undispatched!.n).toBe(0)
    }, 40_000)

    test("tenant isolation at the API: B's key gets 404 for A's webhooks and their deliveries", async () => {
      const [aHook] = [...hooks].find(([, h]) => h.ws === 'A')!
      const [aDelivery] = await db`select id from webhook_deliveries where webhook_id = ${aHook} limit 1`
      expect(aDelivery).toBeDefined()
      for (const path of [`/v1/webhooks/${aHook}/deliveries`, `/v1/webhooks/${aHook}`, `/v1/webhooks/${aHook}/deliveries/${aDelivery!.id}`]) {
        const res = await apiCall(api, keyB, 'GET', path)
        expect(res.status).toBe(404)
        expect(res.body.error.code).toBe('not_found')
        expect(JSON.stringify(res.body)).not.toContain('evt_r1_')
      }
      const redeliver = await apiCall(api, keyB, 'POST', `/v1/webhooks/${aHook}/deliveries/${aDelivery!.id}/redeliver`)
      expect(redeliver.status).toBe(404)
      // Listing the workspace's webhooks with B's key shows B's own only.
      const own = await apiCall(api, keyB, 'GET', `/v1/webhooks?workspace_id=${wsB}`)
      expect(own.status).toBe(200)
      expect(own.body.data.map((w: { id: string }) => hooks.get(w.id)?.ws)).toEqual(['B'])
      expect((await apiCall(api, keyB, 'GET', `/v1/webhooks?workspace_id=${wsA}`)).status).toBe(404)
    })

    test('a worker SIGKILLed mid-run: the other processes finish every delivery, none lost or doubled', async () => {
      const before = receiver.requests.length
      const events = await insertEvents('r2')
      // Mid-run: a good part of the round's requests went out, far from all of them.
      await waitFor(() => receiver.requests.length - before >= DELIVERIES_PER_ROUND / 2, { timeoutMs: 20_000, intervalMs: 5, what: 'round 2 to be under way' })
      w1.proc.kill('SIGKILL')
      await w1.exited
      const killedAt = Date.now()
      expect(w1.proc.signalCode).toBe('SIGKILL')
      const sentBeforeKill = receiver.requests.length - before

      // Attempts the dead worker had in flight are abandoned when their lease runs out. A timer it had
      // claimed but not yet re-armed comes back when the claim lease runs out: no delivery waits for
      // the 30 s overdue sweep.
      const rows = await settledRows('r2', DELIVERIES_PER_ROUND, LEASE_MS + CLAIM_LEASE_MS + 15_000)
      checkRound('r2', events, rows)
      const reqs = requestsOf('r2')
      let abandoned = 0
      let timedOut = 0
      let swept = 0
      let sweptInSending = 0
      for (const r of rows) {
        const seen = reqs.get(r.id) ?? []
        // Each request the receiver saw was one counted attempt (recorded, or abandoned when the
        // worker died before saving its result); no attempt out of nowhere, no lost record.
        expect(seen.length).toBeLessThanOrEqual(r.attempts_count)
        expect(seen.length).toBeGreaterThanOrEqual(r.attempts.filter((a) => a.status_code !== null).length)
        expect(seen.filter((q) => q.answer === 500).length).toBe(1)
        const open = r.attempts.filter((a) => a.status_code === null)
        for (const a of open) expect(a.error).toMatch(/^(abandoned|timed out)/)
        abandoned += open.filter((a) => a.error!.startsWith('abandoned')).length
        timedOut += open.filter((a) => a.error!.startsWith('timed out')).length
        if (Date.parse(r.attempts.at(-1)!.at) > killedAt + LEASE_MS + 5_000) {
          // Late, but not waiting for the sweep: back through its claim lease (or its attempt lease).
          expect(Date.parse(r.attempts.at(-1)!.at)).toBeLessThan(killedAt + LEASE_MS + CLAIM_LEASE_MS + 10_000)
          swept++
          if (open.length > 0) sweptInSending++
        }
        // Untouched by the crash (and by time-outs): exactly the one retry of round 1.
        if (open.length === 0) {
          expect(r.attempts.map((a) => a.status_code)).toEqual([500, 200])
          expect(seen.map((q) => q.answer)).toEqual([500, 200])
        }
      }
      console.log(
        `round 2: worker killed after ${sentBeforeKill} of ~${2 * DELIVERIES_PER_ROUND} requests; ${abandoned} abandoned attempts retried by the others,` +
          ` ${timedOut} time-outs, ${swept} deliveries finished after the attempt lease (back through the claim lease)` +
          ` (${sweptInSending} of them left in sending, ${swept - sweptInSending} claimed but not started); settled ${Date.now() - killedAt} ms after the kill`,
      )
      // The survivors are still healthy.
      expect(w2.proc.exitCode).toBeNull()
      expect(api.proc.exitCode).toBeNull()
      expect((await fetch(`${api.url}/readyz`)).status).toBe(200)
    }, LEASE_MS + CLAIM_LEASE_MS + 40_000)
  })
}
