/**
 * `bun run bench/gateway-overhead.ts`: what the gateway adds to a non-streamed chat call. One
 * connection, requests one at a time: `POST /v1/chat/completions` through the service vs the same
 * body to the fake OpenAI-compatible provider (bench/fake-provider-server.ts) directly, alternating
 * (direct, service, service, direct...), p50 of each and the median of the paired differences.
 * The model is priced and the workspace has a hard-limit budget, as in bench/models.ts: every call
 * checks the budget and writes the ledger.
 *
 * Environment: GW_REQUESTS (3000 per path), GW_WARMUP (500 per path), GW_MAINS (comma-separated
 * service entry points, default src/main.ts; several are measured in the same run, their requests
 * interleaved, e.g. a copy of the previous version beside the current one), GW_STREAM=1 to also
 * measure the first chunk of a streamed call the same way, BENCH_CPU_PROF=<dir> (service under
 * `bun --cpu-prof`), GW_SERVER=1 for the service in server mode (a fresh database on DATABASE_URL's
 * server, dropped at the end, and REDIS_URL; default the local ones; every service of the run shares
 * them), else embedded.
 */
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { freePort, log, percentile, randomBase62, removeDir, startFakeProvider, startServer, tempDir, whenInterrupted } from './lib'

const REQUESTS = Number(process.env.GW_REQUESTS ?? 3000)
const WARMUP = Number(process.env.GW_WARMUP ?? 500)
const MAINS = (process.env.GW_MAINS ?? 'src/main.ts').split(',')
const STREAM = process.env.GW_STREAM === '1'
const CPU_PROF = process.env.BENCH_CPU_PROF
const SERVER_MODE = process.env.GW_SERVER === '1'
const ADMIN_URL = process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/postgres'
const REDIS_URL = SERVER_MODE ? (process.env.REDIS_URL || 'redis://127.0.0.1:6379') : ''
/** Server mode: a database of the run's own (its root key is the run's), dropped at the end. */
const DB_NAME = `bench_gw_${process.pid}_${Date.now()}`

async function admin(statement: string): Promise<void> {
  const { default: postgres } = await import('postgres')
  const sql = postgres(ADMIN_URL, { max: 1, onnotice: () => {} })
  try {
    await sql.unsafe(statement)
  } finally {
    await sql.end()
  }
}

