/**
 * `bun run bench:peers`: our model gateway beside a real peer, the Portkey AI Gateway (open source,
 * Node), on this machine, against the same loopback fake upstream (bench/fake-provider-server.ts),
 * in alternating rounds within the same window, with the upstream called directly as the ceiling.
 * Four processes: this client, our service (`bun run src/main.ts`, embedded default, LOG_LEVEL=warn,
 * the priced catalogue and hard-limit budget of bench/models.ts), Portkey (`node .../start-server.js`)
 * and the fake provider. Nothing connects beyond loopback: the fake is the only upstream.
 *
 *   (a) non-streamed chat (a short answer, 20 completion tokens) at 1, 8 and 32 connections:
 *       req/s, p50, p99 for us, Portkey and direct; rounds rotate the order (us, Portkey, direct /
 *       Portkey, direct, us / ...) so every target shares the machine's noise.
 *       targets: us ≥ 1.1× Portkey's req/s with p99 no worse; p50 over direct at 1 connection < +0.6 ms
 *   (b) streamed chat, one request at a time, the three targets interleaved: time to the first
 *       content chunk (p50) and to the end of a 500-chunk answer.
 *       target: first chunk over direct < +1 ms p50
 *       Also, for context, the first chunk of a 20-chunk answer sent in one upstream write (the shape
 *       of bench:models' first-token figure).
 *   (c) unpaced stream copy rate: a 20 000-chunk answer written as fast as the fake makes it; content
 *       chunks (and bytes) per second from the first to the last content chunk, median of rounds.
 *       target: ≥ 70 % of direct
 *
 * The load generator is a loop of `fetch` per connection in this process (keep-alive), timed with
 * performance.now(): autocannon's latencies are whole milliseconds (a direct p50 reads 0), too coarse
 * for a +0.6 ms target.
 *
 * Portkey is installed (once, then reused) with npm into PEERS_PORTKEY_DIR (default
 * ${TMPDIR:-/tmp}/ap-peers/portkey, outside the repository), pinned to @portkey-ai/gateway 1.15.2 with
 * @hono/node-server pinned to 1.13.8: from 1.14 on, node-server's lightweight Response hands back the
 * upstream fetch's immutable Headers for a streamed body, and Portkey's header update then fails
 * every streamed call with a 500 ("TypeError: immutable"). Portkey is sent the OpenAI body with
 * `x-portkey-provider: openai` and `x-portkey-custom-host: <fake>/v1`. Where it cannot be installed or
 * started, the bench says why and goes on with our figures and direct's.
 *
 * Environment: PEERS_ROUNDS (3), PEERS_SECONDS (2, per load run), PEERS_CONNECTIONS (1,8,32; empty: no (a)),
 * PEERS_STREAMS (150 per target and shape), PEERS_WARMUP (3 s of load per target first), PEERS_BURST_TOKENS (20000), PEERS_BURST_RUNS (3), PEERS_PORTKEY=0 to
 * leave Portkey out, PEERS_PORTKEY_DIR, PEERS_BARE=1 to add a bare Bun relay of the upstream
 * (bench/bare-relay.ts) as a fourth target, a second ceiling, in the log lines only, SERVER=1 for our service on Postgres and Redis (DATABASE_URL,
 * REDIS_URL from the environment, else the machine's local ones).
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { freePort, log, loadOf, machine, percentile, processCpuMs, randomBase62, removeDir, run, sourceVersion, startFakeProvider, startServer, tempDir, verdict, whenInterrupted, writeResults, type LoadResult, type Row, type Server } from './lib'

const ROUNDS = Number(process.env.PEERS_ROUNDS ?? 3)
const SECONDS = Number(process.env.PEERS_SECONDS ?? 2)
const CONNECTIONS = (process.env.PEERS_CONNECTIONS ?? '1,8,32').split(',').filter(Boolean).map(Number)
const STREAMS = Number(process.env.PEERS_STREAMS ?? 150)
const WARMUP = Number(process.env.PEERS_WARMUP ?? 3)
const BURST_TOKENS = Number(process.env.PEERS_BURST_TOKENS ?? 20_000)
const BURST_RUNS = Number(process.env.PEERS_BURST_RUNS ?? 3)
const SERVER_MODE = process.env.SERVER === '1'
const BARE = process.env.PEERS_BARE === '1'
const PORTKEY_VERSION = '1.15.2'
const HONO_NODE_SERVER = '1.13.8'
const PORTKEY_DIR = process.env.PEERS_PORTKEY_DIR ?? join(process.env.TMPDIR || tmpdir(), 'ap-peers', 'portkey')

const work = tempDir('bench-peers-')
whenInterrupted(() => removeDir(work))
const ROOT_KEY = `ap_bench${randomBase62(36)}`

// The upstream's answers; the catalogue's model ids are the same names, so every target gets the same body.
const SHAPES = {
  'bench-first': { tokens: 20, delayMs: 0 },
  'bench-long': { tokens: 500, delayMs: 0, eventWrites: true },
  'bench-burst': { tokens: BURST_TOKENS, delayMs: 0, eventWrites: true },
}
type Model = keyof typeof SHAPES

type Name = 'ours' | 'portkey' | 'direct' | 'bare'
interface Target {
  name: Name
  url: string
  headers: Record<string, string>
  /** The process whose CPU is the gateway's (the fake's for direct). */
  pid: number
}

