import { openSync } from 'node:fs'
import pino from 'pino'
import { createLogger } from '../src/boot'
import { sha256Hex } from '../src/lib/crypto'
import { newId } from '../src/lib/ids'
import { createMetrics } from '../src/lib/metrics'
import { initState, pathOf } from '../src/routes/plugins/request-state'
import { MemoryRedis } from '../src/store/redis/memory'
import { log, tempDir } from './lib'

/**
 * `bun run bench/micro.ts`: the CPU of each piece the conventions add to one request, called in a
 * loop (warm JIT, no load generator, so read them as lower bounds that rank the pieces; the HTTP
 * figures of bench/profile.ts are the truth). One line each: nanoseconds per call.
 */
const N = Number(process.env.MICRO_N ?? 200_000)

function time(name: string, fn: (i: number) => unknown) {
  for (let i = 0; i < N / 10; i++) fn(i)
  const t0 = Bun.nanoseconds()
  for (let i = 0; i < N; i++) fn(i)
  const ns = (Bun.nanoseconds() - t0) / N
  console.log(`${name.padEnd(62)} ${ns.toFixed(0).padStart(7)} ns`)
  return ns
}

async function timeAsync(name: string, fn: (i: number) => Promise<unknown>) {
  for (let i = 0; i < N / 10; i++) await fn(i)
  const t0 = Bun.nanoseconds()
  for (let i = 0; i < N; i++) await fn(i)
  const ns = (Bun.nanoseconds() - t0) / N
  console.log(`${name.padEnd(62)} ${ns.toFixed(0).padStart(7)} ns`)
}

const security: Record<string, string> = {
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cache-control': 'no-store',
}
const request = new Request('http://127.0.0.1:8080/healthz', { headers: { host: '127.0.0.1:8080' } })
const setHeaders = () => {
  const h: Record<string, string> = {}
  Object.assign(h, security)
  h['x-request-id'] = 'req_01m81vg7130ybq5z5c1w96e2p0'
  h['content-security-policy'] = "default-src 'none'; frame-ancestors 'none'"
  return h
}
const body = { request_id: 'req_01m81vg7130ybq5z5c1w96e2p0', status: 'ok' }
const workspace = {
  request_id: 'req_01m81vg7130ybq5z5c1w96e2p0',
  data: {
    id: 'ws_01m81vg723t5x7zjz73ey2tzcj', name: 'bench', description: '', type: 'team', owner_id: 'root', member_count: 1,
    status: 'active', join_policy: 'approve_required', created_at: '2026-11-22T14:45:27.235Z', updated_at: '2026-11-22T14:45:27.235Z', archived_at: null,
  },
  meta: { version: 'v1', deprecated_warnings: [] },
}
const text = JSON.stringify(body)
const token = `ap_${'x'.repeat(40)}`

console.log(`per call, ${N} calls each (Bun ${Bun.version})\n`)
console.log('onRequest (every request)')
time("newId('req') (monotonic ULID, lower-cased)", () => newId('req'))
time('crypto.randomUUID() (for comparison)', () => crypto.randomUUID())
time('initState + pathOf (WeakMap keyed by the Request)', () => initState(request, 'req_x', pathOf(request.url)))
time('security headers into set.headers (Object.assign + 2 sets)', setHeaders)
time("headers.get x-request-id, content-length, content-type + regex", () => {
  request.headers.get('x-request-id')
  Number(request.headers.get('content-length') ?? 0)
  ;/^(multipart\/form-data|application\/x-www-form-urlencoded)\b/i.test(request.headers.get('content-type') ?? '')
})
console.log('\n/v1 only')
time('sha256Hex(token) (node:crypto createHash, key cache lookup key)', () => sha256Hex(token))
time('Bun.hash(token) (non-cryptographic, for comparison)', () => Bun.hash(token))
const redis = new MemoryRedis()
await timeAsync('MemoryRedis.take (token bucket)', () => redis.take('key:k', { capacity: 1e9, refillPerSecond: 1e9 }))

