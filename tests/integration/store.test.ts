import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { existsSync } from 'node:fs'
import postgres from 'postgres'
import { sha256Hex } from '../../src/lib/crypto'
import { newId } from '../../src/lib/ids'
import { insertApiKey } from '../../src/store/api-keys'
import { addCharges } from '../../src/store/credits'
import { openPostgres, type Database } from '../../src/store/db'
import { queueOf } from '../../src/store/knowledge/search'
import { claimUndispatchedEvents, emit, markEventsDispatched, type EventRow } from '../../src/store/events'
import { loadMigrations, migrate } from '../../src/store/migrate'
import { deleteWorkspace, insertMember, insertWorkspace } from '../../src/store/workspaces'
import { freshDatabase } from '../helpers/db'

setDefaultTimeout(TEST_TIMEOUT_MS)

const serverUrl = process.env.DATABASE_URL

let db: Database
beforeAll(async () => {
  db = await freshDatabase()
})
afterAll(() => db?.close())

async function newWorkspace(owner = 'alice'): Promise<string> {
  const id = newId('ws')
  await db.sql.begin((tx) => insertWorkspace(tx, { id, name: `ws of ${owner}`, description: '', type: 'team', join_policy: 'open', owner_id: owner }))
  return id
}

async function newKey(userId: string, workspaceId: string | null): Promise<string> {
  const id = newId('key')
  await insertApiKey(db.sql, {
    id,
    key_hash: sha256Hex(id),
    prefix: 'ap_test',
    name: `key ${id}`,
    user_id: userId,
    workspace_id: workspaceId,
    role_limit: null,
    is_root: false,
    created_by: null,
    issued_by: null,
    expires_at: null,
  })
  return id
}

/** The error a promise rejects with (bun's `expect(p).rejects` costs about a second per use). */
async function failure(p: Promise<unknown>): Promise<Error> {
  const outcome = await p.then(() => null, (err: Error) => err)
  if (!outcome) throw new Error('expected a rejection, but the promise resolved')
  return outcome
}

const count = async (query: postgres.PendingQuery<postgres.Row[]>) => Number((await query)[0]!.n)

