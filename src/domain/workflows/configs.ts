import { AppError, type ErrorDetail } from '../../lib/errors'
import { schemaProblem } from '../../lib/json-schema'
import { checkResponseFormat } from '../models/response-format'
import type { NodeType } from './types'
import { jsonata } from './nodes/condition'

/** A path inside a node's config: `['cases', 0, 'when']`. */
export type Path = (string | number)[]
/** Reports a problem at `path` inside the config of the node being checked. */
export type Report = (path: Path, message: string) => void

export const INPUT_TYPES = ['string', 'number', 'boolean', 'object', 'array'] as const
export type InputType = (typeof INPUT_TYPES)[number]

export interface InputSpec {
  name: string
  type: InputType
  required?: boolean
  default?: unknown
}

/** Input names are plain identifiers so `{{inputs.x}}` and the JSONata path `inputs.x` both reach them. */
export const INPUT_NAME = /^(?!__)[A-Za-z_][A-Za-z0-9_]{0,63}$/
export const HTTP_METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD'] as const
export const LLM_ROLES = ['system', 'user', 'assistant'] as const
export const MAX_CODE_BYTES = 100 * 1024
export const MAX_WAIT_SECONDS = 86_400 * 7
/** A human_input node waits at most 30 days. */
export const MAX_INPUT_SECONDS = 2_592_000
export const MAX_ITERATION_CONCURRENCY = 16
export const DEFAULT_ITERATION_CONCURRENCY = 4
const MAX_EXPRESSION = 10_000
const MAX_CASES = 100

/** Collects problems (at most 20, like TypeBox failures) and throws them as one validation_error. */
export class Issues {
  readonly list: ErrorDetail[] = []
  add(path: string, message: string): void {
    if (this.list.length < 20) this.list.push({ path, message })
  }
  throwIfAny(): void {
    const first = this.list[0]
    if (first) throw new AppError('validation_error', first.message, { param: first.path, details: this.list })
  }
}

/** `cases[0].when` for messages; the param form is `cases.0.when`. */
export function humanPath(path: Path): string {
  return path.reduce<string>((s, p) => (typeof p === 'number' ? `${s}[${p}]` : s ? `${s}.${p}` : p), '')
}

export const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v)

export function typeOf(v: unknown): string {
  if (v === null || v === undefined) return String(v)
  if (Array.isArray(v)) return 'an array'
  if (typeof v === 'object') return 'an object'
  return `a ${typeof v}`
}

/** Whether a value fits a start input's declared type. */
export function hasType(v: unknown, type: InputType): boolean {
  switch (type) {
    case 'string': return typeof v === 'string'
    case 'number': return typeof v === 'number' && Number.isFinite(v)
    case 'boolean': return typeof v === 'boolean'
    case 'object': return isObject(v)
    case 'array': return Array.isArray(v)
  }
}

function str(cfg: Record<string, unknown>, key: string, report: Report, opts: { optional?: boolean; nonEmpty?: boolean } = {}): void {
  const v = cfg[key]
  if (v === undefined) {
    if (!opts.optional) report([key], 'is required')
  } else if (typeof v !== 'string') report([key], `must be a string, not ${typeOf(v)}`)
  else if (opts.nonEmpty && v.trim() === '') report([key], 'must not be empty')
}

function num(cfg: Record<string, unknown>, key: string, report: Report, opts: { min: number; max: number; integer?: boolean; minExclusive?: boolean; optional?: boolean }): void {
  const v = cfg[key]
  if (v === undefined) {
    if (!opts.optional) report([key], 'is required')
    return
  }
  const kind = opts.integer ? 'an integer' : 'a number'
  const range = `${opts.minExclusive ? `greater than ${opts.min}` : `from ${opts.min}`} ${opts.minExclusive ? 'and at most' : 'to'} ${opts.max}`
  if (typeof v !== 'number' || !Number.isFinite(v) || (opts.integer && !Number.isInteger(v))) report([key], `must be ${kind} ${range}`)
  else if ((opts.minExclusive ? v <= opts.min : v < opts.min) || v > opts.max) report([key], `must be ${kind} ${range}, not ${v}`)
}

function stringRecord(cfg: Record<string, unknown>, key: string, report: Report, optional: boolean): void {
  const v = cfg[key]
  if (v === undefined) {
    if (!optional) report([key], 'is required')
  } else if (!isObject(v)) report([key], `must be an object of strings, not ${typeOf(v)}`)
  else {
    for (const [k, s] of Object.entries(v)) {
      // `__proto__` would reach the prototype of whatever object the engine builds from these keys.
      if (k === '' || k === '__proto__') report([key], `keys must be non-empty and not __proto__`)
      else if (typeof s !== 'string') report([key, k], `must be a string, not ${typeOf(s)}`)
    }
  }
}

