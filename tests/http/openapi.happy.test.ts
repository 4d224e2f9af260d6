import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { keyFor, startHarness, workspaceOf, type Harness } from '../helpers/harness'

type Schema = { type?: string; properties?: Record<string, Schema>; required?: string[]; items?: Schema; anyOf?: Schema[] }
type Operation = {
  summary?: string
  tags?: string[]
  security?: Record<string, string[]>[]
  parameters?: { name: string; in: string; required?: boolean }[]
  requestBody?: { content?: Record<string, { schema?: Schema }> }
  responses?: Record<string, { content?: Record<string, { schema?: Schema }> }>
}
type Doc = {
  openapi: string
  info: { title: string; version: string; description?: string }
  tags: { name: string }[]
  security?: Record<string, string[]>[]
  servers?: { url: string }[]
  components: { securitySchemes: Record<string, { type: string; scheme: string }>; schemas: Record<string, Schema> }
  paths: Record<string, Record<string, Operation>>
}

let h: Harness
/** The document with every $ref replaced by its schema (the checks below read shapes). */
let doc: Doc
/** The document as served. */
let raw: Doc & Record<string, any>

function deref<T>(document: T): T {
  const schemas = (document as { components?: { schemas?: Record<string, unknown> } }).components?.schemas ?? {}
  const walk = (node: unknown): unknown => {
    if (Array.isArray(node)) return node.map(walk)
    if (!node || typeof node !== 'object') return node
    const ref = (node as { $ref?: string }).$ref
    if (ref?.startsWith('#/components/schemas/')) return walk(schemas[ref.slice('#/components/schemas/'.length)])
    return Object.fromEntries(Object.entries(node).map(([k, v]) => [k, walk(v)]))
  }
  return walk(document) as T
}
/** Every route the app serves, as OpenAPI "method path" pairs, without the documentation's own. */
let served: { method: string; path: string; hasBody: boolean }[]

beforeAll(async () => {
  h = await startHarness()
  const res = await h.call('GET', '/docs/json', { key: null })
  expect(res.status).toBe(200)
  doc = deref(res.body)
  raw = res.body
  // /console/ is the console's page again, a trailing-slash twin the document leaves out; a hook URL
  // without its token is only refused (404), no operation.
  served = h.app.routes
    .filter((r) => !r.path.startsWith('/docs') && r.path !== '/console/' && r.path !== '/v1/hooks/:trigger_id')
    .map((r) => ({
      method: r.method.toLowerCase(),
      path: r.path.replace(/:([A-Za-z0-9_]+)/g, '{$1}'),
      hasBody: Boolean((r.hooks as { body?: unknown }).body),
    }))
}, 30_000)
afterAll(() => h.close())

const op = (method: string, path: string) => doc.paths[path]?.[method]
const routeName = (r: { method: string; path: string }) => `${r.method.toUpperCase()} ${r.path}`

test('an OpenAPI 3 document, without authentication', () => {
  expect(doc.openapi).toMatch(/^3\.\d+\.\d+$/)
  expect(doc.info.title).toBeTruthy()
  expect(doc.info.version).toBeTruthy()
})

test('says how bodies must be sent (docs/api.md), and offers no media type but JSON save the upload', () => {
  const description = doc.info.description ?? ''
  expect(description).toContain('Content-Type: application/json')
  expect(description).toContain('charset=utf-8')
  expect(description).toMatch(/without one.*400 invalid_json/)
  expect(description).toContain('multipart/form-data')
  const offered = Object.entries(doc.paths).flatMap(([path, item]) =>
    Object.entries(item).flatMap(([method, o]) => Object.keys(o.requestBody?.content ?? {}).map((type) => `${method.toUpperCase()} ${path} ${type}`)))
  expect(offered.length).toBeGreaterThan(20)
  expect(offered.filter((o) => !o.endsWith(' application/json'))).toEqual(['POST /v1/knowledge-bases/{id}/documents multipart/form-data'])
})

test('the app serves more than a handful of routes (the comparison below is not vacuous)', () => {
  expect(served.length).toBeGreaterThanOrEqual(18)
  expect(served.map(routeName)).toContain('POST /v1/workspaces')
  expect(served.map(routeName)).toContain('GET /healthz')
})

test('every served route is documented, and nothing else is', () => {
  const documented = Object.entries(doc.paths).flatMap(([path, item]) => Object.keys(item).map((method) => `${method.toUpperCase()} ${path}`))
  expect(documented.sort()).toEqual(served.map(routeName).sort())
})

