import { once } from 'node:events'
import Busboy from '@fastify/busboy'
import { AppError, invalid } from '../../lib/errors'
import type { Deps } from '../../deps'
import { TooLarge } from '../../store/files'
import { detectType, DOC_TYPES, typeOfName, type DocType } from './parse'

/** How many bytes of a file decide its type (by extension, checked against content: docs/knowledge.md, "Documents"). */
const SNIFF_BYTES = 4096
const MAX_FIELD_BYTES = 64 * 1024

export interface StoredUpload {
  name: string
  type: DocType
  size: number
  sha256: string
  fields: Record<string, string>
}

/**
 * Reads a multipart/form-data upload (`file`, `group`, `metadata`: docs/knowledge.md, "Documents") and
 * streams its one file to `deps.files` under `key`, never holding it whole in memory: the first 4 KiB decide the
 * type (415 when the extension is not ours or the content contradicts it), past `maxBytes` the upload stops
 * (413) and nothing is kept. Text fields are answered as read; the caller validates them and deletes the
 * stored file if it refuses them.
 */
export async function storeMultipart(deps: Pick<Deps, 'files'>, request: Request, key: string, maxBytes: number): Promise<StoredUpload> {
  const contentType = request.headers.get('content-type') ?? ''
  if (!/^multipart\/form-data\s*;.*boundary=/i.test(contentType)) {
    throw new AppError('unsupported_media_type', 'upload with multipart/form-data (a `file` field), or JSON { type: "text", name, content }')
  }
  if (!request.body) throw invalid('file', 'is required')
  const fields: Record<string, string> = {}
  let stored: Promise<StoredUpload> | null = null
  let failure: unknown = null
  // Settles at the first failure: the request is not read further (a wait for busboy to drain must
  // not outlive a file whose storage already stopped).
  let onFailure = () => {}
  const failed = new Promise<void>((resolve) => (onFailure = resolve))
  const fail = (err: unknown) => {
    failure ??= err
    onFailure()
  }
  const bb = Busboy({
    headers: { 'content-type': contentType },
    limits: { files: 1, fields: 8, parts: 9, fieldSize: MAX_FIELD_BYTES, headerPairs: 32 },
  })
  bb.on('field', (name, value, _nameTruncated, valueTruncated) => {
    if (valueTruncated) fail(invalid(name, `is longer than ${MAX_FIELD_BYTES} bytes`))
    else fields[name] = value
  })
  bb.on('filesLimit', () => fail(invalid('file', 'send one file per upload')))
  bb.on('fieldsLimit', () => fail(invalid('body', 'too many form fields: send file, group and metadata')))
  bb.on('partsLimit', () => fail(invalid('body', 'too many form parts: send file, group and metadata')))
  bb.on('file', (field, stream, filename) => {
    if (field !== 'file' || stored) {
      fail(invalid(field, 'unexpected file field: send one file, in the field `file`'))
      stream.resume()
      return
    }
    const name = cleanFileName(filename ?? '')
    stored = storeFile(deps, stream, name, key, maxBytes).then((s) => ({ ...s, fields }))
    // Busboy keeps feeding the stream; a refused file must still be drained for the parse to finish.
    stored.catch((err) => {
      fail(err)
      stream.resume()
    })
  })
  const finished = new Promise<void>((resolve, reject) => {
    bb.on('finish', resolve)
    bb.on('error', reject)
  })
  try {
    for await (const chunk of request.body as unknown as AsyncIterable<Uint8Array>) {
      if (failure) break
      if (!bb.write(chunk)) await Promise.race([once(bb, 'drain'), failed])
      if (failure) break
    }
    if (!failure) {
      bb.end()
      await Promise.race([finished, failed])
    }
  } catch (err) {
    fail(err instanceof AppError || err instanceof TooLarge ? err : invalid('file', 'the multipart body is malformed'))
  }
  const result = stored ? await (stored as Promise<StoredUpload>).catch((err) => (fail(err), null)) : null
  if (failure) bb.destroy()
  if (failure) {
    if (result) await deps.files.delete(key)
    throw failure instanceof TooLarge ? new AppError('payload_too_large', `the file is larger than ${maxBytes} bytes (MAX_UPLOAD_BYTES)`) : failure
  }
  if (!result) throw invalid('file', 'is required')
  return result
}

/** Streams one file part to storage once its first bytes have shown what it is. */
async function storeFile(deps: Pick<Deps, 'files'>, stream: AsyncIterable<Uint8Array>, name: string, key: string, maxBytes: number) {
  if (!name) throw invalid('file', 'needs a file name (its extension decides the type)')
  if (!typeOfName(name)) throw unsupported(name)
  let detected: DocType | null = null
  async function* sniffed(): AsyncGenerator<Uint8Array> {
    const head: Uint8Array[] = []
    let headBytes = 0
    let passing = false
    for await (const chunk of stream) {
      if (passing) {
        yield chunk
        continue
      }
      head.push(chunk)
      headBytes += chunk.byteLength
      if (headBytes < SNIFF_BYTES) continue
      yield* decide()
      passing = true
    }
    if (!passing) yield* decide()
    function* decide() {
      const bytes = Buffer.concat(head)
      detected = detectType(name, bytes.subarray(0, SNIFF_BYTES))
      if (!detected) throw unsupported(name)
      yield bytes
    }
  }
  const { size, sha256 } = await deps.files.write(key, sniffed(), maxBytes)
  return { name, type: detected! as DocType, size, sha256 }
}

function unsupported(name: string) {
  return new AppError('unsupported_media_type', `${name}: supported types are ${Object.keys(DOC_TYPES).join(' ')} (by extension, checked against the content)`, {
    param: 'file',
  })
}

/**
 * A client's file name as a document name: its last path segment (some clients send "C:\\Users\\..."
 * or "../../x"), without control characters or the bidirectional overrides that make "txt.exe" read
 * as "exe.txt", at most 255 characters (the extension kept). The name is never a storage path: files
 * are stored under the document's id.
 */
export function cleanFileName(raw: string): string {
  const last = raw.split(/[\\/]/).pop() ?? ''
  const clean = last.replace(/[\u0000-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]/g, '').trim()
  if (clean === '.' || clean === '..') return ''
  if (clean.length <= 255) return clean
  const dot = clean.lastIndexOf('.')
  const ext = dot > 0 && clean.length - dot <= 16 ? clean.slice(dot) : ''
  return clean.slice(0, 255 - ext.length) + ext
}