describe('migrations', () => {
  test('migrate() again applies nothing; schema_migrations has one row per file', async () => {
    const files = loadMigrations()
    expect(files.length).toBeGreaterThan(0)
    expect(await migrate(db.sql)).toEqual([])
    expect(await migrate(db.sql)).toEqual([])
    const rows = await db.sql<{ version: number; name: string }[]>`select version, name from schema_migrations order by version`
    expect(rows.map((r) => ({ version: r.version, name: r.name }))).toEqual(files.map((m) => ({ version: m.version, name: m.name })))
  })

  test('file names are numbered without gaps and every file is forward-only SQL', () => {
    const files = loadMigrations()
    expect(files.map((m) => m.version)).toEqual(files.map((_, i) => i + 1))
    for (const m of files) expect(m.sql.trim().length).toBeGreaterThan(0)
  })

  if (serverUrl) {
    test('an empty server database: two processes migrating at once apply each migration exactly once', async () => {
      const name = `ap_store_${process.pid}_${Math.random().toString(36).slice(2, 10)}`
      const admin = postgres(serverUrl, { max: 1, onnotice: () => {} })
      await admin.unsafe(`create database "${name}"`)
      const u = new URL(serverUrl)
      u.pathname = `/${name}`
      const a = openPostgres(u.toString(), 2)
      const b = openPostgres(u.toString(), 2)
      try {
        const [ra, rb] = await Promise.all([migrate(a.sql), migrate(b.sql)])
        const all = loadMigrations().map((m) => m.version)
        expect([...ra, ...rb].sort((x, y) => x - y)).toEqual(all)
        expect([ra, rb]).toContainEqual([])
        expect(await count(a.sql`select count(*) as n from schema_migrations`)).toBe(all.length)
      } finally {
        await a.close()
        await b.close()
        await admin.unsafe(`drop database if exists "${name}" with (force)`)
        await admin.end()
      }
    })
  }

  // The server's Unix socket, where this machine has one (Debian's directory, then PostgreSQL's default).
  const socketDir = serverUrl ? ['/var/run/postgresql', '/tmp'].find((d) => existsSync(`${d}/.s.PGSQL.${new URL(serverUrl).port || 5432}`)) : undefined
  test.skipIf(!socketDir)('a DATABASE_URL naming a Unix socket directory connects through the socket, both pools with their settings', async () => {
    const u = new URL(serverUrl!)
    u.hostname = 'localhost'
    const forms = [`${u.toString()}${u.search ? '&' : '?'}host=${socketDir}`, u.toString().replace('@localhost', `@${encodeURIComponent(socketDir!)}`)]
    for (const url of forms) {
      const socketDb = openPostgres(url, 1, 1, 77)
      try {
        expect(socketDb.describe).toBe(`postgres ${socketDir}/.s.PGSQL.${u.port || 5432}${u.pathname}`)
        // A Unix-socket session has no server address; the application name shows the pool's own settings arrived.
        const [main] = await socketDb.sql<{ addr: string | null; app: string }[]>`select inet_server_addr()::text as addr, current_setting('application_name') as app`
        expect(main).toEqual({ addr: null, app: 'agent-platform-api' })
        const [search] = await socketDb.search!<{ addr: string | null; ef: string }[]>`select inet_server_addr()::text as addr, current_setting('hnsw.ef_search') as ef`
        expect(search).toEqual({ addr: null, ef: '77' })
      } finally {
        await socketDb.close()
      }
    }
  })

  test('pgvector is installed: cosine distance works', async () => {
    const [row] = await db.sql<{ d: number }[]>`select ('[1,2,3]'::vector <=> '[1,2,4]'::vector)::float8 as d`
    expect(row!.d).toBeCloseTo(1 - 17 / Math.sqrt(14 * 21), 6)
    const [ext] = await db.sql`select extname from pg_extension where extname = 'vector'`
    expect(ext).toBeDefined()
  })

  test('00020: a vector index built on vector (before it) is built again on halfvec, under its name; one on halfvec is left alone', async () => {
    const m = loadMigrations().find((x) => x.version === 20)!
    expect(m.name).toBe('halfvec_index')
    const defs = async () =>
      Object.fromEntries((await db.sql<{ indexname: string; indexdef: string }[]>`select indexname, indexdef from pg_indexes where tablename = 'chunks' and indexname like 'chunks_hnsw_%'`).map((r) => [r.indexname, r.indexdef]))
    await db.sql.unsafe(`create index chunks_hnsw_7_idx on chunks using hnsw ((embedding::vector(7)) vector_cosine_ops) where dims = 7`)
    try {
      const before = await defs()
      expect(before.chunks_hnsw_384_idx).toContain('halfvec_cosine_ops')
      expect(before.chunks_hnsw_7_idx).toContain('vector_cosine_ops')
      await db.sql.begin((tx) => tx.unsafe(m.sql))
      const after = await defs()
      expect(after.chunks_hnsw_384_idx).toBe(before.chunks_hnsw_384_idx!)
      expect(after.chunks_hnsw_7_idx!.replace(/[()]/g, '')).toContain('USING hnsw l2_normalizeembedding::vector7::halfvec7 halfvec_cosine_ops')
      expect(after.chunks_hnsw_7_idx).toMatch(/WITH \(m='16', ef_construction='64'\) WHERE \(dims = 7\)$/)
    } finally {
      await db.sql`drop index if exists chunks_hnsw_7_idx`
    }
  })

  test('00021: a vector index built with pgvector\'s default parameters is built again with m 12 and ef_construction 128, under its name; one built so is left alone', async () => {
    const m = loadMigrations().find((x) => x.version === 21)!
    expect(m.name).toBe('hnsw_parameters')
    const defs = async () =>
      Object.fromEntries((await db.sql<{ indexname: string; indexdef: string }[]>`select indexname, indexdef from pg_indexes where tablename = 'chunks' and indexname like 'chunks_hnsw_%'`).map((r) => [r.indexname, r.indexdef]))
    await db.sql.unsafe(`create index chunks_hnsw_7_idx on chunks using hnsw ((l2_normalize(embedding::vector(7))::halfvec(7)) halfvec_cosine_ops) with (m = 16, ef_construction = 64) where dims = 7`)
    try {
      const before = await defs()
      expect(before.chunks_hnsw_384_idx).toMatch(/WITH \(m='12', ef_construction='128'\) WHERE \(dims = 384\)$/)
      await db.sql.begin((tx) => tx.unsafe(m.sql))
      const after = await defs()
      expect(after.chunks_hnsw_384_idx).toBe(before.chunks_hnsw_384_idx!)
      expect(after.chunks_hnsw_7_idx!.replace(/[()]/g, '')).toContain('USING hnsw l2_normalizeembedding::vector7::halfvec7 halfvec_cosine_ops')
      expect(after.chunks_hnsw_7_idx).toMatch(/WITH \(m='12', ef_construction='128'\) WHERE \(dims = 7\)$/)
    } finally {
      await db.sql`drop index if exists chunks_hnsw_7_idx`
    }
  })

  test('every foreign key to workspaces cascades, and every workspace_id column has one', async () => {
    const fks = await db.sql<{ table: string; column: string; deltype: string }[]>`
      select c.conrelid::regclass::text as table, a.attname as column, c.confdeltype as deltype
      from pg_constraint c join pg_attribute a on a.attrelid = c.conrelid and a.attnum = any (c.conkey)
      where c.contype = 'f' and c.confrelid = 'workspaces'::regclass`
    expect(fks.length).toBeGreaterThanOrEqual(3)
    expect(fks.filter((fk) => fk.deltype !== 'c')).toEqual([])
    const columns = await db.sql<{ table: string }[]>`
      select table_name as table from information_schema.columns
      where table_schema = 'public' and column_name = 'workspace_id'`
    const covered = new Set(fks.filter((f) => f.column === 'workspace_id').map((f) => f.table))
    expect(columns.map((c) => c.table).filter((table) => !covered.has(table))).toEqual([])
  })
})

