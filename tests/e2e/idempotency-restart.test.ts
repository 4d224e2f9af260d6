import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { EMBEDDED, fetchService, killAll, spawnService, type ServiceProcess } from '../helpers/process'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The 24 h replay window holds across a restart of the embedded default (`bun run src/main.ts`, no
 * DATABASE_URL, no REDIS_URL): the in-process Redis stand-in journals idempotency records in DATA_DIR.
 * A POST with a key, the process stopped (SIGTERM, then SIGKILL), a new process on the same DATA_DIR:
 * the same POST replays the first answer byte for byte and creates nothing.
 */
const KEY = 'ap_idemrestart0123456789ABCDEFGHIJKLMNOPQRS'
let tmp: string
let dataDir: string

beforeAll(() => {
  tmp = mkdtempSync(join(tmpdir(), 'ap-idem-restart-'))
  dataDir = join(tmp, 'data')
})

afterAll(async () => {
  await killAll()
  rmSync(tmp, { recursive: true, force: true })
})

async function start(): Promise<ServiceProcess> {
  const sp = spawnService({ env: { ...EMBEDDED, DATA_DIR: dataDir, BOOTSTRAP_API_KEY: KEY, LOG_LEVEL: 'warn' } })
  await sp.ready(30_000)
  return sp
}

async function post(sp: ServiceProcess, path: string, body: unknown, idempotencyKey: string) {
  const { res, text } = await fetchService(sp, path, {
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', 'idempotency-key': idempotencyKey },
    body: JSON.stringify(body),
  })
  return { status: res.status, headers: res.headers, text }
}

async function workspacesNamed(sp: ServiceProcess, name: string): Promise<number> {
  const { text } = await fetchService(sp, '/v1/workspaces?limit=100', { headers: { authorization: `Bearer ${KEY}` } })
  const page = JSON.parse(text) as { data: { name: string }[] }
  return page.data.filter((w) => w.name === name).length
}

describe.each([['SIGTERM'], ['SIGKILL']] as const)('Idempotency-Key across a restart (%s)', (signal) => {
  const name = `Created once (${signal})`
  const idemKey = `restart-${signal}`
  let first: Awaited<ReturnType<typeof post>>

  test('the first POST creates the workspace; the process is stopped', async () => {
    const sp = await start()
    first = await post(sp, '/v1/workspaces', { name }, idemKey)
    expect(first.status).toBe(201)
    expect(first.headers.get('idempotent-replayed')).toBeNull()
    const code = await sp.stop(signal)
    if (signal === 'SIGTERM') expect(code).toBe(0)
  }, 60_000)

  test('after the restart: the same POST replays the first answer byte for byte, and no second workspace exists', async () => {
    const sp = await start()
    try {
      const again = await post(sp, '/v1/workspaces', { name }, idemKey)
      expect(again.status).toBe(201)
      expect(again.headers.get('idempotent-replayed')).toBe('true')
      expect(again.text).toBe(first.text)
      expect(again.headers.get('location')).toBe(first.headers.get('location'))
      expect(await workspacesNamed(sp, name)).toBe(1)
      // The fingerprint came back too: another body with the key is refused, not executed.
      const other = await post(sp, '/v1/workspaces', { name: `${name}, other body` }, idemKey)
      expect(other.status).toBe(422)
      expect(JSON.parse(other.text).error.code).toBe('idempotency_key_reused')
      expect(await workspacesNamed(sp, `${name}, other body`)).toBe(0)
    } finally {
      await sp.stop('SIGTERM')
    }
  }, 60_000)
})
