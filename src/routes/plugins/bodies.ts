import { Elysia } from 'elysia'
import type { Config } from '../../config'
import { AppError, invalid } from '../../lib/errors'
import { stateOf } from './request-state'

/** `application/json` or a structured `+json` type (RFC 6839), parameters aside. */
const JSON_TYPE = /^application\/([a-z0-9.!#$&^_-]+\+)?json$/i
const MULTIPART_TYPE = /^multipart\/form-data\b/i
/**
 * Bytes that are not UTF-8 are refused, not replaced with U+FFFD; a leading byte order mark is dropped.
 * Reading the bytes and decoding them costs ~4 µs more per 1 KB body than `request.text()` (measured
 * on Requests built in a loop), nothing beside a write's round trip to the database.
 */
const UTF8 = new TextDecoder('utf-8', { fatal: true })
/** The routes that take uploads (the only multipart bodies the API accepts). */
const UPLOAD_PATH = /\/knowledge-bases\/[^/]+\/documents$/

/**
 * The body of a multipart request to an upload route, left unread: the route streams it from
 * `request.body` itself (src/domain/knowledge/upload.ts), so a 50 MiB file is never parsed into
 * memory first.
 */
export const STREAMED_BODY: Readonly<{ streamed: true }> = Object.freeze({ streamed: true })

/**
 * Request bodies (docs/api.md, "Request bodies" and "Sizes and nesting"): a body larger than its
 * limit is refused from its Content-Length before it is read (uploads get MAX_UPLOAD_BYTES, the rest
 * MAX_JSON_BYTES), a NUL escaped into the query is a 400 naming it, and every body but an upload's
 * is UTF-8 JSON labelled as JSON, nested at most 256 deep, with no string Postgres cannot store.
 */
export function bodies(config: Config) {
  return new Elysia({ name: 'conventions.bodies' })
    .onRequest(({ request }) => {
      if (request.method !== 'GET' && request.method !== 'HEAD') {
        const length = Number(request.headers.get('content-length') ?? 0)
        const upload = MULTIPART_TYPE.test(request.headers.get('content-type') ?? '') && UPLOAD_PATH.test(stateOf(request).path)
        const limit = upload ? config.maxUploadBytes + 65_536 : config.maxJsonBytes
        if (length > limit) throw tooLarge(limit)
      }
      // Postgres text cannot hold U+0000: a query parameter carrying one is the client's error (400
      // naming it), not a failed statement. Only an escape can put it in a URL.
      if (request.url.includes('%00')) refuseNulInQuery(request.url)
    })
    .onParse({ as: 'global' }, async ({ request, contentType }) => {
      // Multipart bodies to an upload route are left for the route to stream (STREAMED_BODY); every
      // other body is JSON labelled as JSON (docs/api.md, request bodies). A form sent elsewhere is
      // refused here: left to Elysia, a route declaring `parse: 'json'` would parse it as JSON.
      if (MULTIPART_TYPE.test(contentType) && UPLOAD_PATH.test(stateOf(request).path)) return STREAMED_BODY
      const bytes = await request.arrayBuffer()
      if (bytes.byteLength > config.maxJsonBytes) throw tooLarge(config.maxJsonBytes)
      let text: string
      try {
        text = UTF8.decode(bytes)
      } catch {
        throw new AppError('invalid_json', 'body is not valid UTF-8')
      }
      stateOf(request).raw = text
      // No body at all (a POST to /archive, /ping, /cancel...): whatever its Content-Type says.
      if (text.trim() === '') return null
      // Elysia's contentType stops at the first ';': the charset is in the header itself.
      refuseNonJsonType(request.headers.get('content-type') ?? '')
      if (nestedTooDeep(text)) throw new AppError('invalid_json', `body is nested deeper than ${MAX_JSON_DEPTH} levels`)
      let body: unknown
      try {
        body = JSON.parse(text)
      } catch (err) {
        throw new AppError('invalid_json', `body is not valid JSON: ${(err as Error).message}`)
      }
      // Only an escape can put U+0000 or half a surrogate pair in a string: check just then.
      if (/\\u(0000|d[89a-f])/i.test(text)) refuseUnstorable(body, '')
      return body
    })
}

/**
 * A body must come as `application/json` (or a `+json` type), with no charset or `charset=utf-8`:
 * JSON between systems is UTF-8 (RFC 8259 section 8.1), and a form or a body without a type is
 * refused rather than guessed at.
 */
function refuseNonJsonType(contentType: string): void {
  if (!contentType) throw new AppError('invalid_json', 'a request body needs Content-Type: application/json')
  const [type = '', ...params] = contentType.split(';')
  if (!JSON_TYPE.test(type.trim())) {
    throw new AppError('invalid_json', `Content-Type ${type.trim()} is not supported here; send application/json`)
  }
  for (const param of params) {
    const [name = '', value = ''] = param.split('=')
    if (name.trim().toLowerCase() !== 'charset') continue
    const charset = value.trim().replace(/^"(.*)"$/, '$1').toLowerCase()
    if (charset !== 'utf-8' && charset !== 'utf8') {
      throw new AppError('invalid_json', `charset ${charset || '(empty)'} is not supported; send application/json in UTF-8`)
    }
  }
}

/**
 * Elysia's validation error serialises the whole value recursively: 5,000 levels cost 0.1 s, 20,000
 * levels 4.5 s, and 100,000 (200 KB) overflow the stack. No body of this API nests anywhere near 256.
 */
const MAX_JSON_DEPTH = 256

function nestedTooDeep(text: string): boolean {
  if (text.length <= MAX_JSON_DEPTH) return false
  let depth = 0
  let inString = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === 92) i++ // backslash: skip the escaped character
      else if (c === 34) inString = false
    } else if (c === 34) inString = true
    else if (c === 123 || c === 91) {
      if (++depth > MAX_JSON_DEPTH) return true
    } else if (c === 125 || c === 93) depth--
  }
  return false
}

/** Postgres text and jsonb cannot hold U+0000 or lone surrogates: a 400 naming the field, not a 500. */
function refuseUnstorable(value: unknown, path: string): void {
  if (typeof value === 'string') {
    if (value.includes('\u0000') || !value.isWellFormed()) throw invalid(path || 'body', 'must not contain U+0000 or unpaired surrogates')
  } else if (value && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) {
      refuseUnstorable(k, path)
      refuseUnstorable(v, path ? `${path}.${k}` : k)
    }
  }
}

function refuseNulInQuery(url: string): void {
  for (const [name, value] of new URL(url).searchParams) {
    if (name.includes('\u0000') || value.includes('\u0000')) throw invalid(`query.${name.replaceAll('\u0000', '')}`, 'must not contain U+0000')
  }
}

function tooLarge(limit: number) {
  return new AppError('payload_too_large', `request body is larger than ${limit} bytes`)
}
