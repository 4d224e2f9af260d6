import type { Server, Subprocess } from 'bun'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { waitFor } from './harness'

/**
 * A scripted HTTPS webhook receiver for tests: a real `Bun.serve` with TLS on loopback, in the test
 * process. Each path answers from its own script, so one receiver serves many webhooks at once.
 */

/** A self-signed certificate for CN and SAN `localhost`, made with openssl in a temp dir of its own. */
export interface Certificate {
  dir: string
  certFile: string
  keyFile: string
  cert: string
  key: string
  remove(): void
}

export function createCertificate(): Certificate {
  const dir = mkdtempSync(join(tmpdir(), 'ap-test-cert-'))
  const certFile = join(dir, 'cert.pem')
  const keyFile = join(dir, 'key.pem')
  const openssl = Bun.spawnSync(
    ['openssl', 'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=localhost', '-addext', 'subjectAltName=DNS:localhost', '-keyout', keyFile, '-out', certFile],
    { stdout: 'pipe', stderr: 'pipe' },
  )
  if (openssl.exitCode !== 0) {
    rmSync(dir, { recursive: true, force: true })
    throw new Error(`openssl failed: ${openssl.stderr.toString()}`)
  }
  return {
    dir,
    certFile,
    keyFile,
    cert: readFileSync(certFile, 'utf8'),
    key: readFileSync(keyFile, 'utf8'),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  }
}

/**
 * What the receiver does with one request:
 * - a status code: answers it with a small JSON body;
 * - `{ status, headers?, body? }`: the same with headers (`retry-after`, `location`) or a body of its own;
 * - `'hang'`: never answers (the sender's time-out ends it; `close()` releases it);
 * - `'close'`: drops the connection without an answer (no status line reaches the sender).
 */
export type Answer = number | { status: number; headers?: Record<string, string>; body?: string } | 'hang' | 'close'

export interface ReceivedRequest {
  /** `performance.now()` when the request arrived (for gaps between attempts). */
  at: number
  method: string
  path: string
  /** Lower-cased names. */
  headers: Record<string, string>
  /** The raw body, exactly as received (what was signed). */
  body: string
  answer: Answer
}

export interface Receiver {
  port: number
  hostname: string
  /** `https://localhost:<port><path>`: the certificate is for `localhost`. */
  url(path: string): string
  certFile: string
  /** Every request, in arrival order. */
  requests: ReceivedRequest[]
  requestsTo(path: string): ReceivedRequest[]
  /**
   * The answers for `path`, one per request in order; the last one repeats once the others are used.
   * Replaces the path's remaining script. A path never scripted answers 200.
   */
  script(path: string, answers: Answer[]): void
  /** Requests answered `'hang'` still open (released when the sender gives up, or by `close()`). */
  hanging(): number
  /** Polls (no sleep) until `path` has received at least `count` requests. */
  waitForRequests(path: string, count: number, timeoutMs?: number): Promise<ReceivedRequest[]>
  /** Releases hanging requests, stops the server, and removes the certificate when it made its own. */
  close(): Promise<void>
}

export interface ReceiverOptions {
  /** Default: a fresh one, removed on close. */
  certificate?: Certificate
  /** The address to listen on; `localhost` must resolve to it first. Default 127.0.0.1. */
  hostname?: string
}

function respond(answer: Exclude<Answer, 'hang' | 'close'>, path: string, n: number): Response {
  const { status, headers = {}, body } = typeof answer === 'number' ? { status: answer } : answer
  const text = body ?? JSON.stringify(status >= 200 && status < 300 ? { ok: true, path, request: n } : { error: `scripted ${status}`, path, request: n })
  return new Response(text, { status, headers: { 'content-type': 'application/json', ...headers } })
}

/**
 * A response whose body stream errors on its first read: Bun 1.4.5 then resets the connection before
 * any byte of the status line, so the sender sees a network error (ECONNRESET), never a status.
 * Erroring in `pull` with no reason keeps Bun from printing the error (`start` or any reason prints).
 */
function droppedConnection(): Response {
  return new Response(new ReadableStream({ pull: (c) => c.error() }))
}

