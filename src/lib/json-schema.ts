import Ajv, { type ErrorObject, type ValidateFunction } from 'ajv'

/**
 * JSON Schema validation of data a workflow receives (a human_input node's data): Ajv, draft-07 by
 * default, every error collected, formats it does not know ignored rather than refused. Compiled
 * validators are kept by the schema's text (a bounded cache: schemas come from saved workflows, a
 * handful per node).
 */
const ajv = new Ajv({ allErrors: true, strict: false, validateFormats: false })
const cache = new Map<string, ValidateFunction>()
const MAX_CACHED = 500

function compiled(schema: Record<string, unknown>): ValidateFunction {
  const key = JSON.stringify(schema)
  let validate = cache.get(key)
  if (!validate) {
    validate = ajv.compile(schema)
    if (cache.size >= MAX_CACHED) cache.delete(cache.keys().next().value!)
    cache.set(key, validate)
  }
  return validate
}

/** Why Ajv cannot compile `schema`, or null when it can. */
export function schemaProblem(schema: Record<string, unknown>): string | null {
  try {
    compiled(schema)
    return null
  } catch (err) {
    return (err as Error).message.slice(0, 300)
  }
}

export interface SchemaError {
  /** Where in the data, as a dotted path below `root` (`data.items.0.qty`). */
  path: string
  message: string
}

/** The data's problems against `schema` (at most 20), each with its path below `root`; empty when it matches. */
export function schemaErrors(schema: Record<string, unknown>, data: unknown, root: string): SchemaError[] {
  const validate = compiled(schema)
  if (validate(data)) return []
  return (validate.errors ?? []).slice(0, 20).map((e: ErrorObject) => {
    const path = [root, ...e.instancePath.split('/').slice(1).map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'))]
    if (e.keyword === 'required') path.push(String((e.params as { missingProperty: string }).missingProperty))
    if (e.keyword === 'additionalProperties') path.push(String((e.params as { additionalProperty: string }).additionalProperty))
    return { path: path.join('.'), message: e.keyword === 'required' ? 'is required' : (e.message ?? 'does not match the schema') }
  })
}
