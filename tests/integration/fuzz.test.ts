import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import fc from 'fast-check'
import { errorStatus } from '../../src/lib/errors'
import { startWorkers, type Workers } from '../../src/workers'
import { startHarness, waitFor, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Every route of the OpenAPI document, fed random and boundary inputs built from its own schemas
 * (fast-check): path parameters (real ids, junk, traversal, huge), query parameters, JSON bodies that
 * follow the schema, break it at its bounds or ignore it, wrong content types and Idempotency-Keys.
 * Every answer must come within a time bound, never be a 500, and every error must have the error shape's (docs/api.md, "Errors")
 * shape with the status its code maps to. Seeded, so a failure replays: FUZZ_SEED=<n> FUZZ_RUNS=<n>.
 */
type Schema = {
  type?: string | string[]
  properties?: Record<string, Schema>
  required?: string[]
  additionalProperties?: boolean | Schema
  items?: Schema
  anyOf?: Schema[]
  oneOf?: Schema[]
  enum?: unknown[]
  const?: unknown
  minLength?: number
  maxLength?: number
  minimum?: number
  maximum?: number
  minItems?: number
  maxItems?: number
  patternProperties?: Record<string, Schema>
  examples?: unknown[]
}
type Operation = {
  parameters?: { name: string; in: string; required?: boolean; schema?: Schema }[]
  requestBody?: { content?: Record<string, { schema?: Schema }> }
}

const SEED = Number(process.env.FUZZ_SEED ?? 20261123)
const RUNS = Number(process.env.FUZZ_RUNS ?? 40)
/** An answer slower than this is a hang (sync runs are bounded by SYNC_RUN_TIMEOUT_MS below). */
const HANG_MS = 10_000

let h: Harness
let workers: Workers
let receiver: ReturnType<typeof Bun.serve>
let doc: { paths: Record<string, Record<string, Operation>> }
/** Real ids by path parameter name, so that some requests go past the lookups. */
const known: Record<string, string[]> = {}
const failures: string[] = []

beforeAll(async () => {
  receiver = Bun.serve({ hostname: '127.0.0.1', port: 0, fetch: () => Response.json({ ok: true }) })
  h = await startHarness({
    RATE_LIMIT_PER_SECOND: '1000000',
    RATE_LIMIT_BURST: '1000000',
    // FUZZ_LOG=error shows the stack of a 500 beside the failing input.
    LOG_LEVEL: process.env.FUZZ_LOG ?? 'silent',
    SYNC_RUN_TIMEOUT_MS: '2000',
    WEBHOOK_ALLOW_HTTP: 'true',
    WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
  })
  workers = await startWorkers(h.deps)
  doc = (await h.call('GET', '/docs/json', { key: null })).body
  const must = async (method: string, path: string, body?: unknown) => {
    const res = await h.call(method, path, { body })
    if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${res.text}`)
    return res.body
  }
  const ws = (await must('POST', '/v1/workspaces', { name: 'Fuzz' })).data.id
  await must('POST', `/v1/workspaces/${ws}/members`, { user_id: 'fuzz-member', role: 'developer' })
  const key = (await must('POST', '/v1/api-keys', { user_id: 'fuzz-member', name: 'fuzz' })).data
  const wf = (await must('POST', '/v1/workflows', {
    workspace_id: ws,
    name: 'Fuzz flow',
    graph: { nodes: [{ id: 'start', type: 'start', config: {} }, { id: 'end', type: 'end', config: { outputs: { ok: 'yes' } } }], edges: [{ source: 'start', target: 'end' }] },
  })).data.id
  const run = (await must('POST', `/v1/workflows/${wf}/runs`, { inputs: {} })).run_id
  const kb = (await must('POST', '/v1/knowledge-bases', { workspace_id: ws, name: 'Fuzz base' })).data.id
  const document = (await must('POST', `/v1/knowledge-bases/${kb}/documents`, { type: 'text', name: 'a.txt', content: 'Refunds take five days.' })).document_id
  await waitFor(async () => (await h.call('GET', `/v1/documents/${document}`)).body.status === 'ready', { timeoutMs: 20_000 })
  const agent = (await must('POST', '/v1/agents', { workspace_id: ws, name: 'Fuzz agent', type: 'agent', model: 'local-chat' })).data.id
  const chat = await must('POST', `/v1/agents/${agent}/chat`, { message: 'hello', user_id: 'fuzz' })
  const webhook = (await must('POST', '/v1/webhooks', { workspace_id: ws, url: `http://127.0.0.1:${receiver.port}/hook`, events: ['webhook.test'], secret: 'whsec_fuzz-secret-0123456789' })).data.id
  const delivery = (await must('POST', `/v1/webhooks/${webhook}/ping`)).data.id
  Object.assign(known, {
    workspace: [ws],
    workflow: [wf],
    kb: [kb],
    agent: [agent],
    conversation: [chat.conversation_id],
    user_id: ['fuzz-member', 'root'],
    run_id: [run],
    document_id: [document],
    conversation_id: [chat.conversation_id],
    name: ['webhook-delivery', 'workflow-run', 'document'],
    key_id: [key.id],
    webhook: [webhook],
    delivery_id: [delivery],
  })
}, 60_000)

afterAll(async () => {
  await workers?.stop()
  await h?.close()
  receiver?.stop(true)
})

const junkString = fc.oneof(
  fc.string({ maxLength: 40 }),
  fc.string({ unit: 'grapheme', maxLength: 20 }),
  fc.constantFrom('', ' ', '0', '-1', '1e309', 'null', 'true', '[]', '{}', '../../etc/passwd', '%00', '\u0000', '\ud800', 'a,b,c', '2026-01-02T03:04:05.678Z', 'x'.repeat(5000)),
)

/** A value of any JSON type, shallow. */
const anyJson: fc.Arbitrary<unknown> = fc.oneof(junkString, fc.integer(), fc.double(), fc.boolean(), fc.constant(null), fc.array(fc.integer(), { maxLength: 3 }), fc.dictionary(fc.string({ maxLength: 5 }), fc.integer(), { maxKeys: 3 }))

/** Values of a schema: mostly fitting it (so the route's own code runs), sometimes at or past its bounds. */
function arb(schema: Schema | undefined, depth = 0, name = ''): fc.Arbitrary<unknown> {
  if (!schema || depth > 4) return anyJson
  const hint = HINTS[name]
  const fitting = hint ? fc.oneof({ weight: 4, arbitrary: fc.constantFrom(...hint()) }, { weight: 1, arbitrary: fitted(schema, depth) }) : fitted(schema, depth)
  // Mostly values that fit, so the route's own code runs past validation; sometimes anything at all.
  return fc.oneof({ weight: depth === 0 ? 6 : 25, arbitrary: fitting }, { weight: 1, arbitrary: anyJson })
}

/** Fields whose valid values are ids or names of this service: real ones, so requests go deeper. */
const HINTS: Record<string, () => unknown[]> = {
  workspace_id: () => known.workspace!,
  knowledge_base_ids: () => [known.kb!, []],
  workflow_id: () => known.workflow!,
  model: () => ['local-chat', 'local-embed', 'local-rerank'],
  embedding_model: () => ['local-embed'],
  rerank_model: () => ['local-rerank'],
  user_id: () => ['fuzz-member', 'someone-else'],
  role: () => ['admin', 'developer', 'user', 'readonly'],
  conversation_id: () => known.conversation!,
}

function fitted(s: Schema, depth: number): fc.Arbitrary<unknown> {
  if (s.const !== undefined) return fc.constant(s.const)
  if (s.enum) return fc.constantFrom(...s.enum)
  const alternatives = s.anyOf ?? s.oneOf
  if (alternatives?.length) return fc.oneof(...alternatives.map((a) => arb(a, depth + 1)))
  const type = Array.isArray(s.type) ? s.type.find((t) => t !== 'null') ?? 'null' : s.type
  switch (type) {
    case 'string': {
      const min = s.minLength ?? 0
      const max = Math.min(s.maxLength ?? 60, 300)
      const examples = (s.examples ?? []).filter((e) => typeof e === 'string') as string[]
      return fc.oneof(
        { weight: 6, arbitrary: fc.string({ minLength: min, maxLength: Math.max(min, max) }) },
        ...(examples.length ? [{ weight: 4, arbitrary: fc.constantFrom(...examples) }] : []),
        { weight: 1, arbitrary: fc.constantFrom('x'.repeat(Math.max(0, min - 1)), 'x'.repeat((s.maxLength ?? 300) + 1)) },
        { weight: 1, arbitrary: junkString },
      )
    }
    case 'integer':
    case 'number': {
      const lo = s.minimum ?? -1_000_000
      const hi = s.maximum ?? 1_000_000
      return fc.oneof(
        { weight: 6, arbitrary: type === 'integer' ? fc.integer({ min: Math.ceil(lo), max: Math.floor(hi) }) : fc.double({ min: lo, max: hi, noNaN: true }) },
        { weight: 1, arbitrary: fc.constantFrom(lo - 1, hi + 1, 0, -0.5, Number.MAX_SAFE_INTEGER) },
      )
    }
    case 'boolean':
      return fc.boolean()
    case 'null':
      return fc.constant(null)
    case 'array': {
      const max = Math.min(s.maxItems ?? 4, 6)
      return fc.array(arb(s.items, depth + 1), { minLength: Math.min(s.minItems ?? 0, max), maxLength: max })
    }
    case 'object':
    default: {
      const props = Object.entries(s.properties ?? {})
      if (props.length === 0) return fc.dictionary(fc.string({ maxLength: 8 }), anyJson, { maxKeys: 4 })
      const shape = Object.fromEntries(props.map(([k, v]) => [k, arb(v, depth + 1, k)]))
      const required = (s.required ?? []).filter((r) => r in shape)
      return fc
        .tuple(fc.record(shape, { requiredKeys: required }), fc.nat(19), fc.dictionary(fc.string({ maxLength: 8 }), anyJson, { minKeys: 1, maxKeys: 2 }))
        .map(([obj, dice, extra]) => {
          // Usually as the schema says; one time in twenty a required field is missing, one in twenty
          // an unknown field comes along.
          const out: Record<string, unknown> = { ...obj }
          if (dice === 0 && required.length) delete out[required[0]!]
          return dice === 1 ? { ...out, ...extra } : out
        })
    }
  }
}

/** The real ids a path parameter may take: `{id}` by the collection before it. */
function realIds(path: string, name: string): string[] {
  if (name !== 'id') return known[name] ?? ['x']
  const collection = path.split('/{id}')[0]!.split('/').at(-1)!
  const byCollection: Record<string, string> = { workspaces: 'workspace', workflows: 'workflow', 'knowledge-bases': 'kb', agents: 'agent', 'api-keys': 'key_id', webhooks: 'webhook' }
  return known[byCollection[collection] ?? ''] ?? ['x']
}

const pathValue = (path: string, name: string) =>
  fc.oneof({ weight: 8, arbitrary: fc.constantFrom(...realIds(path, name)) }, { weight: 1, arbitrary: fc.constantFrom('..', '%2e%2e%2f', 'a'.repeat(3000), '%00', 'ws_00000000000000000000000000', '☃', '%E2%98%83', '%ZZ') }, { weight: 1, arbitrary: fc.stringMatching(/^[A-Za-z0-9_.~-]{1,40}$/) })

interface Case {
  path: string
  query: string
  body: unknown
  raw?: string
  contentType?: string
  idempotencyKey?: string
  noKey: boolean
}

function caseFor(path: string, method: string, op: Operation): fc.Arbitrary<Case> {
  const pathParams = (op.parameters ?? []).filter((p) => p.in === 'path')
  const queryParams = (op.parameters ?? []).filter((p) => p.in === 'query')
  const bodySchema = op.requestBody?.content?.['application/json']?.schema
  return fc.record({
    params: fc.tuple(...pathParams.map((p) => pathValue(path, p.name))),
    query: fc.oneof(
      { weight: 3, arbitrary: fc.constant([] as [string, string][]) },
      { weight: 2, arbitrary: fc.array(fc.tuple(fc.constantFrom(...queryParams.map((p) => p.name), 'unknown_param', 'limit', 'cursor', 'sort'), junkString), { maxLength: 3 }) },
    ),
    body: bodySchema ? arb(bodySchema) : fc.constant(undefined),
    mangle: fc.oneof({ weight: 12, arbitrary: fc.constant('none') }, { weight: 1, arbitrary: fc.constantFrom('raw-junk', 'text-plain', 'deep', 'empty') }),
    raw: fc.string({ maxLength: 50 }),
    idempotencyKey: fc.oneof({ weight: 8, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: fc.uuid() }, { weight: 1, arbitrary: fc.stringMatching(/^[\x21-\x7e]{1,300}$/) }),
    noKey: fc.nat(9).map((n) => n === 0),
  }).map(({ params, query, body, mangle, raw, idempotencyKey, noKey }) => {
    let i = 0
    const filled = path.replace(/\{[^}]+\}/g, () => encodeURIComponent(String(params[i++])).replace(/%25([0-9A-F]{2})/gi, '%$1'))
    const q = new URLSearchParams(query as [string, string][]).toString()
    const c: Case = { path: filled, query: q ? `?${q}` : '', body, idempotencyKey, noKey }
    if (method === 'get' || method === 'delete') c.body = undefined
    if (mangle === 'raw-junk') c.raw = raw
    if (mangle === 'text-plain') {
      c.raw = JSON.stringify(body ?? {})
      c.contentType = 'text/plain'
    }
    if (mangle === 'deep') c.raw = '['.repeat(300) + ']'.repeat(300)
    if (mangle === 'empty') c.raw = ''
    return c
  })
}

async function send(method: string, c: Case): Promise<{ status: number; headers: Headers; text: string }> {
  const headers: Record<string, string> = {}
  if (!c.noKey) headers.authorization = `Bearer ${h.rootKey}`
  if (c.idempotencyKey !== undefined) headers['idempotency-key'] = c.idempotencyKey
  let body: string | undefined
  if (c.raw !== undefined && method !== 'GET') {
    body = c.raw
    headers['content-type'] = c.contentType ?? 'application/json'
  } else if (c.body !== undefined) {
    body = JSON.stringify(c.body)
    headers['content-type'] = 'application/json'
  }
  let req: Request
  try {
    req = new Request(`${h.base}${h.deps.config.basePath}${c.path}${c.query}`, { method, headers, body })
  } catch {
    // A header value the Fetch API itself refuses (a client could not send it either).
    return { status: 0, headers: new Headers(), text: '' }
  }
  const timeout = new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`no answer within ${HANG_MS} ms`)), HANG_MS))
  const res = await Promise.race([h.app.handle(req), timeout])
  return { status: res.status, headers: res.headers, text: await res.text() }
}

