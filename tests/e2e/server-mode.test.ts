import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import postgres from 'postgres'
import { generateKey } from '../../src/domain/api-keys'
import { loadMigrations } from '../../src/store/migrate'
import { waitFor } from '../helpers/harness'
import { killAll, spawnService, type ServiceProcess } from '../helpers/process'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Server mode end to end: two service processes on one server Postgres database and one Redis, as
 * a deployment with several replicas runs. Only meaningful when DATABASE_URL and REDIS_URL are set
 * (as in CI).
 */
const databaseUrl = process.env.DATABASE_URL
const redisUrl = process.env.REDIS_URL

// Small enough to exhaust in a few requests, with a refill slow enough not to blur the count.
const BURST = 6

if (!databaseUrl || !redisUrl) {
  describe('server mode (two processes, server Postgres, Redis)', () => {
    test.skip('skipped: DATABASE_URL and REDIS_URL are unset (CI sets both)', () => {})
  })
} else {
  describe('server mode: two processes on one database and one Redis', () => {
    const dbName = `ap_e2e_${process.pid}_${Math.random().toString(36).slice(2, 10)}`
    const rootKey = generateKey()
    let admin: postgres.Sql
    let tmp: string
    let a: ServiceProcess
    let b: ServiceProcess

    const call = async (sp: ServiceProcess, method: string, path: string, key: string = rootKey, body?: unknown) => {
      const res = await fetch(sp.url + path, {
        method,
        headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        body: body === undefined ? undefined : JSON.stringify(body),
      })
      return { status: res.status, headers: res.headers, body: (await res.json()) as any }
    }

    beforeAll(async () => {
      tmp = mkdtempSync(join(tmpdir(), 'ap-e2e-server-'))
      admin = postgres(databaseUrl, { max: 1, onnotice: () => {} })
      // An empty database: the services migrate it themselves at start-up.
      await admin.unsafe(`create database "${dbName}"`)
      const u = new URL(databaseUrl)
      u.pathname = `/${dbName}`
      const env = {
        DATABASE_URL: u.toString(),
        REDIS_URL: redisUrl,
        BOOTSTRAP_API_KEY: rootKey,
        DATA_DIR: join(tmp, 'data'),
        RATE_LIMIT_BURST: String(BURST),
        RATE_LIMIT_PER_SECOND: '1',
      }
      // Both at once, on purpose: the migration lock and the root-key bootstrap must hold under a race.
      a = spawnService({ env })
      b = spawnService({ env })
      await Promise.all([a.ready(30_000), b.ready(30_000)])
    }, 60_000)

    afterAll(async () => {
      await killAll()
      if (admin) {
        await admin.unsafe(`drop database if exists "${dbName}" with (force)`)
        await admin.end()
      }
      if (tmp) rmSync(tmp, { recursive: true, force: true })
    })

    test('both processes came up on the fresh database, migrated once, with one root key', async () => {
      for (const sp of [a, b]) {
        const ready = await fetch(`${sp.url}/readyz`)
        expect(ready.status).toBe(200)
        expect(await ready.json()).toMatchObject({ checks: { database: { kind: 'postgres', status: 'ok' }, redis: { kind: 'redis', status: 'ok' } } })
        expect(sp.output()).not.toContain('in-process Redis')
      }
      const db = postgres(databaseUrl, { max: 1, onnotice: () => {}, database: dbName })
      try {
        const versions = await db<{ version: number }[]>`select version from schema_migrations order by version`
        expect(versions.map((r) => r.version)).toEqual(loadMigrations().map((m) => m.version))
        const roots = await db`select id from api_keys where is_root`
        expect(roots.length).toBe(1)
      } finally {
        await db.end()
      }
    })

    test('a key created through A works on B', async () => {
      const issued = await call(a, 'POST', '/v1/api-keys', rootKey, { user_id: 'erin', name: 'cross-process' })
      expect(issued.status).toBe(201)
      const key: string = issued.body.data.key
      const created = await call(b, 'POST', '/v1/workspaces', key, { name: 'Made on B' })
      expect(created.status).toBe(201)
      const got = await call(a, 'GET', `/v1/workspaces/${created.body.data.id}`, key)
      expect(got.status).toBe(200)
      expect(got.body.data).toMatchObject({ name: 'Made on B', owner_id: 'erin' })
    })

    test('revoking a key through A makes B answer 401 at once (pub/sub reaches every process)', async () => {
      const issued = await call(a, 'POST', '/v1/api-keys', rootKey, { user_id: 'frank', name: 'to revoke' })
      expect(issued.status).toBe(201)
      const { key, id } = issued.body.data as { key: string; id: string }
      // B now holds the key in its cache, where it would stay valid for a minute without pub/sub.
      expect((await call(b, 'GET', '/v1/workspaces', key)).status).toBe(200)
      const revoked = await call(a, 'DELETE', `/v1/api-keys/${id}`)
      expect(revoked.status).toBe(200)
      expect(revoked.body.data.revoked_at).not.toBeNull()
      expect((await call(a, 'GET', '/v1/workspaces', key)).status).toBe(401)
      const onB = await waitFor(
        async () => {
          const r = await call(b, 'GET', '/v1/workspaces', key)
          return r.status === 401 ? r : null
        },
        { timeoutMs: 2_000, intervalMs: 20, what: 'B to refuse the revoked key' },
      )
      expect(onB!.body.error.code).toBe('unauthenticated')
      expect(onB!.headers.get('www-authenticate')).toContain('Bearer')
    })

    test('the per-key rate limit is one bucket across both processes', async () => {
      const issued = await call(a, 'POST', '/v1/api-keys', rootKey, { user_id: 'gina', name: 'rate limited' })
      expect(issued.status).toBe(201)
      const key: string = issued.body.data.key
      const answers: { status: number; remaining: number; retryAfter: string | null }[] = []
      for (let i = 0; i < 2 * BURST; i++) {
        const r = await call(i % 2 === 0 ? a : b, 'GET', '/v1/workspaces', key)
        answers.push({ status: r.status, remaining: Number(r.headers.get('ratelimit-remaining')), retryAfter: r.headers.get('retry-after') })
        if (r.status === 429) {
          expect(r.body.error.code).toBe('rate_limited')
          break
        }
      }
      const allowed = answers.filter((x) => x.status === 200)
      // One shared bucket allows BURST (one more if a token refilled meanwhile); a bucket per
      // process would allow twice as many.
      expect(allowed.length).toBeGreaterThanOrEqual(BURST)
      expect(allowed.length).toBeLessThanOrEqual(BURST + 1)
      expect(allowed.slice(0, BURST).map((x) => x.remaining)).toEqual(Array.from({ length: BURST }, (_, i) => BURST - 1 - i))
      const limited = answers.at(-1)!
      expect(limited.status).toBe(429)
      expect(Number(limited.retryAfter)).toBeGreaterThanOrEqual(1)
    })

    test('both stop gracefully on SIGTERM', async () => {
      const [ca, cb] = await Promise.all([a.stop(), b.stop()])
      expect([ca, cb]).toEqual([0, 0])
    }, 20_000)
  })
}
