import { invalid } from '../../lib/errors'
import { compileTemplate, render } from './templates'

/**
 * A webhook trigger's inputs (docs/triggers.md): each a template over the call's body, query and
 * headers, checked when the trigger is saved and rendered at each call.
 */

/** What a hook call brings: the parsed JSON body (null without one), the query, the headers lower-cased. */
export interface HookCall {
  body: unknown
  raw: string
  query: Record<string, string>
  headers: Record<string, string>
}

const ROOTS = new Set(['body', 'query', 'headers'])
const PLACEHOLDER = /\{\{([^{}]*)\}\}/g

/**
 * Headers no input ever reads, even through `{{headers}}` (every header): credentials a sender may
 * attach, this service's API key among them (src/routes/plugins/auth.ts reads it from Authorization).
 */
export const UNMAPPED_HEADERS: readonly string[] = ['authorization', 'proxy-authorization', 'cookie', 'x-api-key']

/**
 * A hook's input template in the workflow renderer's terms: `{{body.x}}` becomes `{{inputs.body.x}}`
 * rendered over `{ inputs: { body, query, headers } }`, so paths, indexes and the typed value of a
 * lone placeholder behave exactly as in workflow templates (src/domain/workflows/templates.ts).
 * `signed`: the trigger has a secret, whose signature covers only the body, so only the body may be read.
 */
function hookTemplate(name: string, template: unknown, signed = false): string {
  if (typeof template !== 'string') throw invalid(`inputs.${name}`, 'must be a template string over {{body.*}}, {{query.*}} or {{headers.*}}')
  const rewritten = template.replace(PLACEHOLDER, (whole, expr: string) => {
    const path = expr.trim()
    const [root, next] = path.split(/[.[\]'"]+/, 2)
    if (!ROOTS.has(root!)) throw invalid(`inputs.${name}`, `${whole}: placeholders read body, query or headers ({{body.order.id}}, {{query.ref}}, {{headers.x-source}})`)
    if (signed && root !== 'body') {
      throw invalid(`inputs.${name}`, `${whole}: a trigger with a secret takes its inputs only from the body, which its signature covers (${root} is not signed)`)
    }
    if (root === 'headers' && next !== undefined && UNMAPPED_HEADERS.includes(next.toLowerCase())) {
      throw invalid(`inputs.${name}`, `${whole}: the ${next} header is never passed to a run (credentials: ${UNMAPPED_HEADERS.join(', ')})`)
    }
    return `{{inputs.${path}}}`
  })
  try {
    compileTemplate(rewritten)
  } catch {
    throw invalid(`inputs.${name}`, `${template} is not a valid template: a placeholder is not a path like {{body.items[0].sku}}`)
  }
  return rewritten
}

export function checkHookInputs(inputs: Record<string, unknown>, signed: boolean): Record<string, string> {
  const out: Record<string, string> = {}
  for (const [name, template] of Object.entries(inputs)) {
    hookTemplate(name, template, signed)
    out[name] = template as string
  }
  return out
}

/**
 * The run inputs of one hook call; an input whose template reads nothing is left out (its default
 * applies). A signed trigger's inputs see only the body (a template saved before that rule reads
 * nothing from the query or headers); no input ever sees UNMAPPED_HEADERS.
 */
export function renderHookInputs(templates: Record<string, unknown>, call: HookCall, signed = false): Record<string, unknown> {
  const headers: Record<string, string> = {}
  if (!signed) for (const [k, v] of Object.entries(call.headers)) if (!UNMAPPED_HEADERS.includes(k.toLowerCase())) headers[k.toLowerCase()] = v
  const vars = { inputs: { body: call.body ?? null, query: signed ? {} : call.query, headers }, nodes: {} }
  const out: Record<string, unknown> = {}
  for (const [name, template] of Object.entries(templates)) {
    let compiled: string
    try {
      compiled = hookTemplate(name, template)
    } catch {
      continue
    }
    const value = render(compiled, vars)
    if (value !== undefined) out[name] = value
  }
  return out
}