function check(res: { status: number; headers: Headers; text: string }): string | null {
  if (res.status === 0) return null
  if (res.status >= 500 && res.status !== 502 && res.status !== 503 && res.status !== 504) return `${res.status} ${res.text.slice(0, 300)}`
  const type = res.headers.get('content-type') ?? ''
  if (res.status < 400) return null
  if (!type.startsWith('application/json')) return `error ${res.status} with content-type ${type}`
  let body: any
  try {
    body = JSON.parse(res.text)
  } catch {
    return `error ${res.status} whose body is not JSON: ${res.text.slice(0, 200)}`
  }
  const e = body?.error
  if (typeof body?.request_id !== 'string' || body.request_id !== res.headers.get('x-request-id')) return `error without its request_id: ${res.text.slice(0, 200)}`
  if (!e || typeof e.code !== 'string' || typeof e.message !== 'string') return `error not of the error shape of docs/api.md ("Errors"): ${res.text.slice(0, 200)}`
  if (!(e.code in errorStatus)) return `unknown error code ${e.code}`
  if (errorStatus[e.code as keyof typeof errorStatus] !== res.status) return `code ${e.code} answered with status ${res.status}`
  if (e.param !== undefined && typeof e.param !== 'string') return 'param is not a string'
  if (e.details !== undefined && !(Array.isArray(e.details) && e.details.every((d: any) => typeof d.path === 'string' && typeof d.message === 'string'))) return 'details are not [{ path, message }]'
  return null
}

