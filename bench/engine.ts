/**
 * `bun run bench:engine`: the workflow engine's second level beside its ceiling, on the real service
 * (`bun run src/main.ts`, embedded by default; server mode with DATABASE_URL and REDIS_URL set, on a
 * fresh database).
 *
 *   (a) an iteration over ITEMS items (concurrency 16) of a one-node child workflow
 *       (start → template → end); items/s from the parent's trigger to its `finished_at`
 *                                                               target >= 200 items/s embedded
 *   (b) the ceiling: the same number of plain async runs of the same child, 16 triggers in flight,
 *       from the first trigger to the last `finished_at`         target (a) >= 50 % of (b)
 *   (c) WAITING runs parked in a human_input node: the service's CPU over IDLE_S seconds of idle
 *       before and after they were parked (target: no more), and its JS heap and resident memory
 *       before and after, per run                                target < 1 KB per run
 *       (embedded, the resident memory holds the database's pages too: shown, not judged)
 *
 * (a) and (b) alternate for ROUNDS rounds (a b, b a, …), each on one service after a warm-up of
 * both; the figures are the medians. Environment: ROUNDS (3), ITEMS (1000), WAITING (10000),
 * IDLE_S (10).
 */
import { join } from 'node:path'
import { freePort, killAll, log, machine, median, processCpuMs, randomBase62, removeDir, share, sourceVersion, startServer, tempDir, verdict, whenInterrupted, writeResults, type Row } from './lib'

const ROUNDS = Number(process.env.ROUNDS ?? 3)
const ITEMS = Number(process.env.ITEMS ?? 1000)
const WAITING = Number(process.env.WAITING ?? 10_000)
const IDLE_S = Number(process.env.IDLE_S ?? 10)
const CONCURRENCY = 16

const work = tempDir('bench-engine-')
whenInterrupted(() => removeDir(work))
const ROOT_KEY = `ap_bench${randomBase62(36)}`
const headers = { authorization: `Bearer ${ROOT_KEY}`, 'content-type': 'application/json' }
const serverMode = process.env.DATABASE_URL && process.env.REDIS_URL ? { db: process.env.DATABASE_URL, redis: process.env.REDIS_URL } : null