console.log('\nfinish (every JSON answer)')
time('JSON.stringify healthz body', () => JSON.stringify(body))
time('JSON.stringify workspace envelope', () => JSON.stringify(workspace))
const set = setHeaders()
time('copy set.headers with Object.entries + String()', () => {
  const headers: Record<string, string> = {}
  for (const [k, v] of Object.entries(set)) headers[k] = String(v)
  headers['content-type'] = 'application/json'
  return headers
})
const metrics = createMetrics()
time('metrics.observe (prom-client counter + histogram, labels hashed)', (i) => metrics.observe('GET', '/healthz', 200, 0.0001 * (i % 50)))
const warnLog = createLogger('warn')
time('log.info at LOG_LEVEL=warn (a no-op)', () => warnLog.info({ request_id: 'req_x', status: 200 }, 'request'))
const dir = tempDir('agent-platform-micro-')
// The options of createLogger in src/boot.ts, to a file instead of stdout so the terminal is not measured.
const logOptions = { level: 'info', base: { service: 'agent-platform-api' }, timestamp: pino.stdTimeFunctions.isoTime }
const redact = { paths: ['*.authorization', '*.secret', '*.key', 'headers.authorization', 'req.headers.authorization'], censor: '[redacted]' }
const accessLine = { request_id: 'req_01m81vg7130ybq5z5c1w96e2p0', method: 'GET', path: '/v1/workspaces/ws_01m81vg723t5x7zjz73ey2tzcj', route: '/v1/workspaces/:id', status: 200, ms: 0.3 }
for (const [name, logger] of [
  ['log.info at info, as createLogger (redact, a write per line)', pino({ ...logOptions, redact }, pino.destination({ dest: openSync(`${dir}/a.log`, 'w'), sync: true }))],
  ['log.info at info, without redact', pino(logOptions, pino.destination({ dest: openSync(`${dir}/b.log`, 'w'), sync: true }))],
  ['log.info at info, redact, buffered (minLength 8 KiB)', pino({ ...logOptions, redact }, pino.destination({ dest: openSync(`${dir}/c.log`, 'w'), sync: false, minLength: 8192 }))],
  ['log.info at info, no redact, buffered (minLength 8 KiB)', pino(logOptions, pino.destination({ dest: openSync(`${dir}/d.log`, 'w'), sync: false, minLength: 8192 }))],
] as const) {
  time(name, () => logger.info(accessLine, 'request'))
}
const headers = { ...set, 'content-type': 'application/json' }
time('new Response(text, { status, headers }) (8 headers)', () => new Response(text, { status: 200, headers }))
time("…then Elysia's mergeHeaders + second new Response(res.body)", () => {
  const first = new Response(text, { status: 200, headers })
  const merged = new Headers(first.headers)
  for (const k in set) first.headers.has(k) || merged.set(k, set[k]!)
  return new Response(first.body, { headers: merged, status: 200 })
})
time('new Response(text, set) once (a string from mapResponse)', () => new Response(text, { status: 200, headers }))

console.log('\nIdempotency-Key (POST with a key)')
time('2 × sha256Hex (fingerprint of method/path/body, key)', () => {
  sha256Hex(`POST\n/v1/workspaces\n\n{"name":"bench workspace","description":"created by bun run bench"}`)
  sha256Hex('bench-abc-1-12345')
})
let n = 0
await timeAsync('setIfAbsent pending + set done record (MemoryRedis, 24 h TTL)', async () => {
  const key = `idem:key:${n++}`
  await redis.setIfAbsent(key, JSON.stringify({ s: 'pending', f: 'x'.repeat(64) }), 600_000)
  await redis.set(key, JSON.stringify({ s: 'done', f: 'x'.repeat(64), status: 201, body: JSON.stringify(workspace), headers: { 'content-type': 'application/json' } }), 86_400_000)
})
log(`MemoryRedis now holds ${n} idempotency records (~${Math.round(process.memoryUsage().heapUsed / 1048576)} MiB heap): they stay 24 h`)
// Without REDIS_URL the service journals these records (src/boot.ts): one write(2) per call.
const journaled = new MemoryRedis(Date.now, { dir: `${dir}/idempotency`, prefixes: ['idem:'] })
await timeAsync('the same, journaled in DATA_DIR (the embedded default since d9dc77a)', async () => {
  const key = `idem:key:${n++}`
  await journaled.setIfAbsent(key, JSON.stringify({ s: 'pending', f: 'x'.repeat(64) }), 600_000)
  await journaled.set(key, JSON.stringify({ s: 'done', f: 'x'.repeat(64), status: 201, body: JSON.stringify(workspace), headers: { 'content-type': 'application/json' } }), 86_400_000)
})
await journaled.close()
await Bun.sleep(50)
;(await import('node:fs')).rmSync(dir, { recursive: true, force: true })
process.exit(0)
