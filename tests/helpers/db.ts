import { tmpdir } from 'node:os'
import { join } from 'node:path'
import postgres from 'postgres'
import { embeddedClient, openEmbedded, openPostgres, type Database, type Pool } from '../../src/store/db'
import { EF_SEARCH } from '../../src/config'
import { migrate } from '../../src/store/migrate'
import { SCHEMA_HASH as schemaHash, templateDump } from '../../src/store/pglite-template'

let pgliteTemplate: Promise<Blob> | null = null

/** A migrated PGlite data directory, built once and cached on disk across runs (the product's own template). */
function pgliteTemplateDump(): Promise<Blob> {
  pgliteTemplate ??= templateDump(join(tmpdir(), `ap-pglite-template-${schemaHash}.tar.gz`))
  return pgliteTemplate
}

let serverTemplate: Promise<string> | null = null

/** Server mode: one migrated template database, cloned per test file with CREATE DATABASE ... TEMPLATE. */
function serverTemplateName(admin: postgres.Sql): Promise<string> {
  serverTemplate ??= (async () => {
    const name = `ap_template_${schemaHash}`
    await admin`select pg_advisory_lock(7465002)`
    try {
      const [exists] = await admin`select 1 from pg_database where datname = ${name}`
      if (!exists) {
        const building = `${name}_build_${process.pid}`
        await admin.unsafe(`drop database if exists "${building}"`)
        await admin.unsafe(`create database "${building}"`)
        const db = openPostgres(withDatabase(process.env.DATABASE_URL!, building), 2)
        await migrate(db.sql)
        await db.close()
        await admin.unsafe(`alter database "${building}" rename to "${name}"`)
      }
    } finally {
      await admin`select pg_advisory_unlock(7465002)`
    }
    return name
  })()
  return serverTemplate
}

function withDatabase(url: string, name: string): string {
  const u = new URL(url)
  u.pathname = `/${name}`
  return u.toString()
}

/**
 * A fresh, migrated database for one test file: a clone of the template on the server Postgres when
 * DATABASE_URL is set (as in CI), otherwise an in-memory PGlite loaded from the template dump.
 * `efSearch`: the HNSW candidate list its searches start from (KNOWLEDGE_EF_SEARCH; default the product's).
 */
export async function freshDatabase(opts: { efSearch?: number } = {}): Promise<Database> {
  const url = process.env.DATABASE_URL
  if (!url) return leaseEmbedded(opts.efSearch)
  const admin = postgres(url, { max: 1, onnotice: () => {} })
  try {
    const template = await serverTemplateName(admin)
    const name = `ap_test_${process.pid}_${Math.random().toString(36).slice(2, 10)}`
    await admin.unsafe(`create database "${name}" template "${template}"`)
    const db = openPostgres(withDatabase(url, name), 5, undefined, opts.efSearch)
    return {
      ...db,
      async close() {
        await db.close()
        const dropper = postgres(url, { max: 1, onnotice: () => {} })
        await dropper.unsafe(`drop database if exists "${name}" with (force)`).catch(() => {})
        await dropper.end()
      },
    }
  } finally {
    await admin.end()
  }
}

/**
 * Embedded: a PGlite started from the template takes ~1.5 s (the dump unpacked into its memory, the
 * server started), once per test file. Closed, a database is reset to the template instead and kept
 * for the next file: what a test created beside the template's schema dropped, every table emptied
 * but the migrations' own, the session discarded (settings, prepared statements, advisory locks,
 * temporary tables), the planner's statistics forgotten, and the schema compared with the
 * template's. One that does not match (a test altered the schema) is closed, not kept. Each lease
 * has a client of its own, ended at close, so a query a closed file left running fails instead of
 * reaching the next file's data.
 */
interface Kept {
  db: Database
  host: string
  port: number
}

const idle: Kept[] = []
/**
 * What is kept: two idle databases (some files use two at once), and only while their WebAssembly
 * memory is near a fresh one's (189 MB): memory an index build or a large sort grew is never given
 * back, and every database kept would hold the largest any file needed (3.0 GB for the suite, keeping
 * all of them). TEST_DB_KEEP sets the number (0: close every one, as before).
 */
const KEEP_IDLE = Number(process.env.TEST_DB_KEEP ?? 2)
const KEEP_MEMORY_BYTES = 320 * 1024 * 1024
/** The template as a fresh instance has it: its relations, its tables but the migrations' own, and its schema's fingerprint. */
let template: Promise<{ relations: Set<string>; tables: string[]; print: string }> | null = null

