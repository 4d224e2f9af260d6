/**
 * The rules the MCP Inspector's CLI applies to a tools/list answer with `--strict` (its "schema
 * portability" report, @modelcontextprotocol/inspector 2.12): what a strict MCP client may refuse in
 * a tool's inputSchema or outputSchema. The inspector exits non-zero on an error and prints warnings;
 * our tools must have neither. Written from the rules' descriptions, to run without the inspector
 * (a large install that the suite does not need); docs/mcp.md records a run of the inspector itself.
 *
 * - boolean-schema (error): a bare `true`/`false` where a schema object is expected (allowed only as
 *   the value of additionalProperties, unevaluatedProperties, additionalItems, unevaluatedItems);
 * - type-union (warning): `type` given as an array;
 * - remote-ref (warning): a `$ref` to another document (not starting with `#`);
 * - untyped-schema (warning): a schema with no keyword that constrains a value (`{}`, or only
 *   annotations such as `description`), except directly under `not`.
 */
export interface Finding {
  rule: 'boolean-schema' | 'type-union' | 'remote-ref' | 'untyped-schema'
  severity: 'error' | 'warning'
  path: string
}

const BOOLEAN_ALLOWED = new Set(['additionalProperties', 'unevaluatedProperties', 'additionalItems', 'unevaluatedItems'])
const ONE_SCHEMA = ['items', 'contains', 'not', 'propertyNames', 'if', 'then', 'else', 'additionalProperties', 'unevaluatedProperties', 'additionalItems', 'unevaluatedItems', 'contentSchema']
const SCHEMA_LISTS = ['allOf', 'anyOf', 'oneOf', 'prefixItems']
const SCHEMA_MAPS = ['properties', 'patternProperties', 'dependentSchemas', 'dependencies', '$defs', 'definitions']
const CONSTRAINING = new Set([
  'type', 'enum', 'const', 'multipleOf', 'maximum', 'exclusiveMaximum', 'minimum', 'exclusiveMinimum', 'maxLength', 'minLength', 'pattern', 'format',
  'contentMediaType', 'contentEncoding', 'contentSchema', 'maxItems', 'minItems', 'uniqueItems', 'maxContains', 'minContains', 'maxProperties',
  'minProperties', 'required', 'dependentRequired', 'allOf', 'anyOf', 'oneOf', 'not', 'items', 'prefixItems', 'contains', 'additionalItems',
  'unevaluatedItems', 'properties', 'patternProperties', 'additionalProperties', 'unevaluatedProperties', 'propertyNames', 'dependentSchemas',
  'dependencies', '$ref', '$dynamicRef', '$recursiveRef',
])

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v)

export function lintSchema(schema: unknown, root = 'inputSchema'): Finding[] {
  const findings: Finding[] = []
  const visit = (node: unknown, path: string, keyword: string | undefined) => {
    if (typeof node === 'boolean') {
      if (!keyword || !BOOLEAN_ALLOWED.has(keyword)) findings.push({ rule: 'boolean-schema', severity: 'error', path })
      return
    }
    if (!isObject(node)) return
    if (Array.isArray(node.type)) findings.push({ rule: 'type-union', severity: 'warning', path })
    if (typeof node.$ref === 'string' && node.$ref !== '' && !node.$ref.startsWith('#')) findings.push({ rule: 'remote-ref', severity: 'warning', path })
    const constrains = Object.keys(node).some((k) => CONSTRAINING.has(k)) || ('if' in node && ('then' in node || 'else' in node))
    if (!constrains && keyword !== 'not') findings.push({ rule: 'untyped-schema', severity: 'warning', path })
    for (const key of ONE_SCHEMA) if (key in node) visit(node[key], `${path}.${key}`, key)
    for (const key of SCHEMA_LISTS) if (Array.isArray(node[key])) (node[key] as unknown[]).forEach((s, i) => visit(s, `${path}.${key}[${i}]`, key))
    for (const key of SCHEMA_MAPS) if (isObject(node[key])) for (const [name, s] of Object.entries(node[key] as object)) visit(s, `${path}.${key}.${name}`, key)
  }
  visit(schema, root, undefined)
  return findings
}

/** The findings of every tool of a tools/list answer, named `tool: path (rule)`. */
export function lintTools(tools: { name: string; inputSchema?: unknown; outputSchema?: unknown }[]): string[] {
  return tools.flatMap((t) => [
    ...(t.inputSchema === undefined ? [] : lintSchema(t.inputSchema, 'inputSchema')),
    ...(t.outputSchema === undefined ? [] : lintSchema(t.outputSchema, 'outputSchema')),
  ].map((f) => `${t.name}: ${f.path} (${f.rule}, ${f.severity})`))
}
