import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { availableParallelism, tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Subprocess } from 'bun'

/**
 * Helpers of the benchmark: subprocesses that are always killed, a free port, wrk runs and their
 * figures. Every child is registered in `children` and killed on exit, on SIGINT/SIGTERM and on an
 * uncaught error, so a failed run leaves no server holding a port or a PGlite lock.
 */
const children = new Set<Subprocess>()

export function killAll() {
  for (const child of children) {
    try {
      child.kill('SIGKILL')
    } catch {}
  }
  children.clear()
}

const onInterrupt: (() => void)[] = []

/** Runs `fn` (say, removing the work directory) if the run is interrupted by SIGINT or SIGTERM. */
export function whenInterrupted(fn: () => void) {
  onInterrupt.push(fn)
}

process.on('exit', killAll)
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    killAll()
    for (const fn of onInterrupt) {
      try {
        fn()
      } catch {}
    }
    process.exit(130)
  })
}

export function tempDir(prefix: string): string {
  return mkdtempSync(join(tmpdir(), prefix))
}

export function removeDir(dir: string) {
  rmSync(dir, { recursive: true, force: true })
}

/** A port nobody listens on right now (the OS picks it; a race with another process is unlikely). */
export function freePort(): number {
  const probe = Bun.serve({ port: 0, hostname: '127.0.0.1', fetch: () => new Response() })
  const port = probe.port!
  probe.stop(true)
  return port
}

export interface Server {
  url: string
  pid: number
  logFile: string
  /** SIGTERM (graceful shutdown), then SIGKILL after `graceMs`. */
  stop(graceMs?: number): Promise<number | null>
}

/**
 * Spread into the environment of a service a bench measures on the embedded default: every process
 * it starts inherits the caller's environment, where a DATABASE_URL or REDIS_URL would make it server
 * mode. The service reads an empty value as unset.
 */
export const EMBEDDED_ENV = { DATABASE_URL: '', REDIS_URL: '' } as const

/**
 * Starts `cmd` with stdout and stderr to `logFile` (never a pipe: a pipe nobody reads blocks the
 * server once it fills, which would throttle the access log and the figures with it), and waits until
 * `readyPath` answers 200.
 */
/** The SECRET_KEY of server-mode services a bench starts without naming one. */
export const BENCH_SECRET_KEY = 'bench-secret-key-of-server-mode-processes-0123456789'

export async function startServer(opts: {
  cmd: string[]
  env: Record<string, string>
  port: number
  logFile: string
  readyPath?: string
  /** For a process that serves no HTTP (`src/main.ts worker`): ready once its log has a line matching this. */
  readyLine?: RegExp
  timeoutMs?: number
}): Promise<Server> {
  const url = `http://127.0.0.1:${opts.port}`
  const env: Record<string, string | undefined> = { ...process.env, ...opts.env }
  // Server mode refuses to start without SECRET_KEY; the processes of one bench share this one.
  if (env.DATABASE_URL && !env.SECRET_KEY) env.SECRET_KEY = BENCH_SECRET_KEY
  const child = Bun.spawn(opts.cmd, {
    cwd: join(import.meta.dir, '..'),
    env,
    stdout: Bun.file(opts.logFile),
    stderr: Bun.file(`${opts.logFile}.err`),
    stdin: 'ignore',
  })
  children.add(child)
  const stop = async (graceMs = 10_000) => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM')
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs)
      await child.exited
      clearTimeout(timer)
    }
    children.delete(child)
    return child.exitCode
  }
  const deadline = Date.now() + (opts.timeoutMs ?? 60_000)
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) {
      children.delete(child)
      throw new Error(`${opts.cmd.join(' ')} exited with ${child.exitCode ?? child.signalCode} before it was ready:\n${tail(opts.logFile)}`)
    }
    if (opts.readyLine) {
      if (opts.readyLine.test(tail(opts.logFile, 1000))) return { url, pid: child.pid, logFile: opts.logFile, stop }
      await Bun.sleep(100)
      continue
    }
    try {
      const res = await fetch(url + (opts.readyPath ?? '/'), { signal: AbortSignal.timeout(1000) })
      await res.arrayBuffer()
      if (res.status === 200) return { url, pid: child.pid, logFile: opts.logFile, stop }
    } catch {}
    await Bun.sleep(100)
  }
  await stop(1000)
  throw new Error(`${opts.cmd.join(' ')} did not answer ${url}${opts.readyPath ?? '/'} within ${opts.timeoutMs ?? 60_000} ms:\n${tail(opts.logFile)}`)
}

