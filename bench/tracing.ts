/**
 * `bun run bench:tracing`: what tracing costs (docs/observability.md). The real service (`bun run
 * src/main.ts`, embedded default, LOG_LEVEL=warn) is started alternately with tracing off (no
 * OTEL_* variable) and on (OTEL_EXPORTER_OTLP_ENDPOINT at a loopback receiver in this process,
 * which accepts every export; the SDK's default batch delay of 5 s), a fresh data directory per
 * round; figures are the medians of the rounds'.
 *
 *   (a) authenticated GET /v1/workspaces/{id} throughput (wrk, 32 connections)   target on ≥ 90 % of off
 *   (b) async runs (start → 3 templates → end, RUNS_ASYNC triggers, 32 in flight):
 *       runs/s from the first trigger to the last finished_at                    target on ≥ 90 % of off
 *   (c) first token of a streamed chat (POST /v1/chat/completions, the fake provider in a process
 *       of its own, FIRST_TOKEN sequential requests), p50                       target on − off < +1 ms
 *
 * Environment: ROUNDS (3), GET_SECONDS (8), RUNS_ASYNC (600), FIRST_TOKEN (200), ON_ENV (JSON: more variables for the "on" service), ONLY (`runs`: figure (b) alone,
 * for a quick comparison; the results file is then not written).
 */
import { join } from 'node:path'
import { writeFileSync } from 'node:fs'
import { EMBEDDED_ENV, freePort, killAll, log, machine, measureOnce, median, percentile, processCpuMs, randomBase62, removeDir, sourceVersion, startFakeProvider, startServer, tempDir, verdict, whenInterrupted, writeResults, type Round, type Row, type Server } from './lib'

const ROUNDS = Number(process.env.ROUNDS ?? 3)
const GET_SECONDS = Number(process.env.GET_SECONDS ?? 8)
const RUNS = Number(process.env.RUNS_ASYNC ?? 600)
const FIRST_TOKEN = Number(process.env.FIRST_TOKEN ?? 200)
const CONCURRENCY = 32
const ONLY = process.env.ONLY

const work = tempDir('bench-tracing-')
whenInterrupted(() => removeDir(work))
const ROOT_KEY = `ap_bench${randomBase62(36)}`
const headers = { authorization: `Bearer ${ROOT_KEY}`, 'content-type': 'application/json' }

/** The collector: counts exports and their bytes, answers an empty ExportTraceServiceResponse. */
const exported = { requests: 0, bytes: 0 }
const collector = Bun.serve({
  hostname: '127.0.0.1',
  port: 0,
  async fetch(req) {
    exported.requests++
    exported.bytes += (await req.arrayBuffer()).byteLength
    return new Response(new Uint8Array(0), { headers: { 'content-type': 'application/x-protobuf' } })
  },
})

const provider = await startFakeProvider({ 'up-stream': { tokens: 20, delayMs: 1, eventWrites: true } })
const modelsFile = join(work, 'models.json')
writeFileSync(modelsFile, JSON.stringify({
  providers: [{ id: 'fake', kind: 'openai', base_url: `${provider.url}/v1`, api_key: 'sk-bench' }],
  models: [{ id: 'bench-chat', type: 'llm', vendor: 'bench', routes: [{ provider: 'fake', model: 'up-stream' }] }],
}))

async function api(base: string, method: string, path: string, body?: unknown, extra: Record<string, string> = {}) {
  const res = await fetch(`${base}${path}`, { method, headers: { ...headers, ...extra }, body: body === undefined ? undefined : JSON.stringify(body) })
  return { status: res.status, body: (await res.json()) as any }
}

async function startService(tracing: boolean, tag: string): Promise<Server> {
  const port = freePort()
  return startServer({
    cmd: ['bun', 'run', 'src/main.ts'],
    env: {
      PORT: String(port), HOST: '127.0.0.1', DATA_DIR: join(work, `data-${tag}`), BOOTSTRAP_API_KEY: ROOT_KEY,
      RATE_LIMIT_PER_SECOND: '1000000000', RATE_LIMIT_BURST: '1000000000', LOG_LEVEL: 'warn', MODELS_FILE: modelsFile,
      ...EMBEDDED_ENV,
      OTEL_EXPORTER_OTLP_ENDPOINT: tracing ? `http://127.0.0.1:${collector.port}` : '',
      // ON_ENV: more variables for the "on" service (e.g. {"OTEL_TRACES_SAMPLER":"always_off"}).
      ...(tracing ? (JSON.parse(process.env.ON_ENV ?? '{}') as Record<string, string>) : {}),
    },
    port,
    logFile: join(work, `service-${tag}.log`),
    readyPath: '/healthz',
  })
}

