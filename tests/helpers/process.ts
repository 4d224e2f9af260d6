import type { Subprocess } from 'bun'
import { join } from 'node:path'
import { waitFor } from './harness'

const root = join(import.meta.dir, '..', '..')
const running = new Set<Spawned>()

const handedOut = new Set<number>()

/**
 * A port nobody listens on right now: bind port 0, read what the kernel gave, let it go. Never the
 * same port twice in one test process, so services started side by side cannot collide.
 */
/** Whether something accepts a TCP connection on 127.0.0.1:`port` (a server started, or gone). */
export async function listening(port: number): Promise<boolean> {
  try {
    const socket = await Bun.connect({ hostname: '127.0.0.1', port, socket: { data() {} } })
    socket.end()
    return true
  } catch {
    return false
  }
}

export function freePort(): number {
  for (;;) {
    const listener = Bun.listen({ hostname: '127.0.0.1', port: 0, socket: { data() {} } })
    const port = listener.port
    listener.stop(true)
    if (!handedOut.has(port)) {
      handedOut.add(port)
      return port
    }
  }
}

/** The SECRET_KEY of the server-mode processes tests start without naming one: processes sharing a database must share it. */
export const TEST_SECRET_KEY = 'test-secret-key-of-server-mode-processes-0123456789'

/** A subprocess of the repository's, its output collected as it comes. */
export interface Spawned {
  proc: Subprocess<'ignore', 'pipe', 'pipe'>
  /** Everything the process wrote so far, stdout and stderr interleaved as they arrived. */
  output(): string
  /** What it wrote to stdout alone. */
  stdout(): string
  /** Resolves with the exit code once the process is gone and its output read (it may still be starting). */
  exited: Promise<number>
  /** Polls the output until `re` matches; fails at once, with the output, if the process ends first. */
  waitForOutput(re: RegExp, timeoutMs?: number): Promise<RegExpMatchArray>
  /** Sends `signal` (unless the process is gone already) and waits for the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number>
}

/**
 * Runs `cmd` in the repository's root with the test process' environment and `env` over it
 * (`undefined` removes a variable). Every process spawned here is remembered, so `killAll()` in an
 * afterAll leaves none behind even when a test failed half-way.
 */
export function spawnProcess(cmd: string[], env: Record<string, string | undefined> = {}): Spawned {
  const merged: Record<string, string> = {}
  for (const [k, v] of Object.entries({ ...process.env, ...env })) if (v !== undefined) merged[k] = v
  // Server mode refuses to start without SECRET_KEY: one shared value unless the test names its own
  // (or removes it, with `SECRET_KEY: undefined`, to see the refusal).
  if (merged.DATABASE_URL && !merged.SECRET_KEY && !('SECRET_KEY' in env)) merged.SECRET_KEY = TEST_SECRET_KEY
  const proc = Bun.spawn(cmd, { cwd: root, env: merged, stdin: 'ignore', stdout: 'pipe', stderr: 'pipe' })
  let out = ''
  let stdout = ''
  let ended = false
  const pump = async (stream: ReadableStream<Uint8Array>, isStdout: boolean) => {
    const decoder = new TextDecoder()
    for await (const chunk of stream) {
      const text = decoder.decode(chunk, { stream: true })
      out += text
      if (isStdout) stdout += text
    }
  }
  const drained = Promise.all([pump(proc.stdout, true), pump(proc.stderr, false)]).catch(() => {})
  // The exit code only once the output is complete, so a failure message can show all of it.
  const exited = proc.exited.then(async (code) => {
    await drained
    ended = true
    running.delete(spawned)
    return code
  })
  const spawned: Spawned = {
    proc,
    output: () => out,
    stdout: () => stdout,
    exited,
    async waitForOutput(re, timeoutMs = 10_000) {
      let match: RegExpMatchArray | null = null
      try {
        await waitFor(() => (match = out.match(re)) !== null || ended, { timeoutMs, what: `output matching ${re}` })
      } catch (err) {
        throw new Error(`${(err as Error).message}\n--- output ---\n${out}`)
      }
      if (!match) throw new Error(`the process ended (code ${proc.exitCode}, signal ${proc.signalCode}) before printing ${re}\n--- output ---\n${out}`)
      return match
    },
    async stop(signal = 'SIGTERM') {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal)
      return exited
    },
  }
  running.add(spawned)
  return spawned
}

