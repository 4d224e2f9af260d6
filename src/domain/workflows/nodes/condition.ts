import type jsonataType from 'jsonata'
import { NodeError, type Executor } from '../types'
import { invalidConfig, throwIfAborted } from './common'

/**
 * JSONata guardrails, per evaluation: JSONata checks the clock and the depth at every step it
 * evaluates, so a runaway expression (`$map([1..10000000], ...)`, deep recursion of a user function)
 * ends with D1012 / D1011 instead of holding the event loop. Typical cases take microseconds.
 */
export const EXPRESSION_LIMITS = { timeout: 1_000, stack: 200, sequence: 100_000 }
const CACHE_LIMIT = 10_000
const cache = new Map<string, jsonataType.Expression>()

/** JSONata, loaded by the first expression compiled (~7 MB resident a process without one never needs). */
export const jsonata: typeof jsonataType = ((...args: Parameters<typeof jsonataType>) => (require('jsonata') as typeof jsonataType)(...args)) as typeof jsonataType

/** Compiles (and caches) an expression; a syntax error is `expression_error` with JSONata's message. */
export function compileExpression(when: string): jsonataType.Expression {
  let expr = cache.get(when)
  if (expr) return expr
  try {
    expr = jsonata(when, EXPRESSION_LIMITS)
  } catch (err) {
    throw new NodeError('expression_error', describe(err, when))
  }
  if (cache.size >= CACHE_LIMIT) cache.clear()
  cache.set(when, expr)
  return expr
}

function describe(err: unknown, when: string): string {
  const e = err as { message?: string; code?: string; position?: number }
  const at = typeof e.position === 'number' ? ` at character ${e.position}` : ''
  return `${JSON.stringify(when)}: ${e.message ?? String(err)}${e.code ? ` (${e.code}${at})` : ''}`
}

/**
 * JS truthiness, except that what JSONata means by "nothing" is false: undefined (no match) and an
 * empty sequence. A path that matched something (an object, a non-empty string...) is true.
 */
function truthy(v: unknown): boolean {
  if (v === undefined) return false
  if (Array.isArray(v) && (v as { sequence?: boolean }).sequence === true && v.length === 0) return false
  return Boolean(v)
}

/** The first case whose `when` holds chooses the branch (`handle`); none → `default`. */
export const condition: Executor = async (node, ctx) => {
  const cases = node.config.cases
  if (!Array.isArray(cases)) throw invalidConfig('config.cases must be an array of { id, when }')
  const input = { inputs: ctx.vars.inputs, nodes: ctx.vars.nodes }
  for (const c of cases as { id?: unknown; when?: unknown }[]) {
    if (typeof c?.id !== 'string' || typeof c.when !== 'string') throw invalidConfig('config.cases[] must be { id, when: expression }')
    throwIfAborted(ctx.signal)
    let result: unknown
    try {
      result = await compileExpression(c.when).evaluate(input)
    } catch (err) {
      throw new NodeError('expression_error', `case ${c.id}: ${err instanceof NodeError ? err.message : describe(err, c.when)}`)
    }
    if (truthy(result)) return { output: { matched: c.id }, handle: c.id }
  }
  return { output: { matched: 'default' }, handle: 'default' }
}