/**
 * (b) RUNS async triggers, CONCURRENCY in flight; runs/s from the first trigger to the last
 * finished_at, and the service's CPU per run (its process' CPU time over the phase).
 */
async function asyncRuns(service: Server, workflowId: string): Promise<{ perSecond: number; cpuUsPerRun: number }> {
  const base = service.url
  const ids: string[] = []
  let next = 0
  const cpu0 = processCpuMs(service.pid)
  const t0 = Date.now()
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
    while (next++ < RUNS) {
      const r = await api(base, 'POST', `/v1/workflows/${workflowId}/runs?async=true`, { inputs: {} })
      if (r.status !== 202) throw new Error(`async trigger answered ${r.status}: ${JSON.stringify(r.body)}`)
      ids.push(r.body.run_id)
    }
  }))
  for (;;) {
    const r = await api(base, 'GET', `/v1/workflows/${workflowId}/runs?status=running&limit=1`)
    if (r.body.data.length === 0) break
    await Bun.sleep(50)
  }
  const cpuUsPerRun = Math.round(((processCpuMs(service.pid) - cpu0) * 1000) / RUNS)
  let last = 0
  for (let cursor: string | null = ''; cursor !== null;) {
    const page = await api(base, 'GET', `/v1/workflows/${workflowId}/runs?limit=100${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`)
    for (const run of page.body.data) {
      if (run.status !== 'completed') throw new Error(`run ${run.run_id} ${run.status}`)
      last = Math.max(last, Date.parse(run.finished_at))
    }
    cursor = page.body.next_cursor
  }
  return { perSecond: Math.round((RUNS * 1000) / (last - t0)), cpuUsPerRun }
}

/** (c) Sequential streamed chats: ms from sending to the first content chunk. */
async function firstTokens(base: string, workspaceId: string, n: number): Promise<number[]> {
  const out: number[] = []
  for (let i = 0; i < n; i++) {
    const t0 = performance.now()
    const res = await fetch(`${base}/v1/chat/completions`, {
      method: 'POST',
      headers: { ...headers, 'x-workspace-id': workspaceId },
      body: JSON.stringify({ model: 'bench-chat', stream: true, messages: [{ role: 'user', content: 'hello' }] }),
    })
    const reader = res.body!.getReader()
    let text = ''
    for (;;) {
      const { value, done } = await reader.read()
      if (done) throw new Error(`the stream ended before a token: ${text}`)
      text += new TextDecoder().decode(value)
      if (text.includes('"content"')) break
    }
    out.push(performance.now() - t0)
    while (!(await reader.read()).done);
  }
  return out
}

const r2 = (n: number) => Math.round(n * 100) / 100

interface Figures { getRps: number; getCpuUs: number; get: Round; runsPerSecond: number; runCpuUs: number; firstTokenP50: number; firstTokenP99: number }
const figures: Record<'off' | 'on', Figures[]> = { off: [], on: [] }

/**
 * METHOD=interleaved: both services (off, on) up at once for the whole measurement, with the same
 * data, loaded in short alternating bursts (BURSTS pairs of BURST_SECONDS of GET, then pairs of
 * RUNS_BURST async runs), the order swapped every pair. Drift of the machine (seconds to minutes)
 * then falls on both alike, and no round pays for a fresh process of its own: the ratio is of the
 * sums. Figure (c) is left to the default method.
 */