describe('fuzzing every route of the OpenAPI document', () => {
  test('the document lists the routes to fuzz', () => {
    expect(Object.keys(doc.paths).filter((p) => p.startsWith('/v1/')).length).toBeGreaterThan(40)
  })

  test('no 500, no hang, every error of the shape of docs/api.md (Errors)', async () => {
    let sent = 0
    const statuses = new Map<string, number[]>()
    // Reads and writes first; what destroys or freezes the seeded resources (deletes, archive,
    // transfer, revoke) last, so that the other routes meet real ids.
    const destructive = (method: string, path: string) => method === 'delete' || /\/(archive|transfer)$/.test(path)
    const operations = Object.entries(doc.paths)
      .filter(([path]) => path.startsWith('/v1/'))
      .flatMap(([path, item]) => Object.entries(item).map(([method, op]) => ({ path, method, op })))
      .sort((a, b) => Number(destructive(a.method, a.path)) - Number(destructive(b.method, b.path)))
    for (const { path, method, op } of operations) {
      {
        await fc.assert(
          fc.asyncProperty(caseFor(path, method, op), async (c) => {
            sent++
            let res
            try {
              res = await send(method.toUpperCase(), c)
            } catch (err) {
              failures.push(`${method.toUpperCase()} ${path}: ${(err as Error).message}\n    ${method.toUpperCase()} ${c.path}${c.query} ${c.raw ?? JSON.stringify(c.body)?.slice(0, 300)}`)
              return true
            }
            statuses.set(`${method.toUpperCase()} ${path}`, [...(statuses.get(`${method.toUpperCase()} ${path}`) ?? []), res.status])
            if (process.env.FUZZ_DEBUG && path === process.env.FUZZ_DEBUG && res.status === 400) console.log('DBG', res.text.slice(0, 250))
            const problem = check(res)
            if (problem) failures.push(`${method.toUpperCase()} ${path}: ${problem}\n    ${method.toUpperCase()} ${c.path.slice(0, 200)}${c.query.slice(0, 200)} ${(c.raw ?? JSON.stringify(c.body) ?? '').slice(0, 300)}`)
            return true
          }),
          { seed: SEED, numRuns: RUNS },
        )
      }
    }
    if (process.env.FUZZ_STATS) for (const [r, codes] of statuses) console.log(r, Object.entries(codes.reduce<Record<number, number>>((a, c) => ((a[c] = (a[c] ?? 0) + 1), a), {})).map(([c, n]) => `${c}:${n}`).join(' '))
    expect(sent).toBeGreaterThan(40 * 40)
    // One line per distinct problem, with the first input that showed it.
    const distinct = new Map<string, string>()
    for (const f of failures) {
      const key = f.split('\n')[0]!.replace(/req_[a-z0-9]+/g, 'req').slice(0, 160)
      if (!distinct.has(key)) distinct.set(key, f)
    }
    expect([...distinct.values()]).toEqual([])
  }, 240_000)
})