async function leaseEmbedded(efSearch?: number): Promise<Database> {
  let kept = idle.pop()
  if (!kept) {
    const db = await openEmbedded({ dataDir: null, loadDataDir: await pgliteTemplateDump() })
    const options = db.sql.options as unknown as { host: string[]; port: number[] }
    kept = { db, host: options.host[0]!, port: options.port[0]! }
    const own = kept
    template ??= (async () => {
      const sql = embeddedClient(own.host, own.port)
      try {
        const all = await relations(sql)
        const tables = all.filter((r) => (r.kind === 'r' || r.kind === 'p') && r.name !== 'public.schema_migrations').map((r) => r.name)
        return { relations: new Set(all.map((r) => r.name)), tables, print: await fingerprint(sql) }
      } finally {
        await sql.end()
      }
    })()
    await template
  }
  const lease = kept
  const sql = embeddedClient(lease.host, lease.port)
  let closed = false
  return {
    ...lease.db,
    sql,
    efSearch: efSearch ?? EF_SEARCH,
    async close() {
      if (closed) return
      closed = true
      await sql.end({ timeout: 5 })
      const keep = idle.length < KEEP_IDLE && (lease.db.memoryBytes?.() ?? Infinity) <= KEEP_MEMORY_BYTES && (await reset(lease).catch(() => false))
      if (process.env.TEST_DB_LOG) console.error(`test database ${lease.port}: ${Math.round((lease.db.memoryBytes?.() ?? 0) / 1048576)} MB, ${keep ? 'kept' : 'closed'}`)
      if (keep) idle.push(lease)
      else await lease.db.close().catch(() => {})
    },
  }
}

/** Back to the template's state; false when that cannot be done (then the instance is closed). */
async function reset(kept: Kept): Promise<boolean> {
  const { relations: known, tables, print } = await template!
  const sql = embeddedClient(kept.host, kept.port)
  try {
    await sql.unsafe('discard all')
    const extra = (await relations(sql)).filter((r) => !known.has(r.name))
    const order = ['v', 'm', 'r', 'p', 'i', 'S', 'c']
    for (const r of extra.sort((a, b) => order.indexOf(a.kind) - order.indexOf(b.kind))) {
      const what = { v: 'view', m: 'materialized view', r: 'table', p: 'table', i: 'index', S: 'sequence', c: 'type' }[r.kind]
      if (what) await sql.unsafe(`drop ${what} if exists ${r.name} cascade`)
    }
    // What is left is the template's (else the fingerprint below tells): its tables, emptied.
    if (tables.length > 0) await sql.unsafe(`truncate ${tables.join(', ')} cascade`)
    await sql.unsafe(`delete from pg_statistic where starelid in (select c.oid from pg_class c join pg_namespace n on n.oid = c.relnamespace where n.nspname = 'public')`)
    return (await fingerprint(sql)) === print
  } finally {
    await sql.end()
  }
}

/** The relations of the schemas a test may write to, as quoted qualified names. */
function relations(sql: Pool): Promise<{ name: string; kind: string }[]> {
  return sql<{ name: string; kind: string }[]>`
    select format('%I.%I', n.nspname, c.relname) as name, c.relkind::text as kind
    from pg_class c join pg_namespace n on n.oid = c.relnamespace
    where n.nspname not in ('pg_catalog', 'information_schema') and n.nspname not like 'pg\_%'`
}

/** A hash of the schema: relations, columns, indexes, constraints, triggers, functions, extensions, schemas, stored settings, migrations. */
async function fingerprint(sql: Pool): Promise<string> {
  const [row] = await sql<{ print: string }[]>`
    select md5(coalesce(string_agg(x, E'\n' order by x), '')) as print from (
      select 'rel ' || n.nspname || '.' || c.relname || ' ' || c.relkind::text
        from pg_class c join pg_namespace n on n.oid = c.relnamespace
        where n.nspname not in ('pg_catalog', 'information_schema') and n.nspname not like 'pg\_%'
      union all
      select 'col ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull::text || ' ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
        from pg_attribute a join pg_class c on c.oid = a.attrelid join pg_namespace n on n.oid = c.relnamespace
        left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
        where n.nspname = 'public' and a.attnum > 0 and not a.attisdropped
      union all
      select 'idx ' || pg_get_indexdef(i.indexrelid)
        from pg_index i join pg_class c on c.oid = i.indrelid join pg_namespace n on n.oid = c.relnamespace where n.nspname = 'public'
      union all
      select 'con ' || conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid) from pg_constraint where connamespace = 'public'::regnamespace
      union all
      select 'trg ' || pg_get_triggerdef(oid) from pg_trigger where not tgisinternal
      union all
      select 'fn ' || p.oid::regprocedure::text || ' ' || md5(p.prosrc) from pg_proc p where pronamespace = 'public'::regnamespace
      union all
      select 'ext ' || extname || ' ' || extversion from pg_extension
      union all
      select 'ns ' || nspname from pg_namespace where nspname not like 'pg\_%' and nspname <> 'information_schema'
      union all
      select 'set ' || setdatabase::text || ' ' || setrole::text || ' ' || array_to_string(setconfig, ',') from pg_db_role_setting
      union all
      select 'mig ' || string_agg(version::text, ',' order by version) from schema_migrations
    ) s(x)`
  return row!.print
}
