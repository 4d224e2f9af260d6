import { createHash } from 'node:crypto'
import { mkdir, rename, rm } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import { newId } from '../lib/ids'

/**
 * Where uploaded originals live: a port, so object storage can stand in for the local directory.
 * Keys are relative paths (`<knowledge_base_id>/<document_id>`) the caller builds from ids.
 */
export interface FileStore {
  /**
   * Streams `body` to `key`, at most `maxBytes`: past it the write stops, nothing is kept and
   * TooLarge is thrown. The file appears under its key only once complete (write, then rename).
   */
  write(key: string, body: AsyncIterable<Uint8Array> | Iterable<Uint8Array>, maxBytes: number): Promise<{ size: number; sha256: string }>
  read(key: string): Promise<Uint8Array>
  /** Removes the file; a missing one is not an error. */
  delete(key: string): Promise<void>
  /** Removes every file under a prefix (a deleted knowledge base's). */
  deletePrefix(prefix: string): Promise<void>
}

export class TooLarge extends Error {
  override name = 'TooLarge'
  constructor(readonly maxBytes: number) {
    super(`the file is larger than ${maxBytes} bytes`)
  }
}

/** Files under `DATA_DIR/files`: each shared by every process of a deployment that shares DATA_DIR. */
export class LocalFileStore implements FileStore {
  constructor(private readonly root: string) {}

  private path(key: string): string {
    if (!/^[A-Za-z0-9_-]+(\/[A-Za-z0-9_-]+)*$/.test(key)) throw new Error(`bad file key ${key}`)
    return join(this.root, key)
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
    return new Uint8Array(await Bun.file(this.path(key)).arrayBuffer())
  }

  async delete(key: string) {
    await rm(this.path(key), { force: true })
  }

  async deletePrefix(prefix: string) {
    await rm(this.path(prefix), { recursive: true, force: true })
  }
}
