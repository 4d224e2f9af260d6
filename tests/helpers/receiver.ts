import type { Server } from 'bun'
import { createCertificate, type Certificate } from './certificate'
import { waitFor } from './harness'
import { spawnProcess, type Spawned } from './process'

/**
 * HTTPS webhook receivers for tests, with a certificate for `localhost` (helpers/certificate.ts):
 * - `startReceiver`: a real `Bun.serve` with TLS on loopback, in the test process, that records every
 *   request and answers as scripted per path, or per a mode for the paths without a script (one
 *   answer for all, or a function of the request and how many requests its delivery id had before);
 * - `startReferenceReceiver`: examples/webhook-receiver.ts as a subprocess.
 */

/**
 * What the receiver does with one request:
 * - a status code: answers it with a small JSON body;
 * - `{ status, headers?, body? }`: the same with headers (`retry-after`, `location`) or a body of its own;
 * - `'hang'`: never answers (the sender's time-out ends it; `close()` releases it);
 * - `'close'`: drops the connection without an answer (no status line reaches the sender).
 */
export type Answer = number | { status: number; headers?: Record<string, string>; body?: string } | 'hang' | 'close'

/**
 * The answer to a request on a path without a script: one answer for all, or a function of the
 * request and of how many requests with the same delivery id came before it.
 */
export type Mode = Answer | ((req: ReceivedRequest, previous: number) => Answer)

export interface ReceivedRequest {
  /** `performance.now()` on arrival: monotonic, for gaps between attempts. */
  at: number
  /** `Date.now()` on arrival: wall clock, to compare with the service's timestamps. */
  receivedAt: number
  method: string
  path: string
  /** Lower-cased names. */
  headers: Record<string, string>
  /** The raw body, exactly as received (what was signed). */
  body: string
  /** `body` parsed (null when it is not JSON). */
  json: any
  /** `x-service-delivery-id` ('' when absent). */
  deliveryId: string
  /** `x-service-event` ('' when absent). */
  event: string
  answer: Answer
}

export interface Receiver {
  port: number
  hostname: string
  /** `https://localhost:<port><path>`: the certificate is for `localhost`. */
  url(path: string): string
  /** Every request, in arrival order. */
  requests: ReceivedRequest[]
  requestsTo(path: string): ReceivedRequest[]
  /** Requests per delivery id, each list in arrival order. */
  byDelivery(): Map<string, ReceivedRequest[]>
  /**
   * The answers for `path`, one per request in order; the last one repeats once the others are used.
   * Replaces the path's remaining script.
   */
  script(path: string, answers: Answer[]): void
  /** How requests on a path never scripted are answered; may be changed at any time. */
  mode: Mode
  /** Requests answered `'hang'` still open (released when the sender gives up, or by `close()`). */
  hanging(): number
  /** The delivery ids of those requests. */
  hangingIds(): string[]
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
  /** The initial `mode`. Default 200. */
  mode?: Mode
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
  const perPath = new Map<string, number>()
  const perDelivery = new Map<string, number>()
  /** release → the delivery id it holds */
  const hanging = new Map<() => void, string>()

  const next = (rec: ReceivedRequest, previous: number): Answer => {
    const script = scripts.get(rec.path)
    if (!script || script.length === 0) return typeof receiver.mode === 'function' ? receiver.mode(rec, previous) : receiver.mode
    return script.length > 1 ? script.shift()! : script[0]!
  }

