import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { createHash } from 'node:crypto'
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, relative } from 'node:path'
import type { Database } from '../../src/store/db'
import { FileNotFound, LocalFileStore, PostgresFileStore, S3FileStore, StorageUnavailable, TooLarge, type FileStore } from '../../src/store/files'
import { PART_BYTES } from '../../src/store/files/postgres'
import { freshDatabase } from '../helpers/db'
import { waitFor } from '../helpers/harness'
import { startS3, type S3Server } from '../helpers/s3'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * One conformance suite for the three adapters of the storage port (docs/deployment.md, "Where
 * uploaded files live"), each on the real thing: a temporary directory, the test database (PGlite
 * or PostgreSQL, as the run is), and s3rver. `leftovers()` is everything an adapter holds, finished
 * or not (partial files, incomplete rows and their parts, objects and multipart uploads never ended).
 */
interface Subject {
  store: FileStore
  leftovers(): Promise<string[]>
}

const MAX = 32 << 20
const bytes = (n: number, seed = 1) => {
  const out = new Uint8Array(n)
  for (let i = 0; i < n; i++) out[i] = (i * 31 + seed * 7 + (i >> 11)) & 0xff
  return out
}
const sha256 = (b: Uint8Array) => createHash('sha256').update(b).digest('hex')

/**
 * What the adapter holds comes back to `before`. Bun's S3 client sends AbortMultipartUpload after
 * the write has already failed, not before: the abort is waited for (2 s at most), not assumed.
 */
async function settledTo(s: { leftovers(): Promise<string[]> }, before: string[]) {
  await waitFor(async () => JSON.stringify(await s.leftovers()) === JSON.stringify(before), { timeoutMs: 2000, intervalMs: 20, what: 'the failed write to leave nothing behind' }).catch(() => {})
  expect(await s.leftovers()).toEqual(before)
}
/** `data` in chunks of `size` bytes, as an upload streams in. */
async function* chunked(data: Uint8Array, size = 64 << 10): AsyncGenerator<Uint8Array> {
  for (let i = 0; i < data.byteLength; i += size) yield data.subarray(i, i + size)
}

const tmp = mkdtempSync(join(tmpdir(), 'ap-file-storage-'))
let db: Database
let s3: S3Server

beforeAll(async () => {
  db = await freshDatabase()
  s3 = await startS3()
})
afterAll(async () => {
  await db?.close()
  await s3?.close()
  rmSync(tmp, { recursive: true, force: true })
})

function walk(dir: string): string[] {
  let out: string[] = []
  let entries
  try {
    entries = readdirSync(dir, { withFileTypes: true })
  } catch {
    return []
  }
  for (const e of entries) out = e.isDirectory() ? out.concat(walk(join(dir, e.name))) : out.concat(join(dir, e.name))
  return out
}

const subjects: [string, () => Subject][] = [
  [
    'local directory',
    () => {
      const root = join(tmp, 'local')
      return { store: new LocalFileStore(root), leftovers: async () => walk(root).map((f) => relative(root, f)).sort() }
    },
  ],
  [
    'PostgreSQL',
    () => ({
      store: new PostgresFileStore(db.sql),
      leftovers: async () => {
        const files = await db.sql<{ key: string; complete: boolean }[]>`select key, complete from stored_files order by key`
        const n = (await db.sql<{ n: number }[]>`select count(*)::int as n from stored_file_parts p where not exists (select 1 from stored_files f where f.id = p.file_id and f.complete)`)[0]!.n
        return [...files.map((f) => (f.complete ? f.key : `${f.key} (incomplete)`)), ...(n > 0 ? [`${n} parts of no complete file`] : [])]
      },
    }),
  ],
  [
    'S3 (s3rver)',
    () => {
      const store = new S3FileStore({ bucket: s3.bucket, prefix: 'tenant/originals', endpoint: s3.endpoint, region: 'us-east-1', accessKeyId: s3.accessKeyId, secretAccessKey: s3.secretAccessKey, sessionToken: null, virtualHostedStyle: false })
      const client = new Bun.S3Client({ bucket: s3.bucket, endpoint: s3.endpoint, region: 'us-east-1', accessKeyId: s3.accessKeyId, secretAccessKey: s3.secretAccessKey })
      return {
        store,
        leftovers: async () => {
          const page = await client.list({ prefix: '', maxKeys: 1000 })
          const objects = (page.contents ?? []).map((c) => c.key)
          return [...objects.sort(), ...s3.openUploads().map((id) => `multipart upload ${id} (open)`)]
        },
      }
    },
  ],
]

