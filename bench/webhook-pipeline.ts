/**
 * Child of bench/webhooks.ts (started with NODE_EXTRA_CA_CERTS so it trusts the bench receiver):
 * the real store, Redis port and workers in this process, fed by outbox events inserted with SQL.
 * Prints one JSON line with the figures.
 *   EVENTS, WEBHOOKS, RECEIVER (https://localhost:<port>), MODE (burst | retry), STORE (embedded | server)
 */
import { openDeps, createLogger, closeDeps } from '../src/boot'
import { loadConfig } from '../src/config'
import { SecretBox } from '../src/lib/secret-box'
import { newId } from '../src/lib/ids'
import { openEmbedded, openPostgres } from '../src/store/db'
import { IoRedis } from '../src/store/redis/ioredis'
import { MemoryRedis } from '../src/store/redis/memory'
import { startWorkers } from '../src/workers'

const events = Number(process.env.EVENTS ?? 10_000)
const webhooks = Number(process.env.WEBHOOKS ?? 5)
const receiver = process.env.RECEIVER!
const mode = process.env.MODE ?? 'burst'
const dataDir = process.env.DATA_DIR!
const server = process.env.STORE === 'server'
const retryDelay = Number(process.env.RETRY_DELAY_MS ?? 2000)

const config = loadConfig({
  LOG_LEVEL: 'warn',
  DATA_DIR: dataDir,
  SECRET_KEY: 'bench-secret-key-bench-secret-key-0123',
  WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
  WEBHOOK_RETRY_DELAYS_MS: `${retryDelay},${retryDelay},${retryDelay},${retryDelay},${retryDelay}`,
})
const db = server ? openPostgres(process.env.DATABASE_URL!, 10) : await openEmbedded({ dataDir: null })
const redis = server ? new IoRedis(process.env.REDIS_URL!, `bench:${process.pid}:`) : new MemoryRedis()
const deps = await openDeps(config, { db, redis, log: createLogger('warn') })
const sql = deps.db.sql
const box = new SecretBox(config.secretKey!)

await sql`insert into workspaces (id, name, type, join_policy, owner_id) values ('ws_bench', 'bench', 'team', 'open', 'bench')`
for (let i = 0; i < webhooks; i++) {
  await sql`insert into webhooks (id, workspace_id, url, events, secret_encrypted, created_by)
            values (${`whk_bench_${i}`}, 'ws_bench', ${`${receiver}/hook/${i}`}, ${['workflow.run.completed']}, ${box.seal(`bench-secret-${i}`)}, 'bench')`
}
const rows = Array.from({ length: events }, (_, i) => ({
  id: newId('evt'),
  workspace_id: 'ws_bench',
  type: 'workflow.run.completed',
  data: sql.json({ workflow_id: 'wf_bench', run_id: `run_${i}`, status: 'completed', duration_ms: 1234, outputs: { answer: 'forty-two', n: i } }),
}))
for (let i = 0; i < rows.length; i += 1000) await sql`insert into events ${sql(rows.slice(i, i + 1000))}`

const expected = events * webhooks
const t0 = performance.now()
const workers = await startWorkers(deps)
// Settled = every delivery succeeded; polled every 100 ms with one cheap count.
let settledAt = 0
for (;;) {
  const [row] = await sql<{ n: number }[]>`select count(*)::int as n from webhook_deliveries where status = 'succeeded'`
  const n = row?.n ?? 0
  if (n >= expected) {
    settledAt = performance.now()
    break
  }
  await Bun.sleep(100)
}
await workers.stop()
const seconds = (settledAt - t0) / 1000
const out: Record<string, unknown> = { mode, store: server ? 'server' : 'embedded', events, webhooks, deliveries: expected, seconds: +seconds.toFixed(2), per_second: Math.round(expected / seconds) }
if (mode === 'retry') {
  const attempts = await sql<{ a: { at: string; duration_ms: number }[] }[]>`select attempts as a from webhook_deliveries`
  // Lateness of the retry timer: second attempt start minus (end of the first + the delay). An upper
  // bound: it includes saving the first result and the time to claim and lock the row.
  const late = attempts.map(({ a }) => Date.parse(a[1]!.at) - (Date.parse(a[0]!.at) + a[0]!.duration_ms + retryDelay)).sort((x, y) => x - y)
  const pct = (p: number) => late[Math.min(late.length - 1, Math.floor((p / 100) * late.length))]!
  out.timer_lateness_ms = { p50: pct(50), p99: pct(99), max: late[late.length - 1] }
}
console.log(JSON.stringify(out))
await closeDeps(deps)
process.exit(0)
