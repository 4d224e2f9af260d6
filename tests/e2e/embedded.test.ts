import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createCertificate, type Certificate } from '../helpers/certificate'
import { waitFor } from '../helpers/harness'
import { apiCall, EMBEDDED, killAll, runToExit, spawnService, type ServiceProcess } from '../helpers/process'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The embedded default end to end, always (even in CI, where DATABASE_URL and REDIS_URL are set):
 * `bun run src/main.ts` on PGlite under a DATA_DIR of its own and the in-process Redis. The steps
 * share one DATA_DIR and run in order, each starting from what the previous one left.
 */
const ROOT_KEY = /ap_[A-Za-z0-9]{40}(?![A-Za-z0-9])/g

let tmp: string
let dataDir: string
let lockFile: string
let rootKey: string
let firstWorkspace: string
let inFlightWorkspace: string
let crashWorkspace: string
/** The first process, left running by one step for the next. */
let running: ServiceProcess | undefined
let certificate: Certificate | undefined

beforeAll(() => {
  tmp = mkdtempSync(join(tmpdir(), 'ap-e2e-embedded-'))
  dataDir = join(tmp, 'data')
  lockFile = join(dataDir, 'pglite.lock')
})

afterAll(async () => {
  await killAll()
  certificate?.remove()
  rmSync(tmp, { recursive: true, force: true })
})

function start(env: Record<string, string | undefined> = {}, https = false): ServiceProcess {
  return spawnService({ env: { ...EMBEDDED, DATA_DIR: dataDir, ...env }, https })
}

async function call(sp: ServiceProcess, method: string, path: string, opts: { key?: string | null; body?: unknown } = {}) {
  return apiCall(sp, opts.key === undefined ? rootKey : opts.key, method, path, opts.body)
}

async function workspaceNames(sp: ServiceProcess): Promise<string[]> {
  const res = await call(sp, 'GET', '/v1/workspaces?limit=100')
  expect(res.status).toBe(200)
  return res.body.data.map((w: { name: string }) => w.name).sort()
}

/** Sends `text` on a raw connection; what came back once the server closes it (or after 10 s). */
async function rawExchange(port: number, text: string): Promise<string> {
  let response = ''
  let closed = false
  const socket = await Bun.connect({
    hostname: '127.0.0.1',
    port,
    socket: {
      data(_s, chunk) {
        response += chunk.toString()
      },
      close() {
        closed = true
      },
      error() {
        closed = true
      },
    },
  })
  socket.write(text)
  await waitFor(() => closed || /\r\n\r\n/.test(response), { timeoutMs: 10_000, what: 'an answer on the raw connection' })
  socket.end()
  return response
}

