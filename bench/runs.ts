/**
 * `bun run bench:runs`: the workflow engine's overhead beside its storage ceiling (the
 * targets in bench/README.md). Two processes at a time: this client and the real service (`bun run
 * src/main.ts`, embedded default, LOG_LEVEL=warn, API and workers in one process); then, once the
 * service has stopped, the ceiling (bench/runs-ceiling.ts) on the same data directory.
 *
 *   (a) RUNS_ASYNC async runs (`POST /v1/workflows/{id}/runs?async=true`, RUNS_CONCURRENCY triggers
 *       in flight) of a linear workflow start → RUNS_TEMPLATES `template` nodes → end (5 nodes with
 *       the default 3); runs/s from the first trigger to the last `finished_at`, and per run the
 *       latency from its trigger to its `finished_at`                      target >= 300 runs/s
 *   (b) the storage ceiling: the same statements the service issues per run, in the same
 *       order, through postgres.js on the same store with no HTTP and no engine, the same
 *       number of runs at the same concurrency                              target (a) >= 30 % of (b)
 *   (c) RUNS_SYNC sequential synchronous runs of start → template → end, latency as the client sees
 *       it (POST to the 200 with status completed)                         target p50 < 15 ms
 *
 * Rounds alternate (service then ceiling, ceiling then service, ...), each on a fresh data directory;
 * figures are the medians of the rounds'. Every phase is preceded by a warm-up of the same work.
 * With DATABASE_URL and REDIS_URL set, every round is repeated in server mode (a fresh database per
 * round, Redis database 15 unless the URL names one; the ceiling through a pool of 10 as the
 * service's); PostgreSQL's own CPU then shows under "others".
 * Environment: ROUNDS (3), RUNS_ASYNC (1000), RUNS_WARMUP (200), RUNS_CONCURRENCY (32),
 * RUNS_TEMPLATES (3), RUNS_SYNC (300), RUNS_SYNC_WARMUP (50), BENCH_SERVICE_MAIN (a candidate copy
 * of src/main.ts), BENCH_CPU_PROF=<dir> (the service under `bun --cpu-prof --cpu-prof-md`; the
 * profiles are written when it stops).
 */
import { join } from 'node:path'
import { freePort, killAll, log, machine, machineCpuMs, median, percentile, processCpuMs, randomBase62, removeDir, run, sourceVersion, startServer, tempDir, verdict, whenInterrupted, writeResults, type Row, type Server } from './lib'

const ROUNDS = Number(process.env.ROUNDS ?? 3)
const RUNS = Number(process.env.RUNS_ASYNC ?? 1000)
const WARMUP = Number(process.env.RUNS_WARMUP ?? 200)
const CONCURRENCY = Number(process.env.RUNS_CONCURRENCY ?? 32)
const TEMPLATES = Number(process.env.RUNS_TEMPLATES ?? 3)
const SYNC_RUNS = Number(process.env.RUNS_SYNC ?? 300)
const SYNC_WARMUP = Number(process.env.RUNS_SYNC_WARMUP ?? 50)
const SERVICE_MAIN = process.env.BENCH_SERVICE_MAIN ?? 'src/main.ts'
const CPU_PROF = process.env.BENCH_CPU_PROF

const work = tempDir('bench-runs-')
whenInterrupted(() => removeDir(work))
const ROOT_KEY = `ap_bench${randomBase62(36)}`
const headers = { authorization: `Bearer ${ROOT_KEY}`, 'content-type': 'application/json' }
const INPUTS = { name: 'bench' }

