import type { TSchema } from 'elysia'
import { errorStatus } from '../lib/errors'
import { EVENT_STREAM } from './streams.model'

type Json = any // a JSON document walked by shape

/**
 * What the generator (@elysiajs/openapi) leaves for a client generator to trip on, put right once per
 * process before the document is served at /docs/json (docs/api.md, "Reference"):
 * - every schema is inlined (the error body alone 532 times): the shared ones named in `named` are
 *   moved to `components.schemas` and referred to with `$ref`, recognised by their property names;
 * - integers are written `integer | string(format integer)` (how Elysia coerces query strings): one type;
 * - `limit` is a pattern-checked string on the wire, as every query value is: an integer from 1 to 100;
 * - an error answer is described by its status and the error codes it carries, not as "Error";
 * - a route that also streams declares it in its `detail` (src/routes/streams.model.ts): that becomes
 *   the `text/event-stream` content of its 200 answer, beside the JSON one.
 * - a response without a body (`t.Void()`: a 204) is given `content: { type: 'void' }`, which is no
 *   media type: it has no content.
 */
export function refineDocument(doc: Json, named: Record<string, TSchema>): Json {
  const out = numbersAsNumbers(structuredClone(doc))
  for (const path of Object.values<Json>(out.paths ?? {})) {
    for (const op of Object.values<Json>(path)) {
      for (const p of op?.parameters ?? []) {
        if (p.in === 'query' && p.name === 'limit') p.schema = { type: 'integer', minimum: 1, maximum: 100, default: 20, description: p.schema?.description ?? 'Page size' }
      }
      for (const [status, response] of Object.entries<Json>(op?.responses ?? {})) {
        if (response.description === 'Error' && ERROR_ANSWERS[status]) response.description = ERROR_ANSWERS[status]
        if (typeof response?.content?.type === 'string') delete response.content
      }
      const events = op?.[EVENT_STREAM]
      if (events) {
        delete op[EVENT_STREAM]
        const ok = op.responses?.['200']
        if (!ok) throw new Error(`${op.operationId}: an event stream is declared but no 200 answer`)
        ok.content = { ...ok.content, 'text/event-stream': { schema: literalUnionsAsEnums(events) } }
      }
    }
  }
  const bySignature = new Map<string, string>()
  for (const [name, schema] of Object.entries(named)) bySignature.set(signature(JSON.parse(JSON.stringify(schema))), name)
  // The first rendering of each named schema becomes the component; every identical one, a $ref.
  const components: Record<string, Json> = {}
  const hoist = (node: Json): Json => {
    if (Array.isArray(node)) return node.map(hoist)
    if (!node || typeof node !== 'object') return node
    const name = node.type === 'object' ? bySignature.get(signature(node)) : undefined
    if (name) {
      const inner = Object.fromEntries(Object.entries(node).map(([k, v]) => [k, hoist(v)]))
      const text = JSON.stringify(inner)
      components[name] ??= inner
      if (JSON.stringify(components[name]) === text) return { $ref: `#/components/schemas/${name}` }
      return inner
    }
    return Object.fromEntries(Object.entries(node).map(([k, v]) => [k, hoist(v)]))
  }
  out.paths = hoist(out.paths)
  out.components = { ...out.components, schemas: { ...components, ...out.components?.schemas } }
  return out
}

/** What each error status means, with the codes of docs/api.md that it carries (src/lib/errors.ts). */
const ERROR_MEANING: Record<string, string> = {
  400: 'The request is malformed: a field, the JSON, a cursor, a sort or a filter (param names it)',
  401: 'No API key, or one that is unknown, revoked or expired',
  402: 'The workspace\'s credit budget is spent for this period',
  403: 'The key\'s role or workspace does not allow this',
  404: 'Not found, or not visible to this key',
  405: 'The method is not served on this path (Allow names the one that is)',
  409: 'Conflicts with the current state of the resource',
  413: 'The body is larger than this route takes',
  415: 'The body\'s media type is not one this route takes',
  422: 'Understood but refused: a rule of the resource, or an Idempotency-Key reused with another request',
  429: 'Too many requests: retry after Retry-After seconds',
  500: 'An internal error, logged with the request_id: quote it when reporting it',
  502: 'The model provider (or every fallback) failed',
  503: 'The database or Redis is unreachable, or the service is shutting down: retry after Retry-After seconds',
  504: 'The model provider did not answer in time',
}
const ERROR_ANSWERS: Record<string, string> = Object.fromEntries(
  Object.entries(ERROR_MEANING).map(([status, meaning]) => {
    const codes = Object.entries(errorStatus).filter(([, s]) => String(s) === status).map(([code]) => code)
    return [status, codes.length ? `${meaning}. error.code: ${codes.join(', ')}` : meaning]
  }),
)

/**
 * A union of string literals as one `enum`, as the generator writes the routes' own schemas (so that
 * a shared schema inside a stream's events is recognised, and referred to, as the same one).
 */
function literalUnionsAsEnums(node: Json): Json {
  if (Array.isArray(node)) return node.map(literalUnionsAsEnums)
  if (!node || typeof node !== 'object') return node
  const alts = node.anyOf
  if (Array.isArray(alts) && alts.length > 0 && alts.every((a: Json) => a?.type === 'string' && typeof a.const === 'string' && Object.keys(a).length === 2)) {
    const { anyOf: _, ...rest } = node
    return { ...rest, type: 'string', enum: alts.map((a: Json) => a.const) }
  }
  return Object.fromEntries(Object.entries(node).map(([k, v]) => [k, literalUnionsAsEnums(v)]))
}

/** An object schema's identity for matching: its property names and which are required. */
function signature(node: Json): string {
  return `${Object.keys(node.properties ?? {}).sort().join(',')}|${[...(node.required ?? [])].sort().join(',')}`
}

/** Elysia's `integer | string(format integer)` as the one number type a JSON client sends (also for the MCP tools' schemas). */
export function numbersAsNumbers(node: Json): Json {
  if (Array.isArray(node)) return node.map(numbersAsNumbers)
  if (!node || typeof node !== 'object') return node
  const alts = node.anyOf
  if (Array.isArray(alts) && alts.length === 2) {
    const text = alts.find((a: Json) => a?.type === 'string' && (a.format === 'integer' || a.format === 'number'))
    const num = alts.find((a: Json) => a?.type === 'integer' || a?.type === 'number')
    if (text && num) {
      const { anyOf: _, ...rest } = node
      return numbersAsNumbers({ ...rest, ...num })
    }
  }
  return Object.fromEntries(Object.entries(node).map(([k, v]) => [k, numbersAsNumbers(v)]))
}