export function tail(file: string, lines = 20): string {
  let out = ''
  for (const f of [file, `${file}.err`]) {
    try {
      out += readFileSync(f, 'utf8').split('\n').slice(-lines).join('\n')
    } catch {}
  }
  return out
}

/** Runs a command to completion, registered like the servers; its stdout and the CPU time it used. */
export async function run(
  cmd: string[],
  opts: { env?: Record<string, string>; timeoutMs?: number } = {},
): Promise<{ stdout: string; cpuMs: number }> {
  const child = Bun.spawn(cmd, {
    cwd: join(import.meta.dir, '..'),
    env: { ...process.env, ...opts.env },
    stdout: 'pipe',
    stderr: 'pipe',
    stdin: 'ignore',
  })
  children.add(child)
  const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 120_000)
  try {
    const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited])
    if (code !== 0) throw new Error(`${cmd.join(' ')} exited with ${code ?? child.signalCode}:\n${stderr.slice(-2000)}${stdout.slice(-2000)}`)
    return { stdout, cpuMs: Number(child.resourceUsage()?.cpuTime.total ?? 0) / 1000 }
  } finally {
    clearTimeout(timer)
    children.delete(child)
  }
}

/** One load measurement: rate, latency percentiles in milliseconds, and every kind of failure. */
export interface LoadResult {
  rps: number
  requests: number
  seconds: number
  p50: number
  p90: number
  p99: number
  mean: number
  max: number
  /** Non-2xx/3xx answers plus connect, read, write errors and timeouts: must be 0 for a valid figure. */
  errors: number
}

export interface WrkOptions {
  url: string
  seconds: number
  connections: number
  threads: number
  method?: string
  headers?: Record<string, string>
  body?: string
  /** Lua source of a `request()` function, for a per-request header (a unique Idempotency-Key). */
  request?: string
}

/**
 * wrk with a Lua `done()` that prints its summary and latency distribution as one JSON line: the
 * same histogram that `--latency` prints, in whole microseconds rather than rounded text ("1.02ms").
 * Each thread gets an id in `setup()` so a `request()` hook can make keys unique across threads.
 */
export async function wrk(o: WrkOptions, scriptDir: string): Promise<LoadResult & { wrkCpuMs: number }> {
  const lua = [
    `wrk.method = ${luaString(o.method ?? 'GET')}`,
    o.body !== undefined ? `wrk.body = ${luaString(o.body)}` : '',
    ...Object.entries(o.headers ?? {}).map(([k, v]) => `wrk.headers[${luaString(k)}] = ${luaString(v)}`),
    'local threads = 0',
    'function setup(thread) threads = threads + 1; thread:set("thread_id", threads) end',
    o.request ?? '',
    `function done(s, latency, requests)
  local e = s.errors
  io.write(string.format('BENCH_JSON {"requests":%d,"duration_us":%d,"p50":%d,"p90":%d,"p99":%d,"mean":%.1f,"max":%d,"errors":%d}\\n',
    s.requests, s.duration, latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.mean, latency.max,
    e.connect + e.read + e.write + e.status + e.timeout))
end`,
  ].join('\n')
  const script = join(scriptDir, `wrk-${Date.now()}-${Math.random().toString(36).slice(2, 8)}.lua`)
  writeFileSync(script, lua)
  const { stdout, cpuMs } = await run(
    ['wrk', `-t${o.threads}`, `-c${o.connections}`, `-d${o.seconds}s`, '--timeout', '10s', '--latency', '-s', script, o.url],
    { timeoutMs: (o.seconds + 30) * 1000 },
  )
  return { ...parseWrk(stdout), wrkCpuMs: cpuMs }
}

export function parseWrk(out: string): LoadResult {
  const line = out.split('\n').find((l) => l.startsWith('BENCH_JSON '))
  if (!line) throw new Error(`wrk printed no summary:\n${out}`)
  const j = JSON.parse(line.slice('BENCH_JSON '.length)) as Record<string, number>
  const ms = (us: number) => Math.round(us) / 1000
  const seconds = j.duration_us! / 1e6
  return {
    rps: Math.round(j.requests! / seconds),
    requests: j.requests!,
    seconds: Math.round(seconds * 100) / 100,
    p50: ms(j.p50!),
    p90: ms(j.p90!),
    p99: ms(j.p99!),
    mean: ms(j.mean!),
    max: ms(j.max!),
    errors: j.errors!,
  }
}

