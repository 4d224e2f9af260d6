import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { generateKey } from '../../src/domain/api-keys'
import { openEmbedded } from '../../src/store/db'
import { waitFor } from '../helpers/harness'
import { longLineText } from '../helpers/hostile-documents'
import { apiCall, EMBEDDED, killAll, spawnService } from '../helpers/process'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * A hostile document survives its process (docs/knowledge.md "Limits: the document process"): the
 * real service, embedded, is sent a 5 MB text on one line and SIGKILLed while its document process
 * reads it. The document process goes with it (no orphan); restarted on the same DATA_DIR, the
 * service ends the dead one's lease at its start (the data directory's lock proves it gone), claims
 * the document at once, reads it again and
 * makes it ready, without any repair by hand. Before, such a text hung every process that claimed it.
 */

/** src/workers/documents.ts DOCUMENT_LEASE_MS. */
const DOCUMENT_LEASE_MS = 15_000

/** The resident memory of a process in bytes, from /proc; 0 once it is gone. */
function residentBytes(pid: number): number {
  try {
    return Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) * 1024
  } catch {
    return 0
  }
}

/** The pids of a process' children (every thread's), from /proc. */
function childrenOf(pid: number): number[] {
  try {
    return readdirSync(`/proc/${pid}/task`).flatMap((t) => readFileSync(`/proc/${pid}/task/${t}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number))
  } catch {
    return []
  }
}
const alive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return !readFileSync(`/proc/${pid}/status`, 'utf8').includes('State:\tZ')
  } catch {
    return false
  }
}

// The two tests below have a service and a data directory each, and mostly wait on them: run together.
describe.concurrent('embedded: SIGKILL while a document is read', () => {
  let tmp: string

  beforeAll(() => {
    tmp = mkdtempSync(join(tmpdir(), 'ap-e2e-knowledge-hostile-'))
  })
  afterAll(async () => {
    await killAll()
    if (tmp) rmSync(tmp, { recursive: true, force: true })
  })

  test('a hostile document: the document process dies with the service; after a restart the document is read again and ready', async () => {
    const rootKey = generateKey()
    const boot = () => spawnService({ env: { ...EMBEDDED, DATA_DIR: join(tmp, 'hostile'), BOOTSTRAP_API_KEY: rootKey, RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000' } })
    const call = (method: string, path: string, body?: unknown) => apiCall(sp, rootKey, method, path, body)
    let sp = boot()
    await sp.ready(120_000)
    const ws = await call('POST', '/v1/workspaces', { name: 'Hostile' })
    // Big chunks: the test waits on reading the line, not on embedding ~5 000 small chunks.
    const kb = await call('POST', '/v1/knowledge-bases', { workspace_id: ws.body.data.id, name: 'One line', chunking: { chunk_size: 4096, chunk_overlap: 0 } })
    expect(kb.status).toBe(201)
    const bytes = longLineText(5 * 1024 * 1024)
    const form = new FormData()
    form.append('file', new Blob([bytes]), 'one-line.txt')
    const up = await fetch(`${sp.url}/v1/knowledge-bases/${kb.body.data.id}/documents`, { method: 'POST', headers: { authorization: `Bearer ${rootKey}` }, body: form })
    expect(up.status).toBe(201)
    const id = ((await up.json()) as { document_id: string }).document_id

    // The service has started its document process, and the document is being read.
    const reader = await waitFor(
      async () => {
        const kids = childrenOf(sp.proc.pid)
        return kids.length > 0 && (await call('GET', `/v1/documents/${id}`)).body.status === 'parsing' ? kids : null
      },
      { timeoutMs: 20_000, intervalMs: 20, what: 'the document process to read the document' },
    )
    sp.proc.kill('SIGKILL')
    await sp.exited
    // Its document process notices the closed channel and exits: nothing is left reading.
    await waitFor(() => reader!.every((pid) => !alive(pid)), { timeoutMs: 5_000, what: 'the document process to exit' })

    sp = boot()
    await sp.ready(120_000)
    const done = await waitFor(
      async () => {
        const s = (await call('GET', `/v1/documents/${id}`)).body
        return s.status === 'ready' || s.status === 'failed' ? s : null
      },
      { timeoutMs: DOCUMENT_LEASE_MS + 45_000, intervalMs: 200, what: 'the document to be ready after the restart' },
    )
    expect(done).toMatchObject({ status: 'ready', chunks_count: Math.ceil(bytes.byteLength / 5 / 4096) })
    await sp.stop('SIGTERM')

    // The second claim read it; the first counted an attempt only if the kill came after the
    // document was handed to its process (it may have come while the process started).
    const db = await openEmbedded({ dataDir: join(tmp, 'hostile') })
    try {
      const [row] = await db.sql<{ attempts: number; processing_attempts: number; error: unknown }[]>`select attempts, processing_attempts, error from documents where id = ${id}`
      expect(row).toMatchObject({ processing_attempts: 0, error: null })
      expect([1, 2]).toContain(row!.attempts)
    } finally {
      await db.close()
    }
  }, DOCUMENT_LEASE_MS + 120_000)

  /**
   * A document process does not outlive its service (docs/knowledge.md "Limits: the document
   * process"): a text of 40 MB on one line keeps it busy for many seconds (its main thread inside the
   * chunker and local-embed, deaf to its closed channel); the service is SIGKILLed mid-document. The
   * process' watchdog thread sees its parent gone (its ppid changes) and ends it within a poll
   * (WATCHDOG_POLL_MS, 100 ms); the target is 1 s, asserted here with room for a busy machine (5 s),
   * the time it took printed. Measured (2 cores at load ~30): 1 ms and 17 ms. This test alone does
   * not tell the watchdog from the closed IPC channel: without the watchdog it measured 2 ms and
   * 135 ms too, the reading being between asynchronous steps when the kill came (a 15 MiB Word
   * document: 2 ms). What only the watchdog covers, a main thread busy in synchronous work (a child
   * spinning 8 s outlived its SIGKILLed parent by 7.6 s; its own limits while the service cannot act),
   * is tested in tests/unit/document-sandbox.test.ts ("holds its time limit itself").
   */
  test('in the middle of a long document: the document process exits within a second of its service', async () => {
    const rootKey = generateKey()
    const sp = spawnService({ env: { ...EMBEDDED, DATA_DIR: join(tmp, 'orphan'), BOOTSTRAP_API_KEY: rootKey, RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000' } })
    await sp.ready(120_000)
    const call = (method: string, path: string, body?: unknown) => apiCall(sp, rootKey, method, path, body)
    const ws = await call('POST', '/v1/workspaces', { name: 'Orphans' })
    const kb = await call('POST', '/v1/knowledge-bases', { workspace_id: ws.body.data.id, name: 'One line', chunking: { chunk_size: 4096, chunk_overlap: 0 } })
    expect(kb.status).toBe(201)
    const form = new FormData()
    form.append('file', new Blob([longLineText(40 * 1024 * 1024)]), 'one-line.txt')
    const up = await fetch(`${sp.url}/v1/knowledge-bases/${kb.body.data.id}/documents`, { method: 'POST', headers: { authorization: `Bearer ${rootKey}` }, body: form })
    expect(up.status).toBe(201)

    // Mid-document, in its synchronous part: past the 40 MB received (~100 MB at rest, ~200 MB once
    // they are in), the process holds the text made of them and its chunks. Receiving is asynchronous:
    // a kill then was already noticed at once (the closed channel), before the watchdog.
    // The reader is the child holding that much; the second process may be beside it, started
    // ahead for the next document (docs/knowledge.md): it must go too.
    const kids = await waitFor(
      () => {
        const all = childrenOf(sp.proc.pid)
        return all.some((pid) => residentBytes(pid) > 300 * 1024 * 1024) ? all : null
      },
      { timeoutMs: 120_000, intervalMs: 20, what: 'the document process to be reading the document' },
    )
    sp.proc.kill('SIGKILL')
    await sp.exited
    const killed = performance.now()
    await waitFor(() => !kids!.some(alive), { timeoutMs: 5_000, intervalMs: 10, what: `the document processes (${kids!.join(', ')}) to exit after their service` })
    const tookMs = Math.round(performance.now() - killed)
    console.log(`document process gone ${tookMs} ms after its service was SIGKILLed (target 1 000 ms)`)
    expect(tookMs).toBeLessThan(5_000)
  }, 180_000)
})
