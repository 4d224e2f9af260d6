import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { keyFor, startHarness, workspaceOf, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

type Schema = { type?: string; title?: string; description?: string; const?: unknown; properties?: Record<string, Schema>; required?: string[]; items?: Schema; anyOf?: Schema[]; contentSchema?: Schema }
type Operation = {
  operationId?: string
  summary?: string
  tags?: string[]
  security?: Record<string, string[]>[]
  parameters?: { name: string; in: string; required?: boolean }[]
  requestBody?: { content?: Record<string, { schema?: Schema }> }
  responses?: Record<string, { description?: string; content?: Record<string, { schema?: Schema }> }>
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
let served: { method: string; path: string; hasBody: boolean; operationId?: string }[]

beforeAll(async () => {
  h = await startHarness()
  const res = await h.call('GET', '/docs/json', { key: null })
  expect(res.status).toBe(200)
  doc = deref(res.body)
  raw = res.body
  // Routes that say `hide` are no API (the console's files, /console/ the page's trailing-slash twin).
  served = h.app.routes
    .filter((r) => !r.path.startsWith('/docs') && !(r.hooks as { detail?: { hide?: boolean } }).detail?.hide)
    .map((r) => ({
      method: r.method.toLowerCase(),
      path: r.path.replace(/:([A-Za-z0-9_]+)/g, '{$1}'),
      hasBody: Boolean((r.hooks as { body?: unknown }).body),
      operationId: (r.hooks as { detail?: { operationId?: string } }).detail?.operationId,
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

  test('no path ends with a slash', () => {
    for (const path of Object.keys(raw.paths)) expect(path === '/' || !path.endsWith('/')).toBe(true)
  })
})

/**
 * Every operation's id, as a client generator names its method after it. Changing one breaks the
 * generated clients: this list makes every change deliberate. A new route adds its line here.
 */
const OPERATION_IDS: Record<string, string> = {
  'GET /console': 'getConsole',
  'GET /healthz': 'getHealth',
  'GET /metrics': 'getMetrics',
  'GET /readyz': 'getReadiness',
  'GET /v1/agents': 'listAgents',
  'POST /v1/agents': 'createAgent',
  'GET /v1/agents/{id}': 'getAgent',
  'PATCH /v1/agents/{id}': 'updateAgent',
  'DELETE /v1/agents/{id}': 'deleteAgent',
  'POST /v1/agents/{id}/chat': 'chatWithAgent',
  'GET /v1/agents/{id}/conversations': 'listConversations',
  'GET /v1/api-keys': 'listApiKeys',
  'POST /v1/api-keys': 'createApiKey',
  'DELETE /v1/api-keys/{id}': 'revokeApiKey',
  'POST /v1/chat/completions': 'createChatCompletion',
  'GET /v1/conversations/{conversation_id}': 'getConversation',
  'DELETE /v1/conversations/{conversation_id}': 'deleteConversation',
  'GET /v1/documents/{document_id}': 'getDocument',
  'DELETE /v1/documents/{document_id}': 'deleteDocument',
  'POST /v1/documents/{document_id}/reparse': 'reparseDocument',
  'POST /v1/embeddings': 'createEmbedding',
  'POST /v1/hooks/{trigger_id}/{token}': 'fireHook',
  'GET /v1/knowledge-bases': 'listKnowledgeBases',
  'POST /v1/knowledge-bases': 'createKnowledgeBase',
  'GET /v1/knowledge-bases/{id}': 'getKnowledgeBase',
  'PATCH /v1/knowledge-bases/{id}': 'updateKnowledgeBase',
  'DELETE /v1/knowledge-bases/{id}': 'deleteKnowledgeBase',
  'GET /v1/knowledge-bases/{id}/documents': 'listDocuments',
  'POST /v1/knowledge-bases/{id}/documents': 'uploadDocument',
  'POST /v1/knowledge-bases/{id}/search': 'searchKnowledgeBase',
  'GET /v1/machines': 'listMachines',
  'GET /v1/machines/{name}': 'getMachine',
  'POST /v1/mcp': 'postMcpMessage',
  'GET /v1/models': 'listModels',
  'POST /v1/models/embeddings': 'embedTexts',
  'POST /v1/models/llm/chat': 'chatWithModel',
  'POST /v1/models/rerank': 'rerankDocuments',
  'GET /v1/models/{id}': 'getModel',
  'GET /v1/runs': 'listRuns',
  'GET /v1/runs/{run_id}': 'getRun',
  'POST /v1/runs/{run_id}/cancel': 'cancelRun',
  'GET /v1/runs/{run_id}/events': 'streamRun',
  'POST /v1/runs/{run_id}/input': 'submitRunInput',
  'GET /v1/runs/{run_id}/nodes': 'listRunNodes',
  'GET /v1/triggers/{id}': 'getTrigger',
  'PATCH /v1/triggers/{id}': 'updateTrigger',
  'DELETE /v1/triggers/{id}': 'deleteTrigger',
  'GET /v1/webhooks': 'listWebhooks',
  'POST /v1/webhooks': 'createWebhook',
  'GET /v1/webhooks/{id}': 'getWebhook',
  'PATCH /v1/webhooks/{id}': 'updateWebhook',
  'DELETE /v1/webhooks/{id}': 'deleteWebhook',
  'GET /v1/webhooks/{id}/deliveries': 'listDeliveries',
  'GET /v1/webhooks/{id}/deliveries/{delivery_id}': 'getDelivery',
  'POST /v1/webhooks/{id}/deliveries/{delivery_id}/redeliver': 'redeliverDelivery',
  'POST /v1/webhooks/{id}/ping': 'pingWebhook',
  'GET /v1/workflows': 'listWorkflows',
  'POST /v1/workflows': 'createWorkflow',
  'GET /v1/workflows/{id}': 'getWorkflow',
  'PUT /v1/workflows/{id}': 'updateWorkflow',
  'DELETE /v1/workflows/{id}': 'deleteWorkflow',
  'GET /v1/workflows/{id}/runs': 'listWorkflowRuns',
  'POST /v1/workflows/{id}/runs': 'runWorkflow',
  'GET /v1/workflows/{id}/triggers': 'listTriggers',
  'POST /v1/workflows/{id}/triggers': 'createTrigger',
  'POST /v1/workflows/{id}/triggers/{trigger_id}/rotate': 'rotateTriggerToken',
  'GET /v1/workspaces': 'listWorkspaces',
  'POST /v1/workspaces': 'createWorkspace',
  'GET /v1/workspaces/{id}': 'getWorkspace',
  'PATCH /v1/workspaces/{id}': 'updateWorkspace',
  'DELETE /v1/workspaces/{id}': 'deleteWorkspace',
  'POST /v1/workspaces/{id}/archive': 'archiveWorkspace',
  'GET /v1/workspaces/{id}/audit-log': 'listAuditLog',
  'PUT /v1/workspaces/{id}/budget': 'setBudget',
  'GET /v1/workspaces/{id}/members': 'listMembers',
  'POST /v1/workspaces/{id}/members': 'addMember',
  'PATCH /v1/workspaces/{id}/members/{user_id}': 'updateMember',
  'DELETE /v1/workspaces/{id}/members/{user_id}': 'removeMember',
  'POST /v1/workspaces/{id}/restore': 'restoreWorkspace',
  'POST /v1/workspaces/{id}/transfer': 'transferWorkspace',
  'GET /v1/workspaces/{id}/usage': 'getUsage',
}

describe('operation ids', () => {
  test('every route names its own operationId in its detail (the generator would make up an unreadable one)', () => {
    // A route missing from this list has none: give it `detail: { operationId: 'verbNoun', ... }`.
    expect(served.filter((r) => !r.operationId).map(routeName)).toEqual([])
  })

  test('are identifiers (letters and digits, a letter first), unique, and the served ones', () => {
    const ids = served.map((r) => op(r.method, r.path)!.operationId!)
    expect(ids.filter((id) => !/^[A-Za-z][A-Za-z0-9]*$/.test(id))).toEqual([])
    expect(ids.filter((id, i) => ids.indexOf(id) !== i)).toEqual([])
    for (const r of served) expect({ route: routeName(r), id: op(r.method, r.path)!.operationId }).toEqual({ route: routeName(r), id: r.operationId })
  })

  test('are these, and change only on purpose', () => {
    const documented = Object.fromEntries(served.map((r) => [routeName(r), op(r.method, r.path)!.operationId]))
    expect(documented).toEqual(OPERATION_IDS)
  })
})

test('every response says what it is: none is the generator\'s "Response for status ..." or a bare "Error"', () => {
  const vague: string[] = []
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [method, o] of Object.entries(item)) {
      for (const [status, response] of Object.entries(o.responses ?? {})) {
        const d = response.description ?? ''
        if (/^Response for status/.test(d) || d === 'Error' || d.trim().length < 8) vague.push(`${method.toUpperCase()} ${path} ${status}: ${JSON.stringify(d)}`)
      }
    }
  }
  expect(vague).toEqual([])
  expect(op('get', '/v1/workspaces/{id}')!.responses!['404']!.description).toContain('not_found')
  expect(op('post', '/v1/workspaces')!.responses!['201']!.description).toBe('The workspace created')
})

test('the console\'s files and the reference UI\'s are left out; the console\'s page is in', async () => {
  const paths = Object.keys(raw.paths)
  expect(paths.filter((p) => p.startsWith('/console/') || p.startsWith('/docs') || /\.[a-z]+$/.test(p))).toEqual([])
  expect(paths).toContain('/console')
  // Served all the same.
  for (const file of ['/console/app.css', '/console/vendor/mermaid.min.js', '/docs/assets/swagger-ui.css']) {
    expect((await h.app.handle(new Request(`${h.base}${file}`))).status).toBe(200)
  }
})

describe('streamed answers are declared as text/event-stream, with their events', () => {
  /** The events a route's stream declares: name (or the data of an unnamed one) → its data's schema. */
  function eventsOf(method: string, path: string): Record<string, Schema | undefined> {
    const o = op(method, path)!
    const json = o.responses!['200']!.content!['application/json']
    expect(json?.schema).toBeDefined()
    const stream = o.responses!['200']!.content!['text/event-stream']?.schema
    expect({ route: `${method} ${path}`, declared: Boolean(stream?.anyOf?.length) }).toEqual({ route: `${method} ${path}`, declared: true })
    expect(stream!.description).toMatch(/server-sent events/)
    return Object.fromEntries(stream!.anyOf!.map((e) => {
      expect(e.description?.length ?? 0).toBeGreaterThan(8)
      const data = e.properties!.data!
      return [e.properties!.event?.const ?? data.const ?? 'chunk', data.contentSchema]
    }))
  }

  test.each([
    ['post', '/v1/workflows/{id}/runs'],
    ['get', '/v1/runs/{run_id}/events'],
  ])('a run\'s events: %s %s', (method, path) => {
    const events = eventsOf(method, path)
    expect(Object.keys(events)).toEqual(['node_start', 'node_end', 'message', 'usage', 'done'])
    expect(Object.keys(events.node_end!.properties!)).toEqual(['node', 'node_id', 'duration_ms', 'output', 'attempt'])
    expect(events.done!.properties!.status).toMatchObject({ enum: ['completed', 'failed', 'cancelled'] })
    const stream = op(method, path)!.responses!['200']!.content!['text/event-stream']!.schema!
    for (const e of stream.anyOf!) expect(e.required).toEqual(['event', 'id', 'data'])
  })

  test('an agent\'s chat turn', () => {
    const events = eventsOf('post', '/v1/agents/{id}/chat')
    expect(Object.keys(events)).toEqual(['message', 'tool_call', 'tool_result', 'usage', 'done', 'error'])
    expect(events.error!.required).toEqual(['request_id', 'error'])
  })

  test.each([['/v1/models/llm/chat'], ['/v1/chat/completions']])('OpenAI\'s chunks: POST %s', (path) => {
    const events = eventsOf('post', path)
    expect(Object.keys(events)).toEqual(['chunk', '[DONE]', 'error'])
    expect(events.chunk!.properties!.object).toMatchObject({ const: 'chat.completion.chunk' })
  })

  test('and no other route claims to stream', () => {
    const streaming = Object.entries(doc.paths).flatMap(([path, item]) =>
      Object.entries(item).filter(([, o]) => Object.values(o.responses ?? {}).some((r) => r.content?.['text/event-stream'])).map(([method]) => `${method.toUpperCase()} ${path}`))
    expect(streaming.sort()).toEqual(['GET /v1/runs/{run_id}/events', 'POST /v1/agents/{id}/chat', 'POST /v1/chat/completions', 'POST /v1/models/llm/chat', 'POST /v1/workflows/{id}/runs'])
    expect(JSON.stringify(raw)).not.toContain('x-event-stream')
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
