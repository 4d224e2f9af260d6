/**
 * Idle memory of the service (`bun run bench:memory`; figures in bench/README.memory.md):
 *
 *   A. resident memory (VmRSS, with its peak VmHWM and its anonymous / file-backed parts) of
 *      `bun run src/main.ts` idle ~5 s after it answers, in embedded mode (fresh DATA_DIR, no
 *      DATABASE_URL/REDIS_URL) and in server mode (PostgreSQL + Redis on this machine), and of the
 *      server-mode process kinds `api` and `worker`; for the HTTP processes again after warm-up
 *      requests (/healthz, GET /v1/models, one local-chat call) and after the lazily loaded extras
 *      (/docs/json, /console/app.js);
 *   B. ceilings measured in the same run: a bare `Bun.serve` process, and a bare PGlite+vector open of
 *      a data directory (embedded mode's floor) beside the same `Bun.serve`;
 *   C. where the memory goes: RSS of a fresh `bun` process after importing (and, where it is what the
 *      service does, starting) each heavy part alone, less a bare `bun` process's.
 *
 * Server mode uses a database of its own (created and dropped here) and a Redis database number of
 * its own (REDIS_DB, 11 by default), so nothing else using the machine's PostgreSQL or Redis is touched.
 * IDLE_MS (5000) and PART_ROUNDS (3, the median is kept) tune it. Each mode is set here: the
 * embedded service is started with DATABASE_URL and REDIS_URL empty whatever the caller's environment
 * holds, and BENCH_DATABASE_URL and BENCH_REDIS_URL name the servers of the server-mode rows.
 */
import { cpSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { EMBEDDED_ENV, freePort, log, machine, randomBase62, removeDir, run, sourceVersion, startServer, tempDir, whenInterrupted, writeResults, type Row, type Server } from './lib'

const ROOT = join(import.meta.dir, '..')
const IDLE_MS = Number(process.env.IDLE_MS ?? 5000)
const PART_ROUNDS = Number(process.env.PART_ROUNDS ?? 3)
const PG = process.env.BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres'
const REDIS = `${process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379'}/${process.env.REDIS_DB ?? 11}`
const TARGET_SERVER_MB = 150

export interface Mem {
  rss: number
  hwm: number
  anon: number
  file: number
  shmem: number
  threads: number
}

/** Resident memory of a process, in MB, from /proc/<pid>/status. */
export function memOf(pid: number): Mem {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8')
  const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+)`, 'm').exec(status)?.[1] ?? NaN)
  const mb = (field: string) => Math.round(kb(field) / 102.4) / 10
  return { rss: mb('VmRSS'), hwm: mb('VmHWM'), anon: mb('RssAnon'), file: mb('RssFile'), shmem: mb('RssShmem'), threads: kb('Threads') }
}

/** Child processes of `pid` (none expected: workers are threads): their RSS would count too. */
function childPids(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number)
  } catch {
    return []
  }
}

interface Sample extends Mem {
  what: string
  phase: string
  children_rss: number
}

const samples: Sample[] = []

function sample(what: string, phase: string, pid: number): Sample {
  const kids = childPids(pid)
  const s = { what, phase, ...memOf(pid), children_rss: Math.round(kids.reduce((a, p) => a + memOf(p).rss, 0) * 10) / 10 }
  samples.push(s)
  log(`${what.padEnd(28)} ${phase.padEnd(22)} RSS ${s.rss} MB (peak ${s.hwm}, anon ${s.anon}, file ${s.file}, shmem ${s.shmem}, ${s.threads} threads${kids.length ? `, children ${s.children_rss} MB` : ''})`)
  return s
}

const work = tempDir('ap-bench-memory-')
whenInterrupted(() => removeDir(work))
const key = `ap_${randomBase62(40)}`

/** One warm-up round: what a client does first. */
async function warmUp(server: Server) {
  const auth = { authorization: `Bearer ${key}` }
  const check = async (res: Response, what: string) => {
    const body = await res.text()
    if (!res.ok) throw new Error(`${what}: ${res.status} ${body.slice(0, 300)}`)
  }
  await check(await fetch(`${server.url}/healthz`), '/healthz')
  await check(await fetch(`${server.url}/v1/models`, { headers: auth }), 'GET /v1/models')
  // A root key acts in a workspace it names: one is created for the chat call.
  const made = await fetch(`${server.url}/v1/workspaces`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify({ name: 'memory bench' }) })
  if (!made.ok) throw new Error(`POST /v1/workspaces: ${made.status} ${await made.text()}`)
  const workspace = ((await made.json()) as { data: { id: string } }).data.id
  await check(
    await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json', 'x-workspace-id': workspace },
      body: JSON.stringify({ model: 'local-chat', messages: [{ role: 'user', content: 'What is the capital of France?' }] }),
    }),
    'POST /v1/chat/completions',
  )
}

/** What is built on first use only: the OpenAPI document and the console's script. */
async function extras(server: Server) {
  for (const path of ['/docs/json', '/console/app.js']) {
    const res = await fetch(server.url + path)
    await res.arrayBuffer()
    if (!res.ok) throw new Error(`${path}: ${res.status}`)
  }
}

async function service(what: string, args: string[], env: Record<string, string>, http: boolean) {
  const port = freePort()
  const server = await startServer({
    cmd: ['bun', 'run', 'src/main.ts', ...args],
    env: { PORT: String(port), HOST: '127.0.0.1', LOG_LEVEL: 'info', BOOTSTRAP_API_KEY: key, EXIT_WITH_LAUNCHER: '0', ...env },
    port,
    logFile: join(work, `${what.replace(/\W+/g, '-')}.log`),
    readyPath: '/healthz',
    ...(http ? {} : { readyLine: /workers running/ }),
  })
  try {
    await Bun.sleep(IDLE_MS)
    sample(what, 'idle', server.pid)
    if (http) {
      await warmUp(server)
      await Bun.sleep(IDLE_MS)
      sample(what, 'after warm-up', server.pid)
      await extras(server)
      await Bun.sleep(IDLE_MS)
      sample(what, 'after /docs/json+console', server.pid)
    } else {
      await Bun.sleep(IDLE_MS)
      sample(what, 'idle (+5 s)', server.pid)
    }
  } finally {
    await server.stop()
  }
}

async function ceiling(what: string, script: string) {
  const port = freePort()
  const server = await startServer({ cmd: ['bun', '-e', script.replaceAll('@PORT@', String(port))], env: {}, port, logFile: join(work, `${what.replace(/\W+/g, '-')}.log`) })
  try {
    await Bun.sleep(IDLE_MS)
    sample(what, 'idle', server.pid)
  } finally {
    await server.stop()
  }
}

/** The migrated template `bun install` makes: the embedded service's fresh DATA_DIR starts as a copy of it. */
async function templateCopy(): Promise<string> {
  const { templateDir } = await import('../src/store/pglite-template')
  const dir = join(work, `pglite-${Math.random().toString(36).slice(2, 8)}`)
  cpSync(templateDir(), dir, { recursive: true })
  return dir
}

// C. The parts: each imported (and started, where the service starts it) alone in a fresh process.
const RSS = `const rss = () => Number(/VmRSS:\\s+(\\d+)/.exec(require('node:fs').readFileSync('/proc/self/status', 'utf8'))[1]) / 1024`
const PARTS: { part: string; code: string; note?: string }[] = [
  { part: 'bare bun', code: '' },
  { part: 'Bun.serve listening', code: `Bun.serve({ port: 0, fetch: () => new Response('ok') })` },
  { part: '@electric-sql/pglite (import)', code: `await import('@electric-sql/pglite')` },
  {
    part: 'PGlite+vector open of a data dir',
    code: `const { PGlite } = await import('@electric-sql/pglite'); const { vector } = await import('@electric-sql/pglite-pgvector'); const db = await PGlite.create({ dataDir: '@PGDIR@', extensions: { vector } }); await db.query('select 1')`,
  },
  { part: 'postgres (driver)', code: `await import('postgres')` },
  { part: 'ioredis', code: `await import('ioredis')` },
  { part: 'in-process Redis stand-in', code: `const { openRedis } = await import('./src/store/redis'); const r = openRedis(null, 'ap:', { dir: '@TMP@', prefixes: ['idem:'] }); await r.ping()` },
  { part: 'elysia', code: `await import('elysia')` },
  { part: 'elysia + @elysiajs/openapi', code: `await import('elysia'); await import('@elysiajs/openapi')` },
  { part: 'xstate', code: `await import('xstate')` },
  { part: 'pino', code: `await import('pino')` },
  { part: 'ajv', code: `await import('ajv')` },
  { part: 'prom-client + default metrics', code: `const p = await import('prom-client'); p.collectDefaultMetrics({ register: new p.Registry() })` },
  { part: '@modelcontextprotocol/sdk (server)', code: `await import('@modelcontextprotocol/sdk/server/index.js'); await import('@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js'); await import('@modelcontextprotocol/sdk/validation/ajv')` },
  { part: '@modelcontextprotocol/sdk (client)', code: `await import('@modelcontextprotocol/sdk/client/index.js'); await import('@modelcontextprotocol/sdk/client/streamableHttp.js')` },
  { part: '@opentelemetry/api', code: `await import('@opentelemetry/api')` },
  { part: '@opentelemetry SDK + OTLP exporter', code: `await Promise.all(['@opentelemetry/sdk-trace', '@opentelemetry/exporter-trace-otlp-proto', '@opentelemetry/resources', '@opentelemetry/context-async-hooks', '@opentelemetry/core'].map((m) => import(m)))` },
  { part: 'gpt-tokenizer o200k (first use)', code: `const { o200k } = await import('./src/lib/bpe'); o200k().countTokens('hello world')` },
  { part: 'quickjs-emscripten (getQuickJS)', code: `const q = await import('quickjs-emscripten'); await q.getQuickJS()` },
  { part: 'unpdf', code: `await import('unpdf')` },
  { part: 'mammoth', code: `await import('mammoth')` },
  { part: 'jsonata', code: `await import('jsonata')` },
  { part: 'src/routes/console.ts (import, for the next row)', code: `await import('./src/routes/console')` },
  { part: 'console bundle (Bun.build)', code: `const { buildConsole } = await import('./src/routes/console'); await buildConsole()` },
  { part: 'mermaid.min.js read into memory', code: `globalThis.keep = await Bun.file('node_modules/mermaid/dist/mermaid.min.js').text()`, note: 'served with Bun.file: never read into the heap' },
  { part: 'src/app.ts import graph', code: `await import('./src/app.ts')` },
  { part: 'src/boot.ts + src/workers import graph', code: `await import('./src/boot.ts'); await import('./src/workers/index.ts')` },
  { part: 'src/main.ts import graph (no main())', code: `await Promise.all(['./src/app.ts', './src/boot.ts', './src/workers/index.ts', './src/routes/console.ts', './src/domain/agents/mcp-client.ts', './src/config.ts'].map((m) => import(m)))` },
]

async function partRss(code: string, pgdir: string): Promise<number> {
  const script = `${RSS}\n${code.replaceAll('@PGDIR@', pgdir).replaceAll('@TMP@', join(work, 'redis-standin'))}\nBun.gc(true); await Bun.sleep(200); Bun.gc(true)\nconsole.log('RSS', rss())\nprocess.exit(0)`
  const { stdout } = await run(['bun', '-e', script], { timeoutMs: 60_000 })
  return Number(/RSS (\S+)/.exec(stdout)![1])
}

async function parts() {
  const pgdir = await templateCopy()
  const out: { part: string; rss: number; over_bare: number; note?: string }[] = []
  let bare = 0
  for (const p of PARTS) {
    const rounds: number[] = []
    for (let i = 0; i < PART_ROUNDS; i++) rounds.push(await partRss(p.code, pgdir))
    const rss = Math.round(rounds.sort((a, b) => a - b)[rounds.length >> 1]! * 10) / 10
    if (p.part === 'bare bun') bare = rss
    const over = Math.round((rss - bare) * 10) / 10
    out.push({ part: p.part, rss, over_bare: over, ...(p.note ? { note: p.note } : {}) })
    log(`part ${p.part.padEnd(42)} RSS ${rss} MB (+${over} over bare bun)`)
  }
  return out
}

async function freshDatabase(): Promise<{ url: string; drop(): Promise<void> }> {
  const { default: postgres } = await import('postgres')
  const name = `ap_bench_memory_${Math.random().toString(36).slice(2, 8)}`
  const admin = postgres(PG, { max: 1, onnotice: () => {} })
  await admin.unsafe(`create database ${name}`)
  await admin.end()
  const url = new URL(PG)
  url.pathname = `/${name}`
  return {
    url: url.toString(),
    async drop() {
      const a = postgres(PG, { max: 1, onnotice: () => {} })
      await a.unsafe(`drop database if exists ${name} with (force)`)
      await a.end()
    },
  }
}

const loadBefore = readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ')
log(`load average before: ${loadBefore}`)

const bareServe = `Bun.serve({ port: @PORT@, hostname: '127.0.0.1', fetch: () => new Response('ok') })`
await ceiling('ceiling: bare Bun.serve', bareServe)
const floorDir = await templateCopy()
await ceiling(
  'floor: PGlite+vector + Bun.serve',
  `const { PGlite } = await import('@electric-sql/pglite'); const { vector } = await import('@electric-sql/pglite-pgvector'); const db = await PGlite.create({ dataDir: '${floorDir}', extensions: { vector } }); await db.query('select 1'); ${bareServe}`,
)

const dataDir = join(work, 'embedded')
await service('embedded (all)', [], { DATA_DIR: dataDir, ...EMBEDDED_ENV }, true)

const db = await freshDatabase()
try {
  const server = { DATABASE_URL: db.url, REDIS_URL: REDIS, DATA_DIR: join(work, 'server') }
  await service('server (all)', [], server, true)
  await service('server api', ['api'], server, true)
  await service('server worker', ['worker'], server, false)
} finally {
  await db.drop()
}

const partRows = await parts()
const loadAfter = readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ')
log(`load average after: ${loadAfter}`)

const get = (what: string, phase = 'idle') => samples.find((s) => s.what === what && s.phase === phase)!
const bare = get('ceiling: bare Bun.serve')
const floor = get('floor: PGlite+vector + Bun.serve')

console.log(`\n| process | phase | RSS MB | peak (VmHWM) | anon | file | shmem | threads |\n|---|---|---|---|---|---|---|---|`)
for (const s of samples) console.log(`| ${s.what} | ${s.phase} | ${s.rss} | ${s.hwm} | ${s.anon} | ${s.file} | ${s.shmem} | ${s.threads} |`)
console.log(`\n| part (alone in a fresh bun) | RSS MB | over bare bun |\n|---|---|---|`)
for (const p of partRows) console.log(`| ${p.part} | ${p.rss} | +${p.over_bare}${p.note ? ` (${p.note})` : ''} |`)
console.log(`\nload average: ${loadBefore} before, ${loadAfter} after`)

const rows: Row[] = [
  ...['server (all)', 'server api', 'server worker'].map((what): Row => {
    const s = get(what)
    return { figure: `M. idle RSS, ${what}`, measured: `${s.rss} MB`, ceiling: `${bare.rss} MB (bare Bun.serve)`, share: `+${Math.round((s.rss - bare.rss) * 10) / 10} MB`, target: `< ${TARGET_SERVER_MB} MB`, result: s.rss < TARGET_SERVER_MB ? 'pass' : 'missed' }
  }),
  (() => {
    const s = get('embedded (all)')
    return { figure: 'M. idle RSS, embedded (all)', measured: `${s.rss} MB`, ceiling: `${floor.rss} MB (PGlite+vector + Bun.serve)`, share: `+${Math.round((s.rss - floor.rss) * 10) / 10} MB`, target: '', result: 'info' } satisfies Row
  })(),
]
const file = writeResults('memory', { machine: machine(), source: sourceVersion(), idle_ms: IDLE_MS, load_average: { before: loadBefore, after: loadAfter }, samples, parts: partRows }, rows)
log(`results: ${file}`)
removeDir(work)
