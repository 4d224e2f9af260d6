import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { DEFAULT_SANDBOX_LIMITS, type SandboxLimits } from '../../src/domain/knowledge/sandbox-protocol'
import { DocumentWorker } from '../../src/workers/documents'
import { keyFor, startHarness, waitFor, workspaceOf, type Harness } from '../helpers/harness'
import { inflatingDocx, longLineText } from '../helpers/hostile-documents'
import { chunksOf, createKb, settled, upload } from '../helpers/knowledge'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Documents that attack the service through its document worker (docs/hardening.md, "one upload
 * blocks the service"): parsing and chunking run in the document process, off the event loop, with a
 * time, memory and chunk limit that fail the document with a code; the lease heartbeat goes on while
 * a long document is read; a document whose reading never finishes is failed as poison_document
 * after MAX_PROCESSING_ATTEMPTS readings begun, and claimed no more. Each test runs a worker of its own with
 * a short lease (every third of it a heartbeat) and the limits under test.
 */

/** A lease this short makes a worker that stops heartbeating lose its documents within a second. */
const LEASE_MS = 600

let h: Harness
let owner: string
let kb: string
/**
 * Big chunks: the 12 MB line makes ~600 of them, so the test waits on reading it, not on embedding.
 * 12 MB, not 5: read in ~2 s here, it spans four heartbeats of the worker's 1.5 s lease; 5 MB was
 * read in ~1 s on a quick run and left too few heartbeats to count.
 */
let bigChunks: string

beforeAll(async () => {
  h = await startHarness({ RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000' })
  owner = await keyFor(h, 'hostile-owner')
  const ws = await workspaceOf(h, owner, 'Hostile documents')
  kb = (await createKb(h, owner, { workspace_id: ws, name: 'Hostile' })).id
  bigChunks = (await createKb(h, owner, { workspace_id: ws, name: 'Big chunks', chunking: { chunk_size: 4096, chunk_overlap: 0 } })).id
})

afterAll(async () => {
  await h?.close()
})

/** A document worker of this test's own, stopped (its document process too) when `body` ends. */
async function withWorker<T>(limits: Partial<SandboxLimits>, body: (w: DocumentWorker) => Promise<T>, leaseMs = LEASE_MS): Promise<T> {
  const worker = new DocumentWorker(h.deps, { leaseMs, limits: { ...DEFAULT_SANDBOX_LIMITS, ...limits } })
  worker.start()
  try {
    return await body(worker)
  } finally {
    await worker.stop()
  }
}

interface Row {
  status: string
  lease_owner: string | null
  lease_until: Date | null
  attempts: number
  processing_attempts: number
  error: { code: string; message: string } | null
}
const rowOf = async (id: string) => (await h.deps.db.sql<Row[]>`select status, lease_owner, lease_until, attempts, processing_attempts, error from documents where id = ${id}`)[0]!

describe('a text of 12 MB on one line', () => {
  test('is ready, read off the event loop: its lease is heartbeated all the while it is parsed, never lost', async () => {
    await withWorker({}, async (worker) => {
      const id = await upload(h, owner, bigChunks, { bytes: longLineText(12 * 1024 * 1024), name: 'one-line.txt' })
      // Sampled while the document is being read: the lease keeps moving, and it stays this worker's.
      const leases = new Set<number>()
      const owners = new Set<string>()
      await waitFor(
        async () => {
          const row = await rowOf(id)
          if (row.status === 'parsing' && row.lease_until) {
            leases.add(row.lease_until.getTime())
            owners.add(row.lease_owner!)
          }
          return row.status !== 'parsing'
        },
        { timeoutMs: 60_000, intervalMs: 20, what: 'the document to be parsed' },
      )
      // Before: the one line held the loop for minutes, no heartbeat went out, the lease ran out.
      expect(leases.size).toBeGreaterThanOrEqual(3)
      expect([...owners]).toEqual([worker.owner])
      const s = await settled(h, owner, id, 120_000)
      expect(s.status).toBe('ready')
      // 'word ' × ~1 M: one token each, 4 096 a chunk.
      expect(s.chunks_count).toBe(Math.ceil((12 * 1024 * 1024) / 5 / 4096))
      const row = await rowOf(id)
      expect(row).toMatchObject({ attempts: 1, processing_attempts: 0, error: null })
    }, 1_500) // embedding in the embedded database stalls the loop ~300 ms at worst on a busy machine: not 600 ms here
  }, 180_000)
})

describe('limits of the document process', () => {
  test('the time limit fails the document with processing_timeout; the next document is read by a new process', async () => {
    await withWorker({ timeoutMs: 200 }, async () => {
      const slow = await upload(h, owner, kb, { bytes: longLineText(2 * 1024 * 1024), name: 'slow.txt' })
      const s = await settled(h, owner, slow, 60_000)
      expect(s.status).toBe('failed')
      expect((await rowOf(slow)).error).toEqual({ code: 'processing_timeout', message: 'parsing and chunking the document took longer than 0.2 s' })
      const next = await upload(h, owner, kb, { bytes: new TextEncoder().encode('A short note.'), name: 'note.txt' })
      expect((await settled(h, owner, next, 30_000)).status).toBe('ready')
    })
  }, 90_000)

  test('the memory limit fails the document with processing_memory', async () => {
    // 12 MiB of Word XML (under the 16 MiB cap) takes mammoth ~250 MB; the process at rest ~130 MB.
    await withWorker({ maxRssBytes: 200 * 1024 * 1024 }, async () => {
      const id = await upload(h, owner, kb, { bytes: inflatingDocx(12 * 1024 * 1024), name: 'big.docx' })
      const s = await settled(h, owner, id, 60_000)
      expect(s.status).toBe('failed')
      expect((await rowOf(id)).error).toEqual({ code: 'processing_memory', message: 'parsing and chunking the document took more than 200 MiB of memory' })
    })
  }, 90_000)

  test('a DOCX whose XML inflates to 32 MiB (~50 KB; under the old 256 MiB cap) is refused from its zip directory', async () => {
    // The probe's was 196 MB in 287 KB (bun run bench:hostile-documents sends that one): it took
    // the process to 14 GB. 32 MiB is enough to show the cap, and quick to make.
    const bytes = inflatingDocx(32 * 1024 * 1024)
    expect(bytes.byteLength).toBeLessThan(200_000)
    await withWorker({}, async () => {
      const id = await upload(h, owner, kb, { bytes, name: 'bomb.docx' })
      const s = await settled(h, owner, id, 60_000)
      expect(s.status).toBe('failed')
      const row = await rowOf(id)
      expect(row.error!.code).toBe('parse_error')
      expect(row.error!.message).toMatch(/^the Word document's XML unpacks to \d+ bytes \(at most 16777216\): refused as too large to read$/)
    })
  }, 90_000)

  test('more chunks than the limit fails the document with too_many_chunks', async () => {
    await withWorker({ maxChunks: 10 }, async () => {
      const id = await upload(h, owner, kb, { bytes: longLineText(100_000), name: 'many.txt' })
      expect((await settled(h, owner, id, 30_000)).status).toBe('failed')
      expect((await rowOf(id)).error).toEqual({ code: 'too_many_chunks', message: 'the document makes more than 10 chunks (at most 10): split it into smaller files' })
      expect(await chunksOf(h, id)).toEqual([])
    })
  }, 60_000)
})

describe('poison documents', () => {
  test('a document whose reading dies every time is failed as poison_document at the fourth claim, and claimed no more', async () => {
    await withWorker({}, async (worker) => {
      const id = await upload(h, owner, kb, { bytes: longLineText(2 * 1024 * 1024), name: 'poison.txt' })
      // Each reading counts as it is handed to the document process; each time, the process is killed mid-document.
      for (let claim = 1; claim <= 3; claim++) {
        await waitFor(async () => (await rowOf(id)).processing_attempts === claim && worker.sandbox.pid !== null, {
          timeoutMs: 90_000,
          intervalMs: 10,
          what: `claim ${claim} to start reading`,
        })
        process.kill(worker.sandbox.pid!, 'SIGKILL')
      }
      const s = await settled(h, owner, id, 30_000)
      expect(s.status).toBe('failed')
      const row = await rowOf(id)
      expect(row.error).toEqual({
        code: 'poison_document',
        message: 'reading the document was started 3 times and never finished (its process died or stopped answering each time): it is not tried again',
      })
      // Three readings begun and never finished; the fourth claim failed it before its turn came.
      expect(row).toMatchObject({ attempts: 3, processing_attempts: 3, lease_owner: null })
      // Failed is final: no claim takes it again (the claim query reads only parsing, chunking, embedding).
      expect(await h.deps.db.sql`select 1 from documents where id = ${id} and status in ('parsing', 'chunking', 'embedding')`).toHaveLength(0)
    })
  }, 360_000)
})