describe('each operation', () => {
  test('has a summary and known tags', () => {
    const declared = doc.tags.map((t) => t.name)
    for (const r of served) {
      const o = op(r.method, r.path)!
      expect({ route: routeName(r), summary: typeof o.summary === 'string' && o.summary.length > 3 }).toEqual({ route: routeName(r), summary: true })
      expect(o.tags?.length ?? 0).toBeGreaterThan(0)
      for (const tag of o.tags!) expect(declared).toContain(tag)
    }
  })

  test('documents its path parameters', () => {
    for (const r of served) {
      const names = [...r.path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]!)
      const params = (op(r.method, r.path)!.parameters ?? []).filter((p) => p.in === 'path')
      expect({ route: routeName(r), params: params.map((p) => p.name).sort() }).toEqual({ route: routeName(r), params: [...names].sort() })
      for (const p of params) expect(p.required).toBe(true)
    }
  })

  test('that takes a body documents its JSON schema', () => {
    const withBody = served.filter((r) => r.hasBody)
    expect(withBody.map(routeName)).toEqual(expect.arrayContaining(['POST /v1/workspaces', 'PATCH /v1/workspaces/{id}', 'POST /v1/workspaces/{id}/members', 'POST /v1/api-keys']))
    for (const r of withBody) {
      const schema = op(r.method, r.path)!.requestBody?.content?.['application/json']?.schema
      expect({ route: routeName(r), type: schema?.type }).toEqual({ route: routeName(r), type: 'object' })
      expect(Object.keys(schema!.properties ?? {}).length).toBeGreaterThan(0)
    }
    const create = op('post', '/v1/workspaces')!.requestBody!.content!['application/json']!.schema!
    expect(create.required).toEqual(['name'])
    expect(Object.keys(create.properties!).sort()).toEqual(['description', 'join_policy', 'name', 'type'])
  })

  test('has a success response', () => {
    for (const r of served) {
      const codes = Object.keys(op(r.method, r.path)!.responses ?? {})
      expect({ route: routeName(r), success: codes.some((c) => /^2\d\d$/.test(c)) }).toEqual({ route: routeName(r), success: true })
    }
  })
})

describe('/v1 operations', () => {
  const v1 = () => served.filter((r) => r.path.startsWith('/v1/'))

  test('document the errors every authenticated call can give, in the error shape of docs/api.md', () => {
    for (const r of v1()) {
      const responses = op(r.method, r.path)!.responses!
      for (const status of ['400', '401', '429']) {
        const schema = responses[status]?.content?.['application/json']?.schema
        expect({ route: routeName(r), status, required: schema?.required }).toEqual({ route: routeName(r), status, required: ['request_id', 'error'] })
        expect(schema!.properties!.error!.required).toEqual(['code', 'message'])
      }
    }
  })

  test('document 404 where an id is named', () => {
    for (const r of v1().filter((r) => r.path.includes('{id}'))) expect(Object.keys(op(r.method, r.path)!.responses!)).toContain('404')
  })

  test('need the bearer scheme; operations routes need nothing', () => {
    expect(doc.components.securitySchemes.bearer).toMatchObject({ type: 'http', scheme: 'bearer' })
    expect(doc.security).toEqual([{ bearer: [] }])
    for (const r of v1()) {
      const security = op(r.method, r.path)!.security
      // Inherits the document's bearer requirement unless it names its own, which must still be bearer.
      if (security !== undefined) expect(security).toContainEqual({ bearer: [] })
    }
    for (const path of ['/healthz', '/readyz', '/metrics']) expect(op('get', path)!.security).toEqual([])
  })

  test('lists document limit, cursor and sort', () => {
    for (const path of ['/v1/workspaces', '/v1/workspaces/{id}/members', '/v1/api-keys']) {
      const query = (op('get', path)!.parameters ?? []).filter((p) => p.in === 'query').map((p) => p.name)
      expect(query).toEqual(expect.arrayContaining(['limit', 'cursor', 'sort']))
    }
  })
})

