import type { TSchema } from 'elysia'

type Json = any // a JSON document walked by shape

/**
 * What the generator (@elysiajs/openapi) leaves for a client generator to trip on, put right once per
 * process before the document is served at /docs/json (docs/api.md, "Reference"):
 * - every schema is inlined (the error body alone 532 times): the shared ones named in `named` are
 *   moved to `components.schemas` and referred to with `$ref`, recognised by their property names;
 * - integers are written `integer | string(format integer)` (how Elysia coerces query strings): one type;
 * - `limit` is a pattern-checked string on the wire, as every query value is: an integer from 1 to 100;
 * - a response without a body (`t.Void()`: a 204) is given `content: { type: 'void' }`, which is no
 *   media type: it has no content.
 */
export function refineDocument(doc: Json, named: Record<string, TSchema>): Json {
  const out = numbersAsNumbers(structuredClone(doc))
  for (const path of Object.values<Json>(out.paths ?? {})) {
    for (const op of Object.values<Json>(path)) {
      for (const p of op?.parameters ?? []) {
        if (p.in === 'query' && p.name === 'limit') p.schema = { type: 'integer', minimum: 1, maximum: 100, default: 20, description: p.schema?.description ?? 'Page size' }
      }
      for (const r of Object.values<Json>(op?.responses ?? {})) {
        if (typeof r?.content?.type === 'string') delete r.content
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
    return Object.fromEntries(Object.entries(node).map(([k, v]) => [k, hoist(v)]))
  }
  out.paths = hoist(out.paths)
  out.components = { ...out.components, schemas: { ...components, ...out.components?.schemas } }
  return out
}

/** An object schema's identity for matching: its property names and which are required. */
function signature(node: Json): string {
  return `${Object.keys(node.properties ?? {}).sort().join(',')}|${[...(node.required ?? [])].sort().join(',')}`
}

/** Elysia's `integer | string(format integer)` as the one number type a JSON client sends (also for the MCP tools' schemas). */
export function numbersAsNumbers(node: Json): Json {
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