function checkInputs(cfg: Record<string, unknown>, report: Report): void {
  const inputs = cfg.inputs
  if (inputs === undefined) return
  if (!Array.isArray(inputs)) return report(['inputs'], `must be an array of { name, type, required?, default? }, not ${typeOf(inputs)}`)
  const seen = new Map<string, number>()
  inputs.forEach((input: unknown, i) => {
    if (!isObject(input)) return report(['inputs', i], `must be an object { name, type, required?, default? }, not ${typeOf(input)}`)
    for (const k of Object.keys(input)) {
      if (!['name', 'type', 'required', 'default'].includes(k)) report(['inputs', i, k], 'unknown field; an input takes name, type, required, default')
    }
    const { name, type, required } = input
    if (typeof name !== 'string' || !INPUT_NAME.test(name)) {
      report(['inputs', i, 'name'], 'must be an identifier: a letter or _ (not __), then letters, digits or _ (at most 64)')
    } else if (seen.has(name)) report(['inputs', i, 'name'], `"${name}" is already declared by inputs[${seen.get(name)}]`)
    else seen.set(name, i)
    if (required !== undefined && typeof required !== 'boolean') report(['inputs', i, 'required'], `must be a boolean, not ${typeOf(required)}`)
    if (!(INPUT_TYPES as readonly unknown[]).includes(type)) {
      return report(['inputs', i, 'type'], `must be one of ${INPUT_TYPES.join(', ')}`)
    }
    if ('default' in input) {
      if (required === true) report(['inputs', i, 'default'], 'a required input takes no default')
      else if (!hasType(input.default, type as InputType)) report(['inputs', i, 'default'], `must be of the input's type ${type as string}, not ${typeOf(input.default)}`)
    }
  })
}

function checkMessages(cfg: Record<string, unknown>, report: Report): void {
  const messages = cfg.messages
  if (messages === undefined) return report(['messages'], 'is required')
  if (!Array.isArray(messages) || messages.length === 0) return report(['messages'], 'must be a non-empty array of { role, content }')
  messages.forEach((m: unknown, i) => {
    if (!isObject(m)) return report(['messages', i], `must be an object { role, content }, not ${typeOf(m)}`)
    for (const k of Object.keys(m)) if (k !== 'role' && k !== 'content') report(['messages', i, k], 'unknown field; a message takes role and content')
    if (!(LLM_ROLES as readonly unknown[]).includes(m.role)) report(['messages', i, 'role'], `must be one of ${LLM_ROLES.join(', ')}`)
    str(m, 'content', (p, msg) => report(['messages', i, ...p], msg))
  })
}

function checkCases(cfg: Record<string, unknown>, report: Report): void {
  const cases = cfg.cases
  if (cases === undefined) return report(['cases'], 'is required')
  if (!Array.isArray(cases) || cases.length === 0) return report(['cases'], 'must be a non-empty array of { id, when }')
  if (cases.length > MAX_CASES) return report(['cases'], `has ${cases.length} cases; at most ${MAX_CASES}`)
  const seen = new Map<string, number>()
  cases.forEach((c: unknown, i) => {
    if (!isObject(c)) return report(['cases', i], `must be an object { id, when }, not ${typeOf(c)}`)
    for (const k of Object.keys(c)) if (k !== 'id' && k !== 'when') report(['cases', i, k], 'unknown field; a case takes id and when')
    const { id, when } = c
    if (typeof id !== 'string' || !/^[A-Za-z0-9_-]{1,64}$/.test(id)) report(['cases', i, 'id'], 'must be 1-64 characters of A-Z, a-z, 0-9, _ and -')
    else if (id === 'default') report(['cases', i, 'id'], '"default" names the branch taken when no case matches; choose another id')
    else if (seen.has(id)) report(['cases', i, 'id'], `"${id}" is already the id of cases[${seen.get(id)}]`)
    else seen.set(id, i)
    if (typeof when !== 'string' || when.trim() === '') return report(['cases', i, 'when'], 'must be a non-empty JSONata expression')
    if (when.length > MAX_EXPRESSION) return report(['cases', i, 'when'], `is ${when.length} characters; at most ${MAX_EXPRESSION}`)
    try {
      jsonata(when)
    } catch (err) {
      const e = err as { message?: string; position?: number }
      report(['cases', i, 'when'], `is not a valid JSONata expression: ${e.message ?? String(err)}${typeof e.position === 'number' ? ` (at character ${e.position})` : ''}`)
    }
  })
}

