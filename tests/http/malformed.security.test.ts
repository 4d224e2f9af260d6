import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { createAgent, createWorkflow } from '../helpers/agents'
import { keyFor, startHarness, workspaceOf, type Answer, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Hostile input, row by row: none of it may answer a 500, and none of it may lose or change data it
 * was not meant to. Where the input is valid (odd but legal text), it is stored and returned verbatim.
 */

let h: Harness
let alice: string
let seed: string
let seedBefore: unknown
let keysBefore: number
let agent: string
let workflow: string
const created: string[] = []

beforeAll(async () => {
  // The table sends a few hundred requests at once: no rate limit in the way.
  h = await startHarness({ RATE_LIMIT_PER_SECOND: '100000', RATE_LIMIT_BURST: '100000' })
  alice = await keyFor(h, 'alice')
  seed = await workspaceOf(h, alice, 'Seed workspace')
  expect((await h.call('PATCH', `/v1/workspaces/${seed}`, { key: alice, body: { description: 'the data that must survive' } })).status).toBe(200)
  expect((await h.call('POST', `/v1/workspaces/${seed}/members`, { key: alice, body: { user_id: 'bob', role: 'developer' } })).status).toBe(201)
  seedBefore = (await h.call('GET', `/v1/workspaces/${seed}`, { key: alice })).body.data
  keysBefore = await count('api_keys')
  agent = (await createAgent(h, alice, seed)).id
  workflow = await createWorkflow(h, alice, seed)
}, 30_000)
afterAll(() => h.close())

async function count(table: 'workspaces' | 'workspace_members' | 'api_keys'): Promise<number> {
  const [row] = await h.deps.db.sql<{ n: number }[]>`select count(*)::int as n from ${h.deps.db.sql(table)}`
  return row!.n
}

const json = { 'content-type': 'application/json' }
const deep = (n: number, open: string, close: string, inner = '') => open.repeat(n) + inner + close.repeat(n)
const SQL = "'; drop table workspaces; --"

interface Row {
  what: string
  method: string
  /** `{ws}` stands for the seed workspace. */
  path: string
  body?: unknown
  raw?: string
  headers?: Record<string, string>
  /** The exact status, 'refused' for any 4xx, or 'handled' for any answer below 500. */
  expect: number | 'refused' | 'handled'
  /** Fields that must come back exactly as sent (and again on a later read). */
  verbatim?: Record<string, string>
}

const ws = (body: unknown, expectStatus: Row['expect'], what: string, verbatim?: Record<string, string>): Row =>
  ({ what, method: 'POST', path: '/v1/workspaces', body, expect: expectStatus, verbatim })
const rawWs = (raw: string, what: string, expectStatus: Row['expect'] = 400): Row =>
  ({ what, method: 'POST', path: '/v1/workspaces', raw, headers: json, expect: expectStatus })
const get = (path: string, expectStatus: Row['expect'], what = path): Row => ({ what, method: 'GET', path, expect: expectStatus })

const rows: Row[] = [
  // Broken JSON
  ...['{', '}', '[', '{"name":}', '{"name":"x"', '{"name":"x",}', "{'name':'x'}", 'nul', 'undefined', 'NaN', '{"name":NaN}',
    '{"name":Infinity}', '{"name":"x"} trailing', '{"name":"\\x41"}', '{"name":"a\nb"}',
    '/* comment */ {"name":"x"}', '{"name":"x"}\u0000', '{"name":"\\u12"}', '{"name" "x"}', '{"name":"x"}}'].map((raw) => rawWs(raw, `broken JSON ${JSON.stringify(raw)}`)),
  // JSON that is not an object
  ...['[]', '[{"name":"x"}]', 'null', '0', '-1e309', '"name"', 'true', '{}'].map((raw) => rawWs(raw, `body ${raw}`)),
  // Deep nesting
  rawWs(deep(5000, '[', ']'), 'arrays nested 5000 levels'),
  rawWs(`{"name":"deep","description":${deep(5000, '{"a":', '}', '1')}}`, 'objects nested 5000 levels'),
  rawWs(deep(100_000, '[', ']'), 'arrays nested 100000 levels'),
  rawWs(`{"name":"deep","x":${deep(300, '[', ']')}}`, 'an extra field nested 300 levels'),
  rawWs(`{"name":"Brackets","description":"${'{['.repeat(400)}"}`, 'brackets inside a string are not nesting', 201),
  // A byte order mark is tolerated (RFC 8259 section 8.1 allows ignoring it).
  rawWs('\uFEFF{"name":"Byte order mark"}', 'a leading byte order mark', 201),
  // JSON labelled as JSON, however the label is spelled (docs/api.md, request bodies).
  ...['application/json; charset=UTF-8', 'Application/JSON;charset="utf-8"', 'application/json; charset=utf8', 'application/vnd.api+json']
    .map((type): Row => ({ ...rawWs(JSON.stringify({ name: `Typed ${type}` }), `Content-Type ${type}`, 201), headers: { 'content-type': type }, verbatim: { name: `Typed ${type}` } })),
  // Huge strings
  ws({ name: 'x'.repeat(100_000) }, 400, 'a 100 000 character name'),
  ws({ name: 'ok', description: 'd'.repeat(2001) }, 400, 'a description one over its limit'),
  ws({ name: 'n'.repeat(200), description: 'd'.repeat(2000) }, 201, 'a name and description exactly at their limits', { name: 'n'.repeat(200), description: 'd'.repeat(2000) }),
  ws({ name: 'ok', description: 'd'.repeat(1_100_000) }, 413, 'a body over 1 MiB'),
  { what: 'a user_id over 128 characters', method: 'POST', path: '/v1/workspaces/{ws}/members', body: { user_id: 'u'.repeat(129), role: 'user' }, expect: 400 },
  // Unicode, stored verbatim
  ...[
    ['emoji', '🚀 Launch 🌍', 'Ünïcödé 👩‍👩‍👧‍👦'],
    ['right-to-left', 'مرحبا بالعالم', 'שלום עולם'],
    ['bidi override', '\u202Eevil\u202C', '\u2066isolate\u2069'],
    ['combining marks', 'e\u0301e\u0301', 'Z\u0351\u0352\u0353'],
    ['zero-width characters', '\u200bzero\u200dwidth\ufeff', '\u200b'],
    ['CJK and astral', '工作区 𝕏', '𠜎𠜱𠝹'],
    ['newlines in a description', 'Lines', 'line 1\nline 2\r\n\ttabbed'],
    ['SQL in the name', SQL, "Robert'); DROP TABLE students;--"],
    ['SQL-ish operators', '" OR 1=1 --', "$1 $$ \\ %s %d ${'{'}{x}} \\x00 \\u0000"],
    ['HTML', '<script>alert(1)</script>', '<img src=x onerror=alert(1)>'],
  ].map(([what, name, description]) => ws({ name, description }, 201, `${what} stored verbatim`, { name: name!, description: description! })),
  { ...rawWs('{"name":"\\ud83d\\ude80 escaped pair"}', 'an escaped surrogate pair', 201), verbatim: { name: '🚀 escaped pair' } },
  // Characters Postgres cannot store, and control characters in names: 400 naming the field
  ws({ name: 'a\u0000b' }, 400, 'NUL in the name'),
  ws({ name: 'ok', description: 'x\u0000' }, 400, 'NUL in the description'),
  rawWs('{"name":"ok","description":"\\u0000"}', 'an escaped NUL in the description'),
  rawWs('{"name":"a\\ud800b"}', 'a lone high surrogate'),
  rawWs('{"name":"ok","description":"\\udfff"}', 'a lone low surrogate'),
  ws({ name: 'tab\there' }, 400, 'a tab in the name'),
  ws({ name: '\u007f' }, 400, 'DEL as the name'),
  ws({ name: '   ' }, 400, 'a name of spaces'),
  { what: 'NUL in a member user_id', method: 'POST', path: '/v1/workspaces/{ws}/members', body: { user_id: 'u\u0000', role: 'user' }, expect: 400 },
  { what: 'NUL in an API key name', method: 'POST', path: '/v1/api-keys', body: { user_id: 'alice', name: 'k\u0000' }, expect: 400 },
  { what: 'SQL as a member user_id', method: 'POST', path: '/v1/workspaces/{ws}/members', body: { user_id: SQL, role: 'user' }, expect: 201, verbatim: { user_id: SQL } },
  { what: 'SQL as an API key name', method: 'POST', path: '/v1/api-keys', body: { user_id: 'alice', name: "x'); drop table api_keys; --" }, expect: 201, verbatim: { name: "x'); drop table api_keys; --" } },
  // Wrong types, field by field
  ...[1, 1.5, true, null, [], {}, ['x']].map((name) => ws({ name }, 400, `name ${JSON.stringify(name)}`)),
  ...[1, null, [], {}, false].map((description) => ws({ name: 'ok', description }, 400, `description ${JSON.stringify(description)}`)),
  ...[1, 'galaxy', ['team'], null, 'TEAM'].map((type) => ws({ name: 'ok', type }, 400, `type ${JSON.stringify(type)}`)),
  ...[{}, 'x', 0].map((join_policy) => ws({ name: 'ok', join_policy }, 400, `join_policy ${JSON.stringify(join_policy)}`)),
  ...[{ user_id: 1, role: 'user' }, { user_id: null, role: 'user' }, { user_id: 'x', role: 1 }, { user_id: 'x', role: 'owner' }, { user_id: 'x', role: 'ADMIN' }, { user_id: 'x' }, { role: 'user' }, { user_id: '', role: 'user' }]
    .map((body): Row => ({ what: `member ${JSON.stringify(body)}`, method: 'POST', path: '/v1/workspaces/{ws}/members', body, expect: 400 })),
  ...[{ new_owner_id: 1 }, { new_owner_id: [] }, { new_owner_id: '' }, {}].map((body): Row => ({ what: `transfer ${JSON.stringify(body)}`, method: 'POST', path: '/v1/workspaces/{ws}/transfer', body, expect: 400 })),
  ...[{ name: 1 }, { description: [] }, {}, { name: '' }].map((body): Row => ({ what: `patch ${JSON.stringify(body)}`, method: 'PATCH', path: '/v1/workspaces/{ws}', body, expect: 400 })),
  ...[{ role: 'root' }, { role: null }, {}].map((body): Row => ({ what: `role change ${JSON.stringify(body)}`, method: 'PATCH', path: '/v1/workspaces/{ws}/members/bob', body, expect: 400 })),
  ...[
    { user_id: 1, name: 'k' },
    { user_id: 'alice', name: [] },
    { user_id: 'alice', name: 'k', workspace_id: 1 },
    { user_id: 'alice', name: 'k', role_limit: 'god' },
    { user_id: 'alice', name: 'k', expires_at: 5 },
    { user_id: 'alice', name: 'k', expires_at: 'tomorrow' },
    { user_id: 'alice', name: 'k', expires_at: '2027-02-30T00:00:00Z' },
    { user_id: 'alice', name: 'k', expires_at: '0000-01-01T00:00:00Z' },
    { user_id: 'alice', name: 'k', expires_at: '+275760-09-13T00:00:00Z' },
  ].map((body): Row => ({ what: `api key ${JSON.stringify(body)}`, method: 'POST', path: '/v1/api-keys', body, expect: 400 })),
  { what: 'an API key for a workspace that does not exist', method: 'POST', path: '/v1/api-keys', body: { user_id: 'alice', name: 'k', workspace_id: 'ws_00000000000000000000000000' }, expect: 404 },
  // Fields that are not the client's to set
  ...[{ id: 'ws_mine' }, { owner_id: 'mallory' }, { member_count: 99 }, { status: 'archived' }, { created_at: '2000-01-01T00:00:00Z' }]
    .map((extra) => ws({ name: 'Extra', ...extra }, 400, `extra field ${Object.keys(extra)[0]}`)),
  // JSON.parse makes "__proto__" an own key, which the validator lets through; harmless, as long as it pollutes nothing.
  rawWs('{"name":"Proto","__proto__":{"polluted":true}}', 'a __proto__ field', 'handled'),
  rawWs('{"name":"Ctor","constructor":{"prototype":{"polluted":true}}}', 'a constructor field', 'refused'),
  // Path parameters
  ...['%00', '%ZZ', 'w'.repeat(10_000), '..%2F..%2Fetc%2Fpasswd', '%2e%2e', '%F0%9F%9A%80', "ws_1'%20or%20'1'%3D'1", 'ws_1;drop', '%20', 'ws_%0a1']
    .map((id) => get(`/v1/workspaces/${id}`, 'refused', `GET /v1/workspaces/${id.slice(0, 40)}`)),
  get('/v1/workspaces/../../etc/passwd', 404),
  get('/v1/workspaces/ws_00000000000000000000000000/members', 404),
  ...['%00', '%ZZ', 'u'.repeat(5000), '..%2Fbob', 'nobody'].map((user): Row => ({ what: `DELETE member ${user.slice(0, 40)}`, method: 'DELETE', path: `/v1/workspaces/{ws}/members/${user}`, expect: 'refused' })),
  { what: 'PATCH a workspace %00', method: 'PATCH', path: '/v1/workspaces/%00', body: { name: 'x' }, expect: 400 },
  { what: 'DELETE a workspace %2e%2e', method: 'DELETE', path: '/v1/workspaces/%2e%2e', expect: 'refused' },
  { what: 'DELETE an API key %00', method: 'DELETE', path: '/v1/api-keys/%00', expect: 400 },
  { what: 'DELETE an API key that is not one', method: 'DELETE', path: '/v1/api-keys/key_00000000000000000000000000', expect: 404 },
  // Query strings
  ...['limit=1e2', 'limit=%00', 'limit=-1', 'limit=99999999999999999999', 'limit=', 'limit=0x10', 'sort=%00', 'sort=name%00', 'sort=', 'sort=name;drop',
    'status=%00', 'status=', 'owner_id=%00', 'owner_id_in=a,%00', 'type_in=' + ',x'.repeat(200), 'cursor=%00', `cursor=${'A'.repeat(10_000)}`,
    `cursor=${Buffer.from(JSON.stringify({ s: '-created_at', v: ['2026-01-01T00:00:00Z', 'a\u0000'] })).toString('base64url')}`,
    `cursor=${Buffer.from(JSON.stringify({ s: 'name', v: ['a\u0000', 'b'] })).toString('base64url')}&sort=name`,
    'created_at_after=0000-01-01T00:00:00Z', 'created_at_after=2026-02-30T00:00:00Z', 'created_at_before=%2B275760-09-13', 'created_at_after=%00',
    'created_at_before=0001-01-01T00:30:00%2B01:00', 'a[b]=c', 'status_in=' + 'active,'.repeat(1000), '%ZZ=1']
    .map((q) => get(`/v1/workspaces?${q}`, 400, `GET /v1/workspaces?${q.slice(0, 60)}`)),
  ...[`owner_id=${encodeURIComponent(SQL)}`, 'owner_id=%F0%9F%9A%80', '__proto__=x', 'status=active&status=archived', '&&&', 'limit=100&sort=name,-created_at',
    'created_at_after=0001-01-01T00:00:00Z', 'created_at_before=9999-12-31T23:59:59.999Z', `sort=${encodeURIComponent('-name')}`]
    .map((q) => get(`/v1/workspaces?${q}`, 200, `GET /v1/workspaces?${q.slice(0, 60)}`)),
  get('/v1/workspaces/{ws}/members?role=%00', 400),
  get(`/v1/workspaces/{ws}/members?user_id=${encodeURIComponent(SQL)}`, 400),
  get(`/v1/api-keys?user_id=${encodeURIComponent(SQL)}`, 200),
]

const answers: { row: Row; res: Answer }[] = []

test.each(rows.map((row) => [row.what, row] as const))('%s', async (_what, row) => {
  const path = row.path.replaceAll('{ws}', seed)
  const res = await h.call(row.method, path, { key: alice, body: row.body, raw: row.raw, headers: row.headers })
  answers.push({ row, res })
  expect(res.status).toBeLessThan(500)
  if (row.expect === 'refused') {
    expect(res.status).toBeGreaterThanOrEqual(400)
  } else if (row.expect !== 'handled') {
    expect(res.status).toBe(row.expect)
  }
  // Every answer keeps the conventions, whatever came in.
  expect(res.headers.get('content-type')).toStartWith('application/json')
  expect(res.body.request_id).toBe(res.headers.get('x-request-id'))
  if (res.status >= 400) {
    expect(Object.keys(res.body).sort()).toEqual(['error', 'request_id'])
    expect(res.body.error.code).not.toBe('internal_error')
    expect(res.text).not.toMatch(/PostgresError|node_modules|\bat .+:\d+:\d+/)
  }
  if (res.status === 201 && res.body.data?.id?.startsWith('ws_')) created.push(res.body.data.id)
  if (row.verbatim) {
    expect(res.body.data).toMatchObject(row.verbatim)
    // ...and again on a later read, from the database.
    if (path === '/v1/workspaces') {
      expect((await h.call('GET', `/v1/workspaces/${res.body.data.id}`, { key: alice })).body.data).toMatchObject(row.verbatim)
    } else if (path.endsWith('/members')) {
      const user = row.verbatim.user_id!
      const listed = await h.call('GET', `/v1/workspaces/${seed}/members?limit=100`, { key: alice })
      expect(listed.body.data.map((m: { user_id: string }) => m.user_id)).toContain(user)
    } else {
      const listed = await h.call('GET', '/v1/api-keys?user_id=alice&limit=100')
      expect(listed.body.data.map((k: { name: string }) => k.name)).toContain(row.verbatim.name)
    }
  }
})

test('U+0000 in a query parameter is a 400 naming it, on every kind of route (found by the fuzz test)', async () => {
  for (const path of [`/v1/webhooks?workspace_id=%00`, `/v1/workspaces?name=a%00b`, `/v1/workspaces/${seed}/members?sort=%00`, `/v1/models?x%00y=1`]) {
    const res = await h.call('GET', path, { key: alice })
    expect([path, res.status, res.body.error?.code]).toEqual([path, 400, 'validation_error'])
    expect(res.body.error.param).toMatch(/^query\./)
  }
  const res = await h.call('GET', '/v1/webhooks?workspace_id=%00', { key: alice })
  expect(res.body.error.param).toBe('query.workspace_id')
  expect(res.body.error.message).toBe('query.workspace_id: must not contain U+0000')
})

/**
 * Bodies are JSON labelled as JSON (docs/api.md, request bodies). A valid JSON body under any other
 * label, or bytes that are not UTF-8, is 400 invalid_json on every route that takes a body, and
 * creates nothing: each route's own list is read afterwards.
 */
describe('a body that is not JSON labelled as JSON', () => {
  interface Target {
    path: () => string
    body: (tag: string) => Record<string, unknown>
    /** How many resources the route made for `tag`, read through the API. */
    made: (tag: string) => Promise<number>
  }
  const listed = async (path: string, named?: string, key: string | undefined = alice) => {
    const res = await h.call('GET', path, { key })
    expect(res.status).toBe(200)
    return (res.body.data as { name?: string }[]).filter((item) => named === undefined || item.name === named).length
  }
  const targets: Record<string, Target> = {
    'POST /v1/workspaces': {
      path: () => '/v1/workspaces',
      body: (tag) => ({ name: tag }),
      made: (tag) => listed('/v1/workspaces?limit=100', tag),
    },
    'POST /v1/api-keys': {
      path: () => '/v1/api-keys',
      body: (tag) => ({ user_id: 'alice', name: tag }),
      // Issued by the root key, so listed with it.
      made: (tag) => listed('/v1/api-keys?user_id=alice&limit=100', tag, undefined),
    },
    'POST /v1/agents/{id}/chat': {
      path: () => `/v1/agents/${agent}/chat`,
      body: (tag) => ({ message: tag, user_id: 'alice' }),
      made: () => listed(`/v1/agents/${agent}/conversations`),
    },
    'POST /v1/workflows/{id}/runs': {
      path: () => `/v1/workflows/${workflow}/runs?async=true`,
      body: (tag) => ({ inputs: { message: tag } }),
      made: () => listed(`/v1/workflows/${workflow}/runs`),
    },
  }
  // A Uint8Array body: a string would make fetch's Request add text/plain on its own.
  const utf8 = (text: string) => new TextEncoder().encode(text)
  const labels: [string, Record<string, string>][] = [
    ['application/x-www-form-urlencoded', { 'content-type': 'application/x-www-form-urlencoded' }],
    ['multipart/form-data', { 'content-type': 'multipart/form-data; boundary=x' }],
    ['no Content-Type', {}],
    ['application/json; charset=utf-16', { 'content-type': 'application/json; charset=utf-16' }],
    ['application/json; charset=iso-8859-1', { 'content-type': 'application/json; charset=iso-8859-1' }],
    ['text/json', { 'content-type': 'text/json' }],
  ]
  const json = { 'content-type': 'application/json' }
  /** JSON whose string holds `bad` where the tag's last character was. */
  const broken = (bad: number[]) => (text: string) => {
    const at = text.lastIndexOf('"')
    return new Uint8Array([...utf8(text.slice(0, at)), ...bad, ...utf8(text.slice(at))])
  }
  const encodings: [string, (text: string) => Uint8Array][] = [
    ['a 0xFF byte', broken([0xff])],
    ['a lead byte without its continuation', broken([0xc3, 0x28])],
    ['an overlong "/"', broken([0xc0, 0xaf])],
    ['a surrogate encoded in UTF-8', broken([0xed, 0xa0, 0x80])],
    ['a truncated 4-byte sequence', broken([0xf0, 0x9f, 0x9a])],
  ]
  const rows = Object.keys(targets).flatMap((route) => [
    ...labels.map(([label, headers]) => [route, label, headers, utf8] as const),
    ...encodings.map(([what, encode]) => [route, `invalid UTF-8: ${what}`, json, encode] as const),
  ])

  test.each(rows)('%s with %s: 400 invalid_json, nothing made', async (route, label, headers, encode) => {
    const target = targets[route]!
    const tag = `Refused ${route} ${label}`
    const before = await target.made(tag)
    const res = await h.call('POST', target.path(), { key: route.includes('api-keys') ? undefined : alice, raw: encode(JSON.stringify(target.body(tag))), headers })
    expect([res.status, res.body.error?.code]).toEqual([400, 'invalid_json'])
    expect(res.body.request_id).toBe(res.headers.get('x-request-id'))
    expect(await target.made(tag)).toBe(before)
  })

  test('the same bodies labelled application/json are taken (the rows above fail on the label alone)', async () => {
    const tag = 'Accepted as JSON'
    const res = await h.call('POST', targets['POST /v1/workspaces']!.path(), { key: alice, raw: utf8(JSON.stringify({ name: tag })), headers: json })
    expect(res.status).toBe(201)
    created.push(res.body.data.id)
    expect(await targets['POST /v1/workspaces']!.made(tag)).toBe(1)
  })

  test('an action without a body needs no Content-Type; an empty body is no body, whatever its label', async () => {
    const id = await workspaceOf(h, alice, 'Archived without a body')
    created.push(id)
    expect((await h.call('POST', `/v1/workspaces/${id}/archive`, { key: alice })).status).toBe(200)
    expect((await h.call('POST', `/v1/workspaces/${id}/restore`, { key: alice, raw: '', headers: { 'content-type': 'text/plain' } })).status).toBe(200)
    expect((await h.call('POST', `/v1/workspaces/${id}/archive`, { key: alice, raw: utf8('  \n') })).status).toBe(200)
    const labelled = await h.call('POST', `/v1/workspaces/${id}/restore`, { key: alice, raw: '{}', headers: json })
    expect(labelled.status).toBe(200)
    // ...but a body it is sent must still be JSON labelled as JSON.
    const form = await h.call('POST', `/v1/workspaces/${id}/archive`, { key: alice, raw: 'confirm=1', headers: { 'content-type': 'application/x-www-form-urlencoded' } })
    expect([form.status, form.body.error?.code]).toEqual([400, 'invalid_json'])
    expect((await h.call('GET', `/v1/workspaces/${id}`, { key: alice })).body.data.status).toBe('active')
  })
})

test('afterwards: every table is intact and the earlier data is unchanged', async () => {
  expect(answers.length).toBe(rows.length)
  const [tables] = await h.deps.db.sql<{ w: string | null; m: string | null; k: string | null }[]>`
    select to_regclass('workspaces')::text as w, to_regclass('workspace_members')::text as m, to_regclass('api_keys')::text as k`
  expect(tables).toEqual({ w: 'workspaces', m: 'workspace_members', k: 'api_keys' })
  const after = await h.call('GET', `/v1/workspaces/${seed}`, { key: alice })
  expect(after.status).toBe(200)
  expect(after.body.data).toEqual({ ...(seedBefore as object), member_count: 3 })
  const members = await h.call('GET', `/v1/workspaces/${seed}/members?limit=100&sort=user_id`, { key: alice })
  expect(members.body.data.map((m: { user_id: string; role: string }) => [m.user_id, m.role])).toEqual([
    [SQL, 'user'],
    ['alice', 'admin'],
    ['bob', 'developer'],
  ])
  // Exactly the workspaces the valid rows created, plus the seed; every one still readable.
  expect(await count('workspaces')).toBe(1 + created.length)
  for (const id of created) expect((await h.call('GET', `/v1/workspaces/${id}`, { key: alice })).status).toBe(200)
  expect(await count('api_keys')).toBe(keysBefore + 1)
  expect((await h.call('GET', '/v1/workspaces', { key: alice })).status).toBe(200)
})

test('no prototype was polluted', () => {
  expect(({} as Record<string, unknown>).polluted).toBeUndefined()
  expect(Object.prototype.hasOwnProperty.call(Object.prototype, 'polluted')).toBe(false)
})