/** start → t1 … tN → end; each template depends only on the inputs, the end on the last template. */
function linear(templates: number) {
  const ids = Array.from({ length: templates }, (_, i) => `t${i + 1}`)
  const nodes = [
    { id: 'start', type: 'start', config: { inputs: [{ name: 'name', type: 'string', required: true }] } },
    ...ids.map((id, i) => ({ id, type: 'template', config: { template: `Hello {{inputs.name}}, step ${i + 1}` } })),
    { id: 'end', type: 'end', config: { outputs: { text: `{{nodes.${ids[ids.length - 1]}.output.text}}` } } },
  ]
  const order = ['start', ...ids, 'end']
  return { nodes, edges: order.slice(1).map((target, i) => ({ source: order[i]!, target })), expected: `Hello ${INPUTS.name}, step ${templates}` }
}

async function api<T = any>(base: string, method: string, path: string, body?: unknown): Promise<{ status: number; body: T }> {
  const res = await fetch(`${base}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) })
  return { status: res.status, body: (await res.json()) as T }
}

/** Embedded: a fresh data directory per round. Server: a fresh database per round, and Redis. */
interface Store {
  mode: 'embedded' | 'server'
  dataDir: string
  databaseUrl?: string
}
const server = process.env.DATABASE_URL && process.env.REDIS_URL ? { db: process.env.DATABASE_URL, redis: withRedisDb(process.env.REDIS_URL) } : null

/** The service's keys are prefixed `ap:` whatever the process: a database index of its own (15 unless the URL names one). */
function withRedisDb(url: string): string {
  const u = new URL(url)
  if (u.pathname.length <= 1) u.pathname = '/15'
  return u.toString()
}

/** Databases this run created, dropped after their round (or at a failure). */
const databases = new Set<string>()

async function freshDatabase(name: string): Promise<string> {
  const { default: postgres } = await import('postgres')
  const admin = postgres(server!.db, { max: 1, onnotice: () => {} })
  await admin.unsafe(`drop database if exists ${name}`)
  await admin.unsafe(`create database ${name}`)
  await admin.end()
  const url = new URL(server!.db)
  url.pathname = `/${name}`
  databases.add(url.toString())
  return url.toString()
}

async function dropDatabase(url: string) {
  const { default: postgres } = await import('postgres')
  const admin = postgres(server!.db, { max: 1, onnotice: () => {} })
  await admin.unsafe(`drop database if exists ${new URL(url).pathname.slice(1)} with (force)`)
  await admin.end()
  databases.delete(url)
}

function startService(store: Store, tag: string): Promise<Server> {
  const port = freePort()
  return startServer({
    cmd: CPU_PROF ? ['bun', '--cpu-prof', '--cpu-prof-md', `--cpu-prof-dir=${CPU_PROF}`, 'run', SERVICE_MAIN] : ['bun', 'run', SERVICE_MAIN],
    env: {
      PORT: String(port), HOST: '127.0.0.1', DATA_DIR: store.dataDir, BOOTSTRAP_API_KEY: ROOT_KEY,
      // The limiter runs on every /v1 request but never refuses.
      RATE_LIMIT_PER_SECOND: '1000000000', RATE_LIMIT_BURST: '1000000000',
      LOG_LEVEL: 'warn', DATABASE_URL: store.databaseUrl ?? '', REDIS_URL: store.databaseUrl ? server!.redis : '',
    },
    port,
    logFile: join(work, `service-${tag}.log`),
    readyPath: '/healthz',
  })
}

interface Setup {
  workspaceId: string
  userId: string
  async: { workflowId: string; version: number; expected: string }
  sync: { workflowId: string; version: number; expected: string }
}

async function setup(base: string): Promise<Setup> {
  const ws = await api(base, 'POST', '/v1/workspaces', { name: 'bench runs' })
  if (ws.status !== 201) throw new Error(`could not create the workspace: ${ws.status} ${JSON.stringify(ws.body)}`)
  const workflow = async (templates: number) => {
    const { expected, ...graph } = linear(templates)
    const wf = await api(base, 'POST', '/v1/workflows', { workspace_id: ws.body.data.id, name: `linear ${templates}`, graph })
    if (wf.status !== 201) throw new Error(`could not create the workflow: ${wf.status} ${JSON.stringify(wf.body)}`)
    return { workflowId: wf.body.data.id as string, version: wf.body.data.version as number, expected }
  }
  return { workspaceId: ws.body.data.id, userId: ws.body.data.owner_id, async: await workflow(TEMPLATES), sync: await workflow(1) }
}

const round3 = (n: number) => Math.round(n * 1000) / 1000
function stats(xs: number[]) {
  const v = Float64Array.from(xs).sort()
  return { n: v.length, p50: round3(percentile(v, 50)), p90: round3(percentile(v, 90)), p99: round3(percentile(v, 99)), max: round3(v[v.length - 1]!) }
}
const wallNow = () => performance.timeOrigin + performance.now()

interface RunView { run_id: string; status: string; outputs: { text?: string }; duration_ms: number | null; created_at: string; finished_at: string | null }

/** Every run of the workflow, through the list endpoint (newest first, 100 a page). */
async function allRuns(base: string, workflowId: string): Promise<Map<string, RunView>> {
  const out = new Map<string, RunView>()
  for (let cursor: string | null = ''; cursor !== null; ) {
    const page: { status: number; body: { data: RunView[]; next_cursor: string | null } } = await api(base, 'GET', `/v1/workflows/${workflowId}/runs?limit=100${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`)
    if (page.status !== 200) throw new Error(`listing runs: ${page.status} ${JSON.stringify(page.body)}`)
    for (const r of page.body.data) out.set(r.run_id, r)
    cursor = page.body.next_cursor
  }
  return out
}

/**
 * (a) `n` async triggers, CONCURRENCY in flight, then a poll (one `status=running&limit=1` list
 * every 50 ms) until none is left running. The figures come from the runs' own `finished_at`, not
 * from the poll, so its period does not enter them.
 */
async function asyncRuns(service: Server, s: Setup, n: number) {
  const wf = s.async
  const sent = new Map<string, number>()
  const answers: number[] = []
  let next = 0
  const t0 = wallNow()
  const cpu0 = processCpuMs(service.pid)
  const c0 = process.cpuUsage()
  const m0 = machineCpuMs()
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next++ < n) {
        const at = wallNow()
        const r = await api(service.url, 'POST', `/v1/workflows/${wf.workflowId}/runs?async=true`, { inputs: INPUTS })
        if (r.status !== 202 || r.body.status !== 'running') throw new Error(`async trigger answered ${r.status}: ${JSON.stringify(r.body)}`)
        answers.push(wallNow() - at)
        sent.set(r.body.run_id, at)
      }
    }),
  )
  const triggeredMs = wallNow() - t0
  const deadline = Date.now() + 600_000
  for (;;) {
    const r = await api(service.url, 'GET', `/v1/workflows/${wf.workflowId}/runs?status=running&limit=1`)
    if (r.status !== 200) throw new Error(`polling: ${r.status} ${JSON.stringify(r.body)}`)
    if (r.body.data.length === 0) break
    if (Date.now() > deadline) throw new Error('runs still running after 10 minutes')
    await Bun.sleep(50)
  }
  const wallMs = wallNow() - t0
  const serviceCpuMs = processCpuMs(service.pid) - cpu0
  const c = process.cpuUsage(c0)
  const busy = machineCpuMs().busy - m0.busy
  const clientCpuMs = (c.user + c.system) / 1000
  const views = await allRuns(service.url, wf.workflowId)
  const latencies: number[] = []
  const durations: number[] = []
  let last = 0
  for (const [id, at] of sent) {
    const v = views.get(id)
    if (!v || v.status !== 'completed' || v.outputs.text !== wf.expected || !v.finished_at) throw new Error(`run ${id}: ${JSON.stringify(v)}`)
    const finished = Date.parse(v.finished_at)
    latencies.push(finished - at)
    durations.push(v.duration_ms!)
    last = Math.max(last, finished)
  }
  const first = Math.min(...sent.values())
  const cores = (ms: number) => Math.round((100 * Math.max(0, ms)) / wallMs) / 100
  return {
    runs: n,
    seconds: round3((last - first) / 1000),
    runs_per_s: Math.round((n * 1000) / (last - first)),
    triggers_per_s: Math.round((n * 1000) / triggeredMs),
    trigger_to_finished_ms: stats(latencies),
    server_duration_ms: stats(durations),
    trigger_answer_ms: stats(answers),
    service_cpu_us_per_run: Math.round((serviceCpuMs * 1000) / n),
    service_cores: cores(serviceCpuMs),
    client_cores: cores(clientCpuMs),
    other_cores: cores(busy - serviceCpuMs - clientCpuMs),
  }
}

/** (c) one synchronous run at a time, timed from the POST to the end of the 200's body. */
async function syncRuns(service: Server, s: Setup, n: number) {
  const latencies: number[] = []
  const cpu0 = processCpuMs(service.pid)
  for (let i = 0; i < n; i++) {
    const t0 = performance.now()
    const r = await api(service.url, 'POST', `/v1/workflows/${s.sync.workflowId}/runs`, { inputs: INPUTS })
    latencies.push(performance.now() - t0)
    if (r.status !== 200 || r.body.status !== 'completed' || r.body.outputs.text !== s.sync.expected) throw new Error(`sync run answered ${r.status}: ${JSON.stringify(r.body)}`)
  }
  return { runs: n, latency_ms: stats(latencies), service_cpu_us_per_run: Math.round(((processCpuMs(service.pid) - cpu0) * 1000) / n) }
}

async function servicePhase(store: Store, tag: string, existing: Setup | null) {
  const service = await startService(store, tag)
  try {
    const s = existing ?? (await setup(service.url))
    if (WARMUP > 0) await asyncRuns(service, s, WARMUP)
    const a = await asyncRuns(service, s, RUNS)
    log(`${tag}: (a) ${a.runs_per_s} runs/s; trigger → finished p50 ${a.trigger_to_finished_ms.p50} ms, p99 ${a.trigger_to_finished_ms.p99} ms; ${a.service_cpu_us_per_run} µs service CPU/run; others ${a.other_cores} cores`)
    if (SYNC_WARMUP > 0) await syncRuns(service, s, SYNC_WARMUP)
    const c = await syncRuns(service, s, SYNC_RUNS)
    log(`${tag}: (c) sync p50 ${c.latency_ms.p50} ms, p90 ${c.latency_ms.p90} ms, p99 ${c.latency_ms.p99} ms`)
    return { setup: s, async: a, sync: c }
  } finally {
    await service.stop()
  }
}

async function ceilingPhase(store: Store, tag: string, s: Setup) {
  const cfg = {
    dataDir: store.dataDir, databaseUrl: store.databaseUrl, workspaceId: s.workspaceId, userId: s.userId,
    async: { ...s.async, templates: TEMPLATES, runs: RUNS, warmup: WARMUP, concurrency: CONCURRENCY },
    sync: { ...s.sync, templates: 1, runs: SYNC_RUNS, warmup: SYNC_WARMUP },
  }
  const { stdout } = await run(['bun', 'run', 'bench/runs-ceiling.ts'], { env: { CEILING: JSON.stringify(cfg) }, timeoutMs: 600_000 })
  const out = JSON.parse(stdout.trim().split('\n').pop()!) as { async: { runs_per_s: number; latency_ms: { p50: number; p99: number }; cpu_us_per_run: number; other_cores: number }; sync: { latency_ms: { p50: number } } }
  log(`${tag}: (b) ${out.async.runs_per_s} runs/s; per run p50 ${out.async.latency_ms.p50} ms, p99 ${out.async.latency_ms.p99} ms; ${out.async.cpu_us_per_run} µs CPU/run; others ${out.async.other_cores} cores; sync store floor p50 ${out.sync.latency_ms.p50} ms`)
  return out
}

type Ceiling = Awaited<ReturnType<typeof ceilingPhase>>
interface Round {
  mode: Store['mode']
  order: string
  service: { async: Awaited<ReturnType<typeof asyncRuns>>; sync: Awaited<ReturnType<typeof syncRuns>> }
  ceiling: Ceiling
  share_percent: number
}

/** The medians of one mode's rounds, and whether they meet the targets of the header comment. */
function summarise(rounds: Round[], mode: Store['mode']) {
  const of = rounds.filter((r) => r.mode === mode)
  const m = (f: (r: Round) => number) => round3(median(of.map(f)))
  const out = {
    runs_per_s: m((r) => r.service.async.runs_per_s),
    ceiling_runs_per_s: m((r) => r.ceiling.async.runs_per_s),
    share_of_ceiling_percent: m((r) => r.share_percent),
    trigger_to_finished_p50_ms: m((r) => r.service.async.trigger_to_finished_ms.p50),
    trigger_to_finished_p99_ms: m((r) => r.service.async.trigger_to_finished_ms.p99),
    ceiling_per_run_p50_ms: m((r) => r.ceiling.async.latency_ms.p50),
    service_cpu_us_per_run: m((r) => r.service.async.service_cpu_us_per_run),
    ceiling_cpu_us_per_run: m((r) => r.ceiling.async.cpu_us_per_run),
    max_other_cores: Math.max(...of.map((r) => Math.max(r.service.async.other_cores, r.ceiling.async.other_cores))),
    sync_p50_ms: m((r) => r.service.sync.latency_ms.p50),
    sync_p90_ms: m((r) => r.service.sync.latency_ms.p90),
    sync_p99_ms: m((r) => r.service.sync.latency_ms.p99),
    sync_store_floor_p50_ms: m((r) => r.ceiling.sync!.latency_ms.p50),
  }
  return { ...out, pass: { runs_per_s: out.runs_per_s >= 300, share_of_ceiling: out.share_of_ceiling_percent >= 30, sync_p50: out.sync_p50_ms < 15 } }
}
type Summary = ReturnType<typeof summarise>

const ms = (n: number) => `${n.toFixed(1)} ms`
const perS = (n: number) => `${Math.round(n).toLocaleString('en')} runs/s`
const signed = (n: number, digits: number) => `${n >= 0 ? '+' : ''}${n.toFixed(digits)} ms`

/** One mode's rows of the summary table: the three targets of the header comment, and two for context. */
function rows(mode: Store['mode'], s: Summary): Row[] {
  return [
    {
      figure: `(a) async runs/s [${mode}]`,
      measured: perS(s.runs_per_s),
      ceiling: '',
      share: '',
      target: '≥ 300 runs/s',
      result: verdict(s.pass.runs_per_s),
    },
    {
      figure: `(a) async runs/s, share of (b) the storage ceiling [${mode}]`,
      measured: perS(s.runs_per_s),
      ceiling: `(b) the same statements alone ${perS(s.ceiling_runs_per_s)}`,
      // The median of the rounds' shares, which the target is held to (not the ratio of the two medians).
      share: `${s.share_of_ceiling_percent.toFixed(1)} %`,
      target: '(a) ≥ 30 % of (b)',
      result: verdict(s.pass.share_of_ceiling),
    },
    {
      figure: `(a) trigger → finished_at, queueing included [${mode}]`,
      measured: `p50 ${ms(s.trigger_to_finished_p50_ms)}, p99 ${ms(s.trigger_to_finished_p99_ms)}`,
      ceiling: `(b) per run, no queue: p50 ${ms(s.ceiling_per_run_p50_ms)}`,
      share: '',
      target: '',
      result: 'info',
    },
    {
      figure: `(a) CPU per run [${mode}]`,
      measured: `service ${(s.service_cpu_us_per_run / 1000).toFixed(2)} ms`,
      ceiling: `(b) ${(s.ceiling_cpu_us_per_run / 1000).toFixed(2)} ms`,
      share: signed((s.service_cpu_us_per_run - s.ceiling_cpu_us_per_run) / 1000, 2),
      target: '',
      result: 'info',
    },
    {
      figure: `(c) sync run latency [${mode}]`,
      measured: `p50 ${ms(s.sync_p50_ms)} (p90 ${ms(s.sync_p90_ms)}, p99 ${ms(s.sync_p99_ms)})`,
      ceiling: `store floor p50 ${ms(s.sync_store_floor_p50_ms)}`,
      share: signed(s.sync_p50_ms - s.sync_store_floor_p50_ms, 1),
      target: 'p50 < 15 ms',
      result: verdict(s.pass.sync_p50),
    },
  ]
}

async function main() {
  const source = SERVICE_MAIN === 'src/main.ts' ? sourceVersion() : null
  log(`bench:runs: ${SERVICE_MAIN}${source ? ` at ${source.commit}${source.src_dirty ? ' (src/ modified)' : ''}` : ''}; ${ROUNDS} rounds of ${RUNS} async runs (start → ${TEMPLATES} templates → end, ${CONCURRENCY} in flight) and ${SYNC_RUNS} sync runs`)
  const modes: Store['mode'][] = server ? ['embedded', 'server'] : ['embedded']
  const rounds: Round[] = []
  for (let i = 0; i < ROUNDS; i++) {
    for (const mode of modes) {
      const store: Store = { mode, dataDir: join(work, `data-${mode}-${i}`) }
      if (mode === 'server') store.databaseUrl = await freshDatabase(`bench_runs_${process.pid}_${i}`)
      const tag = `round ${i + 1}, ${mode}`
      let service
      let ceiling
      if (i % 2 === 0) {
        service = await servicePhase(store, `${tag}, service`, null)
        ceiling = await ceilingPhase(store, `${tag}, ceiling`, service.setup)
      } else {
        // The workspace and workflows first (the ceiling's rows reference them), then the ceiling.
        const bootstrap = await startService(store, `${tag}, setup`)
        const s = await setup(bootstrap.url).finally(() => bootstrap.stop())
        ceiling = await ceilingPhase(store, `${tag}, ceiling`, s)
        service = await servicePhase(store, `${tag}, service`, s)
      }
      const share = Math.round((1000 * service.async.runs_per_s) / ceiling.async.runs_per_s) / 10
      log(`${tag}: (a) is ${share} % of the ceiling`)
      rounds.push({ mode, order: i % 2 === 0 ? 'service, ceiling' : 'ceiling, service', service: { async: service.async, sync: service.sync }, ceiling, share_percent: share })
      removeDir(store.dataDir)
      if (store.databaseUrl) await dropDatabase(store.databaseUrl)
    }
  }

  const summaries = modes.map((mode) => [mode, summarise(rounds, mode)] as const)
  const summary = { workflow: `start → ${TEMPLATES} template nodes → end (${TEMPLATES + 2} nodes)`, ...Object.fromEntries(summaries) }
  const results = {
    when: new Date().toISOString(),
    ...(source ?? { service_main: SERVICE_MAIN }),
    machine: machine(),
    config: { rounds: ROUNDS, runs: RUNS, warmup: WARMUP, concurrency: CONCURRENCY, templates: TEMPLATES, sync_runs: SYNC_RUNS, sync_warmup: SYNC_WARMUP },
    summary,
    rounds,
  }
  writeResults('runs', results, summaries.flatMap(([mode, s]) => rows(mode, s)))
  console.log(JSON.stringify(summary, null, 2))
  console.log('written to bench/results/runs-latest.json')
}

try {
  await main()
  removeDir(work)
  process.exit(0)
} catch (err) {
  log(`bench:runs failed: ${(err as Error).stack ?? err}; logs kept in ${work}`)
  killAll()
  for (const url of databases) await dropDatabase(url).catch(() => {})
  process.exit(1)
}
