import { createHash, randomUUID } from 'node:crypto'
import type { Pool } from '../db'
import type { LocalFileStore } from './local'
import { checkKey, FileNotFound, StorageUnavailable, TooLarge, type FileStore } from './port'

/** Bytes per row of stored_file_parts: a 50 MB upload is 50 inserts, never one 50 MB parameter. */
export const PART_BYTES = 1 << 20
/** Parts fetched per query when reading: 8 MiB a round trip at most. */
const READ_PAGE = 8
/** An upload not complete after this long belongs to a process that died: the next write removes it. */
const ABANDONED_AFTER = '1 hour'

/**
 * Files in PostgreSQL (migration 00017): the server-mode default, so processes on different hosts
 * share nothing but PostgreSQL and Redis. A write inserts its parts under a row that is not complete,
 * then completes it in one transaction; readers only ever see complete rows.
 *
 * `legacy` is the directory a deployment used before (DATA_DIR/files): a key not in the table is read
 * from there, and deletes reach it too, so originals uploaded before an upgrade stay readable
 * (docs/deployment.md, "Where uploaded files live").
 */
export class PostgresFileStore implements FileStore {
  readonly describe: string

  constructor(
    private readonly sql: Pool,
    private readonly legacy: LocalFileStore | null = null,
  ) {
    this.describe = legacy ? `PostgreSQL (table stored_files; before that ${legacy.describe})` : 'PostgreSQL (table stored_files)'
  }

  async write(key: string, body: AsyncIterable<Uint8Array> | Iterable<Uint8Array>, maxBytes: number) {
    checkKey(key)
    await this.sweep()
    const id = randomUUID()
    await this.sql`insert into stored_files (id, key) values (${id}, ${key})`
    const hash = createHash('sha256')
    let size = 0
    let n = 0
    const part = Buffer.allocUnsafe(PART_BYTES)
    let filled = 0
    const flush = async () => {
      await this.sql`insert into stored_file_parts (file_id, n, data) values (${id}, ${n++}, ${part.subarray(0, filled)})`
      filled = 0
    }
    try {
      for await (const chunk of body) {
        size += chunk.byteLength
        if (size > maxBytes) throw new TooLarge(maxBytes)
        hash.update(chunk)
        for (let at = 0; at < chunk.byteLength; ) {
          const take = Math.min(PART_BYTES - filled, chunk.byteLength - at)
          part.set(chunk.subarray(at, at + take), filled)
          filled += take
          at += take
          if (filled === PART_BYTES) await flush()
        }
      }
      if (filled > 0) await flush()
      const sha256 = hash.digest('hex')
      await this.sql.begin(async (tx) => {
        // Two writes of one key complete one after the other: the second replaces the first.
        await tx`select pg_advisory_xact_lock(hashtextextended(${key}, 17))`
        await tx`delete from stored_files where key = ${key} and complete`
        const done = await tx`update stored_files set complete = true, size = ${size}, sha256 = ${sha256} where id = ${id} returning id`
        // deletePrefix ran meanwhile (the knowledge base was deleted): the file must not appear.
        if (done.length === 0) throw new FileNotFound(key, this.describe)
      })
      return { size, sha256 }
    } catch (err) {
      await this.sql`delete from stored_files where id = ${id}`.catch(() => {})
      throw err
    }
  }

  async read(key: string): Promise<Uint8Array> {
    checkKey(key)
    try {
      const [file] = await this.sql<{ id: string; size: string }[]>`select id, size from stored_files where key = ${key} and complete`
      if (!file) {
        if (!this.legacy) throw new FileNotFound(key, this.describe)
        return await this.legacy.read(key).catch((err) => {
          throw err instanceof FileNotFound ? new FileNotFound(key, this.describe) : err
        })
      }
      const out = new Uint8Array(Number(file.size))
      let at = 0
      for (let from = 0; ; from += READ_PAGE) {
        const parts = await this.sql<{ data: Uint8Array }[]>`
          select data from stored_file_parts where file_id = ${file.id} and n >= ${from} and n < ${from + READ_PAGE} order by n`
        for (const p of parts) {
          if (at + p.data.byteLength > out.byteLength) break
          out.set(p.data, at)
          at += p.data.byteLength
        }
        if (parts.length < READ_PAGE) break
      }
      // Deleted (or replaced) while it was read.
      if (at !== out.byteLength) throw new FileNotFound(key, this.describe)
      return out
    } catch (err) {
      if (err instanceof FileNotFound || err instanceof StorageUnavailable) throw err
      throw new StorageUnavailable(`reading ${key} from PostgreSQL: ${(err as Error).message}`, true)
    }
  }

  async delete(key: string) {
    checkKey(key)
    await this.sql`delete from stored_files where key = ${key}`
    await this.legacy?.delete(key)
  }

  async deletePrefix(prefix: string) {
    checkKey(prefix)
    // A range in byte order rather than LIKE (`_` is a LIKE wildcard, and ids have it).
    await this.sql`delete from stored_files where key = ${prefix} or (key collate "C" >= ${`${prefix}/`} and key collate "C" < ${`${prefix}0`})`
    await this.legacy?.deletePrefix(prefix)
  }

  /** Uploads of processes that died half-way: their parts would otherwise stay forever. */
  private async sweep() {
    await this.sql`delete from stored_files where not complete and created_at < now() - ${ABANDONED_AFTER}::interval`
  }
}
