import { CloneType } from '@sinclair/typebox'
import { t, type TSchema } from 'elysia'
import { errorStatus } from '../lib/errors'

export const Id = (prefix: string, description: string) =>
  t.String({ minLength: 1, maxLength: 64, pattern: '^[A-Za-z0-9_.:-]+$', description, examples: [`${prefix}_01jbz3k9x8q7r6s5t4v3w2y1z0`] })
export const UserId = t.String({ minLength: 1, maxLength: 128, pattern: '^[^\\u0000-\\u001f]+$', description: 'User identifier (free-form, chosen by the client)', examples: ['user_42'] })
export const Timestamp = t.String({ format: 'date-time', description: 'ISO 8601 UTC with milliseconds and Z', examples: ['2026-01-02T03:04:05.678Z'] })
export const RequestId = t.String({ description: 'Request id, also in the X-Request-Id header', examples: ['req_01jbz3k9x8q7r6s5t4v3w2y1z0'] })
/** A visible name: 1-200 characters, no control characters, not only spaces. */
export const Name = t.String({ minLength: 1, maxLength: 200, pattern: '^[^\\u0000-\\u001f\\u007f]*[^\\s\\u0000-\\u001f\\u007f][^\\u0000-\\u001f\\u007f]*$' })

export const ErrorBody = t.Object(
  {
    request_id: RequestId,
    error: t.Object({
      code: t.Union(Object.keys(errorStatus).map((c) => t.Literal(c))),
      message: t.String(),
      param: t.Optional(t.String()),
      details: t.Optional(t.Array(t.Object({ path: t.String(), message: t.String() }))),
    }),
  },
  { description: 'Error', examples: [{ request_id: 'req_01jbz3k9x8q7r6s5t4v3w2y1z0', error: { code: 'not_found', message: 'workspace ws_01jbz3k9x8q7r6s5t4v3w2y1z0 not found' } }] },
)

export const Meta = t.Object({ version: t.Literal('v1'), deprecated_warnings: t.Array(t.String()) })

/**
 * The general envelope `{ request_id, data, meta }` (docs/decisions.md, "Workspaces"). `description`
 * is what the OpenAPI document says of the answer (the generator takes a response's description from
 * its schema's).
 */
export const Envelope = <T extends TSchema>(data: T, description?: string) => t.Object({ request_id: RequestId, data, meta: Meta }, description ? { description } : {})

/** A page of a list; `description` as for Envelope. */
export const ListOf = <T extends TSchema>(item: T, description?: string) =>
  t.Object({ request_id: RequestId, data: t.Array(item), next_cursor: t.Union([t.String(), t.Null()]), has_more: t.Boolean() }, description ? { description } : {})

/** A response schema described for the OpenAPI document, the schema itself left as it is. */
export const Described = <T extends TSchema>(schema: T, description: string): T => CloneType(schema, { description })

/** List query parameters; filters are validated by the list's own spec (unknown ones are 400). */
export const ListQuery = (sortable: string, filters: Record<string, TSchema> = {}) =>
  t.Object(
    {
      limit: t.Optional(t.String({ pattern: '^[0-9]+$', description: 'Page size, 1-100 (default 20)', examples: ['20'] })),
      cursor: t.Optional(t.String({ description: 'The next_cursor of the previous page' })),
      sort: t.Optional(t.String({ description: `Comma-separated fields, "-" for descending; sortable: ${sortable}. Default -created_at.`, examples: ['-created_at'] })),
      ...filters,
    },
    { additionalProperties: true },
  )

export const meta = { version: 'v1' as const, deprecated_warnings: [] as string[] }

export function envelope<T>(requestId: string, data: T) {
  return { request_id: requestId, data, meta }
}

/** Error responses for the OpenAPI document: those every authenticated route can give, plus `extra`. */
export function errors(...extra: number[]) {
  const out: Record<number, typeof ErrorBody> = {}
  for (const status of [400, 401, 429, 500, 503, ...extra]) out[status] = ErrorBody
  return out
}
