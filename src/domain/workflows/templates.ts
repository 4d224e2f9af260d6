import { NodeError, type Variables } from './types'

/**
 * Templates (docs/workflows.md, "Variables and templates"): `{{inputs.<name>...}}` and
 * `{{nodes.<id>.output...}}`, where the path goes down objects by key and arrays by index, written `.0` or
 * `[0]`. A template that is exactly one placeholder returns the value with its type; otherwise each
 * placeholder is replaced by its text (strings as they are, objects and arrays as JSON, null and undefined
 * as nothing).
 *
 * Strict where a mistake is likely, lenient where data is: a missing input or a node that has not run
 * (yet, or on a branch that was not taken) throws `template_error` naming the placeholder, while a
 * property missing inside an existing value is undefined, so optional fields of an API answer render
 * empty instead of failing the run. Only own properties are read (never `constructor`, `__proto__`).
 *
 * Templates are compiled once per string and cached: rendering is a loop over prepared parts.
 */

interface Ref {
  /** The placeholder as written, for error messages. */
  text: string
  root: 'inputs' | 'nodes'
  /** The input name or node id. */
  name: string
  /** Below `inputs.<name>` or `nodes.<id>.output`. */
  path: (string | number)[]
}

interface Compiled {
  /** Literal text and references, in order; adjacent literals merged. */
  parts: (string | Ref)[]
  /** Set when the whole template is one placeholder: the value keeps its type. */
  single: Ref | null
}

const PLACEHOLDER = /\{\{([^{}]*)\}\}/g
const SEGMENT = /^[A-Za-z0-9_$-]+$/
const CACHE_LIMIT = 10_000
const cache = new Map<string, Compiled>()

/** Compiles (and caches) a template; throws `template_error` for a placeholder that is not a valid path. */
export function compileTemplate(template: string): Compiled {
  let compiled = cache.get(template)
  if (compiled) return compiled
  compiled = compile(template)
  // A bound on what arbitrary graphs can make us keep; clearing is cheaper than an LRU and rare.
  if (cache.size >= CACHE_LIMIT) cache.clear()
  cache.set(template, compiled)
  return compiled
}

function compile(template: string): Compiled {
  const parts: (string | Ref)[] = []
  let last = 0
  for (const m of template.matchAll(PLACEHOLDER)) {
    if (m.index > last) parts.push(template.slice(last, m.index))
    parts.push(parseRef(m[0], m[1]!.trim()))
    last = m.index + m[0].length
  }
  if (last < template.length) parts.push(template.slice(last))
  const single = parts.length === 1 && typeof parts[0] !== 'string' ? parts[0]! : null
  return { parts, single }
}

function parseRef(text: string, expr: string): Ref {
  const segments: (string | number)[] = []
  // `a.b[0].c` → a, b, 0, c: brackets hold array indexes only.
  const re = /([^.[\]]+)|\[(\d+)\]|(\.)/y
  let expectName = true
  let pos = 0
  let m: RegExpExecArray | null
  while (pos < expr.length && (m = re.exec(expr))) {
    if (m[3]) {
      if (expectName) break
      expectName = true
    } else if (m[2] !== undefined) {
      if (expectName) break
      segments.push(Number(m[2]))
    } else {
      if (!expectName || !SEGMENT.test(m[1]!)) break
      segments.push(/^\d+$/.test(m[1]!) ? Number(m[1]) : m[1]!)
      expectName = false
    }
    pos = re.lastIndex
  }
  const wellFormed = pos === expr.length && expr.length > 0 && !expectName
  const [root, name, ...rest] = segments
  const bad = (why: string) => new NodeError('template_error', `${text}: ${why}; placeholders are {{inputs.<name>}} or {{nodes.<id>.output.<path>}}`)
  if (!wellFormed) throw bad('is not a valid path')
  if (root !== 'inputs' && root !== 'nodes') throw bad(`unknown variable ${String(root)}`)
  if (name === undefined) throw bad(`names no ${root === 'inputs' ? 'input' : 'node'}`)
  if (root === 'nodes') {
    if (rest[0] !== 'output') throw bad(`a node is read through its output (nodes.${String(name)}.output...)`)
    rest.shift()
  }
  return { text, root, name: String(name), path: rest }
}

function resolve(ref: Ref, vars: Variables): unknown {
  let value: unknown
  if (ref.root === 'inputs') {
    if (!Object.hasOwn(vars.inputs, ref.name)) throw new NodeError('template_error', `${ref.text}: the run has no input ${ref.name}`)
    value = vars.inputs[ref.name]
  } else {
    if (!Object.hasOwn(vars.nodes, ref.name)) throw new NodeError('template_error', `${ref.text}: node ${ref.name} has not run`)
    value = vars.nodes[ref.name]!.output
  }
  for (const key of ref.path) {
    if (value === null || typeof value !== 'object') return undefined
    if (Array.isArray(value)) {
      value = typeof key === 'number' ? value[key] : undefined
    } else {
      const k = String(key)
      value = Object.hasOwn(value, k) ? (value as Record<string, unknown>)[k] : undefined
    }
  }
  return value
}

/** A value as it appears inside a longer string. */
export function toText(value: unknown): string {
  if (value === null || value === undefined) return ''
  if (typeof value === 'string') return value
  if (typeof value === 'object') return JSON.stringify(value)
  return String(value)
}

/** Renders one template: the typed value for a lone placeholder, else a string. */
export function render(template: string, vars: Variables): unknown {
  const { parts, single } = compileTemplate(template)
  if (single) return resolve(single, vars)
  if (parts.length === 1) return parts[0] as string
  let out = ''
  for (const part of parts) out += typeof part === 'string' ? part : toText(resolve(part, vars))
  return out
}

/** Renders a template that must give text (a message, a URL, a header): a lone placeholder's value as text. */
export function renderText(template: string, vars: Variables): string {
  return toText(render(template, vars))
}

/** Renders every string inside objects and arrays (keys are left as they are); other values are kept. */
export function renderDeep(value: unknown, vars: Variables): unknown {
  if (typeof value === 'string') return render(value, vars)
  if (Array.isArray(value)) return value.map((v) => renderDeep(v, vars))
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {}
    for (const [k, v] of Object.entries(value)) out[k] = renderDeep(v, vars)
    return out
  }
  return value
}
