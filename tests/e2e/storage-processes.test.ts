import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { existsSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { startCluster, type Cluster } from '../helpers/cluster'
import { waitFor } from '../helpers/harness'
import { EMBEDDED, fetchService, killAll, runToExit, type ServiceProcess } from '../helpers/process'
import { startS3, type S3Server } from '../helpers/s3'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Processes on different hosts share nothing but PostgreSQL and Redis (docs/deployment.md, "Where
 * uploaded files live"): an API-only process and a worker-only process, each with a DATA_DIR of its
 * own, so a file one of them left on its disk is one the other cannot see. Uploads go through the
 * API and the worker ingests them, with the server-mode default (originals in PostgreSQL) and with
 * STORAGE_URL=s3://… against s3rver. An original removed from storage before ingestion fails its
 * document with original_missing; storage that refuses connections is retried after the lease, and
 * the document's last claim fails it with storage_unavailable, saying where.
 */

/** src/workers/documents.ts DOCUMENT_LEASE_MS. */
const DOCUMENT_LEASE_MS = 15_000
/** src/domain/knowledge/ingest.ts MAX_ATTEMPTS. */
const MAX_ATTEMPTS = 5
const SECRET = 'e2e-secret-access-key-never-shown'

const databaseUrl = process.env.DATABASE_URL
const redisUrl = process.env.REDIS_URL

interface DocRow {
  status: string
  attempts: number
  processing_attempts: number
  error: { code: string; message: string } | null
}

/** One deployment: an API-only process, and worker processes started by the test, each on a DATA_DIR of its own. */
async function deployment(name: string, env: Record<string, string> = {}) {
  const tmp = mkdtempSync(join(tmpdir(), `ap-e2e-storage-${name}-`))
  const apiDataDir = join(tmp, 'api-data')
  const cluster = await startCluster({ name, workers: 0, apiOnly: true, env: { DATA_DIR: apiDataDir, ...env } })
  const { api, rootKey, db } = cluster
  const call = async (method: string, path: string, body?: unknown) => {
    const { res, text } = await fetchService(api, path, { method, headers: { authorization: `Bearer ${rootKey}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) })
    return { status: res.status, body: JSON.parse(text) }
  }
  const ws = await call('POST', '/v1/workspaces', { name: `Storage ${name}` })
  expect(ws.status).toBe(201)
  const kb = await call('POST', '/v1/knowledge-bases', { workspace_id: ws.body.data.id, name: 'Originals' })
  expect(kb.status).toBe(201)
  const kbId = kb.body.data.id as string
  let workerDirs = 0
  return {
    cluster,
    kbId,
    apiDataDir,
    /** A multipart upload through the API (the file streams to storage); the document's id. */
    async upload(fileName: string, content: string): Promise<string> {
      const form = new FormData()
      form.append('file', new Blob([content]), fileName)
      const { res, text } = await fetchService(api, `/v1/knowledge-bases/${kbId}/documents`, { method: 'POST', headers: { authorization: `Bearer ${rootKey}` }, body: form })
      expect({ status: res.status, text }).toMatchObject({ status: 201 })
      return JSON.parse(text).document_id
    },
    /** A worker-only process on a fresh DATA_DIR of its own. */
    async worker(): Promise<ServiceProcess & { dataDir: string }> {
      const dataDir = join(tmp, `worker-data-${++workerDirs}`)
      return Object.assign(await cluster.spawn('worker', { DATA_DIR: dataDir }), { dataDir })
    },
    row: async (id: string) => (await db<DocRow[]>`select status, attempts, processing_attempts, error from documents where id = ${id}`)[0]!,
    settled: async (id: string, timeoutMs = 30_000): Promise<DocRow> =>
      (await waitFor(async () => {
        const r = (await db<DocRow[]>`select status, attempts, processing_attempts, error from documents where id = ${id}`)[0]!
        return r.status === 'ready' || r.status === 'failed' ? r : null
      }, { timeoutMs, intervalMs: 50, what: `document ${id} to be ingested` }))!,
    async close() {
      await cluster.close()
      rmSync(tmp, { recursive: true, force: true })
    },
  }
}

// In both modes: configuration is checked before anything is opened.
describe('a bad STORAGE_URL stops start-up', () => {
  const tmp = mkdtempSync(join(tmpdir(), 'ap-e2e-storage-config-'))
  afterAll(() => rmSync(tmp, { recursive: true, force: true }))

  test.each([
    ['a scheme that is none of the four', { STORAGE_URL: 'ftp://files.example/originals' }, 'configuration: STORAGE_URL is invalid ("ftp://files.example/originals"): expected file:, file:///absolute/path, postgres: or s3://<bucket>/<prefix>'],
    ['s3:// with a secret but no access key (the secret is not shown)', { STORAGE_URL: 's3://originals/prod', S3_SECRET_ACCESS_KEY: SECRET, S3_ACCESS_KEY_ID: undefined, AWS_ACCESS_KEY_ID: undefined }, 'configuration: S3_ACCESS_KEY_ID (or AWS_ACCESS_KEY_ID) must be set with STORAGE_URL=s3://'],
  ])('%s', async (_, env, message) => {
    const dataDir = join(tmp, 'never-used')
    const { code, output } = await runToExit({ env: { ...EMBEDDED, DATA_DIR: dataDir, ...env } })
    expect(code).not.toBe(0)
    expect(output).toContain(message)
    expect(output).not.toContain(SECRET)
    expect(output).not.toContain('listening on')
    expect(existsSync(dataDir)).toBe(false)
  }, 20_000)
})

if (!databaseUrl || !redisUrl) {
  describe('storage across processes on different hosts', () => {
    test.skip('skipped: server mode only; DATABASE_URL and REDIS_URL are unset (CI sets both)', () => {})
  })
} else {
  describe('storage across processes on different hosts', () => {
    let s3: S3Server

    beforeAll(async () => {
      s3 = await startS3('originals')
    })
    afterAll(async () => {
      await killAll()
      await s3?.close()
    })

    test('default (PostgreSQL): the API stores, a worker with another DATA_DIR ingests; a removed original fails with original_missing', async () => {
      const d = await deployment('stpg')
      try {
        const ok = await d.upload('manual.txt', 'The pressure valve opens slowly.\n\nClose it before the pump starts.')
        const gone = await d.upload('gone.txt', 'This original is removed before any worker reads it.')
        // Nothing on the API's disk: the original is in the database, complete.
        expect(existsSync(join(d.apiDataDir, 'files'))).toBe(false)
        const stored = await d.cluster.db<{ key: string; size: string }[]>`select key, size from stored_files where complete order by key`
        expect(stored.map((r) => r.key).sort()).toEqual([`${d.kbId}/${ok}`, `${d.kbId}/${gone}`].sort())
        await d.cluster.db`delete from stored_files where key = ${`${d.kbId}/${gone}`}`

        const worker = await d.worker()
        expect(await d.settled(ok)).toMatchObject({ status: 'ready', error: null })
        const failed = await d.settled(gone)
        expect(failed.status).toBe('failed')
        expect(failed.error!.code).toBe('original_missing')
        expect(failed.error!.message).toContain('PostgreSQL')
        expect(existsSync(join(worker.dataDir, 'files'))).toBe(false)
        expect(worker.output()).toContain('uploaded originals are kept in PostgreSQL')
      } finally {
        await d.close()
      }
    }, 120_000)

    test('STORAGE_URL=s3://…: the same across processes; an unreachable store is retried after the lease and ends storage_unavailable, saying where', async () => {
      const d = await deployment('sts3', {
        STORAGE_URL: 's3://originals/e2e/docs',
        S3_ENDPOINT: s3.directEndpoint,
        S3_REGION: 'us-east-1',
        S3_ACCESS_KEY_ID: s3.accessKeyId,
        S3_SECRET_ACCESS_KEY: SECRET,
      })
      const bucket = new Bun.S3Client({ bucket: 'originals', endpoint: s3.directEndpoint, region: 'us-east-1', accessKeyId: s3.accessKeyId, secretAccessKey: s3.secretAccessKey })
      try {
        const ok = await d.upload('manual.md', '# Pumps\n\nThe pressure valve opens slowly.')
        const gone = await d.upload('gone.txt', 'This original is removed before any worker reads it.')
        expect(existsSync(join(d.apiDataDir, 'files'))).toBe(false)
        expect(await bucket.file(`e2e/docs/${d.kbId}/${ok}`).exists()).toBe(true)
        await bucket.delete(`e2e/docs/${d.kbId}/${gone}`)

        const first = await d.worker()
        expect(await d.settled(ok)).toMatchObject({ status: 'ready', error: null })
        const failed = await d.settled(gone)
        expect(failed.error!.code).toBe('original_missing')
        expect(failed.error!.message).toContain('s3://originals/e2e/docs')
        expect(existsSync(join(first.dataDir, 'files'))).toBe(false)
        // Not in PostgreSQL: STORAGE_URL chose the bucket.
        expect((await d.cluster.db`select 1 from stored_files`).length).toBe(0)
        await first.stop()

        // The store stops answering (connections refused) before the next document is read.
        const late = await d.upload('late.txt', 'Uploaded while the store was up, read after it went down.')
        await s3.stopServer()
        const second = await d.worker()
        await second.waitForOutput(new RegExp(`"document_id":"${late}".*will retry the document after its lease`), 20_000)
        const retried = await d.row(late)
        // Passing trouble: the document is not failed, and the parsing that never started is not counted towards poison_document.
        expect(retried).toMatchObject({ status: 'parsing', attempts: 1, processing_attempts: 0, error: null })
        expect(second.output()).toMatch(/could not be read: reading [^ ]+ in s3:\/\/originals\/e2e\/docs at 127\.0\.0\.1:\d+: ConnectionRefused/)
        // Its last claim (the earlier ones are the same, a lease apart): it ends failed, saying what and where.
        await d.cluster.db`update documents set attempts = ${MAX_ATTEMPTS - 1} where id = ${late}`
        const ended = await d.settled(late, DOCUMENT_LEASE_MS + 20_000)
        expect(ended.status).toBe('failed')
        expect(ended.error!.code).toBe('storage_unavailable')
        expect(ended.error!.message).toMatch(/^the uploaded original could not be read: reading [^ ]+ in s3:\/\/originals\/e2e\/docs at 127\.0\.0\.1:\d+: ConnectionRefused/)
        expect(ended.attempts).toBe(MAX_ATTEMPTS)
        // The secret key is in no log line and no error.
        for (const p of [d.cluster.api, first, second]) expect(p.output()).not.toContain(SECRET)
        expect(JSON.stringify(ended)).not.toContain(SECRET)
      } finally {
        await d.close()
      }
    }, DOCUMENT_LEASE_MS + 120_000)
  })
}
