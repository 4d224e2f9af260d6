import type { ErrorObject } from 'ajv'
import { Type, type Static } from '@sinclair/typebox'
import { Value } from '@sinclair/typebox/value'

/**
 * OpenAI's `response_format`, the one shape of structured output: the chat routes' schema, the
 * `llm` node's config check and the providers all read this (docs/models.md, "Structured output").
 */
export const SCHEMA_NAME = /^[a-zA-Z0-9_-]{1,64}$/

const Text = Type.Object({ type: Type.Literal('text') }, { additionalProperties: false })
const JsonObject = Type.Object({ type: Type.Literal('json_object') }, { additionalProperties: false, description: 'Any JSON object' })
const JsonSchema = Type.Object(
  {
    type: Type.Literal('json_schema'),
    json_schema: Type.Object(
      {
        name: Type.String({ pattern: SCHEMA_NAME.source, description: 'The schema\'s name (1-64 of a-z, A-Z, 0-9, _ and -)' }),
        description: Type.Optional(Type.String({ maxLength: 4096 })),
        schema: Type.Record(Type.String(), Type.Unknown(), { description: 'A JSON Schema the answer must satisfy' }),
        strict: Type.Optional(Type.Union([Type.Boolean(), Type.Null()])),
      },
      { additionalProperties: false },
    ),
  },
  { additionalProperties: false, description: 'A JSON object that satisfies `json_schema.schema`' },
)

export const ResponseFormatSchema = Type.Union([Text, JsonObject, JsonSchema], {
  description: 'OpenAI\'s structured output: `{ "type": "json_object" }` or `{ "type": "json_schema", "json_schema": { "name", "schema", "strict"? } }` ({ "type": "text" } is the default)',
  examples: [{ type: 'json_schema', json_schema: { name: 'verdict', schema: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] }, strict: true } }],
})

export type ResponseFormat = Static<typeof ResponseFormatSchema>

/** Whether the format asks for JSON (text is the default: nothing to do). */
export function wantsJson(f: ResponseFormat | undefined): f is Exclude<ResponseFormat, { type: 'text' }> {
  return f !== undefined && f.type !== 'text'
}

/**
 * Checks a value against the shape, reporting the first problem at its path below the field
 * (`[]` for the field itself, `['json_schema', 'name']`...); a json_schema's schema must also
 * compile, so a workflow is refused when it is saved rather than when it runs.
 */
export function checkResponseFormat(v: unknown, report: (path: string[], message: string) => void): void {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return report([], 'must be an object { type: text | json_object | json_schema }')
  const o = v as Record<string, unknown>
  if (!['text', 'json_object', 'json_schema'].includes(o.type as string)) return report(['type'], 'must be text, json_object or json_schema')
  for (const k of Object.keys(o)) {
    if (k !== 'type' && !(k === 'json_schema' && o.type === 'json_schema')) return report([k], `unknown field for type ${String(o.type)}`)
  }
  if (o.type !== 'json_schema') return
  const js = o.json_schema
  if (typeof js !== 'object' || js === null || Array.isArray(js)) return report(['json_schema'], 'must be an object { name, schema, strict? }')
  const s = js as Record<string, unknown>
  for (const k of Object.keys(s)) {
    if (!['name', 'description', 'schema', 'strict'].includes(k)) return report(['json_schema', k], 'unknown field; json_schema takes name, description, schema, strict')
  }
  if (typeof s.name !== 'string' || !SCHEMA_NAME.test(s.name)) return report(['json_schema', 'name'], 'is required: 1-64 characters of a-z, A-Z, 0-9, _ and -')
  if (s.description !== undefined && typeof s.description !== 'string') return report(['json_schema', 'description'], 'must be a string')
  if (s.strict !== undefined && s.strict !== null && typeof s.strict !== 'boolean') return report(['json_schema', 'strict'], 'must be a boolean')
  if (typeof s.schema !== 'object' || s.schema === null || Array.isArray(s.schema)) return report(['json_schema', 'schema'], 'is required: a JSON Schema object')
  try {
    validatorFor(s.schema as Record<string, unknown>)
  } catch (err) {
    return report(['json_schema', 'schema'], `is not a JSON Schema ajv can compile: ${(err as Error).message}`)
  }
  // The hand-written checks above name the path; this keeps them in step with the TypeBox shape.
  if (!Value.Check(ResponseFormatSchema, v)) report([], 'does not match OpenAI\'s response_format')
}

import { validatorFor } from '../../lib/json-schema'

export { cachedValidators, validatorFor } from '../../lib/json-schema'

export type Structured = { ok: true; json: unknown } | { ok: false; message: string }

/**
 * The answer's JSON: surrounding whitespace and one ```json fence (models add one despite being
 * told not to) are tolerated; json_object wants an object; json_schema wants its schema satisfied,
 * and the message names the first failing path (`/items/0/price`, `(root)` for the whole value).
 */
export function parseStructured(text: string, format: Exclude<ResponseFormat, { type: 'text' }>): Structured {
  let body = text.trim()
  const fence = /^```[A-Za-z]*[ \t]*\r?\n([\s\S]*?)\r?\n?```$/.exec(body)
  if (fence) body = fence[1]!.trim()
  let json: unknown
  try {
    json = JSON.parse(body)
  } catch (err) {
    return { ok: false, message: `the answer is not JSON (${(err as Error).message}): ${excerpt(text)}` }
  }
  if (format.type === 'json_object') {
    if (typeof json !== 'object' || json === null || Array.isArray(json)) return { ok: false, message: `the answer is JSON but not an object: ${excerpt(body)}` }
    return { ok: true, json }
  }
  const validate = validatorFor(format.json_schema.schema)
  if (validate(json)) return { ok: true, json }
  const first = validate.errors![0]!
  return { ok: false, message: `the answer does not satisfy schema ${format.json_schema.name}: ${describe(first)}` }
}

function describe(e: ErrorObject): string {
  const at = e.instancePath || '(root)'
  // `required` names the missing property in params, not in the path.
  if (e.keyword === 'required') return `${at === '(root)' ? '' : at}/${(e.params as { missingProperty: string }).missingProperty} is required`
  if (e.keyword === 'additionalProperties') return `${at === '(root)' ? '' : at}/${(e.params as { additionalProperty: string }).additionalProperty} is not allowed`
  return `${at} ${e.message ?? 'is invalid'}`
}

const excerpt = (s: string) => (s.length > 80 ? `${JSON.stringify(s.slice(0, 80))}...` : JSON.stringify(s))
