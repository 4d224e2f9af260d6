import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import {
  combine, describe, EMBEDDED_ENV, freePort, killAll, log, machine, measureOnce, randomBase62, removeDir, sourceVersion, startServer, tempDir, whenInterrupted,
  type LoadShape, type Measurement,
} from './lib'
import { VARIANTS, type Variant } from './profile-variants'

/**
 * `bun run bench/profile.ts [variant[@level] ...]`: what each part of the stack costs. Every variant
 * of bench/profile-server.ts runs as its own subprocess on its own store and answers GET /healthz and
 * (when it has the routes) GET /v1/workspaces/{id} under the load of `bun run bench`; the table shows
 * each beside `full`. CPU per request is the figure to read on a shared machine; the rate moves with
 * whatever else runs. Default: every variant, then full at LOG_LEVEL=info and silent, then full again
 * (the drift between the two `full` rows is the noise floor).
 */
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5)
const WARMUP = Number(process.env.BENCH_WARMUP ?? 2)
const work = tempDir('agent-platform-profile-')
whenInterrupted(() => removeDir(work))
const shape: LoadShape = { connections: Number(process.env.BENCH_CONNECTIONS ?? 32), threads: Number(process.env.BENCH_THREADS ?? 2), scriptDir: work }
const ROOT_KEY = `ap_bench${randomBase62(36)}`
const AUTH = { authorization: `Bearer ${ROOT_KEY}` }

const requested = process.argv.slice(2)
const runs = requested.length > 0 ? requested : [...Object.keys(VARIANTS), 'full@info', 'full@silent', 'full']

interface Row {
  variant: string
  what: string
  healthz: Measurement
  get_workspace: Measurement | null
}

async function profile(spec: string, index: number): Promise<Row> {
  const [variant, level = 'warn'] = spec.split('@') as [Variant, string?]
  if (!(variant in VARIANTS)) throw new Error(`unknown variant ${variant}; one of ${Object.keys(VARIANTS).join(', ')}`)
  const port = freePort()
  const server = await startServer({
    cmd: ['bun', 'run', 'bench/profile-server.ts'],
    env: {
      BENCH_VARIANT: variant,
      PORT: String(port),
      DATA_DIR: join(work, `data-${index}`),
      BOOTSTRAP_API_KEY: ROOT_KEY,
      RATE_LIMIT_PER_SECOND: '1000000000',
      RATE_LIMIT_BURST: '1000000000',
      LOG_LEVEL: level,
      ...EMBEDDED_ENV,
    },
    port,
    logFile: join(work, `${index}-${variant}.log`),
    readyPath: '/healthz',
  })
  try {
    const healthz = combine('GET /healthz', [await measureOnce(server, { url: `${server.url}/healthz`, seconds: SECONDS }, WARMUP, shape)])
    log(describe(`${spec} healthz`, healthz))
    let getWorkspace: Measurement | null = null
    const created = await fetch(`${server.url}/v1/workspaces`, {
      method: 'POST',
      headers: { ...AUTH, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'profile' }),
    })
    if (created.status === 201) {
      const { data } = (await created.json()) as { data: { id: string } }
      const url = `${server.url}/v1/workspaces/${data.id}`
      getWorkspace = combine('GET /v1/workspaces/{id}', [await measureOnce(server, { url, headers: AUTH, seconds: SECONDS }, WARMUP, shape)])
      log(describe(`${spec} get`, getWorkspace))
    }
    return { variant: spec, what: `${VARIANTS[variant]}${level === 'warn' ? '' : `, LOG_LEVEL=${level}`}`, healthz, get_workspace: getWorkspace }
  } finally {
    await server.stop()
  }
}

async function main() {
  log(`profile: ${runs.join(', ')}; ${shape.connections} connections, ${WARMUP} s warm-up + ${SECONDS} s each`)
  const rows: Row[] = []
  for (const [i, spec] of runs.entries()) rows.push(await profile(spec, i))

  const full = rows.find((r) => r.variant === 'full')
  const delta = (m: Measurement | null, base: Measurement | null | undefined) =>
    m && base ? `${m.server_cpu_us_per_req - base.server_cpu_us_per_req >= 0 ? '+' : ''}${(m.server_cpu_us_per_req - base.server_cpu_us_per_req).toFixed(1)}` : ''
  const cols = ['variant', 'healthz /s', 'µs CPU/req', 'vs full', 'get /s', 'µs CPU/req ', 'vs full ', 'p99 get ms', 'others']
  const cells = rows.map((r) => [
    r.variant,
    String(r.healthz.rps),
    String(r.healthz.server_cpu_us_per_req),
    delta(r.healthz, full?.healthz),
    r.get_workspace ? String(r.get_workspace.rps) : '',
    r.get_workspace ? String(r.get_workspace.server_cpu_us_per_req) : '',
    delta(r.get_workspace, full?.get_workspace),
    r.get_workspace ? String(r.get_workspace.p99) : '',
    String(Math.max(r.healthz.other_cores, r.get_workspace?.other_cores ?? 0)),
  ])
  const widths = cols.map((c, i) => Math.max(c.length, ...cells.map((row) => row[i]!.length)))
  const fmt = (row: string[]) => row.map((v, i) => (i === 0 ? v.padEnd(widths[i]!) : v.padStart(widths[i]!))).join('  ')
  console.log(`\n${fmt(cols)}\n${widths.map((w) => '-'.repeat(w)).join('  ')}\n${cells.map(fmt).join('\n')}\n`)
  for (const r of rows) console.log(`${r.variant.padEnd(widths[0]!)}  ${r.what}`)

  const dir = join(import.meta.dir, 'results')
  mkdirSync(dir, { recursive: true })
  writeFileSync(
    join(dir, 'profile.json'),
    `${JSON.stringify({ date: new Date().toISOString(), command: `bun run bench/profile.ts ${requested.join(' ')}`.trim(), machine: machine(), source: sourceVersion(), rows }, null, 2)}\n`,
  )
  console.log('\nwritten to bench/results/profile.json')
}

try {
  await main()
} catch (err) {
  console.error(`profile failed: ${(err as Error).stack ?? err}`)
  process.exitCode = 1
} finally {
  killAll()
  if (process.exitCode) console.error(`logs kept in ${work}`)
  else removeDir(work)
}
