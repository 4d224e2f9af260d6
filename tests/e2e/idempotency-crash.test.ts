import { afterAll, afterEach, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Server } from 'bun'
import { generateKey } from '../../src/domain/api-keys'
import { startCluster, type Cluster } from '../helpers/cluster'
import { waitFor } from '../helpers/harness'
import { apiCall, EMBEDDED, fetchService, killAll, spawnService, type ServiceProcess } from '../helpers/process'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * An Idempotency-Key cut off by SIGKILL (docs/api.md, "Idempotency"): the real service as a
 * subprocess, killed at the two points that matter, then started again and the same request retried.
 *
 * - After the write committed, before its answer was stored: a synchronous run held by a slow
 *   loopback server its http_request node calls (the request waits for the run: a real dependency
 *   keeps it in that window), and a workspace, an API key and a document upload held there by the
 *   test-only TEST_FAILPOINT=idempotency.before-store. The retry is answered from the row that was
 *   created (`Idempotent-Replayed: true`), within seconds, and exactly one row exists.
 * - After the key was taken, before anything was written (TEST_FAILPOINT=idempotency.before-write):
 *   the retry executes, within seconds, and creates exactly one.
 *
 * Both modes: embedded (PGlite, the in-process Redis stand-in journaling its records in DATA_DIR) and
 * server (PostgreSQL and Redis, when DATABASE_URL and REDIS_URL are set). Before the write's row was
 * recorded with it, the retry was refused 409 for 10 minutes, then created a second row.
 */

/** What "promptly" means here: seconds (the dead owner's heartbeat lapses in 6 s), far from 10 minutes. */
const PROMPT_MS = 30_000

interface Mode {
  rootKey: string
  /** Starts the service (the first time, or again after a kill) with `failpoint`, ready. */
  start(failpoint?: 'idempotency.before-write' | 'idempotency.before-store'): Promise<ServiceProcess>
  close(): Promise<void>
}

/** A loopback server whose `/hold` answers only once `release()` was called: it keeps a synchronous run in its node. */
function startHolder() {
  let released = false
  const arrivals: number[] = []
  const waiting: (() => void)[] = []
  const server: Server<undefined> = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    idleTimeout: 0,
    async fetch(req) {
      if (new URL(req.url).pathname !== '/hold') return new Response('no', { status: 404 })
      arrivals.push(Date.now())
      if (!released) await new Promise<void>((resolve) => waiting.push(resolve))
      return Response.json({ held: true })
    },
  })
  return {
    server,
    arrivals,
    release() {
      released = true
      for (const w of waiting.splice(0)) w()
    },
  }
}

const COMMON_ENV = {
  WEBHOOK_ALLOW_HTTP: 'true',
  WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
  RATE_LIMIT_BURST: '100000',
  RATE_LIMIT_PER_SECOND: '100000',
  LOG_LEVEL: 'warn',
}

function embeddedMode(): Mode {
  const tmp = mkdtempSync(join(tmpdir(), 'ap-idem-crash-'))
  const rootKey = generateKey()
  return {
    rootKey,
    async start(failpoint) {
      const sp = spawnService({
        env: { ...EMBEDDED, ...COMMON_ENV, DATA_DIR: join(tmp, 'data'), BOOTSTRAP_API_KEY: rootKey, SYNC_RUN_TIMEOUT_MS: failpoint ? '120000' : '2000', TEST_FAILPOINT: failpoint },
      })
      await sp.ready(60_000)
      return sp
    },
    async close() {
      await killAll()
      rmSync(tmp, { recursive: true, force: true })
    },
  }
}

async function serverMode(): Promise<Mode> {
  const cluster: Cluster = await startCluster({ name: 'idemcrash', workers: 0, env: { ...COMMON_ENV, TEST_FAILPOINT: 'idempotency.before-store' } })
  let first = true
  return {
    rootKey: cluster.rootKey,
    async start(failpoint) {
      // The cluster's first process is the one started with the failpoint of the first phase.
      if (first && failpoint === 'idempotency.before-store') {
        first = false
        return cluster.api
      }
      // An empty value is unset (src/config.ts).
      return cluster.spawn('api', { TEST_FAILPOINT: failpoint ?? '', SYNC_RUN_TIMEOUT_MS: failpoint ? '120000' : '2000' })
    },
    async close() {
      await killAll()
      await cluster.close()
    },
  }
}