describe.each(subjects)('%s', (name, make) => {
  let s: Subject
  // Each adapter under keys of its own (the PostgreSQL and S3 subjects see only their own anyway).
  beforeAll(() => {
    s = make()
  })

  test('a round trip: the bytes, their size and sha256, computed while streaming', async () => {
    const data = bytes(300_000)
    expect(await s.store.write('kb_a/doc_1', chunked(data), MAX)).toEqual({ size: data.byteLength, sha256: sha256(data) })
    expect(await s.store.read('kb_a/doc_1')).toEqual(data)
    // An empty file is a file, and a second write of a key replaces the first.
    expect(await s.store.write('kb_a/doc_2', [], MAX)).toEqual({ size: 0, sha256: sha256(new Uint8Array()) })
    expect((await s.store.read('kb_a/doc_2')).byteLength).toBe(0)
    const again = bytes(1000, 9)
    await s.store.write('kb_a/doc_1', [again], MAX)
    expect(await s.store.read('kb_a/doc_1')).toEqual(again)
  })

  test('a large file (12 MiB: several PostgreSQL parts, several S3 parts) comes back whole', async () => {
    const data = bytes(12 << 20, 3)
    const partsBefore = s3.partsUploaded()
    expect(await s.store.write('kb_large/doc_big', chunked(data, 100_003), MAX)).toEqual({ size: data.byteLength, sha256: sha256(data) })
    const back = await s.store.read('kb_large/doc_big')
    expect(back.byteLength).toBe(data.byteLength)
    expect(sha256(back)).toBe(sha256(data))
    if (name === 'PostgreSQL') {
      const [row] = await db.sql<{ parts: number; largest: number }[]>`
        select count(*)::int as parts, max(octet_length(data))::int as largest from stored_file_parts p join stored_files f on f.id = p.file_id where f.key = 'kb_large/doc_big'`
      expect(row).toEqual({ parts: 12, largest: PART_BYTES })
    }
    if (name.startsWith('S3')) expect(s3.partsUploaded() - partsBefore).toBeGreaterThanOrEqual(2)
    await s.store.delete('kb_large/doc_big')
  })

  test('a file appears only once complete: mid-write, a new key is not found and a replaced one reads as before', async () => {
    const old = bytes(2000, 6)
    await s.store.write('kb_mid/doc_old', [old], MAX)
    const next = bytes(7 << 20, 7)
    const paused = (reached: PromiseWithResolvers<void>, gate: Promise<void>) =>
      (async function* () {
        yield next.subarray(0, 6 << 20)
        reached.resolve()
        await gate
        yield next.subarray(6 << 20)
      })()
    const gate = Promise.withResolvers<void>()
    const reachedNew = Promise.withResolvers<void>()
    const reachedOld = Promise.withResolvers<void>()
    const writes = [s.store.write('kb_mid/doc_new', paused(reachedNew, gate.promise), MAX), s.store.write('kb_mid/doc_old', paused(reachedOld, gate.promise), MAX)]
    await Promise.all([reachedNew.promise, reachedOld.promise])
    expect(await s.store.read('kb_mid/doc_new').catch((e) => e)).toBeInstanceOf(FileNotFound)
    expect(await s.store.read('kb_mid/doc_old')).toEqual(old)
    gate.resolve()
    await Promise.all(writes)
    expect(sha256(await s.store.read('kb_mid/doc_new'))).toBe(sha256(next))
    expect(sha256(await s.store.read('kb_mid/doc_old'))).toBe(sha256(next))
    await s.store.deletePrefix('kb_mid')
  })

  test('past the limit: TooLarge, and nothing is left (not readable, no partial file, part or upload)', async () => {
    const before = await s.leftovers()
    const data = bytes(11 << 20, 4)
    const err = await s.store.write('kb_limit/doc_x', chunked(data), 10 << 20).catch((e) => e)
    expect(err).toBeInstanceOf(TooLarge)
    expect(await s.store.read('kb_limit/doc_x').catch((e) => e)).toBeInstanceOf(FileNotFound)
    await settledTo(s, before)
  })

  test('a body that fails half-way (the client went away): its error, and nothing is left', async () => {
    const before = await s.leftovers()
    async function* broken() {
      yield* chunked(bytes(7 << 20, 5))
      throw new Error('the client went away')
    }
    const err = await s.store.write('kb_broken/doc_y', broken(), MAX).catch((e) => e)
    expect((err as Error).message).toBe('the client went away')
    expect(await s.store.read('kb_broken/doc_y').catch((e) => e)).toBeInstanceOf(FileNotFound)
    await settledTo(s, before)
  })

  test('reading a key never written: FileNotFound, told apart from storage that cannot answer', async () => {
    const err = await s.store.read('kb_none/doc_none').catch((e) => e)
    expect(err).toBeInstanceOf(FileNotFound)
    expect(err).not.toBeInstanceOf(StorageUnavailable)
    expect((err as Error).message).toContain('kb_none/doc_none')
  })

  test('delete removes one file; deleting a missing one is not an error', async () => {
    await s.store.write('kb_del/doc_1', [bytes(10)], MAX)
    await s.store.write('kb_del/doc_2', [bytes(10)], MAX)
    await s.store.delete('kb_del/doc_1')
    expect(await s.store.read('kb_del/doc_1').catch((e) => e)).toBeInstanceOf(FileNotFound)
    expect((await s.store.read('kb_del/doc_2')).byteLength).toBe(10)
    await s.store.delete('kb_del/doc_1')
    await s.store.delete('kb_del/doc_2')
  })

  test('deletePrefix removes every file under the prefix and nothing else (not kb_p_other, whose name begins alike)', async () => {
    for (const k of ['kb_p/doc_1', 'kb_p/doc_2', 'kb_p_other/doc_3', 'kb_q/doc_4']) await s.store.write(k, [bytes(100)], MAX)
    await s.store.deletePrefix('kb_p')
    for (const k of ['kb_p/doc_1', 'kb_p/doc_2']) expect(await s.store.read(k).catch((e) => e)).toBeInstanceOf(FileNotFound)
    for (const k of ['kb_p_other/doc_3', 'kb_q/doc_4']) expect((await s.store.read(k)).byteLength).toBe(100)
    await s.store.deletePrefix('kb_p_none')
    for (const p of ['kb_p_other', 'kb_q']) await s.store.deletePrefix(p)
  })

  test('concurrent writes to different keys each keep their own bytes', async () => {
    const files = Array.from({ length: 8 }, (_, i) => ({ key: `kb_c/doc_${i}`, data: bytes(1_500_000 + i * 1000, i + 20) }))
    const written = await Promise.all(files.map((f) => s.store.write(f.key, chunked(f.data), MAX)))
    expect(written).toEqual(files.map((f) => ({ size: f.data.byteLength, sha256: sha256(f.data) })))
    for (const f of files) expect(sha256(await s.store.read(f.key))).toBe(sha256(f.data))
    await s.store.deletePrefix('kb_c')
  })

  test('keys are ids: a path that climbs out is refused', async () => {
    await expect(s.store.read('../etc/passwd')).rejects.toThrow('bad file key')
    await expect(s.store.write('kb/../x', [], MAX)).rejects.toThrow('bad file key')
    await expect(s.store.deletePrefix('/')).rejects.toThrow('bad file key')
  })
})