function checkUrl(cfg: Record<string, unknown>, report: Report): void {
  const url = cfg.url
  if (typeof url !== 'string') return str(cfg, 'url', report)
  if (url.trim() === '') return report(['url'], 'must not be empty')
  // A URL built from a template is checked when the node runs (and again against the SSRF rules).
  if (url.includes('{{')) return
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch {
    return report(['url'], 'is not a valid absolute URL')
  }
  if (parsed.protocol !== 'https:' && parsed.protocol !== 'http:') report(['url'], 'must be an http:// or https:// URL')
}

interface NodeSpec {
  keys: readonly string[]
  check(cfg: Record<string, unknown>, report: Report): void
  /** The template strings of a config that passed `check`, for the references check. */
  templates(cfg: Record<string, unknown>): [Path, string][]
}

const none = () => []

export const NODE_SPECS: Record<NodeType, NodeSpec> = {
  start: { keys: ['inputs'], check: checkInputs, templates: none },
  template: {
    keys: ['template'],
    check: (cfg, report) => str(cfg, 'template', report),
    templates: (cfg) => [[['template'], cfg.template as string]],
  },
  llm: {
    keys: ['model', 'messages', 'temperature', 'max_tokens', 'response_format'],
    check(cfg, report) {
      str(cfg, 'model', report, { nonEmpty: true })
      checkMessages(cfg, report)
      num(cfg, 'temperature', report, { min: 0, max: 2, optional: true })
      num(cfg, 'max_tokens', report, { min: 1, max: 1_000_000, integer: true, optional: true })
      // OpenAI's shape, and a json_schema's schema must compile: refused at save, not at the run.
      if (cfg.response_format !== undefined) checkResponseFormat(cfg.response_format, (p, m) => report(['response_format', ...p], m))
    },
    templates: (cfg) => (cfg.messages as { content: string }[]).map((m, i) => [['messages', i, 'content'], m.content]),
  },
  condition: { keys: ['cases'], check: checkCases, templates: none },
  code: {
    keys: ['source', 'timeout_ms'],
    check(cfg, report) {
      num(cfg, 'timeout_ms', report, { min: 1, max: 10_000, integer: true, optional: true })
      const source = cfg.source
      if (typeof source !== 'string') return str(cfg, 'source', report)
      const bytes = Buffer.byteLength(source)
      if (bytes > MAX_CODE_BYTES) report(['source'], `is ${bytes} bytes; at most ${MAX_CODE_BYTES}`)
      else if (!/\bmain\b/.test(source)) report(['source'], 'must define function main(vars) returning an object')
    },
    templates: none,
  },
  http_request: {
    keys: ['method', 'url', 'headers', 'body', 'timeout_ms'],
    check(cfg, report) {
      if (!(HTTP_METHODS as readonly unknown[]).includes(cfg.method)) report(['method'], `must be one of ${HTTP_METHODS.join(', ')}`)
      checkUrl(cfg, report)
      stringRecord(cfg, 'headers', report, true)
      num(cfg, 'timeout_ms', report, { min: 1, max: 60_000, integer: true, optional: true })
    },
    templates(cfg) {
      const out: [Path, string][] = [[['url'], cfg.url as string]]
      for (const [k, v] of Object.entries((cfg.headers ?? {}) as Record<string, string>)) out.push([['headers', k], v])
      collectStrings(cfg.body, ['body'], out)
      return out
    },
  },
  knowledge_retrieval: {
    keys: ['knowledge_base_ids', 'query', 'top_k', 'filters'],
    check(cfg, report) {
      const ids = cfg.knowledge_base_ids
      if (ids === undefined) report(['knowledge_base_ids'], 'is required')
      else if (!Array.isArray(ids) || ids.length === 0 || ids.length > 100) report(['knowledge_base_ids'], 'must be an array of 1 to 100 knowledge base ids')
      else ids.forEach((id: unknown, i) => {
        if (typeof id !== 'string' || id === '') report(['knowledge_base_ids', i], 'must be a knowledge base id (a non-empty string)')
      })
      str(cfg, 'query', report, { nonEmpty: true })
      num(cfg, 'top_k', report, { min: 1, max: 100, integer: true, optional: true })
      if (cfg.filters !== undefined && !isObject(cfg.filters)) report(['filters'], `must be an object of metadata key/value pairs, not ${typeOf(cfg.filters)}`)
    },
    templates: (cfg) => [[['query'], cfg.query as string]],
  },
  wait: {
    keys: ['seconds'],
    check: (cfg, report) => num(cfg, 'seconds', report, { min: 0, minExclusive: true, max: MAX_WAIT_SECONDS }),
    templates: none,
  },
  sub_workflow: {
    keys: ['workflow_id', 'inputs'],
    check(cfg, report) {
      str(cfg, 'workflow_id', report, { nonEmpty: true })
      stringRecord(cfg, 'inputs', report, true)
    },
    templates: (cfg) => recordTemplates(cfg, 'inputs'),
  },
  iteration: {
    keys: ['workflow_id', 'items', 'item_input', 'inputs', 'concurrency', 'on_item_error'],
    check(cfg, report) {
      str(cfg, 'workflow_id', report, { nonEmpty: true })
      str(cfg, 'items', report, { nonEmpty: true })
      if (typeof cfg.item_input !== 'string' || !INPUT_NAME.test(cfg.item_input)) report(['item_input'], 'must name an input of the workflow run for each item (an identifier)')
      stringRecord(cfg, 'inputs', report, true)
      if (isObject(cfg.inputs) && typeof cfg.item_input === 'string' && Object.hasOwn(cfg.inputs, cfg.item_input)) {
        report(['inputs', cfg.item_input], `is the item_input, set to each item; leave it out of inputs`)
      }
      num(cfg, 'concurrency', report, { min: 1, max: MAX_ITERATION_CONCURRENCY, integer: true, optional: true })
      if (cfg.on_item_error !== undefined && cfg.on_item_error !== 'fail' && cfg.on_item_error !== 'skip') report(['on_item_error'], 'must be fail or skip')
    },
    templates: (cfg) => [[['items'], cfg.items as string], ...recordTemplates(cfg, 'inputs')],
  },
  human_input: {
    keys: ['prompt', 'schema', 'timeout_seconds'],
    check(cfg, report) {
      str(cfg, 'prompt', report, { nonEmpty: true })
      num(cfg, 'timeout_seconds', report, { min: 1, max: MAX_INPUT_SECONDS, integer: true, optional: true })
      if (cfg.schema === undefined) return
      if (!isObject(cfg.schema)) return report(['schema'], `must be a JSON Schema (an object), not ${typeOf(cfg.schema)}`)
      const problem = schemaProblem(cfg.schema)
      if (problem) report(['schema'], `is not a usable JSON Schema: ${problem}`)
    },
    templates: (cfg) => [[['prompt'], cfg.prompt as string]],
  },
  agent: {
    keys: ['agent_id', 'message', 'user_id', 'conversation_id'],
    check(cfg, report) {
      str(cfg, 'agent_id', report, { nonEmpty: true })
      str(cfg, 'message', report, { nonEmpty: true })
      str(cfg, 'user_id', report, { optional: true, nonEmpty: true })
      str(cfg, 'conversation_id', report, { optional: true, nonEmpty: true })
    },
    templates: (cfg) => (['message', 'user_id', 'conversation_id'] as const).filter((k) => typeof cfg[k] === 'string').map((k) => [[k], cfg[k] as string]),
  },
  end: {
    keys: ['outputs'],
    check: (cfg, report) => stringRecord(cfg, 'outputs', report, false),
    templates: (cfg) => Object.entries(cfg.outputs as Record<string, string>).map(([k, v]) => [['outputs', k], v]),
  },
}