function luaString(s: string): string {
  return JSON.stringify(s) // a JSON string of printable ASCII is a valid Lua string literal
}

/** The median of `xs` (any order; the mean of the two middle values when there are two; NaN when empty). */
export function median(xs: number[]): number {
  const v = [...xs].sort((a, b) => a - b)
  return v.length === 0 ? NaN : v.length % 2 ? v[v.length >> 1]! : (v[v.length / 2 - 1]! + v[v.length / 2]!) / 2
}

/** A JSON API caller with these headers: each call's status and parsed body. */
export function jsonApi(headers: Record<string, string>) {
  return async <T = any>(base: string, method: string, path: string, body?: unknown): Promise<{ status: number; body: T }> => {
    const res = await fetch(`${base}${path}`, { method, headers: { 'content-type': 'application/json', ...headers }, body: body === undefined ? undefined : JSON.stringify(body) })
    return { status: res.status, body: (await res.json()) as T }
  }
}

/** A new, empty database `name` on the server of `adminUrl` (dropped first if a killed run left it); its URL. */
export async function createDatabase(adminUrl: string, name: string): Promise<string> {
  const { default: postgres } = await import('postgres')
  const admin = postgres(adminUrl, { max: 1, onnotice: () => {} })
  try {
    await admin.unsafe(`drop database if exists "${name}" with (force)`)
    await admin.unsafe(`create database "${name}"`)
  } finally {
    await admin.end()
  }
  const url = new URL(adminUrl)
  url.pathname = `/${name}`
  return url.toString()
}

/** Drops the database of `url` (made by createDatabase), connections and all. */
export async function dropDatabase(adminUrl: string, url: string): Promise<void> {
  const { default: postgres } = await import('postgres')
  const admin = postgres(adminUrl, { max: 1, onnotice: () => {} })
  try {
    await admin.unsafe(`drop database if exists "${new URL(url).pathname.slice(1)}" with (force)`)
  } finally {
    await admin.end()
  }
}

/** Percentile of an ascending array (nearest rank). */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return NaN
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))
  return sorted[rank]!
}

/** A load measurement from each request's latency (ms, any order) over `seconds` of wall time. */
export function loadOf(latencies: number[], seconds: number, errors = 0): LoadResult {
  const sorted = Float64Array.from(latencies).sort()
  const round = (ms: number) => Math.round(ms * 1000) / 1000
  return {
    rps: Math.round(latencies.length / seconds),
    requests: latencies.length,
    seconds: Math.round(seconds * 100) / 100,
    p50: round(percentile(sorted, 50)),
    p90: round(percentile(sorted, 90)),
    p99: round(percentile(sorted, 99)),
    mean: round(latencies.reduce((a, b) => a + b, 0) / latencies.length),
    max: round(sorted[sorted.length - 1] ?? NaN),
    errors,
  }
}

// USER_HZ: the unit of /proc CPU times; 100 on every Linux this runs on (`getconf CLK_TCK`).
const TICK_MS = 10

/** CPU time (user + system, all threads) a process has used so far, from /proc/<pid>/stat. */
export function processCpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  return (Number(fields[11]) + Number(fields[12])) * TICK_MS
}

/**
 * CPU time all cores have spent busy so far (every process on the machine), and the time the
 * hypervisor gave to other guests (steal), from /proc/stat.
 */
export function machineCpuMs(): { busy: number; steal: number } {
  const line = readFileSync('/proc/stat', 'utf8').split('\n')[0]!
  const [user, nice, system, , , irq, softirq, steal] = line.trim().split(/\s+/).slice(1).map(Number)
  return { busy: (user! + nice! + system! + irq! + softirq!) * TICK_MS, steal: steal! * TICK_MS }
}

export interface Cpu {
  wallMs: number
  /** CPU of the process under test (all its threads). */
  serverCpuMs: number
  loadGenCpuMs: number
  /** Busy CPU of the whole machine, every process included. */
  machineBusyMs: number
  stealMs: number
}
export type Round = LoadResult & { cpu: Cpu }

/**
 * A figure with the CPU it cost, which is steadier than the rate on shared cores: the server's CPU
 * per request, and how many cores the server, the load generator and everything else on the machine
 * (other tenants' test runs, say) kept busy meanwhile.
 */