/** The same request again until it is not 409 idempotency_key_in_use; answers it and how long that took. */
async function retry(send: () => Promise<{ status: number; headers: Headers; body: any }>) {
  const started = Date.now()
  let answer = await send()
  while (answer.status === 409 && answer.body?.error?.code === 'idempotency_key_in_use' && Date.now() - started < 2 * PROMPT_MS) {
    await Bun.sleep(250)
    answer = await send()
  }
  return { ...answer, ms: Date.now() - started }
}

async function keyed(sp: ServiceProcess, key: string, idem: string, method: string, path: string, body: unknown) {
  const { res, text } = await fetchService(sp, path, {
    method,
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'idempotency-key': idem },
    body: JSON.stringify(body),
  })
  let parsed: any = text
  try {
    parsed = JSON.parse(text)
  } catch {}
  return { status: res.status, headers: res.headers, body: parsed }
}

async function upload(sp: ServiceProcess, key: string, idem: string, kbId: string) {
  const form = new FormData()
  form.append('file', new File(['Idempotency keys hold across a crash.\n'], 'crash.txt', { type: 'text/plain' }))
  const { res, text } = await fetchService(sp, `/v1/knowledge-bases/${kbId}/documents`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'idempotency-key': idem },
    body: form,
  })
  return { status: res.status, headers: res.headers, body: JSON.parse(text) }
}

/** Counts the failpoint's lines in the output: each held request logs one. */
const held = (sp: ServiceProcess, at: string) => sp.output().split(`failpoint ${at} reached`).length - 1