const round3 = (n: number) => Math.round(n * 1000) / 1000
const median = (xs: number[]) => {
  const v = [...xs].sort((a, b) => a - b)
  return v.length === 0 ? NaN : v.length % 2 ? v[v.length >> 1]! : (v[v.length / 2 - 1]! + v[v.length / 2]!) / 2
}
const rotate = <T>(xs: T[], i: number) => xs.map((_, k) => xs[(k + i) % xs.length]!)
const loadavg = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ')

const messages = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Count for me, one word at a time.' }]
const bodyOf = (model: Model, stream: boolean) => JSON.stringify(stream ? { model, messages, stream: true, stream_options: { include_usage: true } } : { model, messages })

// ---- Portkey: install (pinned, outside the repository) and start ----

function installedVersion(pkg: string): string | null {
  try {
    return (JSON.parse(readFileSync(join(PORTKEY_DIR, 'node_modules', pkg, 'package.json'), 'utf8')) as { version: string }).version
  } catch {
    return null
  }
}

async function portkeyEntry(): Promise<string> {
  const entry = join(PORTKEY_DIR, 'node_modules/@portkey-ai/gateway/build/start-server.js')
  if (installedVersion('@portkey-ai/gateway') === PORTKEY_VERSION && installedVersion('@hono/node-server') === HONO_NODE_SERVER && existsSync(entry)) return entry
  log(`installing @portkey-ai/gateway@${PORTKEY_VERSION} (@hono/node-server ${HONO_NODE_SERVER}) into ${PORTKEY_DIR}`)
  Bun.spawnSync(['mkdir', '-p', PORTKEY_DIR])
  writeFileSync(
    join(PORTKEY_DIR, 'package.json'),
    `${JSON.stringify({ name: 'ap-peers-portkey', private: true, dependencies: { '@portkey-ai/gateway': PORTKEY_VERSION }, overrides: { '@hono/node-server': HONO_NODE_SERVER } }, null, 2)}\n`,
  )
  await run(['npm', 'install', '--prefix', PORTKEY_DIR, '--no-audit', '--no-fund'], { timeoutMs: 300_000 })
  if (installedVersion('@portkey-ai/gateway') !== PORTKEY_VERSION || !existsSync(entry)) throw new Error(`npm installed no @portkey-ai/gateway ${PORTKEY_VERSION} in ${PORTKEY_DIR}`)
  return entry
}

async function startPortkey(): Promise<Server> {
  const entry = await portkeyEntry()
  const nodeVersion = Bun.spawnSync(['node', '--version']).stdout.toString().trim()
  if (!nodeVersion) throw new Error('no `node` on PATH')
  const port = freePort()
  // NODE_ENV=production and --headless: no log UI. It listens on every interface (its start script
  // takes no host), but only the fake on loopback is ever its upstream.
  return startServer({ cmd: ['node', entry, `--port=${port}`, '--headless'], env: { NODE_ENV: 'production' }, port, logFile: join(work, 'portkey.log'), readyPath: '/' })
}