export interface Measurement extends LoadResult {
  what: string
  server_cpu_us_per_req: number
  server_cores: number
  load_generator_cores: number
  other_cores: number
  steal_cores: number
  rounds: (LoadResult & { server_cpu_ms: number })[]
}

export interface LoadShape {
  connections: number
  threads: number
  /** Where the generated wrk scripts go. */
  scriptDir: string
}

/**
 * One wrk run against `server`, with the CPU it cost; a warm-up first when asked. `@RUN@` in a
 * request hook becomes a fresh token per run, so no Idempotency-Key of a warm-up is used again.
 */
export async function measureOnce(server: Server, o: Omit<WrkOptions, 'connections' | 'threads'>, warmup: number, shape: LoadShape): Promise<Round> {
  const base = { ...o, connections: shape.connections, threads: shape.threads }
  const hook = (run: string) => o.request?.replaceAll('@RUN@', `${run}${Math.random().toString(36).slice(2, 10)}`)
  if (warmup > 0) await wrk({ ...base, seconds: warmup, request: hook('w') }, shape.scriptDir)
  const t0 = performance.now()
  const cpu0 = processCpuMs(server.pid)
  const m0 = machineCpuMs()
  const { wrkCpuMs, ...r } = await wrk({ ...base, request: hook('m') }, shape.scriptDir)
  const m1 = machineCpuMs()
  return {
    ...r,
    cpu: {
      wallMs: performance.now() - t0,
      serverCpuMs: processCpuMs(server.pid) - cpu0,
      loadGenCpuMs: wrkCpuMs,
      machineBusyMs: m1.busy - m0.busy,
      stealMs: m1.steal - m0.steal,
    },
  }
}

/**
 * Several rounds of one figure as one: the rate over all of them, each percentile the median of the
 * rounds' (the mean of two), CPU summed.
 */
export function combine(what: string, rounds: Round[]): Measurement {
  const sum = (f: (r: Round) => number) => rounds.reduce((a, r) => a + f(r), 0)
  const median = (f: (r: Round) => number) => {
    const v = rounds.map(f).sort((a, b) => a - b)
    const mid = v.length >> 1
    return Math.round((v.length % 2 ? v[mid]! : (v[mid - 1]! + v[mid]!) / 2) * 1000) / 1000
  }
  const requests = sum((r) => r.requests)
  const seconds = sum((r) => r.seconds)
  const wallMs = sum((r) => r.cpu.wallMs)
  const serverCpuMs = sum((r) => r.cpu.serverCpuMs)
  const loadGenCpuMs = sum((r) => r.cpu.loadGenCpuMs)
  const cores = (ms: number) => Math.round((100 * Math.max(0, ms)) / wallMs) / 100
  return {
    what,
    rps: Math.round(requests / seconds),
    requests,
    seconds: Math.round(seconds * 100) / 100,
    p50: median((r) => r.p50),
    p90: median((r) => r.p90),
    p99: median((r) => r.p99),
    mean: median((r) => r.mean),
    max: Math.max(...rounds.map((r) => r.max)),
    errors: sum((r) => r.errors),
    server_cpu_us_per_req: Math.round(((serverCpuMs * 1000) / Math.max(1, requests)) * 10) / 10,
    server_cores: cores(serverCpuMs),
    load_generator_cores: cores(loadGenCpuMs),
    other_cores: cores(sum((r) => r.cpu.machineBusyMs) - serverCpuMs - loadGenCpuMs),
    steal_cores: cores(sum((r) => r.cpu.stealMs)),
    rounds: rounds.map(({ cpu, ...r }) => ({ ...r, server_cpu_ms: cpu.serverCpuMs })),
  }
}

export function describe(name: string, m: Measurement): string {
  return (
    `${name.padEnd(20)} ${String(m.rps).padStart(7)} /s  p50 ${String(m.p50).padEnd(6)} p99 ${String(m.p99).padEnd(7)} ms  ` +
    `server ${m.server_cpu_us_per_req} µs CPU/req on ${m.server_cores} cores; wrk ${m.load_generator_cores}; others ${m.other_cores}; steal ${m.steal_cores}` +
    (m.errors ? `  ERRORS ${m.errors}` : '')
  )
}

export function log(line: string) {
  process.stderr.write(`${new Date().toISOString().slice(11, 19)} ${line}\n`)
}

