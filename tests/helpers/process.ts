import type { Subprocess } from 'bun'
import { join } from 'node:path'
import { waitFor } from './harness'

const root = join(import.meta.dir, '..', '..')
const running = new Set<ServiceProcess>()

const handedOut = new Set<number>()

/**
 * A port nobody listens on right now: bind port 0, read what the kernel gave, let it go. Never the
 * same port twice in one test process, so services started side by side cannot collide.
 */
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

export interface ServiceProcess {
  proc: Subprocess<'ignore', 'pipe', 'pipe'>
  port: number
  /** `http(s)://127.0.0.1:<port>` */
  url: string
  /** Everything the process wrote so far, stdout and stderr interleaved as they arrived. */
  output(): string
  /** Resolves with the exit code (the process may still be starting). */
  exited: Promise<number>
  /** Polls `/healthz` until it answers 200; fails at once, with the output, if the process exits. */
  ready(timeoutMs?: number): Promise<void>
  /** Polls the output until `re` matches. */
  waitForOutput(re: RegExp, timeoutMs?: number): Promise<RegExpMatchArray>
  /** Sends `signal` and waits for the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number>
}

export interface SpawnOptions {
  /** Variables over the test process' own; `undefined` removes one from the child's environment. */
  env?: Record<string, string | undefined>
  port?: number
  https?: boolean
}

/**
 * Runs the real service (`bun run src/main.ts`) as a subprocess. Every process spawned here is
 * remembered, so `killAll()` in an afterAll leaves none behind even when a test failed half-way.
 */
export function spawnService(opts: SpawnOptions = {}): ServiceProcess {
  const port = opts.port ?? freePort()
  const env: Record<string, string> = {}
  const merged = { ...process.env, HOST: '127.0.0.1', PORT: String(port), LOG_LEVEL: 'info', ...opts.env }
  for (const [k, v] of Object.entries(merged)) if (v !== undefined) env[k] = v
  const proc = Bun.spawn(['bun', 'run', 'src/main.ts'], { cwd: root, env, stdin: 'ignore', stdout: 'pipe', stderr: 'pipe' })
  let out = ''
  const pump = async (stream: ReadableStream<Uint8Array>) => {
    const decoder = new TextDecoder()
    for await (const chunk of stream) out += decoder.decode(chunk, { stream: true })
  }
  const drained = Promise.all([pump(proc.stdout), pump(proc.stderr)]).catch(() => {})
  // The exit code only once the output is complete, so a failure message can show all of it.
  const exited = proc.exited.then(async (code) => {
    await drained
    running.delete(sp)
    return code
  })
  const url = `${opts.https ? 'https' : 'http'}://127.0.0.1:${port}`
  const sp: ServiceProcess = {
    proc,
    port,
    url,
    output: () => out,
    exited,
    async ready(timeoutMs = 20_000) {
      await waitFor(
        async () =>
          proc.exitCode !== null ||
          (await fetch(`${url}/healthz`, { tls: { rejectUnauthorized: false } }).then((r) => r.status === 200, () => false)),
        { timeoutMs, what: `the service on port ${port} to answer /healthz` },
      ).catch((err) => {
        throw new Error(`${(err as Error).message}\n--- output ---\n${out}`)
      })
      if (proc.exitCode !== null) throw new Error(`the service exited with code ${proc.exitCode} while starting\n--- output ---\n${out}`)
    },
    async waitForOutput(re, timeoutMs = 10_000) {
      try {
        return (await waitFor(() => out.match(re), { timeoutMs, what: `output matching ${re}` }))!
      } catch (err) {
        throw new Error(`${(err as Error).message}\n--- output ---\n${out}`)
      }
    },
    async stop(signal = 'SIGTERM') {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal)
      return exited
    },
  }
  running.add(sp)
  return sp
}

/** Kills (SIGKILL) every service process still running and waits for each to be gone. */
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