/** Connections of `pid` to anything but loopback (there must be none). */
function remoteConnections(pid: number): string[] {
  const out = Bun.spawnSync(['ss', '-tnpH']).stdout.toString()
  return out
    .split('\n')
    .filter((l) => l.includes(`pid=${pid},`))
    .filter((l) => {
      const peer = l.trim().split(/\s+/)[4] ?? ''
      return !/^(127\.|\[::1\]|\[::ffff:127\.)/.test(peer)
    })
}

// ---- measurements ----

/** bench/lib.ts's load figures (no mean or max here), with the gateway's CPU per request. */
type Load = Omit<LoadResult, 'mean' | 'max'> & {
  /** The gateway's CPU per request (the fake's for direct), microseconds. */
  cpu_us_per_req: number
}

/** `connections` loops of one non-streamed request after another, for `seconds`. */
async function load(t: Target, connections: number, seconds: number): Promise<Load> {
  const body = bodyOf('bench-first', false)
  const latencies: number[] = []
  let errors = 0
  const cpu0 = processCpuMs(t.pid)
  const t0 = performance.now()
  const end = t0 + seconds * 1000
  await Promise.all(
    Array.from({ length: connections }, async () => {
      while (performance.now() < end) {
        const s = performance.now()
        try {
          const res = await fetch(t.url, { method: 'POST', headers: t.headers, body })
          await res.arrayBuffer()
          if (res.status === 200) latencies.push(performance.now() - s)
          else errors++
        } catch {
          errors++
        }
      }
    }),
  )
  const wall = (performance.now() - t0) / 1000
  const cpu = processCpuMs(t.pid) - cpu0
  const { mean: _mean, max: _max, ...figures } = loadOf(latencies, wall, errors)
  return {
    ...figures,
    cpu_us_per_req: Math.round((cpu * 1000) / Math.max(1, latencies.length)),
  }
}

interface Streamed {
  first: number
  last: number
  end: number
  contents: number
  bytes: number
}

/**
 * One streamed request read as SSE (blocks split on a blank line); a content chunk is one whose
 * `choices[0].delta.content` is not empty; events of one read share its timestamp. Throws unless the
 * stream is whole: the expected content chunks and `[DONE]`.
 */
async function stream(t: Target, model: Model): Promise<Streamed> {
  const expected = SHAPES[model].tokens
  const t0 = performance.now()
  const res = await fetch(t.url, { method: 'POST', headers: t.headers, body: bodyOf(model, true) })
  if (res.status !== 200 || !res.body) throw new Error(`${t.name} answered ${res.status}: ${await res.text()}`)
  const reader = res.body.getReader()
  const decoder = new TextDecoder()
  let buf = ''
  let first = NaN
  let last = NaN
  let contents = 0
  let bytes = 0
  let done = false
  for (;;) {
    const r = await reader.read()
    if (r.done) break
    const now = performance.now() - t0
    bytes += r.value.byteLength
    buf += decoder.decode(r.value, { stream: true })
    let at = 0
    for (let i = buf.indexOf('\n\n'); i >= 0; at = i + 2, i = buf.indexOf('\n\n', at)) {
      const block = buf.slice(at, i)
      if (block.startsWith('event: error')) throw new Error(`${t.name}: ${block}`)
      const data = block.startsWith('data: ') ? block.slice(6) : ''
      if (data === '[DONE]') {
        done = true
        continue
      }
      if (!data) continue
      const chunk = JSON.parse(data) as { choices?: { delta?: { content?: string } }[] }
      if (chunk.choices?.[0]?.delta?.content) {
        if (contents++ === 0) first = now
        last = now
      }
    }
    buf = buf.slice(at)
  }
  if (!done || contents !== expected) throw new Error(`${t.name}: ${contents} of ${expected} content chunks, [DONE] ${done ? 'seen' : 'missing'}`)
  return { first, last, end: performance.now() - t0, contents, bytes }
}

async function main() {
  const source = sourceVersion()
  const loadBefore = loadavg()
  log(`bench:peers: src at ${source.commit}${source.src_dirty ? ' (src/ modified)' : ''}; load average ${loadBefore}`)
  const fake = await startFakeProvider(SHAPES)
  const modelsFile = join(work, 'models.json')
  writeFileSync(
    modelsFile,
    JSON.stringify({
      providers: [{ id: 'fake', kind: 'openai', base_url: `${fake.url}/v1`, api_key: 'sk-bench', timeout_ms: 60_000 }],
      models: Object.keys(SHAPES).map((id) => ({ id, type: 'llm', vendor: 'bench', routes: [{ provider: 'fake', model: id }], pricing: { input_per_1k: 0.5, output_per_1k: 1.5 } })),
    }),
  )
  const port = freePort()
  const service = await startServer({
    cmd: ['bun', 'run', 'src/main.ts'],
    env: {
      PORT: String(port), HOST: '127.0.0.1', DATA_DIR: join(work, 'data'), BOOTSTRAP_API_KEY: ROOT_KEY, MODELS_FILE: modelsFile,
      RATE_LIMIT_PER_SECOND: '1000000000', RATE_LIMIT_BURST: '1000000000', LOG_LEVEL: 'warn',
      DATABASE_URL: SERVER_MODE ? (process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres') : '',
      REDIS_URL: SERVER_MODE ? (process.env.REDIS_URL ?? 'redis://127.0.0.1:6379') : '',
    },
    port,
    logFile: join(work, 'service.log'),
    readyPath: '/healthz',
  })
  const auth = { authorization: `Bearer ${ROOT_KEY}`, 'content-type': 'application/json' }
  const created = await fetch(`${service.url}/v1/workspaces`, { method: 'POST', headers: auth, body: JSON.stringify({ name: `bench peers ${randomBase62(6)}` }) })
  const ws = (await created.json()) as { data?: { id: string } }
  if (created.status !== 201 || !ws.data) throw new Error(`could not create the workspace: ${created.status} ${JSON.stringify(ws)}`)
  const budget = await fetch(`${service.url}/v1/workspaces/${ws.data.id}/budget`, { method: 'PUT', headers: auth, body: JSON.stringify({ credits: 1_000_000_000, period: 'month', thresholds: [50, 80, 100], hard_limit: true }) })
  if (budget.status !== 200) throw new Error(`could not set the budget: ${budget.status} ${await budget.text()}`)

  const targets: Target[] = [
    { name: 'ours', url: `${service.url}/v1/chat/completions`, headers: { ...auth, 'x-workspace-id': ws.data.id }, pid: service.pid },
  ]
  let portkey: Server | null = null
  let portkeySkipped: string | null = process.env.PEERS_PORTKEY === '0' ? 'PEERS_PORTKEY=0' : null
  if (!portkeySkipped) {
    try {
      portkey = await startPortkey()
      targets.push({
        name: 'portkey',
        url: `${portkey.url}/v1/chat/completions`,
        headers: { 'content-type': 'application/json', authorization: 'Bearer sk-bench', 'x-portkey-provider': 'openai', 'x-portkey-custom-host': `${fake.url}/v1` },
        pid: portkey.pid,
      })
    } catch (err) {
      portkeySkipped = (err as Error).message.split('\n').slice(0, 6).join(' ')
      log(`Portkey cannot run here, going on with our figures only: ${portkeySkipped}`)
    }
  }
  targets.push({ name: 'direct', url: `${fake.url}/v1/chat/completions`, headers: { 'content-type': 'application/json', authorization: 'Bearer sk-bench' }, pid: fake.pid })
  // The second ceiling: a bare Bun relay of the same upstream (bench/bare-relay.ts).
  let bare: Server | null = null
  if (BARE) {
    const barePort = freePort()
    bare = await startServer({ cmd: ['bun', 'run', 'bench/bare-relay.ts'], env: { PORT: String(barePort), UPSTREAM: fake.url }, port: barePort, logFile: join(work, 'bare.log'), readyPath: '/' })
    targets.push({ name: 'bare', url: `${bare.url}/v1/chat/completions`, headers: { 'content-type': 'application/json', authorization: 'Bearer sk-bench' }, pid: bare.pid })
  }
  log(`fake ${fake.url} (pid ${fake.pid}), ours ${service.url} (pid ${service.pid})${portkey ? `, Portkey ${portkey.url} (pid ${portkey.pid})` : ''}`)

  // Every target answers as expected before anything is timed: the non-streamed answer's usage
  // (ours with credits charged), and the streams whole.
  for (const t of targets) {
    const res = await fetch(t.url, { method: 'POST', headers: t.headers, body: bodyOf('bench-first', false) })
    const json = (await res.json()) as { choices?: { message?: { content?: string } }[]; usage?: { completion_tokens?: number; credits?: number } }
    if (res.status !== 200 || !json.choices?.[0]?.message?.content || json.usage?.completion_tokens !== 20) throw new Error(`${t.name}: unexpected answer ${res.status} ${JSON.stringify(json)}`)
    if (t.name === 'ours' && !(json.usage.credits! > 0)) throw new Error(`ours charged no credits: ${JSON.stringify(json.usage)}`)
    await stream(t, 'bench-long')
  }

  // Warm-up (the JIT of all three, PGlite's first inserts): WARMUP seconds of load at 8 connections and 100 streams each.
  for (const t of targets) {
    await load(t, 8, WARMUP)
    for (let i = 0; i < 100; i++) await stream(t, 'bench-first')
  }

  // (a) non-streamed, alternating rounds, the order rotated each round.
  const nonStreamed: Record<number, Record<string, Load & { rounds: Load[] }>> = {}
  for (const c of CONNECTIONS) {
    const rounds: Record<string, Load[]> = Object.fromEntries(targets.map((t) => [t.name, []]))
    for (let r = 0; r < ROUNDS; r++) for (const t of rotate(targets, r)) rounds[t.name]!.push(await load(t, c, SECONDS))
    nonStreamed[c] = {}
    for (const t of targets) {
      const rs = rounds[t.name]!
      const requests = rs.reduce((n, x) => n + x.requests, 0)
      const seconds = rs.reduce((n, x) => n + x.seconds, 0)
      nonStreamed[c]![t.name] = {
        rps: Math.round(requests / seconds),
        requests,
        seconds: Math.round(seconds * 100) / 100,
        p50: round3(median(rs.map((x) => x.p50))),
        p90: round3(median(rs.map((x) => x.p90))),
        p99: round3(median(rs.map((x) => x.p99))),
        errors: rs.reduce((n, x) => n + x.errors, 0),
        cpu_us_per_req: Math.round(median(rs.map((x) => x.cpu_us_per_req))),
        rounds: rs,
      }
    }
    log(`(a) ${c} connection(s): ${targets.map((t) => { const m = nonStreamed[c]![t.name]!; return `${t.name} ${m.rps}/s p50 ${m.p50} p99 ${m.p99} ms (${m.cpu_us_per_req} µs CPU/req)${m.errors ? ` ERRORS ${m.errors}` : ''}` }).join('; ')}`)
  }

  // (b) 500-chunk streams one at a time, the targets interleaved (order rotated each request).
  const streams: Record<string, Streamed[]> = Object.fromEntries(targets.map((t) => [t.name, []]))
  for (let i = 0; i < STREAMS; i++) for (const t of rotate(targets, i)) streams[t.name]!.push(await stream(t, 'bench-long'))
  const sum = (xs: number[]) => {
    const v = [...xs].sort((a, b) => a - b)
    return { p50: round3(percentile(v, 50)), p90: round3(percentile(v, 90)), p99: round3(percentile(v, 99)) }
  }
  // The same with a 20-chunk answer in one upstream write (bench:models' first-token shape).
  const shorts: Record<string, Streamed[]> = Object.fromEntries(targets.map((t) => [t.name, []]))
  for (let i = 0; i < STREAMS; i++) for (const t of rotate(targets, i)) shorts[t.name]!.push(await stream(t, 'bench-first'))
  const streamed = Object.fromEntries(
    targets.map((t) => [t.name, { first_chunk: sum(streams[t.name]!.map((s) => s.first)), total: sum(streams[t.name]!.map((s) => s.end)), short_first_chunk: sum(shorts[t.name]!.map((s) => s.first)), n: streams[t.name]!.length }]),
  )
  log(`(b) 500-chunk stream: ${targets.map((t) => `${t.name} first chunk p50 ${streamed[t.name]!.first_chunk.p50} ms, total p50 ${streamed[t.name]!.total.p50} ms`).join('; ')}; 20-chunk first chunk p50 ${targets.map((t) => `${t.name} ${streamed[t.name]!.short_first_chunk.p50}`).join(', ')} ms`)

  // (c) unpaced long stream, rounds alternating.
  const burstRounds: Record<string, { chunks_per_s: number; bytes_per_s: number }[]> = Object.fromEntries(targets.map((t) => [t.name, []]))
  for (let r = 0; r < BURST_RUNS; r++) {
    for (const t of rotate(targets, r)) {
      const s = await stream(t, 'bench-burst')
      const span = (s.last - s.first) / 1000
      burstRounds[t.name]!.push({ chunks_per_s: Math.round(s.contents / span), bytes_per_s: Math.round(s.bytes / (s.end / 1000)) })
    }
  }
  const burst = Object.fromEntries(targets.map((t) => [t.name, { chunks_per_s: Math.round(median(burstRounds[t.name]!.map((x) => x.chunks_per_s))), bytes_per_s: Math.round(median(burstRounds[t.name]!.map((x) => x.bytes_per_s))), rounds: burstRounds[t.name]! }]))
  log(`(c) ${BURST_TOKENS}-chunk unpaced stream: ${targets.map((t) => `${t.name} ${burst[t.name]!.chunks_per_s} chunks/s`).join('; ')}`)

  const leaks = portkey ? remoteConnections(portkey.pid) : []
  if (leaks.length) log(`WARNING: Portkey holds connections beyond loopback:\n${leaks.join('\n')}`)
  const loadAfter = loadavg()
  await service.stop()
  await portkey?.stop()
  await bare?.stop()
  fake.stop()

  // ---- figures, targets, table ----
  const has = Boolean(portkey)
  const ms = (n: number) => `${n.toFixed(2)} ms`
  const diff = (n: number) => `${n >= 0 ? '+' : ''}${ms(n)}`
  const rows: Row[] = []
  const checks: { figure: string; ours: string; portkey: string; direct: string; ratio: string; target: string; result: Row['result'] }[] = []
  for (const c of CONNECTIONS) {
    const o = nonStreamed[c]!.ours!
    const p = nonStreamed[c]!.portkey
    const d = nonStreamed[c]!.direct!
    const ratio = p ? o.rps / p.rps : NaN
    checks.push({
      figure: `(a) non-streamed chat, ${c} connection${c === 1 ? '' : 's'}: req/s (p50 / p99)`,
      ours: `${o.rps.toLocaleString('en')}/s (${ms(o.p50)} / ${ms(o.p99)}; ${o.cpu_us_per_req.toLocaleString('en')} µs CPU/req)`,
      portkey: p ? `${p.rps.toLocaleString('en')}/s (${ms(p.p50)} / ${ms(p.p99)}; ${p.cpu_us_per_req.toLocaleString('en')} µs CPU/req)` : 'not run',
      direct: `${d.rps.toLocaleString('en')}/s (${ms(d.p50)} / ${ms(d.p99)})`,
      ratio: p ? `${ratio.toFixed(2)}× req/s; p99 ${diff(o.p99 - p.p99)}` : '',
      target: '≥ 1.1× Portkey req/s, p99 no worse',
      result: p ? verdict(ratio >= 1.1 && o.p99 <= p.p99) : 'info',
    })
    rows.push({
      figure: `(a) non-streamed chat, ${c} connection${c === 1 ? '' : 's'}, req/s vs Portkey`,
      measured: `${o.rps.toLocaleString('en')}/s, p99 ${ms(o.p99)}`,
      ceiling: p ? `Portkey ${p.rps.toLocaleString('en')}/s, p99 ${ms(p.p99)}; direct ${d.rps.toLocaleString('en')}/s` : `direct ${d.rps.toLocaleString('en')}/s`,
      share: p ? `${ratio.toFixed(2)}×` : '',
      target: '≥ 1.1× Portkey, p99 no worse',
      result: p ? verdict(ratio >= 1.1 && o.p99 <= p.p99) : 'info',
    })
  }
  if (nonStreamed[1]) {
    const o = nonStreamed[1].ours!
    const p = nonStreamed[1].portkey
    const d = nonStreamed[1].direct!
    checks.push({ figure: '(a) non-streamed chat, 1 connection: p50 over direct', ours: diff(o.p50 - d.p50), portkey: p ? diff(p.p50 - d.p50) : 'not run', direct: ms(d.p50), ratio: '', target: '< +0.6 ms', result: verdict(o.p50 - d.p50 < 0.6) })
    rows.push({ figure: '(a) non-streamed chat, 1 connection, p50 over direct', measured: `p50 ${ms(o.p50)}`, ceiling: `direct p50 ${ms(d.p50)}${p ? `; Portkey ${ms(p.p50)}` : ''}`, share: diff(o.p50 - d.p50), target: '< +0.6 ms', result: verdict(o.p50 - d.p50 < 0.6) })
  }
  {
    const o = streamed.ours!
    const p = streamed.portkey
    const d = streamed.direct!
    checks.push({ figure: '(b) streamed chat, 500 chunks, first content chunk p50 (over direct)', ours: `${ms(o.first_chunk.p50)} (${diff(o.first_chunk.p50 - d.first_chunk.p50)})`, portkey: p ? `${ms(p.first_chunk.p50)} (${diff(p.first_chunk.p50 - d.first_chunk.p50)})` : 'not run', direct: ms(d.first_chunk.p50), ratio: p ? `${(o.first_chunk.p50 / p.first_chunk.p50).toFixed(2)}× Portkey's time` : '', target: '< +1 ms over direct', result: verdict(o.first_chunk.p50 - d.first_chunk.p50 < 1) })
    checks.push({ figure: '(b) streamed chat, 20 chunks in one write, first content chunk p50 (over direct)', ours: `${ms(o.short_first_chunk.p50)} (${diff(o.short_first_chunk.p50 - d.short_first_chunk.p50)})`, portkey: p ? `${ms(p.short_first_chunk.p50)} (${diff(p.short_first_chunk.p50 - d.short_first_chunk.p50)})` : 'not run', direct: ms(d.short_first_chunk.p50), ratio: p ? `${(o.short_first_chunk.p50 / p.short_first_chunk.p50).toFixed(2)}× Portkey's time` : '', target: '(< +1 ms over direct)', result: 'info' })
    checks.push({ figure: '(b) streamed chat, 500 chunks, whole answer p50', ours: ms(o.total.p50), portkey: p ? ms(p.total.p50) : 'not run', direct: ms(d.total.p50), ratio: p ? `${(o.total.p50 / p.total.p50).toFixed(2)}× Portkey's time` : '', target: '', result: 'info' })
    rows.push({ figure: '(b) streamed chat, 500 chunks, first content chunk, p50', measured: `p50 ${ms(o.first_chunk.p50)}`, ceiling: `direct p50 ${ms(d.first_chunk.p50)}${p ? `; Portkey ${ms(p.first_chunk.p50)}` : ''}`, share: diff(o.first_chunk.p50 - d.first_chunk.p50), target: '< +1 ms', result: verdict(o.first_chunk.p50 - d.first_chunk.p50 < 1) })
    rows.push({ figure: '(b) streamed chat, 500 chunks, whole answer, p50', measured: `p50 ${ms(o.total.p50)}`, ceiling: `direct p50 ${ms(d.total.p50)}${p ? `; Portkey ${ms(p.total.p50)}` : ''}`, share: diff(o.total.p50 - d.total.p50), target: '', result: 'info' })
  }
  {
    const o = burst.ours!
    const p = burst.portkey
    const d = burst.direct!
    const pct = (100 * o.chunks_per_s) / d.chunks_per_s
    const k = (n: number) => `${n.toLocaleString('en')} chunks/s`
    checks.push({ figure: `(c) unpaced stream copy rate (${BURST_TOKENS.toLocaleString('en')} chunks)`, ours: `${k(o.chunks_per_s)} (${(o.bytes_per_s / 1e6).toFixed(1)} MB/s)`, portkey: p ? `${k(p.chunks_per_s)} (${(p.bytes_per_s / 1e6).toFixed(1)} MB/s)` : 'not run', direct: `${k(d.chunks_per_s)} (${(d.bytes_per_s / 1e6).toFixed(1)} MB/s)`, ratio: `${pct.toFixed(1)} % of direct${p ? `; ${(o.chunks_per_s / p.chunks_per_s).toFixed(2)}× Portkey` : ''}`, target: '≥ 70 % of direct', result: verdict(pct >= 70) })
    rows.push({ figure: `(c) unpaced stream copy rate, ${BURST_TOKENS.toLocaleString('en')} chunks`, measured: k(o.chunks_per_s), ceiling: `direct ${k(d.chunks_per_s)}${p ? `; Portkey ${k(p.chunks_per_s)}` : ''}`, share: `${pct.toFixed(1)} %`, target: '≥ 70 % of direct', result: verdict(pct >= 70) })
  }

  const when = new Date().toISOString()
  const mach = machine()
  const results = {
    when,
    ...source,
    machine: mach,
    load_average: { before: loadBefore, after: loadAfter },
    mode: SERVER_MODE ? 'server (Postgres + Redis)' : 'embedded default (PGlite)',
    portkey: portkey ? { version: PORTKEY_VERSION, hono_node_server: HONO_NODE_SERVER, dir: PORTKEY_DIR, node: Bun.spawnSync(['node', '--version']).stdout.toString().trim(), non_loopback_connections: leaks } : { skipped: portkeySkipped },
    config: { rounds: ROUNDS, seconds: SECONDS, connections: CONNECTIONS, streams: STREAMS, burst_tokens: BURST_TOKENS, burst_runs: BURST_RUNS, load_generator: 'fetch loops in one Bun process' },
    checks,
    non_streamed: nonStreamed,
    streamed,
    burst,
  }
  writeResults('peers', results, rows)

  // The table, printed and as the markdown section for bench/README.md.
  const header = ['figure', 'ours', 'Portkey', 'direct', 'ratio', 'target', 'result']
  const lines = [
    `## Peers: our model gateway beside Portkey (\`bun run bench:peers\`)`,
    '',
    `${when.slice(0, 16).replace('T', ' ')} UTC, commit ${source.commit}${source.src_dirty ? ' (src/ modified)' : ''}; ${mach.nproc} × ${mach.cpu}, Bun ${mach.bun}, ${results.portkey && 'node' in results.portkey ? `Node ${results.portkey.node}` : 'no Node'}; our service ${results.mode}.`,
    `Load average (uptime) ${loadBefore} before, ${loadAfter} after: another tenant may share the cores; the rounds alternate so the three targets share its noise.`,
    portkey
      ? `Portkey AI Gateway ${PORTKEY_VERSION} (\`@portkey-ai/gateway\`, \`@hono/node-server\` pinned to ${HONO_NODE_SERVER}: later versions fail its every streamed call), run with Node, \`x-portkey-provider: openai\`, \`x-portkey-custom-host\` the fake; connections beyond loopback seen: ${leaks.length}.`
      : `Portkey was not run: ${portkeySkipped}.`,
    `Per call our service authenticates the key, checks the workspace's access and its hard-limit budget (embedded: an answer kept until something it depends on changes), and charges the call (priced model, as \`bench:models\`: journaled before the answer, written to the ledger in batches); Portkey, without a config, does no accounting.`,
    `Non-streamed: ${ROUNDS} rounds × ${SECONDS} s per target and connection count, order rotated; latencies are the medians of the rounds' percentiles. Streams: ${STREAMS} 500-chunk answers (each event its own upstream write) and ${STREAMS} 20-chunk ones per target, one at a time, interleaved; copy rate: median of ${BURST_RUNS} unpaced ${BURST_TOKENS.toLocaleString('en')}-chunk streams. Load from fetch loops in one Bun process.`,
    '',
    `| ${header.join(' | ')} |`,
    `|${header.map(() => '---').join('|')}|`,
    ...checks.map((c) => `| ${[c.figure, c.ours, c.portkey, c.direct, c.ratio, c.target, c.result].join(' | ')} |`),
    '',
  ]
  if (has && streamed.portkey!.first_chunk.p50 > 20) {
    lines.push(`Portkey's first chunk includes a fixed 25 ms pause: its stream reader (\`readStream\`) sleeps 25 ms before the first event of every stream, by design.`, '')
  }
  writeFileSync(join(import.meta.dir, 'README.peers.md'), `${lines.join('\n')}\n`)
  console.log(lines.slice(8, 10 + checks.length).join('\n'))
  console.log(`met: ${checks.filter((c) => c.result === 'pass').length} of ${checks.filter((c) => c.result !== 'info').length}; written to bench/results/peers-latest.json and bench/README.peers.md`)
}

try {
  await main()
  removeDir(work)
  process.exit(0)
} catch (err) {
  log(`bench:peers failed: ${(err as Error).stack ?? err}; logs kept in ${work}`)
  process.exit(1)
}
