/**
 * Where uploaded originals live (docs/deployment.md, "Where uploaded files live"): a port with three
 * adapters, a local directory, PostgreSQL and S3-compatible object storage. Keys are relative paths
 * (`<knowledge_base_id>/<document_id>`) the caller builds from ids.
 */
export interface FileStore {
  /** Where the files are, for logs and error messages (never a credential). */
  readonly describe: string
  /**
   * Streams `body` to `key`, at most `maxBytes`: past it the write stops, nothing is kept and
   * TooLarge is thrown. The file appears under its key only once complete: a write that fails or
   * is cut short leaves nothing readable, and nothing behind once it has been cleaned up.
   */
  write(key: string, body: AsyncIterable<Uint8Array> | Iterable<Uint8Array>, maxBytes: number): Promise<{ size: number; sha256: string }>
  /** The whole file; FileNotFound when there is none, StorageUnavailable when the storage cannot answer. */
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

/** No file under the key: deleted, or never written. */
export class FileNotFound extends Error {
  override name = 'FileNotFound'
  constructor(readonly key: string, where: string) {
    super(`no file ${key} in ${where}`)
  }
}

/**
 * The storage did not answer as it should. `transient` says whether asking again later may work (a
 * refused connection, a time-out, a 5xx) or not (access denied, no such bucket: a setting to fix).
 */
export class StorageUnavailable extends Error {
  override name = 'StorageUnavailable'
  constructor(message: string, readonly transient: boolean) {
    super(message)
  }
}

const KEY = /^[A-Za-z0-9_-]+(\/[A-Za-z0-9_-]+)*$/

/** Keys are built from ids: anything else (`..`, an absolute path, a NUL) is a bug, refused. */
export function checkKey(key: string): string {
  if (!KEY.test(key)) throw new Error(`bad file key ${key}`)
  return key
}