describe('the search pool', () => {
  test.skipIf(!serverUrl)('a search waits for the first free connection of its pool, not behind a search still running on a busy one', async () => {
    // Two search connections, both busy: a long statement on one, a short one on the other. A third
    // statement must go to whichever frees first (the short one's), so it ends before the long one.
    // Sent straight to the pool, postgres.js pipelines it onto the first busy connection, behind the
    // long one: the test shows it can tell the two apart.
    const pool = openPostgres(serverUrl!, 1, 2)
    const queue = queueOf(pool.search!)
    const signal = new AbortController().signal
    const sleep = (seconds: number) => pool.search!`select pg_sleep(${seconds})`
    const order = async (send: (seconds: number) => Promise<unknown>) => {
      const ended: string[] = []
      const run = (name: string, seconds: number) => send(seconds).then(() => ended.push(name))
      const long = run('long', 1)
      const short = run('short', 0.05)
      const third = run('third', 0)
      await Promise.all([long, short, third])
      return ended
    }
    try {
      // The statement prepared on both connections first: a statement's first run waits for its
      // description and is never pipelined, which would hide the difference.
      for (let i = 0; i < 2; i++) await Promise.all([sleep(0.01), sleep(0.01)])
      expect(await order(sleep)).toEqual(['short', 'long', 'third'])
      expect(await order((seconds) => queue.run(signal, async () => sleep(seconds)))).toEqual(['short', 'third', 'long'])
    } finally {
      await pool.close()
    }
  })
})

describe('charge batches', () => {
  test('with genericPlan, the batch statement runs its generic plan (in a transaction of its own); without, the plans PostgreSQL picks per batch', async () => {
    const ws = await newWorkspace()
    const batch = (n: number) => Array.from({ length: n }, () => ({ id: newId('crd'), workspace_id: ws, model: 'm', kind: 'embedding' as const, tokens_in: 3, tokens_out: 0, credits: 0.5, request_id: newId('req'), at: Date.now() }))
    // One connection, so that its prepared statements are the ones counted (the embedded database is one already).
    const o = db.sql.options
    const one = serverUrl ? postgres({ host: o.host[0], port: o.port[0], database: o.database, username: o.user, max: 1, onnotice: () => {} }) : db.sql
    const plans = async () => {
      const [row] = await one<{ generic: number; custom: number }[]>`select coalesce(sum(generic_plans), 0)::int as generic, coalesce(sum(custom_plans), 0)::int as custom from pg_prepared_statements where statement like '%insert into credit_ledger%'`
      return row!
    }
    try {
      for (let i = 0; i < 3; i++) await addCharges(one, batch(1 + i), [], true)
      const generic = await plans()
      expect(generic.custom).toBe(0)
      expect(generic.generic).toBeGreaterThanOrEqual(3)
      // PostgreSQL's own choice for a statement's first runs: a plan for their values.
      for (let i = 0; i < 3; i++) await addCharges(one, batch(1 + i))
      expect((await plans()).custom).toBe(3)
      const [row] = await db.sql<{ n: number }[]>`select count(*)::int as n from credit_ledger where workspace_id = ${ws}`
      expect(row!.n).toBe(12)
    } finally {
      if (one !== db.sql) await one.end()
    }
  })
})

