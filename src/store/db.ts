import { cpSync, existsSync, mkdirSync, renameSync, rmSync } from 'node:fs'
import { join, resolve } from 'node:path'
import postgres from 'postgres'
import { EF_SEARCH, searchPoolDefault } from '../config'
import { lockDataDir } from './data-dir-lock'
import { searchSession } from './knowledge/search-session'

export { DataDirLockedError } from './data-dir-lock'

/** Anything that runs a query: the pool or a transaction. */
export type Sql = postgres.Sql | postgres.TransactionSql
export type Tx = postgres.TransactionSql
/** The pool itself: what can begin a transaction. */
export type Pool = postgres.Sql

/**
 * `value` as a jsonb parameter. postgres.js types `json()` for its own JSON value type, which the
 * service's row interfaces (no index signature) do not match: this is the one place that says they
 * are JSON, instead of a cast at every call.
 */
export const jsonb = (sql: Sql, value: unknown) => sql.json(value as postgres.JSONValue)

export interface Database {
  sql: postgres.Sql
  /**
   * Server mode: the knowledge search's own pool, whose connections start with the search's planner
   * and HNSW settings (knowledge/search-session.ts, searchSession), so that a search is its one statement, one round
   * trip, instead of a transaction that sets them first. Null on the embedded database: one session,
   * so each search sets them for its own transaction.
   */
  search: postgres.Sql | null
  /** HNSW's candidate list searches start from (KNOWLEDGE_EF_SEARCH): the one the search pool's connections start with. */
  efSearch: number
  kind: 'pglite' | 'postgres'
  /** Where it is, for the start-up log (never a password). */
  describe: string
  close(): Promise<void>
  /** Embedded only: the data directory as a tarball (tests clone a migrated template from it). */
  dump?(): Promise<Blob>
  /** Embedded only: how its data directory began (a fresh one from the migrated template, or initdb). */
  startedFrom?: 'existing' | 'template' | 'initdb' | 'memory'
  /** Embedded only: why the template there was not used (unreadable, say), when it was not. */
  templateFailure?: string
  /**
   * Embedded only: the bytes of WebAssembly memory the database holds now. It grows with the work done
   * (an index build, a large sort) and is never given back until the database is closed.
   */
  memoryBytes?(): number
}

const common = {
  onnotice: () => {},
  // Rows keep the column names (snake_case), which are also the API's field names.
  connection: { application_name: 'agent-platform-api' },
} as const

/**
 * Where a server's URL points, as postgres.js takes it. As libpq reads a URL, a `host` query
 * parameter overrides its host, and a host that is a directory names a Unix socket's: in the
 * parameter (`postgres://user@localhost/db?host=/var/run/postgresql`, the URL's own host then unused
 * and may be empty) or percent-encoded as the host (`postgres://user@%2Fvar%2Frun%2Fpostgresql/db`).
 * The socket is `<directory>/.s.PGSQL.<port>`. `host` leaves the query either way: postgres.js would
 * send it to the server as a setting, which refuses the connection. `describe` never holds the password.
 */
