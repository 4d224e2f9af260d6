import type { StorageConfig } from '../../config'
import type { Pool } from '../db'
import { LocalFileStore } from './local'
import type { FileStore } from './port'
import { PostgresFileStore } from './postgres'
import { S3FileStore } from './s3'

export { FileNotFound, StorageUnavailable, TooLarge, type FileStore } from './port'
export { LocalFileStore } from './local'
export { PostgresFileStore } from './postgres'
export { S3FileStore, type S3Settings } from './s3'

/** The adapter STORAGE_URL chose (docs/deployment.md, "Where uploaded files live"). */
export function openFileStore(storage: StorageConfig, sql: Pool): FileStore {
  switch (storage.kind) {
    case 'file':
      return new LocalFileStore(storage.dir)
    case 'postgres':
      return new PostgresFileStore(sql, storage.legacyDir ? new LocalFileStore(storage.legacyDir) : null)
    case 's3':
      return new S3FileStore(storage)
  }
}
