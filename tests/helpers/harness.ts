import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { buildApp } from '../../src/app'
import { closeDeps, createLogger, openDeps } from '../../src/boot'
import { loadConfig, type Config } from '../../src/config'
import type { Deps } from '../../src/deps'
import { generateKey } from '../../src/domain/api-keys'
import type { RedisPort } from '../../src/store/redis'
import { IoRedis } from '../../src/store/redis/ioredis'
import { MemoryRedis } from '../../src/store/redis/memory'
import { freshDatabase } from './db'

/** Real Redis (a namespace of its own) when REDIS_URL is set, as in CI; else the in-process adapter. */
export function freshRedis(): RedisPort {
  const url = process.env.REDIS_URL
  return url ? new IoRedis(url, `test:${process.pid}:${Math.random().toString(36).slice(2, 10)}:`) : new MemoryRedis()
}

export interface Answer<T = any> {
  status: number
  headers: Headers
  body: T
  text: string
}

export interface CallOptions {
  /** API key; `null` sends no Authorization header. Defaults to the root key. */
  key?: string | null
  body?: unknown
  /** Sent as is (not JSON-encoded). */
  raw?: string | Uint8Array
  headers?: Record<string, string>
}

export interface Harness {
  deps: Deps
  app: ReturnType<typeof buildApp>
  rootKey: string
  base: string
  call<T = any>(method: string, path: string, opts?: CallOptions): Promise<Answer<T>>
  close(): Promise<void>
}

/**
 * The real app in-process, on a fresh database and Redis namespace of its own, with a root key.
 * `path` is written from /v1 (e.g. "/v1/workspaces") or absolute for operations ("/healthz").
 */
export async function startHarness(env: Record<string, string> = {}): Promise<Harness> {
  const rootKey = generateKey()
  // Uploaded originals go to DATA_DIR/files: a directory of this harness's own, removed at close.
  const dataDir = env.DATA_DIR ? null : mkdtempSync(join(tmpdir(), 'ap-harness-'))
  const config: Config = loadConfig({ LOG_LEVEL: 'silent', BOOTSTRAP_API_KEY: rootKey, SECRET_KEY: generateKey(), ...(dataDir ? { DATA_DIR: dataDir } : {}), ...env })
  const db = await freshDatabase({ efSearch: config.knowledgeEfSearch })
  const redis = freshRedis()
  const deps = await openDeps(config, { db, redis, log: createLogger(config.logLevel) })
  await deps.apiKeys.bootstrap(rootKey)
  let app = buildApp(deps)
  const base = 'http://localhost'
  const harness: Harness = {
    deps,
    app,
    rootKey,
    base,
    async call(method, path, opts = {}) {
      const headers: Record<string, string> = { ...opts.headers }
      const key = opts.key === undefined ? rootKey : opts.key
      if (key !== null) headers.authorization ??= `Bearer ${key}`
      let body: string | Uint8Array | undefined
      if (opts.raw !== undefined) body = opts.raw
      else if (opts.body !== undefined) {
        body = JSON.stringify(opts.body)
        headers['content-type'] ??= 'application/json'
      }
      const res = await app.handle(new Request(base + config.basePath + path, { method, headers, body }))
      const text = await res.text()
      let parsed: unknown = text
      try {
        parsed = JSON.parse(text)
      } catch {}
      return { status: res.status, headers: res.headers, body: parsed as any, text }
    },
    async close() {
      await closeDeps(deps)
      if (dataDir) rmSync(dataDir, { recursive: true, force: true })
      // A test file's module stays loaded until the whole run ends, and with it the harness its
      // top-level variable holds: let go of the app (its compiled routes) and the dependencies, or
      // every file's would add up in the one test process (~6 MB each even for a few routes).
      app = undefined as never
      Object.assign(harness, { app: undefined, deps: undefined })
    },
  }
  return harness
}

/** Issues a key for `userId` with the root key (optionally restricted) and returns the plain key. */
export async function keyFor(h: Harness, userId: string, extra: Record<string, unknown> = {}): Promise<string> {
  const res = await h.call('POST', '/v1/api-keys', { body: { user_id: userId, name: `key of ${userId}`, ...extra } })
  if (res.status !== 201) throw new Error(`could not issue a key: ${res.status} ${res.text}`)
  return res.body.data.key
}

/** Creates a workspace owned by the key's user; returns its id. */
export async function workspaceOf(h: Harness, key: string, name = 'Workspace'): Promise<string> {
  const res = await h.call('POST', '/v1/workspaces', { key, body: { name } })
  if (res.status !== 201) throw new Error(`could not create a workspace: ${res.status} ${res.text}`)
  return res.body.data.id
}

/** Polls `check` until it returns a truthy value or the deadline passes (tests never sleep a fixed time). */
export async function waitFor<T>(check: () => Promise<T> | T, { timeoutMs = 10_000, intervalMs = 25, what = 'condition' } = {}): Promise<T> {
  const deadline = Date.now() + timeoutMs
  // What the check last answered (a falsy value or an error), for the time-out's message.
  let last = 'no answer'
  while (Date.now() < deadline) {
    try {
      const v = await check()
      if (v) return v
      last = `last answered ${describe(v)}`
    } catch (err) {
      last = `last threw ${(err as Error).message}`
    }
    await Bun.sleep(intervalMs)
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}: ${last}`)
}

function describe(v: unknown): string {
  try {
    return (JSON.stringify(v) ?? String(v)).slice(0, 300)
  } catch {
    return String(v)
  }
}