function crashSuite(label: string, makeMode: () => Mode | Promise<Mode>) {
  describe(`${label}: an Idempotency-Key cut off by SIGKILL`, () => {
    let mode: Mode
    let holder: ReturnType<typeof startHolder>
    let workspaceId: string
    let workflowId: string
    let kbId: string
    const tag = `${label}-${Date.now()}`

    beforeAll(async () => {
      holder = startHolder()
      mode = await makeMode()
    }, 120_000)

    // A test that failed half-way leaves no process holding the data directory for the next one.
    afterEach(async () => {
      await killAll()
    })

    afterAll(async () => {
      holder?.release()
      await mode?.close()
      await holder?.server.stop(true)
    })

    test('killed after the write committed, before its answer was stored: the retry is answered from the row, and one row exists', async () => {
      const root = mode.rootKey
      let sp = await mode.start('idempotency.before-store')
      const ws = await apiCall(sp, root, 'POST', '/v1/workspaces', { name: `Crash ${tag}` })
      expect(ws.status).toBe(201)
      workspaceId = ws.body.data.id
      const wf = await apiCall(sp, root, 'POST', '/v1/workflows', {
        workspace_id: workspaceId,
        name: 'Held',
        graph: {
          nodes: [
            { id: 'start', type: 'start', config: {} },
            { id: 'hold', type: 'http_request', config: { method: 'GET', url: `http://127.0.0.1:${holder.server.port}/hold`, timeout_ms: 60_000 } },
            { id: 'end', type: 'end', config: { outputs: {} } },
          ],
          edges: [{ source: 'start', target: 'hold' }, { source: 'hold', target: 'end' }],
        },
      })
      expect(wf.body.error ?? wf.status).toBe(201)
      workflowId = wf.body.data.id
      const kb = await apiCall(sp, root, 'POST', '/v1/knowledge-bases', { workspace_id: workspaceId, name: 'Crash uploads' })
      expect(kb.status).toBe(201)
      kbId = kb.body.data.id

      // Sent, never answered: the process is killed while each is held after its commit.
      const cut = [
        keyed(sp, root, `run-${tag}`, 'POST', `/v1/workflows/${workflowId}/runs`, { inputs: {} }),
        keyed(sp, root, `ws-${tag}`, 'POST', '/v1/workspaces', { name: `Made once ${tag}` }),
        keyed(sp, root, `key-${tag}`, 'POST', '/v1/api-keys', { user_id: 'carol', name: `made once ${tag}` }),
        upload(sp, root, `doc-${tag}`, kbId),
      ].map((p) => p.catch(() => null))
      await waitFor(() => holder.arrivals.length >= 1 && held(sp, 'idempotency.before-store') >= 3, {
        timeoutMs: 60_000,
        what: 'the run to reach its held node and three writes to reach the failpoint',
      })
      await sp.stop('SIGKILL')
      await Promise.all(cut)
      holder.release()

      sp = await mode.start()
      // The run: its one row, answered as the synchronous request would be (202: still running, after SYNC_RUN_TIMEOUT_MS).
      const run = await retry(() => keyed(sp, root, `run-${tag}`, 'POST', `/v1/workflows/${workflowId}/runs`, { inputs: {} }))
      expect(run.ms).toBeLessThan(PROMPT_MS)
      expect([200, 202]).toContain(run.status)
      expect(run.headers.get('idempotent-replayed')).toBe('true')
      const runs = await apiCall(sp, root, 'GET', `/v1/workflows/${workflowId}/runs?limit=100`)
      expect(runs.body.data.map((r: any) => r.run_id)).toEqual([run.body.run_id])

      const workspace = await retry(() => keyed(sp, root, `ws-${tag}`, 'POST', '/v1/workspaces', { name: `Made once ${tag}` }))
      expect(workspace.ms).toBeLessThan(PROMPT_MS)
      expect(workspace.status).toBe(201)
      expect(workspace.headers.get('idempotent-replayed')).toBe('true')
      const named = (await apiCall(sp, root, 'GET', '/v1/workspaces?limit=100')).body.data.filter((w: any) => w.name === `Made once ${tag}`)
      expect(named.map((w: any) => w.id)).toEqual([workspace.body.data.id])

      // The key is shown again (it was never shown), and it works.
      const apiKey = await retry(() => keyed(sp, root, `key-${tag}`, 'POST', '/v1/api-keys', { user_id: 'carol', name: `made once ${tag}` }))
      expect(apiKey.ms).toBeLessThan(PROMPT_MS)
      expect(apiKey.status).toBe(201)
      expect(apiKey.headers.get('idempotent-replayed')).toBe('true')
      expect((await apiCall(sp, apiKey.body.data.key, 'GET', '/v1/workspaces')).status).toBe(200)
      const keys = (await apiCall(sp, root, 'GET', '/v1/api-keys?limit=100')).body.data.filter((k: any) => k.name === `made once ${tag}`)
      expect(keys.map((k: any) => k.id)).toEqual([apiKey.body.data.id])

      const doc = await retry(() => upload(sp, root, `doc-${tag}`, kbId))
      expect(doc.ms).toBeLessThan(PROMPT_MS)
      expect(doc.status).toBe(201)
      expect(doc.headers.get('idempotent-replayed')).toBe('true')
      const docs = await apiCall(sp, root, 'GET', `/v1/knowledge-bases/${kbId}/documents?limit=100`)
      expect(docs.body.data.map((d: any) => d.id)).toEqual([doc.body.document_id])

      // Kept now: the next retry replays the same answer byte for byte.
      const again = await keyed(sp, root, `ws-${tag}`, 'POST', '/v1/workspaces', { name: `Made once ${tag}` })
      expect(again.status).toBe(201)
      expect(again.body).toEqual(workspace.body)
      await sp.stop('SIGTERM')
    }, 240_000)

    test('killed after the key was taken, before the write: the retry executes at once and creates exactly one', async () => {
      const root = mode.rootKey
      let sp = await mode.start('idempotency.before-write')
      const cut = keyed(sp, root, `early-${tag}`, 'POST', '/v1/workspaces', { name: `Early ${tag}` }).catch(() => null)
      await waitFor(() => held(sp, 'idempotency.before-write') >= 1, { timeoutMs: 30_000, what: 'the write to reach the failpoint' })
      await sp.stop('SIGKILL')
      await cut

      sp = await mode.start()
      const workspace = await retry(() => keyed(sp, root, `early-${tag}`, 'POST', '/v1/workspaces', { name: `Early ${tag}` }))
      expect(workspace.ms).toBeLessThan(PROMPT_MS)
      expect(workspace.status).toBe(201)
      // Executed now, not replayed: nothing had been written.
      expect(workspace.headers.get('idempotent-replayed')).toBeNull()
      const named = (await apiCall(sp, root, 'GET', '/v1/workspaces?limit=100')).body.data.filter((w: any) => w.name === `Early ${tag}`)
      expect(named.map((w: any) => w.id)).toEqual([workspace.body.data.id])
      const replay = await keyed(sp, root, `early-${tag}`, 'POST', '/v1/workspaces', { name: `Early ${tag}` })
      expect(replay.headers.get('idempotent-replayed')).toBe('true')
      expect(replay.body).toEqual(workspace.body)
      await sp.stop('SIGTERM')
    }, 240_000)
  })
}

crashSuite('embedded', embeddedMode)

if (process.env.DATABASE_URL && process.env.REDIS_URL) crashSuite('server', serverMode)
else {
  describe('server: an Idempotency-Key cut off by SIGKILL', () => {
    test.skip('skipped: DATABASE_URL and REDIS_URL are unset (CI sets both)', () => {})
  })
}
