import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { startCluster, type Cluster } from '../helpers/cluster'
import { waitFor } from '../helpers/harness'
import { apiCall, killAll, type ServiceProcess } from '../helpers/process'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Schedules on the real PostgreSQL and Redis (server mode): one API process (no workers) and two
 * worker processes. Many schedules are made due at the same instant (their next_run_at set in the
 * database: cron has minute resolution); each tick runs exactly once, also when a worker is killed
 * with SIGKILL while the ticks fire, and after every worker was down, the missed ticks are not
 * replayed: the first tick due runs once.
 */
const databaseUrl = process.env.DATABASE_URL
const redisUrl = process.env.REDIS_URL
if (!databaseUrl || !redisUrl) console.warn('schedules-crash: skipped; it needs DATABASE_URL and REDIS_URL (server mode)')

const SCHEDULES = 200
/**
 * Midnight on 1 January: once a tick has fired, the schedule's own next tick is months away, so the
 * only ticks are the ones this test makes due (an every-minute cron would add real ticks whenever the
 * test crosses a minute).
 */
const YEARLY = '0 0 1 1 *'

describe.skipIf(!databaseUrl || !redisUrl)('schedules: 2 worker processes, one tick, one run', () => {
  let cluster: Cluster
  const ids: string[] = []
  let replacement: ServiceProcess

  beforeAll(async () => {
    cluster = await startCluster({ name: 'schedules', workers: 2, apiOnly: true })
    const must = async (method: string, path: string, body?: unknown) => {
      const res = await apiCall(cluster.api, cluster.rootKey, method, path, body)
      if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(res.body)}`)
      return res.body
    }
    const ws = (await must('POST', '/v1/workspaces', { name: 'Schedules' })).data.id
    const wf = (await must('POST', '/v1/workflows', {
      workspace_id: ws,
      name: 'Tick',
      graph: { nodes: [{ id: 'start', type: 'start', config: {} }, { id: 'end', type: 'end', config: { outputs: { ok: 'yes' } } }], edges: [{ source: 'start', target: 'end' }] },
    })).data.id
    for (let i = 0; i < SCHEDULES; i += 20) {
      const batch = await Promise.all(Array.from({ length: 20 }, () => must('POST', `/v1/workflows/${wf}/triggers`, { type: 'schedule', cron: YEARLY })))
      ids.push(...batch.map((b) => b.data.id))
    }
  }, 120_000)

  afterAll(async () => {
    await cluster?.close()
    await killAll()
  })

  /** Every schedule due at `at` (the same instant for all). */
  const makeDue = (at: Date) => cluster.db`update triggers set next_run_at = ${at} where id in ${cluster.db(ids)}`

  /** Ticks and runs per trigger, and the runs no tick names. */
  async function counts() {
    const ticks = await cluster.db<{ trigger_id: string; tick_at: Date; run_id: string | null }[]>`
      select trigger_id, tick_at, run_id from trigger_ticks where trigger_id in ${cluster.db(ids)}`
    const runs = await cluster.db<{ id: string; user_id: string }[]>`select id, user_id from runs where user_id like 'schedule:%'`
    const runsPer = new Map<string, number>()
    for (const r of runs) runsPer.set(r.user_id.slice('schedule:'.length), (runsPer.get(r.user_id.slice('schedule:'.length)) ?? 0) + 1)
    const ticksPer = new Map<string, number>()
    for (const t of ticks) ticksPer.set(t.trigger_id, (ticksPer.get(t.trigger_id) ?? 0) + 1)
    const named = new Set(ticks.map((t) => t.run_id))
    return { ticks, runs, runsPer, ticksPer, orphans: runs.filter((r) => !named.has(r.id)).length }
  }

  function expectOncePerTick(c: Awaited<ReturnType<typeof counts>>, rounds: number) {
    const wrong = ids.filter((id) => c.runsPer.get(id) !== rounds || c.ticksPer.get(id) !== rounds)
    expect({ wrong: wrong.length, orphans: c.orphans, ticksWithoutRun: c.ticks.filter((t) => t.run_id === null).length }).toEqual({ wrong: 0, orphans: 0, ticksWithoutRun: 0 })
    expect(c.runs.length).toBe(ids.length * rounds)
  }

  const fired = (rounds: number) =>
    waitFor(async () => (await counts()).ticks.length >= ids.length * rounds, { timeoutMs: 30_000, what: `${ids.length * rounds} ticks` })

  test('all due at the same instant, two workers claiming: one run per schedule', async () => {
    await makeDue(new Date(Date.now() - 1000))
    await fired(1)
    const c = await counts()
    expectOncePerTick(c, 1)
    const [next] = await cluster.db<{ min: Date }[]>`select min(next_run_at) as min from triggers where id in ${cluster.db(ids)}`
    expect(next!.min.getTime()).toBeGreaterThan(Date.now())
  }, 60_000)

  test('a worker SIGKILLed while the ticks fire: still one run per tick', async () => {
    await makeDue(new Date(Date.now() - 500))
    await cluster.workers[0]!.stop('SIGKILL')
    replacement = await cluster.spawn('worker')
    await fired(2)
    expectOncePerTick(await counts(), 2)
  }, 60_000)

  test('every worker down while ticks were missed: the first tick due after the restart runs once', async () => {
    for (const w of [...cluster.workers, replacement]) await w.stop('SIGKILL')
    // Ten minutes of ticks missed.
    await makeDue(new Date(Date.now() - 600_000))
    await cluster.spawn('worker')
    await fired(3)
    expectOncePerTick(await counts(), 3)
    // The next tick is the next 1 January, not one of the missed ones.
    const [row] = await cluster.db<{ min: Date }[]>`select min(next_run_at) as min from triggers where id in ${cluster.db(ids)}`
    expect(row!.min.getTime()).toBeGreaterThan(Date.now())
  }, 60_000)
})