async function api(base: string, method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`${base}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) })
  return { status: res.status, body: await res.json() }
}


function rssKb(pid: number): number {
  const status = require('node:fs').readFileSync(`/proc/${pid}/status`, 'utf8') as string
  return Number(/VmRSS:\s+(\d+)/.exec(status)![1])
}

async function freshDatabase(): Promise<string> {
  const { default: postgres } = await import('postgres')
  const admin = postgres(serverMode!.db, { max: 1, onnotice: () => {} })
  const name = `bench_engine_${Date.now()}`
  await admin.unsafe(`create database ${name}`)
  await admin.end()
  const url = new URL(serverMode!.db)
  url.pathname = `/${name}`
  return url.toString()
}

async function main() {
  const port = freePort()
  const databaseUrl = serverMode ? await freshDatabase() : ''
  const service = await startServer({
    // BENCH_CPU_PROF=<dir>: the service under `bun --cpu-prof --cpu-prof-md`, written when it stops.
    cmd: process.env.BENCH_CPU_PROF ? ['bun', '--cpu-prof', '--cpu-prof-md', `--cpu-prof-dir=${process.env.BENCH_CPU_PROF}`, 'run', 'src/main.ts'] : ['bun', 'run', 'src/main.ts'],
    env: {
      PORT: String(port), HOST: '127.0.0.1', DATA_DIR: join(work, 'data'), BOOTSTRAP_API_KEY: ROOT_KEY,
      RATE_LIMIT_PER_SECOND: '1000000000', RATE_LIMIT_BURST: '1000000000', LOG_LEVEL: 'warn',
      DATABASE_URL: databaseUrl, REDIS_URL: serverMode ? serverMode.redis : '',
    },
    port,
    logFile: join(work, 'service.log'),
    readyPath: '/healthz',
  })
  const base = service.url
  const ws = (await api(base, 'POST', '/v1/workspaces', { name: 'bench engine' })).body.data.id
  const save = async (name: string, graph: unknown) => {
    const res = await api(base, 'POST', '/v1/workflows', { workspace_id: ws, name, graph })
    if (res.status !== 201) throw new Error(`${name}: ${res.status} ${JSON.stringify(res.body)}`)
    return res.body.data.id as string
  }
  const child = await save('child', {
    nodes: [
      { id: 'start', type: 'start', config: { inputs: [{ name: 'i', type: 'number', required: true }] } },
      { id: 'greet', type: 'template', config: { template: 'item {{inputs.i}}' } },
      { id: 'end', type: 'end', config: { outputs: { text: '{{nodes.greet.output.text}}' } } },
    ],
    edges: [{ source: 'start', target: 'greet' }, { source: 'greet', target: 'end' }],
  })
  const parent = await save('parent', {
    nodes: [
      { id: 'start', type: 'start', config: { inputs: [{ name: 'xs', type: 'array', required: true }] } },
      { id: 'each', type: 'iteration', config: { workflow_id: child, items: '{{inputs.xs}}', item_input: 'i', concurrency: CONCURRENCY } },
      { id: 'end', type: 'end', config: { outputs: { n: '{{nodes.each.output.failed}}' } } },
    ],
    edges: [{ source: 'start', target: 'each' }, { source: 'each', target: 'end' }],
  })
  const waiter = await save('waiter', {
    nodes: [
      { id: 'start', type: 'start', config: {} },
      { id: 'ask', type: 'human_input', config: { prompt: 'Approve?', schema: { type: 'object', properties: { ok: { type: 'boolean' } } } } },
      { id: 'end', type: 'end', config: { outputs: {} } },
    ],
    edges: [{ source: 'start', target: 'ask' }, { source: 'ask', target: 'end' }],
  })

  const finished = async (runId: string) => {
    for (;;) {
      const r = (await api(base, 'GET', `/v1/runs/${runId}`)).body
      if (r.status !== 'running') return r
      await Bun.sleep(20)
    }
  }
  const trigger = async (wf: string, inputs: unknown) => {
    const r = await api(base, 'POST', `/v1/workflows/${wf}/runs?async=true`, { inputs })
    if (r.status !== 202) throw new Error(`trigger: ${r.status} ${JSON.stringify(r.body)}`)
    return r.body.run_id as string
  }

  /** (a): items/s of one iteration over `n` items, from its trigger to its finished_at. */
  const iteration = async (n: number) => {
    const t0 = Date.now()
    const run = await finished(await trigger(parent, { xs: Array.from({ length: n }, (_, i) => i) }))
    if (run.status !== 'completed') throw new Error(`iteration ${run.status}: ${JSON.stringify(run.error)}`)
    return (n * 1000) / (Date.parse(run.finished_at) - t0)
  }
  /** (b): runs/s of `n` plain async runs of the child, CONCURRENCY triggers in flight. */
  const plain = async (n: number) => {
    const t0 = Date.now()
    const ids: string[] = []
    let next = 0
    await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
      while (next++ < n) ids.push(await trigger(child, { i: next }))
    }))
    let last = 0
    for (const id of ids) last = Math.max(last, Date.parse((await finished(id)).finished_at))
    return (n * 1000) / (last - t0)
  }

  log(`engine bench (${serverMode ? 'server' : 'embedded'} mode): warm-up`)
  await iteration(Math.min(200, ITEMS))
  await plain(Math.min(200, ITEMS))
  const a: number[] = []
  const b: number[] = []
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? ['a', 'b'] : ['b', 'a']
    for (const which of order) {
      if (which === 'a') a.push(await iteration(ITEMS))
      else b.push(await plain(ITEMS))
    }
    log(`round ${round + 1}: (a) ${a.at(-1)!.toFixed(0)} items/s, (b) ${b.at(-1)!.toFixed(0)} runs/s`)
  }

  // (c) Parked runs: idle CPU and memory before and after. Idle means settled: the work the parked
  // runs left behind (their outbox events going through the fan-out) is over once the CPU of a 2 s
  // window is back near the baseline's, or after a minute.
  const window = async (ms: number) => {
    const c0 = processCpuMs(service.pid)
    await Bun.sleep(ms)
    return processCpuMs(service.pid) - c0
  }
  const heapUsed = async () => {
    const text = await (await fetch(`${base}/metrics`)).text()
    return Number(/^nodejs_heap_size_used_bytes (\S+)$/m.exec(text)?.[1] ?? NaN)
  }
  const idle = async (baselinePer2s?: number) => {
    const until = Date.now() + 60_000
    let last = await window(2_000)
    while (baselinePer2s !== undefined && last > baselinePer2s * 1.5 + 20 && Date.now() < until) {
      log(`settling: ${last} ms of CPU in 2 s`)
      last = await window(2_000)
    }
    // Nothing asked of the service during the window; its heap is read after (a /metrics scrape walks the heap).
    const cpu = await window(IDLE_S * 1000)
    return { cpu, heap: await heapUsed(), rss: rssKb(service.pid) }
  }
  const before = await idle()
  const parked: string[] = []
  let next = 0
  await Promise.all(Array.from({ length: 32 }, async () => {
    while (next++ < WAITING) parked.push(await trigger(waiter, {}))
  }))
  // Every one waiting: the newest page and the last triggered say so.
  for (;;) {
    const page = (await api(base, 'GET', `/v1/workflows/${waiter}/runs?status=running&limit=100`)).body.data as { waiting: unknown }[]
    const last = (await api(base, 'GET', `/v1/runs/${parked.at(-1)}`)).body
    if (page.every((r) => r.waiting) && last.waiting) break
    await Bun.sleep(500)
  }
  const after = await idle((before.cpu / IDLE_S) * 2)
  const idleBefore = before.cpu
  const idleAfter = after.cpu
  const rssBefore = before.rss
  const rssAfter = after.rss
  const perRunBytes = ((rssAfter - rssBefore) * 1024) / WAITING
  const heapPerRun = (after.heap - before.heap) / WAITING
  // Answer one: the parked runs are alive, not stuck.
  const answered = await api(base, 'POST', `/v1/runs/${parked[0]}/input`, { node: 'ask', data: { ok: true } })
  if (answered.status !== 200 || (await finished(parked[0]!)).status !== 'completed') throw new Error('a parked run did not resume')

  await service.stop()
  const itemsPerS = median(a)
  const runsPerS = median(b)
  const mode = serverMode ? 'server' : 'embedded'
  const rows: Row[] = [
    { figure: `(a) iteration, ${ITEMS} items, concurrency ${CONCURRENCY} (${mode})`, measured: `${itemsPerS.toFixed(0)} items/s`, ceiling: `${runsPerS.toFixed(0)} plain runs/s`, share: share(itemsPerS, runsPerS), target: '≥ 200 items/s, ≥ 50 %', result: verdict((serverMode !== null || itemsPerS >= 200) && itemsPerS >= runsPerS / 2) },
    { figure: `(c) ${WAITING} runs parked in human_input: idle CPU over ${IDLE_S} s (${mode})`, measured: `${idleAfter.toFixed(0)} ms`, ceiling: `${idleBefore.toFixed(0)} ms before`, share: '', target: 'no more than before (±10 %)', result: verdict(idleAfter <= idleBefore * 1.1 + 50) },
    { figure: `(c) JS heap per parked run (${mode})`, measured: `${heapPerRun.toFixed(0)} B`, ceiling: `heap ${(before.heap / 2 ** 20).toFixed(0)} → ${(after.heap / 2 ** 20).toFixed(0)} MB`, share: '', target: '< 1 KB', result: verdict(heapPerRun < 1024) },
    // Embedded, the process holds the database too: its pages of the runs, their events and the outbox.
    { figure: `(c) resident memory per parked run (${mode}${serverMode ? '' : ', database included'})`, measured: `${perRunBytes.toFixed(0)} B`, ceiling: `RSS ${(rssBefore / 1024).toFixed(0)} → ${(rssAfter / 1024).toFixed(0)} MB`, share: '', target: serverMode ? '< 1 KB' : '', result: serverMode ? verdict(perRunBytes < 1024) : 'info' },
  ]
  for (const r of rows) log(`${r.figure}: ${r.measured} (${r.ceiling}${r.share ? `, ${r.share}` : ''}) target ${r.target}: ${r.result}`)
  writeResults(serverMode ? 'engine-server' : 'engine', { machine: machine(), source: sourceVersion(), rounds: { a, b }, idle: { before: idleBefore, after: idleAfter }, rss_kb: { before: rssBefore, after: rssAfter }, heap_bytes: { before: before.heap, after: after.heap } }, rows)
  if (serverMode) {
    const { default: postgres } = await import('postgres')
    const admin = postgres(serverMode.db, { max: 1, onnotice: () => {} })
    await admin.unsafe(`drop database if exists ${new URL(databaseUrl).pathname.slice(1)} with (force)`)
    await admin.end()
  }
}

try {
  await main()
} finally {
  killAll()
  removeDir(work)
}
