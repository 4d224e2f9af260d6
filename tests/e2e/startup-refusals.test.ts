import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { existsSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { generateKey } from '../../src/domain/api-keys'
import { startCluster, type Cluster } from '../helpers/cluster'
import { waitFor } from '../helpers/harness'
import { EMBEDDED, fetchService, killAll, runToExit, spawnService, type ServiceProcess } from '../helpers/process'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * What a process refuses at start-up rather than serve wrongly: a port another process holds (it
 * would take a share of that one's connections and answer them from its own database), server mode
 * without SECRET_KEY (every process would seal with a key of its own), and a SECRET_KEY that cannot
 * open what the database holds.
 */
let tmp: string
const KEY_A = `key-a-${generateKey()}`
const KEY_B = `key-b-${generateKey()}`

beforeAll(() => {
  tmp = mkdtempSync(join(tmpdir(), 'ap-e2e-refusals-'))
})

afterAll(async () => {
  await killAll()
  rmSync(tmp, { recursive: true, force: true })
})

/** Waits for the process to end by itself (it must: a refusal), and gives its exit code. */
async function exitCode(sp: ServiceProcess, timeoutMs = 60_000): Promise<number> {
  await waitFor(() => sp.proc.exitCode !== null || sp.proc.signalCode !== null, { timeoutMs, what: 'the process to exit' }).catch((err) => {
    throw new Error(`${(err as Error).message}\n--- output ---\n${sp.output()}`)
  })
  return sp.exited
}

// Independent of each other (a data directory each), and mostly waiting on their processes: run together.
describe.concurrent('refused at start-up', () => {
  test('a second service started on the port another one holds exits 1 naming the port; the first answers every request', async () => {
    const rootKey = generateKey()
    const first = spawnService({ env: { ...EMBEDDED, DATA_DIR: join(tmp, 'first'), BOOTSTRAP_API_KEY: rootKey } })
    await first.ready(180_000)
    const second = spawnService({ port: first.port, env: { ...EMBEDDED, DATA_DIR: join(tmp, 'second'), BOOTSTRAP_API_KEY: generateKey() } })
    // Either outcome is awaited: refused, or (as before) listening beside the first.
    await second.waitForOutput(/already in use|listening on/, 120_000).catch(() => {})

    // A new connection per request, so the kernel would spread them over two listeners: each must reach
    // the first (the second's database does not know this root key: it would answer 401).
    const statuses: number[] = []
    for (let i = 0; i < 60; i++) {
      const { res } = await fetchService(first, '/v1/workspaces', { headers: { authorization: `Bearer ${rootKey}`, connection: 'close' } })
      statuses.push(res.status)
    }
    expect(statuses.filter((s) => s !== 200)).toEqual([])

    expect(await exitCode(second)).toBe(1)
    expect(second.output()).toContain(`port ${first.port} (HOST 127.0.0.1) is already in use by another process`)
    expect(second.output()).not.toContain('listening on')
    // Refused before it opened anything: no database in its DATA_DIR.
    expect(existsSync(join(tmp, 'second', 'pglite'))).toBe(false)
    expect(await first.stop()).toBe(0)
  }, 400_000)

  test.each([
    ['the service', []],
    ['a worker', ['worker']],
    ['an API-only process', ['api']],
  ] as const)('server mode without SECRET_KEY: %s exits 1 naming SECRET_KEY, before connecting to anything', async (_, args) => {
    const dataDir = join(tmp, `no-key-${args.join('') || 'all'}`)
    // Port 1 on loopback: nothing listens there, and the refusal comes before any connection.
    const { code, output } = await runToExit({
      args: [...args],
      env: { DATABASE_URL: 'postgres://postgres@127.0.0.1:1/none', REDIS_URL: 'redis://127.0.0.1:1', SECRET_KEY: undefined, DATA_DIR: dataDir },
    }, 120_000)
    expect(code).toBe(1)
    expect(output).toContain('SECRET_KEY is required in server mode (DATABASE_URL is set)')
    // No key of its own generated in DATA_DIR.
    expect(existsSync(join(dataDir, 'secret.key'))).toBe(false)
  }, 180_000)

  test('embedded: a restart with another SECRET_KEY (or none, so the generated file) is refused naming SECRET_KEY; the first key starts again', async () => {
    const env = (secret: string | undefined) => ({ ...EMBEDDED, DATA_DIR: join(tmp, 'embedded'), SECRET_KEY: secret })
    const first = spawnService({ env: env(KEY_A) })
    await first.ready(180_000)
    expect(await first.stop()).toBe(0)

    for (const other of [KEY_B, undefined]) {
      const { code, output } = await runToExit({ env: env(other) }, 180_000)
      expect(code).toBe(1)
      expect(output).toContain(`SECRET_KEY (${other ? 'from the environment' : `from ${join(tmp, 'embedded', 'secret.key')}`}) cannot open this database's check value`)
      expect(output).not.toContain('listening on')
    }

    const again = spawnService({ env: env(KEY_A) })
    await again.ready(180_000)
    expect(await again.stop()).toBe(0)
  }, 600_000)
})

const server = Boolean(process.env.DATABASE_URL && process.env.REDIS_URL)

describe.skipIf(!server)('SECRET_KEY in server mode, on one database', () => {
  let cluster: Cluster
  beforeAll(async () => {
    // Private plain-HTTP webhook addresses allowed: a webhook (and its sealed secret) is made, never called.
    cluster = await startCluster({ name: 'secretkey', workers: 0, env: { SECRET_KEY: KEY_A, WEBHOOK_ALLOW_HTTP: 'true', WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' } })
  }, 180_000)
  afterAll(() => cluster?.close())

  test('the first process stored the check value; a process with another SECRET_KEY is refused (exit 1), one with the same starts', async () => {
    const [row] = await cluster.db`select sealed from secret_key_check`
    expect(row!.sealed).toMatch(/^v1\.[0-9a-f]{8}\./)
    expect(row!.sealed).not.toContain(KEY_A)

    for (const kind of ['api', 'worker'] as const) {
      const refused = await cluster.spawn(kind, { SECRET_KEY: KEY_B }).then(() => null, (err: Error) => err.message)
      expect(refused).toMatch(/code 1/)
      expect(refused).toContain("SECRET_KEY (from the environment) cannot open this database's check value")
    }
    // The first still serves, and a process with the right key joins it.
    expect((await fetchService(cluster.api, '/healthz')).res.status).toBe(200)
    const worker = await cluster.spawn('worker')
    expect(worker.proc.exitCode).toBeNull()
  }, 300_000)

  test('a database from before the check value: a secret it already holds decides', async () => {
    const hook = await fetchService(cluster.api, '/v1/webhooks', {
      method: 'POST',
      headers: { authorization: `Bearer ${cluster.rootKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ workspace_id: await workspace(), url: 'http://127.0.0.1:9/in', events: ['workflow.run.completed'], secret: 'a-webhook-secret-of-its-own' }),
    })
    expect({ status: hook.res.status, text: hook.text }).toMatchObject({ status: 201 })
    await cluster.db`delete from secret_key_check`
    const refused = await cluster.spawn('worker', { SECRET_KEY: KEY_B }).then(() => null, (err: Error) => err.message)
    expect(refused).toContain('SECRET_KEY (from the environment) cannot open a secret this database already holds')
    expect((await cluster.db`select count(*)::int as n from secret_key_check`)[0]!.n).toBe(0)
    await cluster.spawn('worker')
    expect((await cluster.db`select count(*)::int as n from secret_key_check`)[0]!.n).toBe(1)
  }, 300_000)

  async function workspace(): Promise<string> {
    const { text } = await fetchService(cluster.api, '/v1/workspaces', {
      method: 'POST',
      headers: { authorization: `Bearer ${cluster.rootKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'Secrets' }),
    })
    return JSON.parse(text).data.id
  }
})
