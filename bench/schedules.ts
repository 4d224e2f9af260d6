/**
 * `bun run bench/schedules.ts`: schedule triggers firing in a burst, server mode only (the claim is
 * `for update skip locked` across processes, which the single-session embedded store cannot show).
 * One API process (no workers) and SCHEDULE_WORKERS worker processes (`src/main.ts worker`) on a
 * fresh database and a Redis logical database of their own.
 *
 *   (a) SCHEDULES schedule triggers (`0 0 1 1 *`: no tick of their own meanwhile) all made due at the same whole second (their
 *       next_run_at set in the database: cron has minute resolution), ROUNDS times: every tick must
 *       run exactly once (one tick row and one run per trigger per round), and the lateness of each
 *       tick from its due time, as the tick's transaction saw it (its created_at) and as this client
 *       saw its run appear (polled every 25 ms)                               target p99 < 1 s
 *   (b) the ceiling: the same number of runs inserted directly (the statement startRun issues,
 *       insertRun, through a pool of 10 at 10 in flight), no trigger, no claim: how long the inserts
 *       alone take, against (a)'s time from the due second to the last tick
 *
 * The run workers execute the runs (start → end) meanwhile, as in production: they share the CPU.
 * Environment: DATABASE_URL and REDIS_URL (required), SCHEDULES (1000), ROUNDS (3), SCHEDULE_WORKERS (2).
 */
import { join } from 'node:path'
import type { Subprocess } from 'bun'
import Redis from 'ioredis'
import postgres from 'postgres'
import { newId } from '../src/lib/ids'
import { start } from '../src/machines/runner'
import { RUN_MACHINE_VERSION, runMachine } from '../src/machines/workflow-run.machine'
import { insertRun, type RunRow } from '../src/store/runs'
import { freePort, killAll, log, machine, percentile, randomBase62, removeDir, sourceVersion, startServer, tempDir, verdict, whenInterrupted, writeResults, type Row } from './lib'

const SCHEDULES = Number(process.env.SCHEDULES ?? 1000)
const ROUNDS = Number(process.env.ROUNDS ?? 3)
const WORKERS = Number(process.env.SCHEDULE_WORKERS ?? 2)
/** Once fired, a schedule's own next tick is months away: the only ticks are the ones made due here. */
const YEARLY = '0 0 1 1 *'

if (!process.env.DATABASE_URL || !process.env.REDIS_URL) {
  console.log('bench/schedules.ts measures server mode only: set DATABASE_URL and REDIS_URL')
  process.exit(0)
}
const databaseUrl = process.env.DATABASE_URL
const redisUrl = process.env.REDIS_URL

const work = tempDir('bench-schedules-')
const ROOT_KEY = `ap_bench${randomBase62(36)}`
const headers = { authorization: `Bearer ${ROOT_KEY}`, 'content-type': 'application/json' }
const dbName = `ap_bench_schedules_${process.pid}`
const admin = postgres(databaseUrl, { max: 1, onnotice: () => {} })
const redis0 = new Redis(redisUrl, { maxRetriesPerRequest: 2 })
let redisDb = -1
/** The worker processes (no HTTP, so not startServer's): SIGKILLed at the end, whatever happened. */
const workers: Subprocess[] = []

async function cleanup() {
  killAll()
  for (const w of workers) w.kill('SIGKILL')
  await Promise.all(workers.map((w) => w.exited))
  await admin.unsafe(`drop database if exists ${dbName} with (force)`).catch(() => {})
  if (redisDb > 0) {
    const scoped = new Redis(withDb(redisUrl, redisDb), { maxRetriesPerRequest: 2 })
    await scoped.flushdb().catch(() => {})
    await scoped.quit()
    await redis0.del(`ap-e2e-redis-db:${redisDb}`)
  }
  await redis0.quit()
  await admin.end()
  removeDir(work)
}
whenInterrupted(() => removeDir(work))

function withDb(url: string, db: number | string): string {
  const u = new URL(url)
  u.pathname = `/${db}`
  return u.toString()
}

const round1 = (n: number) => Math.round(n * 10) / 10
function stats(xs: number[]) {
  const v = Float64Array.from(xs).sort()
  return { n: v.length, p50: round1(percentile(v, 50)), p90: round1(percentile(v, 90)), p99: round1(percentile(v, 99)), max: round1(v[v.length - 1]!) }
}

