/**
 * `bun run bench:soak`: a bounded soak. The real service (`bun run src/main.ts`, embedded
 * default, LOG_LEVEL=warn) under SOAK_SECONDS (180) of mixed traffic from SOAK_CONCURRENCY (8)
 * clients in this process, each looping over one of: a workspace read, a synchronous workflow run
 * (start → template → end), a chat turn with a local-chat agent over a small knowledge base, a text
 * document upload, a knowledge search and a webhook ping to a loopback receiver.
 *
 * Targets: memory stays flat (the service's RSS in the last minute within 25 % of the first minute's
 * after warm-up, no steady climb) and p99 latency of every minute within 2× of the first minute's.
 * Also printed: requests per minute, errors (must be 0), the receiver's deliveries.
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { EMBEDDED_ENV, freePort, log, machine, percentile, randomBase62, removeDir, sourceVersion, startServer, tempDir, verdict, whenInterrupted, writeResults, type Row } from './lib'

const SECONDS = Number(process.env.SOAK_SECONDS ?? 180)
const CONCURRENCY = Number(process.env.SOAK_CONCURRENCY ?? 8)
const work = tempDir('bench-soak-')
whenInterrupted(() => removeDir(work))
const KEY = `ap_bench${randomBase62(36)}`

let deliveries = 0
const receiver = Bun.serve({
  hostname: '127.0.0.1',
  port: 0,
  async fetch(req) {
    await req.text()
    deliveries++
    return Response.json({ ok: true })
  },
})
const port = freePort()
const service = await startServer({
  cmd: ['bun', 'run', 'src/main.ts'],
  env: {
    PORT: String(port),
    HOST: '127.0.0.1',
    DATA_DIR: join(work, 'data'),
    BOOTSTRAP_API_KEY: KEY,
    LOG_LEVEL: 'warn',
    RATE_LIMIT_PER_SECOND: '1000000000',
    RATE_LIMIT_BURST: '1000000000',
    WEBHOOK_ALLOW_HTTP: 'true',
    WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
    ...EMBEDDED_ENV,
  },
  port,
  logFile: join(work, 'service.log'),
  readyPath: '/healthz',
})

const call = async (method: string, path: string, body?: unknown) => {
  const res = await fetch(`${service.url}${path}`, { method, headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) })
  const text = await res.text()
  if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${text.slice(0, 300)}`)
  return JSON.parse(text)
}
const ws = (await call('POST', '/v1/workspaces', { name: 'Soak' })).data.id
const hook = (await call('POST', '/v1/webhooks', { workspace_id: ws, url: `http://127.0.0.1:${receiver.port}/hook`, events: ['webhook.test'], secret: 'whsec_soak-secret-0123456789' })).data.id
const wf = (await call('POST', '/v1/workflows', {
  workspace_id: ws,
  name: 'Greeting',
  graph: {
    nodes: [
      { id: 'start', type: 'start', config: { inputs: [{ name: 'name', type: 'string', default: 'world' }] } },
      { id: 'greet', type: 'template', config: { template: 'Hello {{inputs.name}}' } },
      { id: 'end', type: 'end', config: { outputs: { text: '{{nodes.greet.output.text}}' } } },
    ],
    edges: [{ source: 'start', target: 'greet' }, { source: 'greet', target: 'end' }],
  },
})).data.id
const kb = (await call('POST', '/v1/knowledge-bases', { workspace_id: ws, name: 'Soak base' })).data.id
for (let i = 0; i < 20; i++) await call('POST', `/v1/knowledge-bases/${kb}/documents`, { type: 'text', name: `seed-${i}.txt`, content: `Refunds take ${i} days. Parcels ship from warehouse ${i}.` })
const agent = (await call('POST', '/v1/agents', { workspace_id: ws, name: 'Soak agent', type: 'agent', model: 'local-chat', knowledge_base_ids: [kb] })).data.id

type Kind = 'read' | 'run' | 'chat' | 'upload' | 'search' | 'ping'
const KINDS: Kind[] = ['read', 'run', 'chat', 'upload', 'search', 'ping']
let n = 0
const request: Record<Kind, () => Promise<unknown>> = {
  read: () => call('GET', `/v1/workspaces/${ws}`),
  run: () => call('POST', `/v1/workflows/${wf}/runs`, { inputs: { name: `n${n++}` } }),
  chat: () => call('POST', `/v1/agents/${agent}/chat`, { message: `How long do refunds take? (${n++})`, user_id: `u${n % 50}` }),
  upload: () => call('POST', `/v1/knowledge-bases/${kb}/documents`, { type: 'text', name: `doc-${n++}.txt`, content: `Note ${n}: shipping takes ${n % 9} days.` }),
  search: () => call('POST', `/v1/knowledge-bases/${kb}/search`, { query: 'how long do refunds take', top_k: 5 }),
  ping: () => call('POST', `/v1/webhooks/${hook}/ping`),
}

const rss = () => {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${service.pid}/status`, 'utf8'))
  return m ? Number(m[1]) / 1024 : NaN
}
const start = performance.now()
const minutes: { latencies: number[]; byKind: Record<string, number[]>; errors: number; rss: number[] }[] = []
const minuteOf = (t: number) => Math.floor((t - start) / 60_000)
const slot = (m: number) => (minutes[m] ??= { latencies: [], byKind: {}, errors: 0, rss: [] })
const errors: string[] = []
const deadline = start + SECONDS * 1000
const sampler = setInterval(() => {
  const t = performance.now()
  if (t < deadline) slot(minuteOf(t)).rss.push(rss())
}, 5000)

log(`soak: ${SECONDS} s, ${CONCURRENCY} clients, mix ${KINDS.join(', ')}`)
await Promise.all(Array.from({ length: CONCURRENCY }, async (_, c) => {
  let i = c
  while (performance.now() < deadline) {
    const kind = KINDS[i++ % KINDS.length]!
    const t0 = performance.now()
    try {
      await request[kind]()
      const ms = performance.now() - t0
      const s = slot(minuteOf(t0))
      s.latencies.push(ms)
      ;(s.byKind[kind] ??= []).push(ms)
    } catch (err) {
      slot(minuteOf(t0)).errors++
      if (errors.length < 5) errors.push((err as Error).message)
    }
  }
}))
clearInterval(sampler)

const summary = minutes.map((m, i) => {
  const sorted = [...m.latencies].sort((a, b) => a - b)
  return {
    minute: i + 1,
    requests: m.latencies.length,
    errors: m.errors,
    p50_ms: Math.round(percentile(sorted, 50) * 10) / 10,
    p99_ms: Math.round(percentile(sorted, 99) * 10) / 10,
    p99_by_kind_ms: Object.fromEntries(Object.entries(m.byKind).map(([k, v]) => [k, Math.round(percentile([...v].sort((a, b) => a - b), 99) * 10) / 10])),
    rss_mb: { first: Math.round(m.rss[0] ?? NaN), last: Math.round(m.rss.at(-1) ?? NaN), max: Math.round(Math.max(...m.rss)) },
  }
})
const first = summary[0]!
const last = summary.at(-1)!
const p99Ratio = Math.max(...summary.map((s) => s.p99_ms)) / first.p99_ms
const rssGrowth = last.rss_mb.last / first.rss_mb.last
const result = {
  when: new Date().toISOString(),
  ...sourceVersion(),
  machine: machine(),
  seconds: SECONDS,
  concurrency: CONCURRENCY,
  minutes: summary,
  deliveries_received: deliveries,
  errors,
  verdict: { p99_worst_over_first: Math.round(p99Ratio * 100) / 100, rss_last_over_first: Math.round(rssGrowth * 100) / 100 },
}
const worst = Math.max(...summary.map((s) => s.p99_ms))
const requests = summary.reduce((a, s) => a + s.requests + s.errors, 0)
const errorCount = summary.reduce((a, s) => a + s.errors, 0)
const traffic = `${SECONDS} s, ${CONCURRENCY} clients`
const rows: Row[] = [
  {
    figure: `p99 latency, worst minute / first minute (${traffic})`,
    measured: `${p99Ratio.toFixed(2)}× (${worst.toFixed(1)} / ${first.p99_ms.toFixed(1)} ms)`,
    ceiling: '',
    share: '',
    target: '≤ 2×',
    result: verdict(p99Ratio <= 2),
  },
  {
    figure: `service RSS, end / first minute (${traffic})`,
    measured: `${rssGrowth.toFixed(2)}× (${last.rss_mb.last} / ${first.rss_mb.last} MB)`,
    ceiling: '',
    share: '',
    target: 'flat: ≤ 1.25×',
    result: verdict(rssGrowth <= 1.25),
  },
  {
    figure: `errors (${traffic})`,
    measured: `${errorCount.toLocaleString('en')} of ${requests.toLocaleString('en')} requests`,
    ceiling: '',
    share: '',
    target: '0',
    result: verdict(errorCount === 0),
  },
]
writeResults('soak', result, rows)
for (const s of summary) log(`  minute ${s.minute}: ${s.requests} requests, ${s.errors} errors, p50 ${s.p50_ms} ms, p99 ${s.p99_ms} ms, RSS ${s.rss_mb.first} → ${s.rss_mb.last} MB (max ${s.rss_mb.max})`)
log(`  p99 worst minute / first: ${result.verdict.p99_worst_over_first}× (target ≤ 2×) ${p99Ratio <= 2 ? 'PASS' : 'MISS'}`)
log(`  RSS last / first minute: ${result.verdict.rss_last_over_first}× (target ≤ 1.25×) ${rssGrowth <= 1.25 ? 'PASS' : 'MISS'}`)
log(`  webhook deliveries received: ${deliveries}; errors: ${errorCount}${errors.length ? ` (${errors.join(' | ')})` : ''}`)
await service.stop()
receiver.stop(true)
removeDir(work)
