import type { Server } from 'bun'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

/**
 * A webhook receiver for end-to-end tests: a real HTTPS server on loopback with a self-signed
 * certificate for `localhost` (made with openssl). It records every request (headers and raw body,
 * as they arrived) and answers per a mutable mode: 200, 500, or 'hang' (never answers; the sender's
 * time-out gives up). A function mode decides per request.
 */
export type Answer = 200 | 500 | 'hang'

export interface Received {
  /** x-service-delivery-id */
  deliveryId: string
  event: string
  headers: Record<string, string>
  /** The raw body, exactly as received. */
  body: string
  /** `body` parsed (null when it is not JSON). */
  json: any
  /** The request's path. */
  path: string
  /** Date.now() on arrival. */
  at: number
  /** What this receiver answered (set once decided). */
  answer: Answer | null
}

export type Mode = Answer | ((req: Received, previous: number) => Answer)

export interface TestCert {
  dir: string
  certFile: string
  keyFile: string
  /** The certificate in PEM, to trust it as a CA. */
  ca: string
}

/** A self-signed certificate for localhost (and 127.0.0.1) in a fresh temp dir; remove `dir` after. */
export function makeCert(): TestCert {
  const dir = mkdtempSync(join(tmpdir(), 'ap-https-receiver-'))
  const certFile = join(dir, 'cert.pem')
  const keyFile = join(dir, 'key.pem')
  const openssl = Bun.spawnSync(
    [
      // ECDSA P-256: a handshake costs a fraction of RSA's, which matters when hundreds of deliveries
      // open connections to one receiver at once.
      'openssl', 'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1', '-subj', '/CN=localhost',
      '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1', '-keyout', keyFile, '-out', certFile,
    ],
    { stdout: 'pipe', stderr: 'pipe' },
  )
  if (openssl.exitCode !== 0) {
    rmSync(dir, { recursive: true, force: true })
    throw new Error(`openssl failed: ${openssl.stderr.toString()}`)
  }
  return { dir, certFile, keyFile, ca: readFileSync(certFile, 'utf8') }
}

export interface HttpsReceiver {
  port: number
  /** `https://localhost:<port>` (add a path per webhook to tell them apart). */
  url: string
  /** Every request so far, in arrival order. */
  requests: Received[]
  mode: Mode
  /** Requests not answered yet (hanging). */
  hanging(): number
  /** Delivery ids of the requests hanging now. */
  hangingIds(): string[]
  /** Requests per delivery id. */
  byDelivery(): Map<string, Received[]>
  close(): Promise<void>
}

export function startHttpsReceiver(cert: TestCert, mode: Mode = 200): HttpsReceiver {
  const requests: Received[] = []
  const counts = new Map<string, number>()
  const hung = new Map<() => void, string>()
  let server: Server<undefined>
  const r: HttpsReceiver = {
    port: 0,
    url: '',
    requests,
    mode,
    hanging: () => hung.size,
    hangingIds: () => [...hung.values()],
    byDelivery() {
      const m = new Map<string, Received[]>()
      for (const q of requests) {
        const list = m.get(q.deliveryId)
        if (list) list.push(q)
        else m.set(q.deliveryId, [q])
      }
      return m
    },
    async close() {
      for (const release of [...hung.keys()]) release()
      hung.clear()
      server.stop(true)
    },
  }
  server = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    tls: { cert: readFileSync(cert.certFile, 'utf8'), key: readFileSync(cert.keyFile, 'utf8') },
    // A hanging request must outlive the sender's time-out; Bun's default idle time-out is 10 s.
    idleTimeout: 0,
    async fetch(req) {
      const body = await req.text()
      const headers: Record<string, string> = {}
      req.headers.forEach((v, k) => (headers[k] = v))
      let json: any = null
      try {
        json = JSON.parse(body)
      } catch {}
      const rec: Received = {
        deliveryId: headers['x-service-delivery-id'] ?? '',
        event: headers['x-service-event'] ?? '',
        headers,
        body,
        json,
        path: new URL(req.url).pathname,
        at: Date.now(),
        answer: null,
      }
      const previous = counts.get(rec.deliveryId) ?? 0
      counts.set(rec.deliveryId, previous + 1)
      requests.push(rec)
      const answer = typeof r.mode === 'function' ? r.mode(rec, previous) : r.mode
      rec.answer = answer
      if (answer === 'hang') {
        // Never answered; released (to let the server stop) on close or when the sender gives up.
        await new Promise<void>((resolve) => {
          const release = () => {
            hung.delete(release)
            resolve()
          }
          hung.set(release, rec.deliveryId)
          req.signal.addEventListener('abort', release)
        })
        return new Response('gave up', { status: 503 })
      }
      return new Response(answer === 200 ? 'ok' : 'boom', { status: answer })
    },
  })
  r.port = server.port!
  r.url = `https://localhost:${server.port}`
  return r
}