test('documented response schemas match real answers', async () => {
  const alice = await keyFor(h, 'alice')
  const ws = await workspaceOf(h, alice, 'Documented')
  const requiredOf = (method: string, path: string, status: string) => op(method, path)!.responses![status]!.content!['application/json']!.schema!
  const answers: [string, string, string, unknown][] = [
    ['get', '/v1/workspaces/{id}', '200', (await h.call('GET', `/v1/workspaces/${ws}`, { key: alice })).body],
    ['get', '/v1/workspaces', '200', (await h.call('GET', '/v1/workspaces', { key: alice })).body],
    ['get', '/v1/workspaces/{id}/members', '200', (await h.call('GET', `/v1/workspaces/${ws}/members`, { key: alice })).body],
    ['get', '/v1/workspaces/{id}', '404', (await h.call('GET', '/v1/workspaces/ws_missing', { key: alice })).body],
    ['get', '/v1/workspaces', '401', (await h.call('GET', '/v1/workspaces', { key: null })).body],
    ['get', '/readyz', '200', (await h.call('GET', '/readyz', { key: null })).body],
    ['get', '/v1/machines', '200', (await h.call('GET', '/v1/machines', { key: alice })).body],
    ['get', '/v1/machines/{name}', '200', (await h.call('GET', '/v1/machines/webhook-delivery', { key: alice })).body],
    ['get', '/v1/machines/{name}', '404', (await h.call('GET', '/v1/machines/nope', { key: alice })).body],
  ]
  for (const [method, path, status, body] of answers) {
    const schema = requiredOf(method, path, status)
    // Every documented required field is in the answer, and the answer has no undocumented top-level field.
    expect(Object.keys(body as object).sort()).toEqual(expect.arrayContaining(schema.required ?? []))
    for (const k of Object.keys(body as object)) expect(Object.keys(schema.properties ?? {})).toContain(k)
    const data = (body as { data?: unknown }).data
    const dataSchema = schema.properties?.data
    const item = Array.isArray(data) ? data[0] : data
    const itemSchema = dataSchema?.type === 'array' ? dataSchema.items : dataSchema
    if (item && itemSchema?.properties) expect(Object.keys(item).sort()).toEqual(Object.keys(itemSchema.properties).sort())
  }
})

describe('as a client generator reads it', () => {
  test('a valid OpenAPI 3 document (swagger-parser), with a server and a license', async () => {
    const SwaggerParser = (await import('@apidevtools/swagger-parser')).default
    await SwaggerParser.validate(structuredClone(raw) as never)
    expect(raw.servers).toEqual([expect.objectContaining({ url: '/' })])
    expect((raw.info as Record<string, unknown>).license).toMatchObject({ name: 'MIT' })
  })

  test('shared schemas are named once and referred to: the error body, the resources', () => {
    const names = Object.keys(raw.components.schemas)
    expect(names).toEqual(expect.arrayContaining(['Error', 'Workspace', 'Member', 'ApiKey', 'Webhook', 'Delivery', 'Agent', 'Workflow', 'Run', 'KnowledgeBase', 'Document', 'Model']))
    for (const [path, item] of Object.entries(raw.paths)) {
      for (const [method, o] of Object.entries(item as Record<string, Operation>)) {
        if (!path.startsWith('/v1/')) continue
        const schema = o.responses!['401']!.content!['application/json']!.schema as { $ref?: string }
        expect({ route: `${method} ${path}`, ref: schema.$ref }).toEqual({ route: `${method} ${path}`, ref: '#/components/schemas/Error' })
      }
    }
    expect(JSON.stringify(raw).length).toBeLessThan(400_000)
  })

  test('numbers are numbers: limit is an integer 1-100, no integer is also a string', () => {
    for (const item of Object.values(raw.paths)) {
      for (const o of Object.values(item as Record<string, { parameters?: { name: string; schema: unknown }[] }>)) {
        const limit = o.parameters?.find((p) => p.name === 'limit')
        if (limit) expect(limit.schema).toMatchObject({ type: 'integer', minimum: 1, maximum: 100 })
      }
    }
    expect(JSON.stringify(raw)).not.toContain('"format":"integer"')
    expect(raw.components.schemas.Workspace!.properties!.member_count).toEqual({ type: 'integer' })
  })

  test('operation ids are unique, and no path ends with a slash', () => {
    const ids = Object.values(raw.paths).flatMap((item) => Object.values(item as Record<string, { operationId?: string }>).map((o) => o.operationId))
    expect(ids.every(Boolean)).toBe(true)
    expect(new Set(ids).size).toBe(ids.length)
    for (const path of Object.keys(raw.paths)) expect(path === '/' || !path.endsWith('/')).toBe(true)
  })
})

test('GET /docs is the HTML reference, pointing at the document', async () => {
  const res = await h.app.handle(new Request(`${h.base}/docs`))
  expect(res.status).toBe(200)
  expect(res.headers.get('content-type')).toStartWith('text/html')
  const html = await res.text()
  expect(html).toMatch(/^<!doctype html>/i)
  expect(html).toContain('/docs/json')
  expect(res.headers.get('x-request-id')).toMatch(/^req_/)
})

test('the document is stable across fetches', async () => {
  const again = await h.call('GET', '/docs/json', { key: null })
  expect(again.body).toEqual(raw)
})