export function serverTarget(url: string): { url: string; path: string | null; describe: string } {
  // `user@/db` (no host) is valid for libpq, not for the URL parser: the host is a placeholder there.
  const u = URL.parse(url) ?? URL.parse(url.replace(/^(postgres(?:ql)?:\/\/[^/?#]*@)(?=[/?#]|$)/, '$1localhost'))
  if (!u) throw new Error('DATABASE_URL is not a URL')
  const port = u.port || '5432'
  const param = u.searchParams.get('host')
  if (param === null && !/^%2f/i.test(u.hostname)) return { url, path: null, describe: `postgres ${u.hostname}:${port}${u.pathname}` }
  u.searchParams.delete('host')
  const host = param ?? decodeURIComponent(u.hostname)
  if (!host.startsWith('/')) {
    u.hostname = host
    return { url: u.toString(), path: null, describe: `postgres ${host}:${port}${u.pathname}` }
  }
  u.hostname = 'localhost'
  const path = `${host.replace(/\/+$/, '')}/.s.PGSQL.${port}`
  return { url: u.toString(), path, describe: `postgres ${path}${u.pathname}` }
}

/**
 * Server mode: PostgreSQL 15+ with pgvector, through a real pool of `max` connections, and the
 * search's pool of `searchMax` beside it (opened as searches come), whose connections start with
 * `efSearch`. `searchMax` 0: no search pool, for a pooler in transaction mode (PgBouncer), which
 * neither passes nor keeps session settings.
 */
export function openPostgres(url: string, max: number, searchMax = searchPoolDefault(max), efSearch = EF_SEARCH): Database {
  const target = serverTarget(url)
  const options = { ...common, ...(target.path ? { path: target.path } : {}), idle_timeout: 30, connect_timeout: 10 }
  const sql = postgres(target.url, { ...options, max })
  const search = searchMax > 0 ? postgres(target.url, { ...options, max: searchMax, connection: { ...common.connection, ...searchSession(efSearch) } }) : null
  return {
    sql,
    search,
    efSearch,
    kind: 'postgres',
    describe: target.describe,
    close: async () => {
      await Promise.all([sql.end({ timeout: 5 }), search?.end({ timeout: 5 })])
    },
  }
}

export interface EmbeddedOptions {
  /** Directory under which the database lives; null keeps it in memory (tests). */
  dataDir: string | null
  /** A `dumpDataDir()` tarball to start from (tests clone a migrated template this way). */
  loadDataDir?: Blob
  /** How long to wait for a holder of the data directory's lock that is exiting (default 30 s). */
  lockWaitMs?: number
  /** Told when the start waits for such a holder. */
  onLockWait?: (message: string) => void
  /** For a data directory that does not exist yet: a migrated data directory to start as a copy of (pglite-template.ts). */
  template?: string
  /** HNSW's candidate list searches start from (KNOWLEDGE_EF_SEARCH; default EF_SEARCH). */
  efSearch?: number
}

/** A client of an embedded database's socket server (`host`, `port`: where it listens), as openEmbedded makes its own. */
export function embeddedClient(host: string, port: number): Pool {
  return postgres({ ...common, host, port, username: 'postgres', database: 'postgres', max: 1 })
}

/**
 * Embedded default: PGlite with pgvector, served on a loopback port so that postgres.js is the only
 * driver. One connection (`max: 1`): PGlite is a single session, and the socket server's multiplexer
 * breaks when several connections interleave prepared statements.
 */
export async function openEmbedded(opts: EmbeddedOptions): Promise<Database> {
  const [{ PGlite }, { vector }, { PGLiteSocketServer }] = await Promise.all([
    import('@electric-sql/pglite'),
    import('@electric-sql/pglite-pgvector'),
    import('@electric-sql/pglite-socket'),
  ])
  let release = () => {}
  let pgDir: string | undefined
  if (opts.dataDir) {
    const dir = resolve(opts.dataDir)
    mkdirSync(dir, { recursive: true })
    release = await lockDataDir(dir, { waitMs: opts.lockWaitMs ?? 30_000, onWait: opts.onLockWait })
    pgDir = join(dir, 'pglite')
  }
  try {
    let startedFrom: Database['startedFrom'] = pgDir ? (existsSync(pgDir) ? 'existing' : 'initdb') : 'memory'
    let db: InstanceType<typeof PGlite> | undefined
    let templateFailure: string | undefined
    const template = startedFrom === 'initdb' && !opts.loadDataDir ? opts.template : undefined
    if (template && existsSync(template)) {
      const copy = `${pgDir}.copy`
      try {
        // Copied beside, then renamed: a start cut off mid-copy leaves no half directory that looks existing.
        rmSync(copy, { recursive: true, force: true })
        cpSync(template, copy, { recursive: true })
        renameSync(copy, pgDir!)
        db = await PGlite.create({ dataDir: pgDir, extensions: { vector } })
        await db.query('select 1 from schema_migrations limit 1')
        startedFrom = 'template'
      } catch (err) {
        templateFailure = (err as Error).message
        // An unreadable template: forget what it left and initialise as if there were none.
        await db?.close().catch(() => {})
        db = undefined
        rmSync(copy, { recursive: true, force: true })
        rmSync(pgDir!, { recursive: true, force: true })
      }
    }
    db ??= await PGlite.create({ dataDir: pgDir, loadDataDir: opts.loadDataDir, extensions: { vector } })
    const pg = db
    const server = new PGLiteSocketServer({ db: pg, port: 0, host: '127.0.0.1' })
    await server.start()
    const [host, port] = server.getServerConn().split(':')
    const sql = embeddedClient(host!, Number(port))
    return {
      sql,
      search: null,
      efSearch: opts.efSearch ?? EF_SEARCH,
      kind: 'pglite',
      startedFrom,
      templateFailure,
      describe: pgDir ? `embedded PGlite at ${pgDir}` : 'embedded PGlite in memory',
      dump: async () => (await pg.dumpDataDir('gzip')) as Blob,
      // PGlite keeps its Emscripten module as `mod` (not a public field: 0 if a version moves it).
      memoryBytes: () => (pg as unknown as { mod?: { HEAPU8?: Uint8Array } }).mod?.HEAPU8?.byteLength ?? 0,
      async close() {
        await sql.end({ timeout: 5 })
        await server.stop()
        await pg.close()
        release()
      },
    }
  } catch (err) {
    release()
    throw err
  }
}

/** The cheapest statement the database answers (readiness probes). */
export async function ping(sql: Sql): Promise<void> {
  await sql`select 1`
}
