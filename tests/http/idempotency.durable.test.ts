import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { sha256Hex } from '../../src/lib/crypto'
import { IDEMPOTENCY_PREFIX } from '../../src/store/idempotency'
import { startHarness, workspaceOf, type Answer, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The row a write with an Idempotency-Key creates is recorded with it, in the same transaction
 * (docs/api.md, "Idempotency"), for every POST that creates one. Two ways a retry meets that row
 * without the stored answer, as after a crash between the commit and the answer:
 * - the record in Redis is gone (Redis lost it): the retry executes, its write meets the recorded
 *   row, rolls back, and the answer is rebuilt from the row: one row;
 * - the record is still pending, but its owner is a process that no longer beats: the retry is
 *   answered from the row at once; one whose owner still beats is 409.
 * The crash itself (SIGKILL at those points, both modes) is tests/e2e/idempotency-crash.test.ts.
 */

let h: Harness
let ws: string
let wf: string
let hookId: string
let hookPath: string
let kb: string

beforeAll(async () => {
  h = await startHarness()
  ws = await workspaceOf(h, h.rootKey, 'Durable keys')
  const graph = { nodes: [{ id: 'start', type: 'start', config: {} }, { id: 'end', type: 'end', config: { outputs: {} } }], edges: [{ source: 'start', target: 'end' }] }
  wf = (await h.call('POST', '/v1/workflows', { body: { workspace_id: ws, name: 'Plain', graph } })).body.data.id
  const hook = (await h.call('POST', `/v1/workflows/${wf}/triggers`, { body: { type: 'webhook' } })).body.data
  hookId = hook.id
  // The hook's URL with its token, from /v1 on (as every path here is written).
  hookPath = new URL(hook.url).pathname.replace(/^.*?(\/v1\/)/, '$1')
  kb = (await h.call('POST', '/v1/knowledge-bases', { body: { workspace_id: ws, name: 'Docs' } })).body.data.id
}, 60_000)
afterAll(() => h.close())

/** Where the service keeps the record of `idemKey` sent by the root key (or by a hook's trigger). */
async function recordOf(idemKey: string, scope?: string): Promise<string> {
  const keyId = scope ?? (await h.deps.apiKeys.authenticate(h.rootKey)).keyId
  return `${IDEMPOTENCY_PREFIX}${keyId}:${sha256Hex(idemKey)}`
}

const count = async (table: string, where: string, value: string) =>
  (await h.deps.db.sql.unsafe(`select count(*)::int as n from ${table} where ${where} = $1`, [value]))[0]!.n as number

interface Case {
  what: string
  path: () => string
  body: (tag: string) => unknown
  /** The id of what the answer names. */
  id: (a: Answer) => string
  /** How many rows exist for `tag` (and the answer). */
  rows: (tag: string, a: Answer) => Promise<number>
  scope?: () => string
  noAuth?: boolean
}

const cases: Case[] = [
  { what: 'workspace', path: () => '/v1/workspaces', body: (t) => ({ name: t }), id: (a) => a.body.data.id, rows: (t) => count('workspaces', 'name', t) },
  {
    what: 'member',
    path: () => `/v1/workspaces/${ws}/members`,
    body: (t) => ({ user_id: t, role: 'developer' }),
    id: (a) => a.body.data.user_id,
    rows: (t) => count('workspace_members', 'user_id', t),
  },
  { what: 'API key', path: () => '/v1/api-keys', body: (t) => ({ user_id: 'dora', name: t }), id: (a) => a.body.data.id, rows: (t) => count('api_keys', 'name', t) },
  {
    what: 'workflow',
    path: () => '/v1/workflows',
    body: (t) => ({ workspace_id: ws, name: t, graph: { nodes: [{ id: 'start', type: 'start', config: {} }, { id: 'end', type: 'end', config: { outputs: {} } }], edges: [{ source: 'start', target: 'end' }] } }),
    id: (a) => a.body.data.id,
    rows: (t) => count('workflows', 'name', t),
  },
  {
    what: 'run (async)',
    path: () => `/v1/workflows/${wf}/runs?async=true`,
    body: (t) => ({ inputs: {}, user_id: t }),
    id: (a) => a.body.run_id,
    rows: (t) => count('runs', 'user_id', t),
  },
  {
    what: 'run (hook)',
    path: () => hookPath,
    body: (t) => ({ tag: t }),
    id: (a) => a.body.run_id,
    // A hook's runs are those of its trigger's user.
    rows: () => count('runs', 'user_id', `webhook:${hookId}`),
    scope: () => `hook:${hookId}`,
    noAuth: true,
  },
  { what: 'trigger', path: () => `/v1/workflows/${wf}/triggers`, body: (t) => ({ type: 'webhook', inputs: { tag: t } }), id: (a) => a.body.data.id, rows: (t) => count('triggers', "inputs->>'tag'", t) },
  {
    what: 'webhook',
    path: () => '/v1/webhooks',
    body: (t) => ({ workspace_id: ws, url: `https://1.1.1.1/${t}`, events: ['workflow.run.completed'], secret: 'a-good-secret' }),
    id: (a) => a.body.data.id,
    rows: (t) => count('webhooks', 'url', `https://1.1.1.1/${t}`),
  },
  { what: 'knowledge base', path: () => '/v1/knowledge-bases', body: (t) => ({ workspace_id: ws, name: t }), id: (a) => a.body.data.id, rows: (t) => count('knowledge_bases', 'name', t) },
  {
    what: 'document (text upload)',
    path: () => `/v1/knowledge-bases/${kb}/documents`,
    body: (t) => ({ type: 'text', name: `${t}.txt`, content: 'kept once' }),
    id: (a) => a.body.document_id,
    rows: (t) => count('documents', 'name', `${t}.txt`),
  },
  { what: 'agent', path: () => '/v1/agents', body: (t) => ({ workspace_id: ws, name: t, type: 'agent', model: 'local-chat' }), id: (a) => a.body.data.id, rows: (t) => count('agents', 'name', t) },
]

function send(c: Case, idemKey: string, tag: string) {
  return h.call('POST', c.path(), { key: c.noAuth ? null : undefined, body: c.body(tag), headers: { 'idempotency-key': idemKey } })
}

describe('the record in Redis lost after the commit: the retry is answered from the row it created', () => {
  test.each(cases.map((c) => [c.what, c] as const))('%s', async (_, c) => {
    const tag = `lost-${c.what.replace(/\W+/g, '-')}-${Date.now()}`
    const first = await send(c, tag, tag)
    expect(first.status).toBeLessThan(300)
    expect(await c.rows(tag, first)).toBe(1)
    await h.deps.redis.del(await recordOf(tag, c.scope?.()))

    const retry = await send(c, tag, tag)
    expect(retry.status).toBe(first.status)
    expect(retry.headers.get('idempotent-replayed')).toBe('true')
    expect(c.id(retry)).toBe(c.id(first))
    expect(await c.rows(tag, first)).toBe(1)
    if (c.what === 'API key') expect(retry.body.data.key).toBe(first.body.data.key)
    // Kept again: the next retry replays it byte for byte.
    const again = await send(c, tag, tag)
    expect(again.text).toBe(retry.text)
  })
})

test('the record lost, the key sent again with another body: 422 idempotency_key_reused, nothing made, and the first body is still answered from its row', async () => {
  const tag = `lost-other-${Date.now()}`
  const first = await h.call('POST', '/v1/workspaces', { body: { name: tag }, headers: { 'idempotency-key': tag } })
  await h.deps.redis.del(await recordOf(tag))
  const other = await h.call('POST', '/v1/workspaces', { body: { name: `${tag} other` }, headers: { 'idempotency-key': tag } })
  expect(other.status).toBe(422)
  expect(other.body.error.code).toBe('idempotency_key_reused')
  expect(await count('workspaces', 'name', `${tag} other`)).toBe(0)
  const retry = await h.call('POST', '/v1/workspaces', { body: { name: tag }, headers: { 'idempotency-key': tag } })
  expect(retry.status).toBe(201)
  expect(retry.headers.get('idempotent-replayed')).toBe('true')
  expect(retry.body.data.id).toBe(first.body.data.id)
})

describe('a pending record whose owner is gone', () => {
  test('no heartbeat: answered from the row at once (not 409)', async () => {
    const tag = `dead-owner-${Date.now()}`
    const first = await h.call('POST', '/v1/workspaces', { body: { name: tag }, headers: { 'idempotency-key': tag } })
    const key = await recordOf(tag)
    const stored = JSON.parse((await h.deps.redis.get(key))!)
    // As a process killed between the commit and the answer leaves it: pending, named by an owner that no longer beats.
    await h.deps.redis.set(key, JSON.stringify({ s: 'pending', f: stored.f, o: 'a-process-that-was-killed' }), 600_000)
    const retry = await h.call('POST', '/v1/workspaces', { body: { name: tag }, headers: { 'idempotency-key': tag } })
    expect(retry.status).toBe(201)
    expect(retry.headers.get('idempotent-replayed')).toBe('true')
    expect(retry.body.data.id).toBe(first.body.data.id)
    expect(await count('workspaces', 'name', tag)).toBe(1)
  })

  test('no heartbeat and no row (killed before the commit): the key is taken over and the write made once', async () => {
    const tag = `dead-before-${Date.now()}`
    const key = await recordOf(tag)
    const body = JSON.stringify({ name: tag })
    const f = sha256Hex(`POST\n/v1/workspaces\n\n${body}`)
    await h.deps.redis.set(key, JSON.stringify({ s: 'pending', f, o: 'a-process-that-was-killed' }), 600_000)
    const retry = await h.call('POST', '/v1/workspaces', { raw: body, headers: { 'idempotency-key': tag, 'content-type': 'application/json' } })
    expect(retry.status).toBe(201)
    expect(retry.headers.get('idempotent-replayed')).toBeNull()
    expect(await count('workspaces', 'name', tag)).toBe(1)
  })

  test('an owner that still beats: 409 idempotency_key_in_use, nothing created', async () => {
    const tag = `live-owner-${Date.now()}`
    const key = await recordOf(tag)
    const body = JSON.stringify({ name: tag })
    const f = sha256Hex(`POST\n/v1/workspaces\n\n${body}`)
    await h.deps.redis.set('idem-alive:another-live-process', '1', 60_000)
    await h.deps.redis.set(key, JSON.stringify({ s: 'pending', f, o: 'another-live-process' }), 600_000)
    const retry = await h.call('POST', '/v1/workspaces', { raw: body, headers: { 'idempotency-key': tag, 'content-type': 'application/json' } })
    expect(retry.status).toBe(409)
    expect(retry.body.error.code).toBe('idempotency_key_in_use')
    expect(await count('workspaces', 'name', tag)).toBe(0)
  })
})