  const server: Server<undefined> = Bun.serve({
    hostname,
    port: 0,
    tls: { cert: certificate.cert, key: certificate.key },
    // A hanging request must outlive the sender's time-out; Bun's default idle time-out is 10 s.
    idleTimeout: 0,
    async fetch(req) {
      const at = performance.now()
      const receivedAt = Date.now()
      const path = new URL(req.url).pathname
      const body = await req.text()
      let json: any = null
      try {
        json = JSON.parse(body)
      } catch {}
      const headers = Object.fromEntries(req.headers)
      const deliveryId = headers['x-service-delivery-id'] ?? ''
      const rec: ReceivedRequest = { at, receivedAt, method: req.method, path, headers, body, json, deliveryId, event: headers['x-service-event'] ?? '', answer: 200 }
      const previous = perDelivery.get(deliveryId) ?? 0
      perDelivery.set(deliveryId, previous + 1)
      const n = (perPath.get(path) ?? 0) + 1
      perPath.set(path, n)
      const answer = (rec.answer = next(rec, previous))
      requests.push(rec)
      if (answer === 'close') return droppedConnection()
      if (answer === 'hang') {
        return new Promise<Response>((resolve) => {
          const release = () => {
            hanging.delete(release)
            resolve(new Response(null, { status: 503 }))
          }
          hanging.set(release, deliveryId)
          // The sender gave up (its time-out): nothing is waiting for the answer any more.
          req.signal.addEventListener('abort', release, { once: true })
        })
      }
      return respond(answer, path, n)
    },
  })
  const port = server.port!

  const receiver: Receiver = {
    port,
    hostname,
    url: (path) => `https://localhost:${port}${path.startsWith('/') ? path : `/${path}`}`,
    requests,
    requestsTo: (path) => requests.filter((r) => r.path === path),
    byDelivery() {
      const m = new Map<string, ReceivedRequest[]>()
      for (const r of requests) {
        const list = m.get(r.deliveryId)
        if (list) list.push(r)
        else m.set(r.deliveryId, [r])
      }
      return m
    },
    mode: opts.mode ?? 200,
    hanging: () => hanging.size,
    hangingIds: () => [...hanging.values()],
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
      for (const release of [...hanging.keys()]) release()
      await server.stop(true)
      if (ownCertificate) certificate.remove()
    },
  }
  return receiver
}

/** examples/webhook-receiver.ts as a subprocess over HTTPS. */
export interface ReferenceReceiver {
  proc: Spawned['proc']
  port: number
  /** Resolves once the process is gone and its output read. */
  exited: Promise<number>
  stdout(): string
  /** Its `{"received": <delivery id>, "event": ...}` lines so far: one per delivery it processed. */
  received(): { received: string; event: string }[]
  /** SIGKILL, and waits until the process is gone and its output read. */
  stop(): Promise<void>
}

/**
 * Starts the reference receiver on `hostname` (default 127.0.0.1), a free port, and `certificate`,
 * and waits for its "listening on" line. `secret` is its WEBHOOK_SECRET: several (a rotation) as an
 * array, handed over comma-separated. A process that never starts is killed; `killAll()` (helpers/
 * process.ts) also ends any still running.
 */
export async function startReferenceReceiver(opts: { secret: string | string[]; certificate: Certificate; hostname?: string }): Promise<ReferenceReceiver> {
  const spawned = spawnProcess(['bun', 'examples/webhook-receiver.ts'], {
    // A space after each comma, as a person may write it: the receiver trims each secret.
    WEBHOOK_SECRET: typeof opts.secret === 'string' ? opts.secret : opts.secret.join(', '),
    PORT: '0',
    HOST: opts.hostname ?? '127.0.0.1',
    TLS_CERT_FILE: opts.certificate.certFile,
    TLS_KEY_FILE: opts.certificate.keyFile,
  })
  const stop = async () => {
    await spawned.stop('SIGKILL')
  }
  let listening: RegExpMatchArray
  try {
    listening = await spawned.waitForOutput(/^listening on https:\/\/[^\s]*:(\d+)\/?$/m, 15_000)
  } catch (err) {
    await stop()
    throw new Error(`the reference receiver did not start: ${(err as Error).message}`)
  }
  return {
    proc: spawned.proc,
    port: Number(listening[1]),
    exited: spawned.exited,
    stdout: spawned.stdout,
    received: () =>
      spawned
        .stdout()
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l)),
    stop,
  }
}