describe('events outbox', () => {
  test('an emit in a transaction that throws leaves no event', async () => {
    const ws = await newWorkspace()
    const type = `test.rolled_back.${Math.random().toString(36).slice(2)}`
    let emitted: EventRow | undefined
    const err = await failure(
      db.sql.begin(async (tx) => {
        emitted = await emit(tx, ws, type, { n: 1 })
        throw new Error('boom after emit')
      }),
    )
    expect(err.message).toBe('boom after emit')
    // The row did exist inside the transaction; the rollback took it away.
    expect(emitted?.type).toBe(type)
    expect(await count(db.sql`select count(*) as n from events where type = ${type}`)).toBe(0)
  })

  test('a committed emit leaves exactly one undispatched row, its data intact', async () => {
    const ws = await newWorkspace()
    const type = `test.committed.${Math.random().toString(36).slice(2)}`
    const data = { workflow_id: 'wf_1', nested: { list: [1, 'two', null], unicode: 'Zürich ✓ 😀' }, quote: "it's; drop table events; --" }
    const before = Date.now()
    const row = await db.sql.begin((tx) => emit(tx, ws, type, data))
    expect(row.id).toMatch(/^evt_[0-9a-z]{26}$/)
    const rows = await db.sql<EventRow[]>`select * from events where type = ${type}`
    expect(rows.length).toBe(1)
    expect(rows[0]!).toMatchObject({ id: row.id, workspace_id: ws, type, dispatched_at: null })
    expect(rows[0]!.data).toEqual(data)
    expect(rows[0]!.created_at).toBeInstanceOf(Date)
    expect(rows[0]!.created_at.getTime()).toBeGreaterThanOrEqual(before - 5_000)
  })

  test('an event without a workspace (platform-wide) is allowed', async () => {
    const row = await db.sql.begin((tx) => emit(tx, null, 'test.platform', { ok: true }))
    expect(row.workspace_id).toBeNull()
  })

  test('claimUndispatchedEvents returns oldest first up to the limit; markEventsDispatched takes them out', async () => {
    // Start from an empty outbox: whatever earlier tests left is dispatched now.
    await db.sql.begin(async (tx) => markEventsDispatched(tx, (await claimUndispatchedEvents(tx, 10_000)).map((e) => e.id)))
    const ws = await newWorkspace()
    const ids: string[] = []
    for (let i = 0; i < 3; i++) ids.push((await db.sql.begin((tx) => emit(tx, ws, 'test.claim', { i }))).id)

    const first = await db.sql.begin(async (tx) => {
      const claimed = await claimUndispatchedEvents(tx, 2)
      await markEventsDispatched(tx, claimed.map((e) => e.id))
      return claimed
    })
    // Oldest first: by created_at (milliseconds), and among events of one millisecond by id (ids are
    // random within a millisecond, so emission order decides only across milliseconds).
    const emitted = await db.sql<{ id: string; created_at: Date }[]>`select id, created_at from events where id in ${db.sql(ids)}`
    const at = new Map(emitted.map((e) => [e.id, e.created_at.getTime()]))
    expect(ids.map((id) => at.get(id)!)).toEqual(ids.map((id) => at.get(id)!).sort((x, y) => x - y))
    const oldest = [...ids].sort((x, y) => at.get(x)! - at.get(y)! || (x < y ? -1 : 1))
    expect(first.map((e) => e.id)).toEqual(oldest.slice(0, 2))
    expect(first.map((e) => e.data)).toEqual(oldest.slice(0, 2).map((id) => ({ i: ids.indexOf(id) })))

    // A claim whose transaction fails marks nothing: the event stays in the outbox.
    const crashed = await failure(
      db.sql.begin(async (tx) => {
        const claimed = await claimUndispatchedEvents(tx, 10)
        await markEventsDispatched(tx, claimed.map((e) => e.id))
        throw new Error('delivery crashed')
      }),
    )
    expect(crashed.message).toBe('delivery crashed')

    const second = await db.sql.begin(async (tx) => {
      const claimed = await claimUndispatchedEvents(tx, 10)
      await markEventsDispatched(tx, claimed.map((e) => e.id))
      await markEventsDispatched(tx, [])
      return claimed
    })
    expect(second.map((e) => e.id)).toEqual([oldest[2]!])
    expect(await db.sql.begin((tx) => claimUndispatchedEvents(tx, 10))).toEqual([])
    const marked = await db.sql<EventRow[]>`select * from events where id in ${db.sql(ids)}`
    for (const e of marked) expect(e.dispatched_at).toBeInstanceOf(Date)
  })

  test.skipIf(!serverUrl)('two workers claiming at once get disjoint events (skip locked; server Postgres only)', async () => {
    await db.sql.begin(async (tx) => markEventsDispatched(tx, (await claimUndispatchedEvents(tx, 10_000)).map((e) => e.id)))
    const ws = await newWorkspace()
    const ids: string[] = []
    for (let i = 0; i < 4; i++) ids.push((await db.sql.begin((tx) => emit(tx, ws, 'test.skip_locked', { i }))).id)
    let release!: () => void
    const held = new Promise<void>((r) => (release = r))
    let claimedA!: (ids: string[]) => void
    const aClaimed = new Promise<string[]>((r) => (claimedA = r))
    const a = db.sql.begin(async (tx) => {
      const rows = await claimUndispatchedEvents(tx, 2)
      claimedA(rows.map((e) => e.id))
      await held
      await markEventsDispatched(tx, rows.map((e) => e.id))
    })
    const fromA = await aClaimed
    const fromB = await db.sql.begin(async (tx) => {
      const rows = await claimUndispatchedEvents(tx, 10)
      await markEventsDispatched(tx, rows.map((e) => e.id))
      return rows.map((e) => e.id)
    })
    release()
    await a
    expect(fromA).toEqual(ids.slice(0, 2))
    expect(fromB).toEqual(ids.slice(2))
  })
})