describe('embedded default as a subprocess', () => {
  test('a bad PORT stops start-up with a message naming PORT', async () => {
    const { code, output } = await runToExit({ env: { ...EMBEDDED, DATA_DIR: join(tmp, 'never-used'), PORT: 'abc' } })
    expect(code).not.toBe(0)
    expect(output).toContain('PORT')
    expect(output).toContain('abc')
    expect(output).not.toContain('listening on')
    // Configuration is checked before anything is opened.
    expect(existsSync(join(tmp, 'never-used'))).toBe(false)
  }, 20_000)

  test.each([
    ['api', '"api" mode needs DATABASE_URL and REDIS_URL'],
    ['serve', 'unknown mode "serve"'],
  ])('`src/main.ts %s` on the embedded default exits 2 before opening anything', async (mode, message) => {
    const dir = join(tmp, `never-used-${mode}`)
    const { code, output } = await runToExit({ env: { ...EMBEDDED, DATA_DIR: dir }, args: [mode] })
    expect(code).toBe(2)
    expect(output).toContain(message)
    expect(output).not.toContain('listening on')
    expect(existsSync(dir)).toBe(false)
  }, 20_000)

  test('first start: prints the root key once, answers /healthz and /readyz, and the key works', async () => {
    const sp = start()
    await sp.ready(45_000)
    const keys = sp.output().match(ROOT_KEY) ?? []
    expect(keys.length).toBe(1)
    rootKey = keys[0]!
    expect(sp.output()).toContain(`embedded PGlite at ${dataDir}`)
    expect(readFileSync(lockFile, 'utf8').split('\n')[0]).toBe(String(sp.proc.pid))

    const health = await call(sp, 'GET', '/healthz', { key: null })
    expect(health.status).toBe(200)
    expect(health.body.status).toBe('ok')
    const ready = await call(sp, 'GET', '/readyz', { key: null })
    expect(ready.status).toBe(200)
    expect(ready.body).toMatchObject({ status: 'ok', checks: { database: { status: 'ok', kind: 'pglite' }, redis: { status: 'ok', kind: 'memory' } } })

    expect((await call(sp, 'GET', '/v1/workspaces', { key: null })).status).toBe(401)
    const created = await call(sp, 'POST', '/v1/workspaces', { body: { name: 'First' } })
    expect(created.status).toBe(201)
    firstWorkspace = created.body.data.id
    expect(firstWorkspace).toMatch(/^ws_/)
    const got = await call(sp, 'GET', `/v1/workspaces/${firstWorkspace}`)
    expect(got.status).toBe(200)
    expect(got.body.data).toMatchObject({ id: firstWorkspace, name: 'First', owner_id: 'root' })

    // Enormous headers (docs/hardening.md): refused by the HTTP parser with 431, the process goes on.
    const big = await rawExchange(sp.port, `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(200_000)}\r\n\r\n`)
    expect(big.split('\r\n')[0]).toBe('HTTP/1.1 431 Request Header Fields Too Large')
    const many = await rawExchange(sp.port, `GET /healthz HTTP/1.1\r\nHost: x\r\n${Array.from({ length: 2000 }, (_, i) => `X-H${i}: v\r\n`).join('')}\r\n`)
    expect(many.split('\r\n')[0]).toBe('HTTP/1.1 431 Request Header Fields Too Large')
    expect((await call(sp, 'GET', '/healthz', { key: null })).status).toBe(200)

    // Leave it running for the next step.
    running = sp
  }, 60_000)

  test('a second process on the same DATA_DIR exits non-zero naming DATA_DIR; the first goes on', async () => {
    const first = running!
    const { code, output } = await runToExit({ env: { ...EMBEDDED, DATA_DIR: dataDir } })
    expect(code).not.toBe(0)
    expect(output).toContain('DATA_DIR')
    expect(output).toContain(dataDir)
    expect(output).toContain('in use')
    expect(output).not.toContain('listening on')
    expect(output.match(ROOT_KEY)).toBeNull()
    expect(first.proc.exitCode).toBeNull()
    expect(readFileSync(lockFile, 'utf8').split('\n')[0]).toBe(String(first.proc.pid))
    expect((await call(first, 'GET', `/v1/workspaces/${firstWorkspace}`)).status).toBe(200)
    await first.stop()
    running = undefined
  }, 30_000)

  test('SIGTERM: stops accepting, finishes the request in flight, exits 0 and removes the lock', async () => {
    // A refill of 1 token/s makes the per-key bucket a counter: it shows when the server has taken
    // the half-sent request (authentication and the rate limit run before the body is read).
    const sp = start({ RATE_LIMIT_PER_SECOND: '1' })
    await sp.ready(30_000)
    const issued = await call(sp, 'POST', '/v1/api-keys', { body: { user_id: 'dana', name: 'in flight' } })
    expect(issued.status).toBe(201)
    const key: string = issued.body.data.key

    const body = JSON.stringify({ name: 'In flight' })
    let response = ''
    let closed = false
    const socket = await Bun.connect({
      hostname: '127.0.0.1',
      port: sp.port,
      socket: {
        data(_s, chunk) {
          response += chunk.toString()
        },
        close() {
          closed = true
        },
      },
    })
    try {
      socket.write(
        `POST /v1/workspaces HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${key}\r\n` +
          `Content-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body.slice(0, 4)}`,
      )
      let probes = 0
      await waitFor(
        async () => {
          const probe = await call(sp, 'GET', '/v1/api-keys', { key })
          probes++
          // A fresh bucket of 100: each probe takes one, the request in flight one more.
          return Number(probe.headers.get('ratelimit-remaining')) <= 100 - probes - 1
        },
        { timeoutMs: 5_000, what: 'the server to have taken the half-sent request' },
      )

      sp.proc.kill('SIGTERM')
      await sp.waitForOutput(/shutting down/)
      await waitFor(
        () => Bun.connect({ hostname: '127.0.0.1', port: sp.port, socket: { data() {} } }).then((s) => (s.end(), false), () => true),
        { timeoutMs: 5_000, what: 'the listener to refuse new connections' },
      )
      expect(sp.proc.exitCode).toBeNull()

      socket.write(body.slice(4))
      await waitFor(() => closed || /\r\n\r\n\{.*\}$/s.test(response), { timeoutMs: 10_000, what: 'the response to the request in flight' })
    } finally {
      socket.end()
    }
    expect(response.split('\r\n')[0]).toBe('HTTP/1.1 201 Created')
    const json = JSON.parse(response.slice(response.indexOf('\r\n\r\n') + 4))
    expect(json.data).toMatchObject({ name: 'In flight', owner_id: 'dana' })
    inFlightWorkspace = json.data.id

    expect(await sp.exited).toBe(0)
    expect(sp.output()).toContain('"stopped"')
    expect(existsSync(lockFile)).toBe(false)
  }, 40_000)

  test('restart on the same DATA_DIR keeps the data and the root key, and prints no new key', async () => {
    const sp = start()
    await sp.ready(30_000)
    expect(sp.output().match(ROOT_KEY)).toBeNull()
    expect((await call(sp, 'GET', `/v1/workspaces/${firstWorkspace}`)).body.data).toMatchObject({ id: firstWorkspace, name: 'First' })
    expect((await call(sp, 'GET', `/v1/workspaces/${inFlightWorkspace}`)).status).toBe(200)
    expect(await workspaceNames(sp)).toEqual(['First', 'In flight'])

    const created = await call(sp, 'POST', '/v1/workspaces', { body: { name: 'Before the crash' } })
    expect(created.status).toBe(201)
    crashWorkspace = created.body.data.id

    // A crash: no shutdown, the lock file stays behind with a pid that is gone.
    sp.proc.kill('SIGKILL')
    await sp.exited
    expect(sp.proc.signalCode).toBe('SIGKILL')
    expect(readFileSync(lockFile, 'utf8').split('\n')[0]).toBe(String(sp.proc.pid))
  }, 40_000)

  test('after SIGKILL, a restart takes over the stale lock and the committed data is intact', async () => {
    const sp = start()
    await sp.ready(30_000)
    expect(readFileSync(lockFile, 'utf8').split('\n')[0]).toBe(String(sp.proc.pid))
    expect(sp.output().match(ROOT_KEY)).toBeNull()
    expect((await call(sp, 'GET', `/v1/workspaces/${crashWorkspace}`)).body.data).toMatchObject({ name: 'Before the crash' })
    expect(await workspaceNames(sp)).toEqual(['Before the crash', 'First', 'In flight'])
    const ready = await call(sp, 'GET', '/readyz', { key: null })
    expect(ready.status).toBe(200)
    expect(await sp.stop()).toBe(0)
    expect(existsSync(lockFile)).toBe(false)
  }, 40_000)

  test('TLS_CERT_FILE and TLS_KEY_FILE: serves HTTPS', async () => {
    certificate = createCertificate()
    const sp = start({ TLS_CERT_FILE: certificate.certFile, TLS_KEY_FILE: certificate.keyFile }, true)
    await sp.ready(30_000)
    expect(sp.output()).toContain(`listening on https://`)
    const health = await fetch(`https://localhost:${sp.port}/healthz`, { tls: { rejectUnauthorized: false } }).catch(() =>
      // `localhost` may resolve to ::1 first while the service listens on 127.0.0.1 only.
      fetch(`${sp.url}/healthz`, { tls: { rejectUnauthorized: false } }),
    )
    expect(health.status).toBe(200)
    expect(health.headers.get('strict-transport-security')).toContain('max-age=')
    expect((await call(sp, 'GET', `/v1/workspaces/${firstWorkspace}`)).status).toBe(200)
    // Plain HTTP on the same port gets no answer.
    expect(await fetch(`http://127.0.0.1:${sp.port}/healthz`).then((r) => r.status, () => 'refused')).not.toBe(200)
    expect(await sp.stop()).toBe(0)
  }, 40_000)
})