describe('PostgreSQL only', () => {
  test('an upload left incomplete over an hour ago (its process died) is swept by the next write, parts and all', async () => {
    const store = new PostgresFileStore(db.sql)
    await db.sql`insert into stored_files (id, key, created_at) values ('dead-upload', 'kb_dead/doc_1', now() - interval '2 hours'), ('live-upload', 'kb_live/doc_1', now() - interval '5 minutes')`
    await db.sql`insert into stored_file_parts (file_id, n, data) values ('dead-upload', 0, ${Buffer.alloc(1000)}), ('live-upload', 0, ${Buffer.alloc(1000)})`
    await store.write('kb_sweep/doc_1', [bytes(10)], MAX)
    const left = await db.sql<{ id: string }[]>`select id from stored_files where not complete order by id`
    expect(left.map((r) => r.id)).toEqual(['live-upload'])
    const n = (await db.sql<{ n: number }[]>`select count(*)::int as n from stored_file_parts where file_id = 'dead-upload'`)[0]!.n
    expect(n).toBe(0)
    await db.sql`delete from stored_files where id = 'live-upload'`
    await store.delete('kb_sweep/doc_1')
  })

  test('after an upgrade from the directory default: a key not in the table is read from DATA_DIR/files, and deletes reach it', async () => {
    const legacyRoot = join(tmp, 'legacy-files')
    mkdirSync(join(legacyRoot, 'kb_old'), { recursive: true })
    writeFileSync(join(legacyRoot, 'kb_old', 'doc_1'), 'uploaded before the upgrade')
    writeFileSync(join(legacyRoot, 'kb_old', 'doc_2'), 'also before')
    const store = new PostgresFileStore(db.sql, new LocalFileStore(legacyRoot))
    expect(new TextDecoder().decode(await store.read('kb_old/doc_1'))).toBe('uploaded before the upgrade')
    const missing = await store.read('kb_old/doc_9').catch((e) => e)
    expect(missing).toBeInstanceOf(FileNotFound)
    expect((missing as Error).message).toContain('PostgreSQL')
    await store.delete('kb_old/doc_1')
    expect(await store.read('kb_old/doc_1').catch((e) => e)).toBeInstanceOf(FileNotFound)
    await store.deletePrefix('kb_old')
    expect(walk(legacyRoot)).toEqual([])
  })

  test('a write whose knowledge base is deleted meanwhile does not appear', async () => {
    const store = new PostgresFileStore(db.sql)
    const gate = Promise.withResolvers<void>()
    async function* slow() {
      yield bytes(PART_BYTES + 10)
      await gate.promise
      yield bytes(10)
    }
    const writing = store.write('kb_gone/doc_1', slow(), MAX).catch((e) => e)
    // The first part is in (its row exists) before the base goes.
    for (;;) {
      const n = (await db.sql<{ n: number }[]>`select count(*)::int as n from stored_file_parts p join stored_files f on f.id = p.file_id where f.key = 'kb_gone/doc_1'`)[0]!.n
      if (n > 0) break
      await new Promise((r) => setImmediate(r))
    }
    await store.deletePrefix('kb_gone')
    gate.resolve()
    expect(await writing).toBeInstanceOf(Error)
    expect(await store.read('kb_gone/doc_1').catch((e) => e)).toBeInstanceOf(FileNotFound)
    expect((await db.sql`select 1 from stored_files where key like 'kb_gone%'`).length).toBe(0)
  })
})