const work = tempDir('bench-gw-')
whenInterrupted(() => removeDir(work))
const ROOT_KEY = `ap_bench${randomBase62(36)}`
const body = JSON.stringify({ model: 'bench-first', messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Count for me, one word at a time.' }] })
const streamBody = JSON.stringify({ model: 'bench-first', messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Count for me, one word at a time.' }], stream: true, stream_options: { include_usage: true } })

interface Target { name: string; url: string; headers: Record<string, string> }

async function once(t: Target, direct: boolean): Promise<number> {
  const t0 = performance.now()
  const res = await fetch(`${t.url}/v1/chat/completions`, { method: 'POST', headers: t.headers, body })
  const json = (await res.json()) as { choices?: unknown[]; usage?: { credits?: number } }
  const ms = performance.now() - t0
  if (res.status !== 200 || !json.choices) throw new Error(`${t.name} answered ${res.status}: ${JSON.stringify(json)}`)
  if (!direct && !(json.usage!.credits! > 0)) throw new Error(`${t.name} charged no credits`)
  return ms
}

/** Time to the first content chunk of a streamed call (the whole stream is read). */
async function first(t: Target): Promise<number> {
  const t0 = performance.now()
  const res = await fetch(`${t.url}/v1/chat/completions`, { method: 'POST', headers: t.headers, body: streamBody })
  const reader = res.body!.getReader()
  const decoder = new TextDecoder()
  let at = NaN
  let text = ''
  for (;;) {
    const { value, done } = await reader.read()
    if (done) break
    text += decoder.decode(value, { stream: true })
    if (Number.isNaN(at) && text.includes('"content":"')) at = performance.now() - t0
  }
  if (res.status !== 200 || !text.includes('data: [DONE]')) throw new Error(`${t.name} stream: ${res.status} ${text.slice(0, 300)}`)
  return at
}

const round3 = (n: number) => Math.round(n * 1000) / 1000
const median = (xs: number[]) => round3(percentile([...xs].sort((a, b) => a - b), 50))

async function main() {
  let DATABASE_URL = ''
  if (SERVER_MODE) {
    await admin(`create database ${DB_NAME}`)
    whenInterrupted(() => void admin(`drop database if exists ${DB_NAME} with (force)`))
    const url = new URL(ADMIN_URL)
    url.pathname = `/${DB_NAME}`
    DATABASE_URL = url.toString()
  }
  const fake = await startFakeProvider({ 'bench-first': { tokens: 20 } })
  const modelsFile = join(work, 'models.json')
  writeFileSync(modelsFile, JSON.stringify({
    providers: [{ id: 'fake', kind: 'openai', base_url: `${fake.url}/v1`, api_key: 'sk-bench', timeout_ms: 60_000 }],
    models: [{ id: 'bench-first', type: 'llm', vendor: 'bench', routes: [{ provider: 'fake', model: 'bench-first' }], pricing: { input_per_1k: 0.5, output_per_1k: 1.5 } }],
  }))
  const direct: Target = { name: 'direct', url: fake.url, headers: { 'content-type': 'application/json', authorization: 'Bearer sk-bench' } }
  const services: Target[] = []
  const stops: (() => Promise<unknown>)[] = []
  for (const [i, main] of MAINS.entries()) {
    const port = freePort()
    const s = await startServer({
      cmd: CPU_PROF ? ['bun', '--cpu-prof', '--cpu-prof-md', `--cpu-prof-dir=${CPU_PROF}`, 'run', main] : ['bun', 'run', main],
      env: {
        PORT: String(port), HOST: '127.0.0.1', DATA_DIR: join(work, `data${i}`), BOOTSTRAP_API_KEY: ROOT_KEY, MODELS_FILE: modelsFile,
        RATE_LIMIT_PER_SECOND: '1000000000', RATE_LIMIT_BURST: '1000000000', LOG_LEVEL: 'warn', DATABASE_URL, REDIS_URL,
      },
      port,
      logFile: join(work, `service${i}.log`),
      readyPath: '/healthz',
    })
    const auth = { authorization: `Bearer ${ROOT_KEY}`, 'content-type': 'application/json' }
    const created = await fetch(`${s.url}/v1/workspaces`, { method: 'POST', headers: auth, body: JSON.stringify({ name: 'bench gateway' }) })
    const ws = ((await created.json()) as { data: { id: string } }).data.id
    const budget = await fetch(`${s.url}/v1/workspaces/${ws}/budget`, { method: 'PUT', headers: auth, body: JSON.stringify({ credits: 1_000_000_000, period: 'month', thresholds: [50, 80, 100], hard_limit: true }) })
    if (budget.status !== 200) throw new Error(`budget: ${budget.status}`)
    stops.push(() => s.stop())
    services.push({ name: main, url: s.url, headers: { ...auth, 'x-workspace-id': ws } })
  }
  const all = [direct, ...services]
  const measure = async (fn: (t: Target) => Promise<number>, what: string) => {
    for (let i = 0; i < WARMUP; i++) for (const t of all) await fn(t)
    const times = all.map(() => [] as number[])
    for (let i = 0; i < REQUESTS; i++) {
      const order = i % 2 === 0 ? all.map((_, k) => k) : all.map((_, k) => all.length - 1 - k)
      for (const k of order) times[k]!.push(await fn(all[k]!))
    }
    const d = median(times[0]!)
    log(`${what}: direct p50 ${d} ms`)
    for (const [k, s] of services.entries()) {
      const t = times[k + 1]!
      const paired = median(t.map((v, i) => v - times[0]![i]!))
      log(`${what}: ${s.name} p50 ${median(t)} ms: +${round3(median(t) - d)} ms over direct (paired median +${paired}); p90 ${round3(percentile([...t].sort((a, b) => a - b), 90))}`)
    }
  }
  log(`mode: ${SERVER_MODE ? 'server (PostgreSQL + Redis)' : 'embedded (PGlite)'}; load average ${(await import('node:os')).loadavg().map((n) => n.toFixed(2)).join(' ')}`)
  await measure((t) => once(t, t === direct), 'non-streamed chat, 1 connection')
  if (STREAM) await measure(first, 'streamed chat, first content chunk')
  // Stopped with SIGTERM, so that a profiled service writes its profile.
  for (const stop of stops) await stop()
  fake.stop()
  if (SERVER_MODE) await admin(`drop database if exists ${DB_NAME} with (force)`)
  removeDir(work)
  process.exit(0)
}

await main().catch(async (err) => {
  if (SERVER_MODE) await admin(`drop database if exists ${DB_NAME} with (force)`).catch(() => {})
  throw err
})