export interface ServiceProcess extends Spawned {
  port: number
  /** `http(s)://127.0.0.1:<port>` */
  url: string
  /** Polls `/healthz` until it answers 200; fails at once, with the output, if the process exits. */
  ready(timeoutMs?: number): Promise<void>
}

export interface SpawnOptions {
  /** Variables over the test process' own; `undefined` removes one from the child's environment. */
  env?: Record<string, string | undefined>
  port?: number
  https?: boolean
  /** After `src/main.ts`: `['worker']` runs the workers without HTTP (wait for them with `waitForOutput`, not `ready`). */
  args?: string[]
}

/** Runs the real service (`bun run src/main.ts`) as a subprocess (see `spawnProcess`). */
export function spawnService(opts: SpawnOptions = {}): ServiceProcess {
  const port = opts.port ?? freePort()
  const spawned = spawnProcess(['bun', 'run', 'src/main.ts', ...(opts.args ?? [])], { HOST: '127.0.0.1', PORT: String(port), LOG_LEVEL: 'info', ...opts.env })
  const { proc } = spawned
  const url = `${opts.https ? 'https' : 'http'}://127.0.0.1:${port}`
  return Object.assign(spawned, {
    port,
    url,
    async ready(timeoutMs = 20_000) {
      await waitFor(
        async () =>
          proc.exitCode !== null ||
          (await fetch(`${url}/healthz`, { tls: { rejectUnauthorized: false } }).then((r) => r.status === 200, () => false)),
        { timeoutMs, what: `the service on port ${port} to answer /healthz` },
      ).catch((err) => {
        throw new Error(`${(err as Error).message}\n--- output ---\n${spawned.output()}`)
      })
      if (proc.exitCode !== null) throw new Error(`the service exited with code ${proc.exitCode} while starting\n--- output ---\n${spawned.output()}`)
    },
  })
}

const API_CALL_TIMEOUT_MS = 15_000

/**
 * `fetch` to a service subprocess with a time-out: a service that stops answering fails the test at
 * once with what it printed, instead of hanging until the test's own time-out says nothing.
 */
export async function fetchService(sp: { url: string; output?: () => string }, path: string, init: RequestInit = {}): Promise<{ res: Response; text: string }> {
  try {
    const res = await fetch(sp.url + path, { tls: { rejectUnauthorized: false }, ...init, signal: AbortSignal.timeout(API_CALL_TIMEOUT_MS) } as RequestInit)
    return { res, text: await res.text() }
  } catch (err) {
    throw new Error(`${init.method ?? 'GET'} ${path} got no complete answer within ${API_CALL_TIMEOUT_MS} ms (${(err as Error).message})${sp.output ? `\n--- output ---\n${sp.output()}` : ''}`)
  }
}

/**
 * A request to a service subprocess with `Authorization: Bearer <key>` (none when `key` is null),
 * `body` sent as JSON; the answer's body parsed as JSON when it is JSON, else the text.
 */
export async function apiCall(
  sp: { url: string; output?: () => string },
  key: string | null,
  method: string,
  path: string,
  body?: unknown,
  init: Pick<RequestInit, 'keepalive'> = {},
): Promise<{ status: number; headers: Headers; body: any }> {
  const headers: Record<string, string> = {}
  if (key !== null) headers.authorization = `Bearer ${key}`
  if (body !== undefined) headers['content-type'] = 'application/json'
  const { res, text } = await fetchService(sp, path, { ...init, method, headers, body: body === undefined ? undefined : JSON.stringify(body) })
  let parsed: any = text
  try {
    parsed = JSON.parse(text)
  } catch {}
  return { status: res.status, headers: res.headers, body: parsed }
}

/** Kills (SIGKILL) every process spawned here still running and waits for each to be gone. */
export async function killAll(): Promise<void> {
  const left = [...running]
  for (const sp of left) sp.proc.kill('SIGKILL')
  await Promise.all(left.map((sp) => sp.exited))
}

/** Runs the service to completion and returns its exit code and output (for start-up failures). */
export async function runToExit(opts: SpawnOptions = {}, timeoutMs = 20_000): Promise<{ code: number; output: string }> {
  const sp = spawnService(opts)
  const timer = setTimeout(() => sp.proc.kill('SIGKILL'), timeoutMs)
  try {
    const code = await sp.exited
    return { code, output: sp.output() }
  } finally {
    clearTimeout(timer)
  }
}

/** Environment that forces the embedded default, whatever the test process itself was given. */
export const EMBEDDED: Record<string, undefined> = { DATABASE_URL: undefined, REDIS_URL: undefined, BOOTSTRAP_API_KEY: undefined }
