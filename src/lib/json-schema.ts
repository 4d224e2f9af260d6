import Ajv, { type ErrorObject, type ValidateFunction } from 'ajv'

/**
 * JSON Schema validation of what workflows receive and produce (a human_input node's data, an llm
 * node's structured output): one shared Ajv, every error collected, unknown keywords and formats
 * ignored rather than refused (schemas written for OpenAI carry vendor extensions).
 *
 * Compiled validators are kept by the schema's JSON text, compiled once per schema (~1 ms for a small
 * one with a shared Ajv; a fresh Ajv per schema costs ~22 ms) and bounded to 256, the least recently
 * used going first. `addUsedSchema: false` keeps two schemas with the same `$id` from colliding, and
 * `removeSchema` drops an evicted one from Ajv's own cache too.
 */
const MAX_VALIDATORS = 256
const ajv = new Ajv({ allErrors: true, strict: false, validateFormats: false, addUsedSchema: false })
const validators = new Map<string, ValidateFunction>()

export function validatorFor(schema: Record<string, unknown>): ValidateFunction {
  const key = JSON.stringify(schema)
  const hit = validators.get(key)
  if (hit) {
    // Map order is insertion order: re-inserting makes this the most recently used.
    validators.delete(key)
    validators.set(key, hit)
    return hit
  }
  const compiled = ajv.compile(schema)
  validators.set(key, compiled)
  if (validators.size > MAX_VALIDATORS) {
    const [oldest, fn] = validators.entries().next().value!
    validators.delete(oldest)
    ajv.removeSchema(fn.schema as object)
  }
  return compiled
}

/** How many validators are cached (for the bound's test). */
export const cachedValidators = () => validators.size

/** Why Ajv cannot compile `schema`, or null when it can. */
export function schemaProblem(schema: Record<string, unknown>): string | null {
  try {
    validatorFor(schema)
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
  const validate = validatorFor(schema)
  if (validate(data)) return []
  return (validate.errors ?? []).slice(0, 20).map((e: ErrorObject) => {
    const path = [root, ...e.instancePath.split('/').slice(1).map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'))]
    if (e.keyword === 'required') path.push(String((e.params as { missingProperty: string }).missingProperty))
    if (e.keyword === 'additionalProperties') path.push(String((e.params as { additionalProperty: string }).additionalProperty))
    return { path: path.join('.'), message: e.keyword === 'required' ? 'is required' : (e.message ?? 'does not match the schema') }
  })
}