describe('S3 only', () => {
  const settings = () => ({ bucket: s3.bucket, prefix: '', region: 'us-east-1', accessKeyId: s3.accessKeyId, secretAccessKey: s3.secretAccessKey, sessionToken: null, virtualHostedStyle: false })

  test('objects are kept under the prefix of STORAGE_URL', async () => {
    const store = new S3FileStore({ ...settings(), prefix: 'p1/p2', endpoint: s3.endpoint })
    await store.write('kb_pre/doc_1', [bytes(5)], MAX)
    const client = new Bun.S3Client({ bucket: s3.bucket, endpoint: s3.endpoint, region: 'us-east-1', accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' })
    expect(await client.file('p1/p2/kb_pre/doc_1').exists()).toBe(true)
    await store.deletePrefix('kb_pre')
    expect(await client.file('p1/p2/kb_pre/doc_1').exists()).toBe(false)
  })

  test('a bucket that does not exist: StorageUnavailable, not transient (a setting to fix), naming the bucket and never the secret', async () => {
    const store = new S3FileStore({ ...settings(), bucket: 'no-such-bucket', endpoint: s3.endpoint, secretAccessKey: 'secret-not-to-show' })
    const err = await store.read('kb/doc').catch((e) => e)
    expect(err).toBeInstanceOf(StorageUnavailable)
    expect((err as StorageUnavailable).transient).toBe(false)
    expect((err as Error).message).toContain('s3://no-such-bucket/')
    expect((err as Error).message).toContain('NoSuchBucket')
    expect((err as Error).message).not.toContain('secret-not-to-show')
  })

  test('a server that refuses connections: StorageUnavailable, transient, naming where', async () => {
    // A port that was just free: nothing listens on it.
    const listener = Bun.listen({ hostname: '127.0.0.1', port: 0, socket: { data() {} } })
    const port = listener.port
    listener.stop(true)
    const store = new S3FileStore({ ...settings(), endpoint: `http://127.0.0.1:${port}` })
    const err = await store.read('kb/doc').catch((e) => e)
    expect(err).toBeInstanceOf(StorageUnavailable)
    expect((err as StorageUnavailable).transient).toBe(true)
    expect((err as Error).message).toContain(`s3://${s3.bucket}/ at 127.0.0.1:${port}`)
    const write = await store.write('kb/doc', [bytes(10)], MAX).catch((e) => e)
    expect(write).toBeInstanceOf(StorageUnavailable)
  })
})
