import { createHash } from 'node:crypto'
import { mkdir, readFile, rename, rm } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import { newId } from '../../lib/ids'
import { checkKey, FileNotFound, StorageUnavailable, TooLarge, type FileStore } from './port'

/**
 * Files under a directory (`DATA_DIR/files` by default): the embedded default, where one process
 * owns DATA_DIR. Processes on other hosts cannot see it, so server mode defaults to PostgreSQL.
 */
export class LocalFileStore implements FileStore {
  readonly describe: string

  constructor(private readonly root: string) {
    this.describe = `the directory ${root}`
  }

  private path(key: string): string {
    return join(this.root, checkKey(key))
  }

  async write(key: string, body: AsyncIterable<Uint8Array> | Iterable<Uint8Array>, maxBytes: number) {
    const target = this.path(key)
    await mkdir(dirname(target), { recursive: true })
    const partial = `${target}.${newId('req').slice(4)}.partial`
    const sink = Bun.file(partial).writer({ highWaterMark: 1 << 20 })
    const hash = createHash('sha256')
    let size = 0
    try {
      for await (const chunk of body) {
        size += chunk.byteLength
        if (size > maxBytes) throw new TooLarge(maxBytes)
        hash.update(chunk)
        sink.write(chunk)
        await sink.flush()
      }
      await sink.end()
      await rename(partial, target)
      return { size, sha256: hash.digest('hex') }
    } catch (err) {
      await Promise.resolve(sink.end()).catch(() => {})
      await rm(partial, { force: true })
      throw err
    }
  }

  async read(key: string) {
    const path = this.path(key)
    try {
      return new Uint8Array(await readFile(path))
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code
      if (code === 'ENOENT') throw new FileNotFound(key, this.describe)
      // Permissions are a setting to fix; anything else (EIO, EMFILE) may pass.
      throw new StorageUnavailable(`reading ${path}: ${code ?? (err as Error).message}`, code !== 'EACCES' && code !== 'EPERM' && code !== 'EISDIR')
    }
  }

  async delete(key: string) {
    await rm(this.path(key), { force: true })
  }

  async deletePrefix(prefix: string) {
    await rm(this.path(prefix), { recursive: true, force: true })
  }
}