async function interleaved() {
  const BURSTS = Number(process.env.BURSTS ?? 10)
  const BURST_SECONDS = Number(process.env.BURST_SECONDS ?? 2)
  const RUNS_BURST = Number(process.env.RUNS_BURST ?? 200)
  const services = { off: await startService(false, 'off'), on: await startService(true, 'on') }
  try {
    const setup = async (service: Server) => {
      const wsId = (await api(service.url, 'POST', '/v1/workspaces', { name: 'bench tracing' })).body.data.id as string
      const wf = await api(service.url, 'POST', '/v1/workflows', { workspace_id: wsId, name: 'linear', graph: linearGraph() })
      return { wsId, wf: wf.body.data.id as string }
    }
    const made = { off: await setup(services.off), on: await setup(services.on) }
    const totals = { off: { requests: 0, seconds: 0, cpuMs: 0, runs: 0, runSeconds: 0, runCpuUs: 0 }, on: { requests: 0, seconds: 0, cpuMs: 0, runs: 0, runSeconds: 0, runCpuUs: 0 } }
    for (const mode of ['off', 'on'] as const) {
      await measureOnce(services[mode], { url: `${services[mode].url}/v1/workspaces/${made[mode].wsId}`, seconds: 2, headers: { authorization: `Bearer ${ROOT_KEY}` } }, 1, { connections: CONCURRENCY, threads: 1, scriptDir: work })
      await runBurst(services[mode], made[mode].wf, RUNS_BURST)
    }
    for (let i = 0; i < BURSTS; i++) {
      for (const mode of (i % 2 === 0 ? ['off', 'on'] : ['on', 'off']) as ('off' | 'on')[]) {
        const get = await measureOnce(services[mode], { url: `${services[mode].url}/v1/workspaces/${made[mode].wsId}`, seconds: BURST_SECONDS, headers: { authorization: `Bearer ${ROOT_KEY}` } }, 0, { connections: CONCURRENCY, threads: 1, scriptDir: work })
        if (get.errors > 0) throw new Error(`GET: ${get.errors} errors`)
        totals[mode].requests += get.requests
        totals[mode].seconds += get.cpu.wallMs / 1000
        totals[mode].cpuMs += get.cpu.serverCpuMs
      }
    }
    for (let i = 0; i < BURSTS; i++) {
      for (const mode of (i % 2 === 0 ? ['off', 'on'] : ['on', 'off']) as ('off' | 'on')[]) {
        const burst = await runBurst(services[mode], made[mode].wf, RUNS_BURST)
        totals[mode].runs += RUNS_BURST
        totals[mode].runSeconds += burst.seconds
        totals[mode].runCpuUs += burst.cpuMs * 1000
      }
    }
    const rate = (m: 'off' | 'on') => totals[m].requests / totals[m].seconds
    const runRate = (m: 'off' | 'on') => totals[m].runs / totals[m].runSeconds
    log(`interleaved, ${BURSTS} pairs: GET off ${Math.round(rate('off'))}/s (${r2((totals.off.cpuMs * 1000) / totals.off.requests)} µs CPU), on ${Math.round(rate('on'))}/s (${r2((totals.on.cpuMs * 1000) / totals.on.requests)} µs CPU): ${r2((100 * rate('on')) / rate('off'))} %; ` +
      `runs off ${r2(runRate('off'))}/s (${Math.round(totals.off.runCpuUs / totals.off.runs)} µs CPU), on ${r2(runRate('on'))}/s (${Math.round(totals.on.runCpuUs / totals.on.runs)} µs CPU): ${r2((100 * runRate('on')) / runRate('off'))} %; exports ${exported.requests} (${exported.bytes} B)`)
  } finally {
    await services.off.stop()
    await services.on.stop()
  }
}

/** `count` async triggers, CONCURRENCY in flight, then until none of the workflow's runs is running: the wall time and the service's CPU. */
async function runBurst(service: Server, workflowId: string, count: number): Promise<{ seconds: number; cpuMs: number }> {
  let next = 0
  const cpu0 = processCpuMs(service.pid)
  const t0 = performance.now()
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
    while (next++ < count) {
      const r = await api(service.url, 'POST', `/v1/workflows/${workflowId}/runs?async=true`, { inputs: {} })
      if (r.status !== 202) throw new Error(`async trigger answered ${r.status}: ${JSON.stringify(r.body)}`)
    }
  }))
  while ((await api(service.url, 'GET', `/v1/workflows/${workflowId}/runs?status=running&limit=1`)).body.data.length > 0) await Bun.sleep(10)
  return { seconds: (performance.now() - t0) / 1000, cpuMs: processCpuMs(service.pid) - cpu0 }
}

function linearGraph() {
  return {
    nodes: [
      { id: 'start', type: 'start', config: {} },
      ...[1, 2, 3].map((n) => ({ id: `t${n}`, type: 'template', config: { template: `step ${n}` } })),
      { id: 'end', type: 'end', config: { outputs: { text: '{{nodes.t3.output.text}}' } } },
    ],
    edges: ['start', 't1', 't2', 't3', 'end'].slice(1).map((target, k) => ({ source: ['start', 't1', 't2', 't3'][k]!, target })),
  }
}