describe('workspace delete', () => {
  test('cascades to members, keys restricted to it and its events; nothing of another workspace', async () => {
    const doomed = await newWorkspace('alice')
    const kept = await newWorkspace('bob')
    await db.sql.begin(async (tx) => {
      await insertMember(tx, doomed, 'carol', 'developer')
      await insertMember(tx, kept, 'carol', 'readonly')
      await emit(tx, doomed, 'test.cascade', { n: 1 })
      await emit(tx, doomed, 'test.cascade', { n: 2 })
      await emit(tx, kept, 'test.cascade', { n: 3 })
      await emit(tx, null, 'test.cascade', { n: 4 })
    })
    const doomedKey = await newKey('carol', doomed)
    const keptKey = await newKey('carol', kept)
    const platformKey = await newKey('carol', null)

    const n = async (table: 'workspace_members' | 'api_keys' | 'events' | 'workspaces', ws: string, column = 'workspace_id') =>
      count(db.sql`select count(*) as n from ${db.sql(table)} where ${db.sql(column)} = ${ws}`)
    expect([await n('workspace_members', doomed), await n('api_keys', doomed), await n('events', doomed)]).toEqual([2, 1, 2])

    await db.sql.begin((tx) => deleteWorkspace(tx, doomed))

    expect(await n('workspaces', doomed, 'id')).toBe(0)
    expect([await n('workspace_members', doomed), await n('api_keys', doomed), await n('events', doomed)]).toEqual([0, 0, 0])
    expect([await n('workspaces', kept, 'id'), await n('workspace_members', kept), await n('api_keys', kept), await n('events', kept)]).toEqual([1, 2, 1, 1])
    const keys = await db.sql<{ id: string }[]>`select id from api_keys where id in ${db.sql([doomedKey, keptKey, platformKey])} order by id`
    expect(keys.map((k) => k.id).sort()).toEqual([keptKey, platformKey].sort())
    expect(await count(db.sql`select count(*) as n from events where type = 'test.cascade' and workspace_id is null`)).toBe(1)
  })

  test('deleting an unknown workspace is a not_found error and changes nothing', async () => {
    const before = await count(db.sql`select count(*) as n from workspaces`)
    expect(await failure(db.sql.begin((tx) => deleteWorkspace(tx, 'ws_does_not_exist')))).toMatchObject({ code: 'not_found' })
    expect(await count(db.sql`select count(*) as n from workspaces`)).toBe(before)
  })
})