async function api<T = any>(base: string, method: string, path: string, body?: unknown): Promise<{ status: number; body: T }> {
  const res = await fetch(`${base}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) })
  return { status: res.status, body: (await res.json()) as T }
}

async function waitForLog(file: string, re: RegExp, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    const text = await Bun.file(file).text().catch(() => '')
    if (re.test(text)) return
    await Bun.sleep(100)
  }
  throw new Error(`${file} never showed ${re}`)
}

async function main() {
  // A Redis logical database of this run's own, claimed as the e2e tests claim theirs (tests/helpers/cluster.ts).
  for (const n of Array.from({ length: 15 }, (_, i) => i + 1).sort(() => Math.random() - 0.5)) {
    if ((await redis0.set(`ap-e2e-redis-db:${n}`, String(process.pid), 'PX', 3_600_000, 'NX')) === 'OK') {
      redisDb = n
      break
    }
  }
  if (redisDb < 0) throw new Error('no free Redis logical database (1..15)')
  const scoped = new Redis(withDb(redisUrl, redisDb), { maxRetriesPerRequest: 2 })
  await scoped.flushdb()
  await scoped.quit()
  await admin.unsafe(`drop database if exists ${dbName} with (force)`)
  await admin.unsafe(`create database ${dbName}`)
  const env = {
    DATABASE_URL: withDb(databaseUrl, dbName), REDIS_URL: withDb(redisUrl, redisDb), BOOTSTRAP_API_KEY: ROOT_KEY, SECRET_KEY: `ap_bench${randomBase62(36)}`,
    DATA_DIR: join(work, 'data'), RATE_LIMIT_PER_SECOND: '1000000000', RATE_LIMIT_BURST: '1000000000', LOG_LEVEL: 'info', HOST: '127.0.0.1',
  }
  const port = freePort()
  const apiServer = await startServer({ cmd: ['bun', 'run', 'src/main.ts', 'api'], env: { ...env, PORT: String(port) }, port, logFile: join(work, 'api.log'), readyPath: '/healthz' })
  for (let i = 0; i < WORKERS; i++) {
    const logFile = join(work, `worker-${i}.log`)
    workers.push(Bun.spawn(['bun', 'run', 'src/main.ts', 'worker'], { cwd: join(import.meta.dir, '..'), env: { ...process.env, ...env, PORT: String(freePort()) }, stdout: Bun.file(logFile), stderr: Bun.file(`${logFile}.err`), stdin: 'ignore' }))
  }
  await Promise.all(Array.from({ length: WORKERS }, (_, i) => waitForLog(join(work, `worker-${i}.log`), /workers running \(no HTTP\)/)))
  const db = postgres(env.DATABASE_URL, { max: 10, onnotice: () => {} })

  const base = apiServer.url
  const ws = await api(base, 'POST', '/v1/workspaces', { name: 'bench schedules' })
  const wf = await api(base, 'POST', '/v1/workflows', {
    workspace_id: ws.body.data.id,
    name: 'tick',
    graph: { nodes: [{ id: 'start', type: 'start', config: {} }, { id: 'end', type: 'end', config: { outputs: { ok: 'yes' } } }], edges: [{ source: 'start', target: 'end' }] },
  })
  if (wf.status !== 201) throw new Error(`could not create the workflow: ${wf.status} ${JSON.stringify(wf.body)}`)
  const ids: string[] = []
  for (let i = 0; i < SCHEDULES; i += 20) {
    const batch = await Promise.all(Array.from({ length: Math.min(20, SCHEDULES - i) }, () => api(base, 'POST', `/v1/workflows/${wf.body.data.id}/triggers`, { type: 'schedule', cron: YEARLY })))
    for (const b of batch) {
      if (b.status !== 201) throw new Error(`could not create a trigger: ${b.status} ${JSON.stringify(b.body)}`)
      ids.push(b.body.data.id)
    }
  }
  log(`${ids.length} schedules, ${WORKERS} worker processes, ${ROUNDS} rounds`)

  const claimed: number[] = []
  const visible: number[] = []
  const spans: number[] = []
  /** From the due second until every run of the burst finished. */
  const finishing: number[] = []
  let wrong = 0
  for (let round = 1; round <= ROUNDS; round++) {
    // Due at the next whole second, at least 1 s ahead: the burst starts from an idle poll, as in production.
    const due = new Date(Math.ceil((Date.now() + 1000) / 1000) * 1000)
    await db`update triggers set next_run_at = ${due} where id in ${db(ids)}`
    const seen = new Map<string, number>()
    const deadline = Date.now() + 60_000
    while (seen.size < ids.length && Date.now() < deadline) {
      const rows = await db<{ trigger_id: string }[]>`select trigger_id from trigger_ticks where tick_at = ${due}`
      const now = Date.now()
      for (const r of rows) if (!seen.has(r.trigger_id)) seen.set(r.trigger_id, now - due.getTime())
      await Bun.sleep(25)
    }
    const ticks = await db<{ trigger_id: string; late_ms: number; run_id: string | null }[]>`
      select trigger_id, extract(epoch from (created_at - tick_at)) * 1000 as late_ms, run_id from trigger_ticks where tick_at = ${due}`
    const [runs] = await db<{ n: number; per: number }[]>`
      select count(*)::int as n, count(distinct user_id)::int as per from runs where user_id like 'schedule:%'`
    const ticksPer = await db<{ n: number }[]>`select count(*)::int as n from trigger_ticks group by trigger_id having count(*) <> ${round}`
    const bad = ticks.length !== ids.length || runs!.n !== ids.length * round || runs!.per !== ids.length || ticksPer.length > 0 || ticks.some((t) => t.run_id === null)
    if (bad) wrong++
    claimed.push(...ticks.map((t) => Number(t.late_ms)))
    visible.push(...seen.values())
    spans.push(Math.max(...seen.values()))
    // The runs of this burst finish before the next burst is due, so that bursts do not overlap.
    const finishedFrom = Date.now()
    while (Date.now() < deadline + 60_000) {
      const [left] = await db<{ n: number }[]>`select count(*)::int as n from runs where status = 'running'`
      if (left!.n === 0) break
      await Bun.sleep(100)
    }
    finishing.push(Date.now() - finishedFrom + Math.max(...seen.values()))
    log(`round ${round}: ${ticks.length} ticks, runs in all ${runs!.n} (${runs!.per} triggers), exactly once: ${bad ? 'NO' : 'yes'}; last tick visible ${Math.max(...seen.values())} ms after due`)
  }

  // (b) The ceiling: the same number of runs, inserted directly as startRun does, 10 in flight.
  const wfRow = (await db<{ id: string; version: number; workspace_id: string }[]>`select id, version, workspace_id from workflows where id = ${wf.body.data.id}`)[0]!
  const snapshot = start(runMachine, undefined as never).persisted as RunRow['snapshot']
  const ceilingStart = performance.now()
  let next = 0
  await Promise.all(Array.from({ length: 10 }, async () => {
    while (next < SCHEDULES) {
      next++
      await insertRun(db, { id: newId('run'), workflow_id: wfRow.id, workflow_version: wfRow.version, workspace_id: wfRow.workspace_id, user_id: 'bench:ceiling', inputs: {}, snapshot, machine_version: RUN_MACHINE_VERSION, request_id: null })
    }
  }))
  const ceilingMs = performance.now() - ceilingStart
  await db.end()

  const c = stats(claimed)
  const v = stats(visible)
  const span = stats(spans)
  log(`(a) lateness at claim: p50 ${c.p50} ms, p99 ${c.p99} ms, max ${c.max} ms; as seen by the client: p50 ${v.p50} ms, p99 ${v.p99} ms, max ${v.max} ms`)
  const done = stats(finishing)
  log(`(a) due second → last tick visible: median round ${span.p50} ms; → every run finished: median ${done.p50} ms; (b) ${SCHEDULES} plain insertRun statements: ${Math.round(ceilingMs)} ms`)
  const rows: Row[] = [
    { figure: `(a) ${SCHEDULES} ticks due in one second, ${WORKERS} workers: each ran once [server]`, measured: `${ROUNDS - wrong}/${ROUNDS} rounds exact`, ceiling: '', share: '', target: 'every round', result: verdict(wrong === 0) },
    { figure: '(a) tick lateness, client-observed [server]', measured: `p99 ${v.p99} ms (p50 ${v.p50} ms)`, ceiling: '', share: '', target: 'p99 < 1 s', result: verdict(v.p99 < 1000) },
    { figure: '(a) tick lateness at claim [server]', measured: `p99 ${c.p99} ms (p50 ${c.p50} ms)`, ceiling: '', share: '', target: '', result: 'info' },
    { figure: `(a) due → last of ${SCHEDULES} ticks, vs (b) the inserts alone [server]`, measured: `${span.p50} ms`, ceiling: `${SCHEDULES} insertRun, 10 in flight: ${Math.round(ceilingMs)} ms`, share: '', target: '', result: 'info' },
    { figure: `(a) due → every run of the burst finished (start → end) [server]`, measured: `${done.p50} ms`, ceiling: '', share: '', target: '', result: 'info' },
  ]
  const file = writeResults('schedules', { ...machine(), ...sourceVersion(), schedules: SCHEDULES, rounds: ROUNDS, workers: WORKERS, lateness_claim_ms: c, lateness_visible_ms: v, last_tick_ms: span, all_runs_finished_ms: done, ceiling_ms: Math.round(ceilingMs), wrong_rounds: wrong }, rows)
  log(`results: ${file}`)
  await apiServer.stop()
}

try {
  await main()
} finally {
  await cleanup()
}