function recordTemplates(cfg: Record<string, unknown>, key: string): [Path, string][] {
  return Object.entries((cfg[key] ?? {}) as Record<string, string>).map(([k, v]) => [[key, k], v])
}

function collectStrings(v: unknown, path: Path, out: [Path, string][]): void {
  if (typeof v === 'string') out.push([path, v])
  else if (Array.isArray(v)) v.forEach((x, i) => collectStrings(x, [...path, i], out))
  else if (isObject(v)) for (const [k, x] of Object.entries(v)) collectStrings(x, [...path, k], out)
}

/** Checks a node's config against its type: unknown fields, then each field. */
export function checkConfig(type: NodeType, cfg: Record<string, unknown>, report: Report): void {
  const spec = NODE_SPECS[type]
  for (const k of Object.keys(cfg)) {
    if (!spec.keys.includes(k)) report([k], `unknown field; a ${type} node's config takes ${spec.keys.join(', ')}`)
  }
  spec.check(cfg, report)
}

/** `{{inputs.x}}` and `{{nodes.<id>...}}` references in a template string (the first path segment). */
export function references(template: string): { kind: 'inputs' | 'nodes'; name: string }[] {
  const out: { kind: 'inputs' | 'nodes'; name: string }[] = []
  for (const m of template.matchAll(/\{\{\s*(inputs|nodes)\.([A-Za-z0-9_-]+)/g)) out.push({ kind: m[1] as 'inputs' | 'nodes', name: m[2]! })
  return out
}