try {
  if (process.env.METHOD === 'interleaved') await interleaved()
  else for (let i = 0; i < ROUNDS; i++) {
    for (const mode of (i % 2 === 0 ? ['off', 'on'] : ['on', 'off']) as ('off' | 'on')[]) {
      const tag = `${mode}-${i}`
      const service = await startService(mode === 'on', tag)
      try {
        const ws = await api(service.url, 'POST', '/v1/workspaces', { name: 'bench tracing' })
        const wsId = ws.body.data.id as string
        const graph = linearGraph()
        const wf = await api(service.url, 'POST', '/v1/workflows', { workspace_id: wsId, name: 'linear', graph })
        if (wf.status !== 201) throw new Error(`workflow: ${wf.status} ${JSON.stringify(wf.body)}`)
        if (ONLY === 'runs') {
          await asyncRuns(service, wf.body.data.id)
          const runs = await asyncRuns(service, wf.body.data.id)
          log(`round ${i + 1} tracing ${mode}: runs ${runs.perSecond}/s (${runs.cpuUsPerRun} µs CPU/run)`)
          continue
        }
        const get = await measureOnce(service, { url: `${service.url}/v1/workspaces/${wsId}`, seconds: GET_SECONDS, headers: { authorization: `Bearer ${ROOT_KEY}` } }, 2, { connections: CONCURRENCY, threads: 1, scriptDir: work })
        if (get.errors > 0) throw new Error(`GET: ${get.errors} errors`)
        await asyncRuns(service, wf.body.data.id) // warm-up
        const runs = await asyncRuns(service, wf.body.data.id)
        await firstTokens(service.url, wsId, 20) // warm-up
        const ft = Float64Array.from(await firstTokens(service.url, wsId, FIRST_TOKEN)).sort()
        const getCpuUs = Math.round((get.cpu.serverCpuMs * 10_000) / get.requests) / 10
        const f = { getRps: get.rps, getCpuUs, get, runsPerSecond: runs.perSecond, runCpuUs: runs.cpuUsPerRun, firstTokenP50: r2(percentile(ft, 50)), firstTokenP99: r2(percentile(ft, 99)) }
        figures[mode].push(f)
        log(`round ${i + 1} tracing ${mode}: GET ${f.getRps}/s (p50 ${get.p50} ms, ${getCpuUs} µs CPU), runs ${f.runsPerSecond}/s (${f.runCpuUs} µs CPU/run), first token p50 ${f.firstTokenP50} ms p99 ${f.firstTokenP99} ms; exports so far ${exported.requests} (${exported.bytes} B)`)
      } finally {
        await service.stop()
      }
    }
  }
  if (ONLY !== 'runs' && process.env.METHOD !== 'interleaved') summarise()
} finally {
  provider.stop()
  await collector.stop(true)
  killAll()
  removeDir(work)
}

function summarise() {
  const m = (mode: 'off' | 'on', f: (x: Figures) => number) => median(figures[mode].map(f))
  const get = { off: m('off', (x) => x.getRps), on: m('on', (x) => x.getRps) }
  const runs = { off: m('off', (x) => x.runsPerSecond), on: m('on', (x) => x.runsPerSecond) }
  const ft = { off: m('off', (x) => x.firstTokenP50), on: m('on', (x) => x.firstTokenP50) }
  const getCpu = { off: m('off', (x) => x.getCpuUs), on: m('on', (x) => x.getCpuUs) }
  const runCpu = { off: m('off', (x) => x.runCpuUs), on: m('on', (x) => x.runCpuUs) }
  const summary = {
    get_rps: get, get_share: r2((100 * get.on) / get.off),
    runs_per_second: runs, runs_share: r2((100 * runs.on) / runs.off),
    first_token_p50_ms: ft, first_token_delta_ms: r2(ft.on - ft.off),
    get_cpu_us_per_request: getCpu, run_cpu_us_per_run: runCpu,
    exports: exported,
  }
  const rows: Row[] = [
    { figure: '(a) authenticated GET, tracing on', measured: `${get.on} req/s`, ceiling: `off ${get.off} req/s`, share: `${summary.get_share} %`, target: '≥ 90 % of off', result: verdict(summary.get_share >= 90) },
    { figure: '(b) async runs, tracing on', measured: `${runs.on} runs/s`, ceiling: `off ${runs.off} runs/s`, share: `${summary.runs_share} %`, target: '≥ 90 % of off', result: verdict(summary.runs_share >= 90) },
    { figure: '(a) authenticated GET, service CPU per request', measured: `on ${getCpu.on} µs`, ceiling: `off ${getCpu.off} µs`, share: `+${r2(getCpu.on - getCpu.off)} µs`, target: '', result: 'info' },
    { figure: '(b) async runs, service CPU per run', measured: `on ${runCpu.on} µs`, ceiling: `off ${runCpu.off} µs`, share: `+${r2(runCpu.on - runCpu.off)} µs`, target: '', result: 'info' },
    { figure: '(c) first token, streamed chat, p50', measured: `${ft.on} ms`, ceiling: `off ${ft.off} ms`, share: `${summary.first_token_delta_ms >= 0 ? '+' : ''}${summary.first_token_delta_ms} ms`, target: '< +1 ms', result: verdict(summary.first_token_delta_ms < 1) },
  ]
  const file = writeResults('tracing', { machine: machine(), source: sourceVersion(), rounds: ROUNDS, summary, figures }, rows)
  log(`GET ${get.on}/${get.off} req/s (${summary.get_share} %), runs ${runs.on}/${runs.off} runs/s (${summary.runs_share} %), first token p50 ${ft.on}/${ft.off} ms (${summary.first_token_delta_ms} ms); ${file}`)
}
