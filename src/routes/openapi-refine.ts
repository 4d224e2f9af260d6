import type { TSchema } from 'elysia'

type Json = any // a JSON document walked by shape

export type RefineOptions = {
  /** Schemas to name in components.schemas (openapi-names.ts). */
  named: Record<string, TSchema>
  /** operationId by "METHOD /path" below the base path (openapi-names.ts). */
  operationIds: Record<string, string>
  /** BASE_PATH: the document's paths carry it, the operationIds' keys do not. */
  basePath: string
}

/**
 * What the generator (@elysiajs/openapi) leaves for a client generator to trip on, put right once per
 * process before the document is served at /docs/json (docs/api.md, "Reference"):
 * - every schema is inlined (the error body alone 532 times): the shared ones named in `named` are
 *   moved to `components.schemas` and referred to with `$ref`, recognised by their property names;
 * - integers are written `integer | string(format integer)` (how Elysia coerces query strings): one type;
 * - `limit` is a pattern-checked string on the wire, as every query value is: an integer from 1 to 100;
 *   so is any other digits-only query value (`after`): an integer;
 * - a resource answered on its own carries request_id beside its fields (the run object): written as
 *   the named resource `allOf` { request_id };
 * - operationIds are the generator's (`getV1Api-keys`): replaced by the names in `operationIds`.
 */
export function refineDocument(doc: Json, { named, operationIds, basePath }: RefineOptions): Json {
  const out = numbersAsNumbers(structuredClone(doc))
  for (const [path, item] of Object.entries<Json>(out.paths ?? {})) {
    const below = basePath && path.startsWith(`${basePath}/`) ? path.slice(basePath.length) : path
    for (const [method, op] of Object.entries<Json>(item)) {
      const id = operationIds[`${method.toUpperCase()} ${below}`]
      if (id) op.operationId = id
      for (const p of op?.parameters ?? []) {
        if (p.in !== 'query') continue
        if (p.name === 'limit') p.schema = { type: 'integer', minimum: 1, maximum: 100, default: 20, description: p.schema?.description ?? 'Page size' }
        else if (p.schema?.type === 'string' && /^\^\[0-9\]\{1,\d+\}\$$/.test(p.schema.pattern ?? '')) {
          const { pattern: _, examples: __, ...rest } = p.schema
          p.schema = { ...rest, type: 'integer', minimum: 0 }
        }
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
    const flat = node.type === 'object' && node.properties?.request_id ? asResourceWithRequestId(node) : undefined
    if (flat) return flat
    return Object.fromEntries(Object.entries(node).map(([k, v]) => [k, hoist(v)]))
  }
  const asResourceWithRequestId = (node: Json): Json => {
    const { request_id, ...fields } = node.properties
    const bare = { ...node, properties: fields, required: node.required?.filter((r: string) => r !== 'request_id') }
    if (!bySignature.has(signature(bare))) return undefined
    const ref = hoist(bare)
    if (!ref.$ref) return undefined
    return { allOf: [ref, { type: 'object', required: ['request_id'], properties: { request_id } }] }
  }
  out.paths = hoist(out.paths)
  out.components = { ...out.components, schemas: { ...components, ...out.components?.schemas } }
  return out
}

/** An object schema's identity for matching: its property names and which are required. */
function signature(node: Json): string {
  return `${Object.keys(node.properties ?? {}).sort().join(',')}|${[...(node.required ?? [])].sort().join(',')}`
}

function numbersAsNumbers(node: Json): Json {
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
