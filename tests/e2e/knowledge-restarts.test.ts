import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { generateKey } from '../../src/domain/api-keys'
import { MAX_PROCESSING_ATTEMPTS } from '../../src/domain/knowledge/ingest'
import { openEmbedded } from '../../src/store/db'
import { waitFor } from '../helpers/harness'
import { apiCall, EMBEDDED, killAll, spawnService, type ServiceProcess } from '../helpers/process'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Unclean restarts do not make harmless documents poison (docs/knowledge.md, "Limits: the document
 * process"): the real service, embedded, holds three documents and is SIGKILLed three times in a row
 * while they wait for its document process, before any is read. Each restart claims all three in one
 * statement (its start ends the dead service's leases) and starts its document process for
 * the first; the kill comes as soon as that process exists. What counts towards poison_document is a
 * reading handed to the document process, so after the fourth boot every document is ready. Before,
 * every claim counted one, and the fourth claim failed all three as poison_document.
 */

/** The pids of a process' children (every thread's), from /proc. */
function childrenOf(pid: number): number[] {
  try {
    return readdirSync(`/proc/${pid}/task`).flatMap((t) => readFileSync(`/proc/${pid}/task/${t}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number))
  } catch {
    return []
  }
}

interface Row {
  id: string
  status: string
  lease_owner: string | null
  lease_until: Date | null
  attempts: number
  processing_attempts: number
  error: { code: string; message: string } | null
}

const KILLS = 3

describe('embedded: SIGKILLed three times while its documents wait for their document process', () => {
  let tmp: string
  let sp: ServiceProcess
  const rootKey = generateKey()
  const dataDir = () => join(tmp, 'data')

  beforeAll(() => {
    tmp = mkdtempSync(join(tmpdir(), 'ap-e2e-knowledge-restarts-'))
  })
  afterAll(async () => {
    await killAll()
    if (tmp) rmSync(tmp, { recursive: true, force: true })
  })

  const boot = async () => {
    sp = spawnService({ env: { ...EMBEDDED, DATA_DIR: dataDir(), BOOTSTRAP_API_KEY: rootKey, RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000' } })
    await sp.ready(120_000)
  }
  const call = (method: string, path: string, body?: unknown) => apiCall(sp, rootKey, method, path, body)
  const kill = async () => {
    sp.proc.kill('SIGKILL')
    await sp.exited
  }
  /** The documents' rows, read from the data directory while no service holds it. */
  const rows = async (): Promise<Row[]> => {
    const db = await openEmbedded({ dataDir: dataDir() })
    try {
      return [...(await db.sql<Row[]>`select id, status, lease_owner, lease_until, attempts, processing_attempts, error from documents order by created_at`)]
    } finally {
      await db.close()
    }
  }

  test('documents claimed and never read are not counted: all ready after the fourth boot, none poison_document', async () => {
    await boot()
    const ws = await call('POST', '/v1/workspaces', { name: 'Restarts' })
    const kb = await call('POST', '/v1/knowledge-bases', { workspace_id: ws.body.data.id, name: 'Notes' })
    expect(kb.status).toBe(201)
    const ids: string[] = []
    for (const n of [1, 2, 3]) {
      const up = await call('POST', `/v1/knowledge-bases/${kb.body.data.id}/documents`, {
        type: 'text',
        name: `note-${n}.txt`,
        content: `Note ${n}. The depot ships parcels within ${n} days; a parcel that is late is sent again at no cost.`,
      })
      expect(up.status).toBe(201)
      ids.push(up.body.document_id)
    }
    // The first kill: the documents are claimed as they arrive, some may be read already.
    await kill()
    let last = await rows()

    /** Per kill: the documents with their counts, read while the service is down. */
    const rounds: Row[][] = []
    for (let k = 1; k <= KILLS; k++) {
      // Every document still waiting is held by the dead service: the next boot ends its leases at
      // once (the data directory's lock proves it gone) and claims them in one statement.
      expect(last.filter((r) => r.status !== 'ready' && r.status !== 'failed' && r.lease_owner === null)).toEqual([])
      await boot()
      const pid = sp.proc.pid
      // The document process exists: the claim took the documents, the first one's turn has come.
      await waitFor(() => childrenOf(pid).length > 0, { timeoutMs: 60_000, intervalMs: 5, what: 'the document process to start' })
      await kill()
      const after = await rows()
      rounds.push(after)
      last = after
      console.log(`kill ${k}: ${after.map((r) => `${r.status} attempts ${r.attempts} readings ${r.processing_attempts}`).join('; ')}`)
      // Every document not settled yet was held by the killed service.
      for (const r of after) if (r.status !== 'ready' && r.status !== 'failed') expect(r.lease_owner?.split(':')[0]).toBe(String(pid))
    }
    await boot()
    const settled = await waitFor(
      async () => {
        const all = await Promise.all(ids.map(async (id) => (await call('GET', `/v1/documents/${id}`)).body))
        return all.every((d) => d.status === 'ready' || d.status === 'failed') ? all : null
      },
      { timeoutMs: 120_000, intervalMs: 200, what: 'the documents to settle after the fourth boot' },
    )
    await sp.stop('SIGTERM')
    // Before, this fourth claim failed each of them: "reading the document was started 3 times and never finished".
    expect(settled!.map((d) => ({ id: d.id, status: d.status, error: d.error ?? null }))).toEqual(ids.map((id) => ({ id, status: 'ready', error: null })))

    // What the counts said before the fourth boot: at most one reading can have begun per kill (one
    // document process; the kills came while it started), so at least one document waited through all
    // three without one, claimed each time, and counted nothing.
    const waiting = rounds.at(-1)!.filter((r) => r.status !== 'ready' && r.status !== 'failed')
    expect(waiting.every((r) => r.processing_attempts < MAX_PROCESSING_ATTEMPTS)).toBe(true)
    const neverRead = waiting.filter((r) => r.processing_attempts === 0)
    expect(neverRead.length).toBeGreaterThanOrEqual(1)
    for (const r of neverRead) expect(rounds.every((round) => round.some((x) => x.id === r.id && x.lease_owner !== null))).toBe(true)
    // Ready: its reading count starts again; those never read before made one attempt, the last.
    const final = await rows()
    for (const r of final) expect(r).toMatchObject({ status: 'ready', processing_attempts: 0 })
    for (const r of neverRead) expect(final.find((x) => x.id === r.id)).toMatchObject({ attempts: 1 })
  }, 600_000)
})
