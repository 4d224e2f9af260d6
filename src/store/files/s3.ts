import { createHash } from 'node:crypto'
import type { S3Settings } from '../../config'
import { checkKey, FileNotFound, StorageUnavailable, TooLarge, type FileStore } from './port'

export type { S3Settings }

/**
 * S3's smallest part is 5 MiB; two in flight, so an upload holds ~10 MiB of memory at most while
 * it streams (docs/deployment.md).
 */
const PART_BYTES = 5 << 20
const QUEUE = 2
const LIST_PAGE = 1000
const DELETES_AT_ONCE = 8

/** Answers that asking again will not change: a setting (credentials, bucket) to fix. */
const PERMANENT = new Set([
  'AccessDenied',
  'AccountProblem',
  'AllAccessDisabled',
  'InvalidAccessKeyId',
  'InvalidBucketName',
  'InvalidObjectState',
  'NoSuchBucket',
  'SignatureDoesNotMatch',
  'InvalidToken',
  'ExpiredToken',
])

/**
 * Files in an S3-compatible bucket through Bun's own client (Bun.S3Client). A write is one
 * multipart upload fed by a stream: the object exists only once the upload completes, and a body
 * that fails or grows past the limit errors the stream, on which the client aborts the upload
 * (AbortMultipartUpload) so its parts do not linger (a bucket lifecycle rule is the backstop for a
 * process that dies mid-upload: docs/deployment.md).
 */
export class S3FileStore implements FileStore {
  readonly describe: string
  private readonly client: Bun.S3Client
  private readonly prefix: string

  constructor(settings: S3Settings) {
    this.client = new Bun.S3Client({
      bucket: settings.bucket,
      endpoint: settings.endpoint ?? undefined,
      region: settings.region ?? undefined,
      accessKeyId: settings.accessKeyId ?? undefined,
      secretAccessKey: settings.secretAccessKey ?? undefined,
      sessionToken: settings.sessionToken ?? undefined,
      virtualHostedStyle: settings.virtualHostedStyle,
    })
    this.prefix = settings.prefix ? `${settings.prefix}/` : ''
    const at = settings.endpoint ? ` at ${new URL(settings.endpoint).host}` : ''
    this.describe = `s3://${settings.bucket}/${settings.prefix}${at}`
  }

  private object(key: string): string {
    return this.prefix + checkKey(key)
  }

  async write(key: string, body: AsyncIterable<Uint8Array> | Iterable<Uint8Array>, maxBytes: number) {
    const object = this.object(key)
    const source = Symbol.asyncIterator in body ? body[Symbol.asyncIterator]() : body[Symbol.iterator]()
    const hash = createHash('sha256')
    let size = 0
    // What stopped the body (TooLarge, the client's upload breaking off): thrown as it is.
    let failure: unknown = null
    const stream = new ReadableStream<Uint8Array>({
      async pull(controller) {
        try {
          const next = await source.next()
          if (next.done) return controller.close()
          size += next.value.byteLength
          if (size > maxBytes) throw new TooLarge(maxBytes)
          hash.update(next.value)
          controller.enqueue(next.value)
        } catch (err) {
          failure = err
          controller.error(err)
          await source.return?.()
        }
      },
      async cancel() {
        await source.return?.()
      },
    })
    try {
      await this.client.write(object, new Response(stream), { partSize: PART_BYTES, queueSize: QUEUE })
    } catch (err) {
      throw failure ?? this.unavailable(`writing ${key}`, err)
    }
    if (failure) throw failure
    return { size, sha256: hash.digest('hex') }
  }

  async read(key: string): Promise<Uint8Array> {
    try {
      return new Uint8Array(await this.client.file(this.object(key)).arrayBuffer())
    } catch (err) {
      if ((err as { code?: string }).code === 'NoSuchKey') throw new FileNotFound(key, this.describe)
      throw this.unavailable(`reading ${key}`, err)
    }
  }

  async delete(key: string) {
    try {
      await this.client.delete(this.object(key))
    } catch (err) {
      throw this.unavailable(`deleting ${key}`, err)
    }
  }

  async deletePrefix(prefix: string) {
    const under = `${this.object(prefix)}/`
    try {
      let startAfter: string | undefined
      for (;;) {
        const page = await this.client.list({ prefix: under, maxKeys: LIST_PAGE, startAfter })
        const keys = (page.contents ?? []).map((c) => c.key)
        for (let i = 0; i < keys.length; i += DELETES_AT_ONCE) await Promise.all(keys.slice(i, i + DELETES_AT_ONCE).map((k) => this.deleteObject(k)))
        if (!page.isTruncated || keys.length === 0) return
        startAfter = keys[keys.length - 1]
      }
    } catch (err) {
      throw this.unavailable(`deleting ${prefix}/`, err)
    }
  }

  /**
   * One object of many, asked again after an InternalError or SlowDown: S3 answers those now and
   * then under a burst of deletes (and s3rver when deletes in one folder race), and a deleted
   * knowledge base should not keep its originals for that.
   */
  private async deleteObject(object: string) {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.client.delete(object)
      } catch (err) {
        const code = (err as { code?: string }).code
        if (attempt >= 3 || (code !== 'InternalError' && code !== 'SlowDown' && code !== 'ServiceUnavailable')) throw err
      }
    }
  }

  /** The client's error as a StorageUnavailable naming the bucket: its code and message, never a credential. */
  private unavailable(what: string, err: unknown): StorageUnavailable {
    const code = (err as { code?: string }).code
    const message = (err as Error).message
    const reason = code && message && !message.includes(code) ? `${code}: ${message}` : message || code || String(err)
    return new StorageUnavailable(`${what} in ${this.describe}: ${reason}`, !(code && (PERMANENT.has(code) || code.startsWith('ERR_S3_'))))
  }
}
