/**
 * Webhook delivery throughput beside its ceiling: 10 000 outbox events, each to 5 webhooks
 * (50 000 deliveries), to a loopback HTTPS receiver that answers 200 at once; the ceiling is the same
 * HTTP client (sendDelivery) posting the same requests to the same receiver at the same concurrency
 * with no store, Redis or machine. Then timer lateness: 5 000 deliveries whose first attempt gets a
 * 500, retried after 2 s. Rounds alternate (ceiling, service) so both see the same noise.
 * Targets (bench/README.md): >= 1 000 deliveries/s and >= 25 % of the ceiling, in each mode; retry
 * timer lateness p99 < 1 s.
 *
 *   bun run bench:webhooks               embedded PGlite + in-process Redis
 *   DATABASE_URL=... REDIS_URL=... bun run bench:webhooks   also server mode (fresh database per round)
 */
import { join } from 'node:path'
import type { Subprocess } from 'bun'
import { log, machine, removeDir, run, sourceVersion, tempDir, verdict, whenInterrupted, writeResults, type Row } from './lib'

const ROUNDS = Number(process.env.ROUNDS ?? 3)
const EVENTS = Number(process.env.EVENTS ?? 10_000)
const WEBHOOKS = 5
const work = tempDir('bench-webhooks-')
whenInterrupted(() => removeDir(work))
const receivers: Subprocess[] = []
process.on('exit', () => receivers.forEach((r) => r.kill('SIGKILL')))

const cert = join(work, 'cert.pem')
const key = join(work, 'key.pem')
const made = Bun.spawnSync(['openssl', 'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1',
  '-subj', '/CN=localhost', '-addext', 'subjectAltName=DNS:localhost', '-keyout', key, '-out', cert], { stderr: 'pipe' })
if (made.exitCode !== 0) throw new Error(`openssl failed: ${made.stderr}`)

async function receiver(env: Record<string, string>): Promise<string> {
  const child = Bun.spawn(['bun', 'run', 'bench/webhook-receiver-bare.ts'], {
    cwd: join(import.meta.dir, '..'),
    env: { ...process.env, PORT: '0', TLS_CERT_FILE: cert, TLS_KEY_FILE: key, ...env },
    stdout: 'pipe',
    stderr: 'inherit',
  })
  receivers.push(child)
  const reader = child.stdout.getReader()
  let out = ''
  while (!/listening (\d+)/.test(out)) {
    const { value, done } = await reader.read()
    if (done) throw new Error('the bench receiver exited')
    out += new TextDecoder().decode(value)
  }
  return `https://localhost:${/listening (\d+)/.exec(out)![1]}`
}

const trusted = { NODE_EXTRA_CA_CERTS: cert }
const server = process.env.DATABASE_URL && process.env.REDIS_URL ? { db: process.env.DATABASE_URL, redis: process.env.REDIS_URL } : null

async function freshDatabase(name: string): Promise<string> {
  const admin = new URL(server!.db)
  const { default: postgres } = await import('postgres')
  const sql = postgres(admin.toString(), { max: 1, onnotice: () => {} })
  await sql.unsafe(`drop database if exists ${name}`)
  await sql.unsafe(`create database ${name}`)
  await sql.end()
  const url = new URL(admin)
  url.pathname = `/${name}`
  return url.toString()
}