export function machine() {
  let cpu = 'unknown'
  try {
    cpu = /^model name\s*:\s*(.+)$/m.exec(readFileSync('/proc/cpuinfo', 'utf8'))?.[1] ?? cpu
  } catch {}
  const wrkVersion = Bun.spawnSync(['wrk', '-v']).stdout.toString().split('\n')[0]?.trim() ?? 'unknown'
  return { nproc: availableParallelism(), cpu, bun: Bun.version, wrk: wrkVersion, platform: `${process.platform} ${process.arch}` }
}

/** The commit the service under test was built from, and whether src/ differs from it. */
export function sourceVersion(): { commit: string; src_dirty: boolean } {
  const cwd = join(import.meta.dir, '..')
  const git = (...args: string[]) => Bun.spawnSync(['git', ...args], { cwd }).stdout.toString().trim()
  return { commit: git('rev-parse', '--short', 'HEAD') || 'unknown', src_dirty: git('status', '--porcelain', '--', 'src') !== '' }
}

export function randomBase62(length: number): string {
  const alphabet = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'
  return Array.from(crypto.getRandomValues(new Uint8Array(length)), (b) => alphabet[b % 62]).join('')
}

/**
 * The fake OpenAI-compatible provider (bench/fake-provider-server.ts) in a process of its own, so the
 * client, the service and the provider each have their own event loop; `models` is its FAKE_MODELS.
 */
export async function startFakeProvider(models: Record<string, { tokens: number; delayMs?: number; eventWrites?: boolean }>): Promise<{ url: string; pid: number; stop(): void }> {
  const child = await spawnListening('bench/fake-provider-server.ts', { FAKE_MODELS: JSON.stringify(models) }, 'the fake provider')
  return { url: child.words[0]!, pid: child.pid, stop: child.stop }
}

/**
 * A helper process of the bench (`bun run <script>` with `env` over this process's), once it has
 * printed `listening <word> <word>...`: answers those words (its URLs). Killed when this process exits.
 */
export async function spawnListening(script: string, env: Record<string, string>, what: string): Promise<{ words: string[]; pid: number; stop(): void }> {
  const child = Bun.spawn(['bun', 'run', script], {
    cwd: join(import.meta.dir, '..'),
    env: { ...process.env, ...env },
    stdout: 'pipe',
    stderr: 'inherit',
    stdin: 'ignore',
  })
  process.on('exit', () => child.kill('SIGKILL'))
  const reader = child.stdout.getReader()
  let out = ''
  while (!/listening \S+.*\n/.test(out)) {
    const { value, done } = await reader.read()
    if (done) throw new Error(`${what} exited: ${out}`)
    out += new TextDecoder().decode(value)
  }
  // Keep reading, so a later line can never fill the pipe and block the process.
  void (async () => {
    while (!(await reader.read()).done);
  })()
  const words = /listening (\S+.*)\n/.exec(out)![1]!.trim().split(/\s+/)
  return { words, pid: child.pid, stop: () => child.kill('SIGTERM') }
}

/**
 * One line of the table `bun run bench` writes to bench/README.md: a figure beside its ceiling
 * (measured in the same run) and its target. Every suite puts its lines in its results file as
 * `rows`, so the summary needs no knowledge of each suite's own result shape.
 */
export interface Row {
  /** What is measured, with its letter as the suite's header comment names it. */
  figure: string
  /** The figure itself, with its unit ("438 chunks/s", "p99 42.8 ms"). */
  measured: string
  /** What the same work costs without the service around it, measured in the same run; '' if none. */
  ceiling: string
  /** measured as a share of the ceiling, or the difference from it ("62.0 %", "+0.80 ms"); '' if none. */
  share: string
  /** The target ("≥ 1 000 chunks/s"); '' for a figure shown for context only. */
  target: string
  /** 'info' when there is no target. */
  result: 'pass' | 'missed' | 'info'
}

export function verdict(pass: boolean): Row['result'] {
  return pass ? 'pass' : 'missed'
}

/** "12.3 %" of a over b. */
export function share(a: number, b: number): string {
  return b > 0 ? `${((100 * a) / b).toFixed(1)} %` : ''
}

/**
 * Writes bench/results/<name>-latest.json: the suite's own results with its table `rows` and the
 * time it was written (the summary refuses a file older than its own start).
 */
export function writeResults(name: string, results: object, rows: Row[]): string {
  const dir = join(import.meta.dir, 'results')
  mkdirSync(dir, { recursive: true })
  const file = join(dir, `${name}-latest.json`)
  writeFileSync(file, `${JSON.stringify({ suite: name, written_at: new Date().toISOString(), rows, ...results }, null, 2)}\n`)
  return file
}