export async function startReceiver(opts: ReceiverOptions = {}): Promise<Receiver> {
  const ownCertificate = !opts.certificate
  const certificate = opts.certificate ?? createCertificate()
  const hostname = opts.hostname ?? '127.0.0.1'
  const requests: ReceivedRequest[] = []
  const scripts = new Map<string, Answer[]>()
  const counts = new Map<string, number>()
  const hanging = new Set<() => void>()

  const next = (path: string): Answer => {
    const script = scripts.get(path)
    if (!script || script.length === 0) return 200
    return script.length > 1 ? script.shift()! : script[0]!
  }

  const server: Server<undefined> = Bun.serve({
    hostname,
    port: 0,
    tls: { cert: certificate.cert, key: certificate.key },
    async fetch(req) {
      const at = performance.now()
      const path = new URL(req.url).pathname
      const body = await req.text()
      const answer = next(path)
      const n = (counts.get(path) ?? 0) + 1
      counts.set(path, n)
      requests.push({ at, method: req.method, path, headers: Object.fromEntries(req.headers), body, answer })
      if (answer === 'close') return droppedConnection()
      if (answer === 'hang') {
        return new Promise<Response>((resolve) => {
          const release = () => {
            hanging.delete(release)
            resolve(new Response(null, { status: 503 }))
          }
          hanging.add(release)
          // The sender gave up (its time-out): nothing is waiting for the answer any more.
          req.signal.addEventListener('abort', release, { once: true })
        })
      }
      return respond(answer, path, n)
    },
  })
  const port = server.port!

  return {
    port,
    hostname,
    url: (path) => `https://localhost:${port}${path.startsWith('/') ? path : `/${path}`}`,
    certFile: certificate.certFile,
    requests,
    requestsTo: (path) => requests.filter((r) => r.path === path),
    hanging: () => hanging.size,
    script(path, answers) {
      if (answers.length === 0) throw new Error('a script needs at least one answer')
      scripts.set(path, [...answers])
    },
    async waitForRequests(path, count, timeoutMs = 15_000) {
      const got = () => requests.filter((r) => r.path === path)
      try {
        await waitFor(() => got().length >= count, { timeoutMs, what: `${count} request(s) to ${path}` })
        return got()
      } catch (err) {
        throw new Error(`${(err as Error).message} (got ${got().length})`)
      }
    },
    async close() {
      for (const release of [...hanging]) release()
      await server.stop(true)
      if (ownCertificate) certificate.remove()
    },
  }
}

/** examples/webhook-receiver.ts as a subprocess over HTTPS. */
export interface ReferenceReceiver {
  proc: Subprocess<'ignore', 'pipe', 'pipe'>
  port: number
  stdout(): string
  /** Its `{"received": <delivery id>, "event": ...}` lines so far: one per delivery it processed. */
  received(): { received: string; event: string }[]
  /** SIGKILL, and waits until the process is gone and its output read. */
  stop(): Promise<void>
}

const root = join(import.meta.dir, '..', '..')

export async function startReferenceReceiver(opts: { secret: string; certificate: Certificate; hostname?: string }): Promise<ReferenceReceiver> {
  const proc = Bun.spawn(['bun', 'examples/webhook-receiver.ts'], {
    cwd: root,
    env: {
      ...process.env,
      WEBHOOK_SECRET: opts.secret,
      PORT: '0',
      HOST: opts.hostname ?? '127.0.0.1',
      TLS_CERT_FILE: opts.certificate.certFile,
      TLS_KEY_FILE: opts.certificate.keyFile,
    },
    stdin: 'ignore',
    stdout: 'pipe',
    stderr: 'pipe',
  })
  let out = ''
  let err = ''
  const pump = async (stream: ReadableStream<Uint8Array>, add: (s: string) => void) => {
    const decoder = new TextDecoder()
    for await (const chunk of stream) add(decoder.decode(chunk, { stream: true }))
  }
  const drained = Promise.all([pump(proc.stdout, (s) => (out += s)), pump(proc.stderr, (s) => (err += s))]).catch(() => {})
  const ref: ReferenceReceiver = {
    proc,
    port: 0,
    stdout: () => out,
    received: () =>
      out
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l)),
    async stop() {
      proc.kill('SIGKILL')
      await Promise.all([proc.exited, drained])
    },
  }
  const m = await waitFor(() => proc.exitCode !== null || out.match(/^listening on https:\/\/[^\s]*:(\d+)\/?$/m), {
    timeoutMs: 15_000,
    what: 'the reference receiver to print "listening on"',
  }).catch(async (e) => {
    await ref.stop()
    throw new Error(`${(e as Error).message}\n--- stdout ---\n${out}\n--- stderr ---\n${err}`)
  })
  if (m === true) throw new Error(`the reference receiver exited with ${proc.exitCode}\n--- stdout ---\n${out}\n--- stderr ---\n${err}`)
  ref.port = Number((m as RegExpMatchArray)[1])
  return ref
}