async function pipeline(env: Record<string, string>) {
  const { stdout, cpuMs } = await run(['bun', 'run', 'bench/webhook-pipeline.ts'], { env: { ...trusted, DATA_DIR: join(work, `data-${Date.now()}`), ...env }, timeoutMs: 600_000 })
  return { ...JSON.parse(stdout.trim().split('\n').pop()!), cpu_s: +(cpuMs / 1000).toFixed(1) }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!

const fast = await receiver({})
const failing = await receiver({ FAIL_FIRST: '1' })
log(`receivers at ${fast} and ${failing} (the second answers 500 to each first attempt)`)
const rounds: Record<string, unknown>[] = []
for (let i = 0; i < ROUNDS; i++) {
  const { stdout } = await run(['bun', 'run', 'bench/webhook-ceiling.ts'], { env: { ...trusted, RECEIVER: fast, DELIVERIES: String(EVENTS * WEBHOOKS) } })
  const ceiling = JSON.parse(stdout.trim())
  log(`round ${i + 1}: ceiling ${ceiling.per_second}/s`)
  const embedded = await pipeline({ RECEIVER: fast, EVENTS: String(EVENTS), WEBHOOKS: String(WEBHOOKS) })
  log(`round ${i + 1}: embedded ${embedded.per_second}/s (${Math.round((embedded.per_second / ceiling.per_second) * 100)}% of the ceiling)`)
  const round: Record<string, unknown> = { ceiling, embedded }
  if (server) {
    const db = await freshDatabase(`bench_webhooks_${i}`)
    round.server = await pipeline({ RECEIVER: fast, EVENTS: String(EVENTS), WEBHOOKS: String(WEBHOOKS), STORE: 'server', DATABASE_URL: db, REDIS_URL: server.redis })
    log(`round ${i + 1}: server ${(round.server as { per_second: number }).per_second}/s`)
  }
  round.lateness = await pipeline({ RECEIVER: failing, EVENTS: '5000', WEBHOOKS: '1', MODE: 'retry', RETRY_DELAY_MS: '2000' })
  log(`round ${i + 1}: retry timers late by p99 ${(round.lateness as { timer_lateness_ms: { p99: number } }).timer_lateness_ms.p99} ms`)
  rounds.push(round)
}

const pick = (k: string) => rounds.flatMap((r) => (r[k] ? [r[k] as { per_second: number }] : []))
const ceilingRate = median(pick('ceiling').map((c) => c.per_second))
const summary: Record<string, unknown> = {
  ceiling_per_second: ceilingRate,
  embedded_per_second: median(pick('embedded').map((c) => c.per_second)),
  embedded_share_of_ceiling: +(median(rounds.map((r) => (r.embedded as { per_second: number }).per_second / (r.ceiling as { per_second: number }).per_second)) * 100).toFixed(1),
  timer_lateness_p99_ms: median(rounds.map((r) => (r.lateness as { timer_lateness_ms: { p99: number } }).timer_lateness_ms.p99)),
}
if (server) {
  summary.server_per_second = median(pick('server').map((c) => c.per_second))
  summary.server_share_of_ceiling = +(median(rounds.map((r) => (r.server as { per_second: number }).per_second / (r.ceiling as { per_second: number }).per_second)) * 100).toFixed(1)
}
const results = { when: new Date().toISOString(), ...sourceVersion(), machine: machine(), events: EVENTS, webhooks: WEBHOOKS, summary, rounds }

// The summary table's rows: per mode the rate and its share of the ceiling (the share is the median
// of the rounds' shares, as in the summary), then the retry timers (measured embedded only).
const perS = (n: number) => `${Math.round(n).toLocaleString('en')} deliveries/s`
const rows: Row[] = []
for (const mode of server ? ['embedded', 'server'] : ['embedded']) {
  const rate = summary[`${mode}_per_second`] as number
  const shareOfCeiling = summary[`${mode}_share_of_ceiling`] as number
  rows.push(
    {
      figure: `deliveries/s [${mode}]`,
      measured: perS(rate),
      ceiling: '',
      share: '',
      target: '≥ 1 000 deliveries/s',
      result: verdict(rate >= 1000),
    },
    {
      figure: `deliveries/s, share of the ceiling [${mode}]`,
      measured: perS(rate),
      ceiling: `sendDelivery alone, no store ${perS(ceilingRate)}`,
      share: `${shareOfCeiling.toFixed(1)} %`,
      target: '≥ 25 % of the ceiling',
      result: verdict(shareOfCeiling >= 25),
    },
  )
}
const lateP99 = summary.timer_lateness_p99_ms as number
const lateP50 = median(rounds.map((r) => (r.lateness as { timer_lateness_ms: { p50: number } }).timer_lateness_ms.p50))
rows.push({
  figure: 'retry timer lateness, 2 s delay [embedded]',
  measured: `p99 ${Math.round(lateP99)} ms (p50 ${Math.round(lateP50)} ms)`,
  ceiling: '',
  share: '',
  target: 'p99 < 1 s',
  result: verdict(lateP99 < 1000),
})
writeResults('webhooks', results, rows)
console.log(JSON.stringify(summary, null, 2))
console.log('written to bench/results/webhooks-latest.json')
removeDir(work)
process.exit(0)
