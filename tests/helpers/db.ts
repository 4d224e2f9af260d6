import { tmpdir } from 'node:os'
import { join } from 'node:path'
import postgres from 'postgres'
import { openEmbedded, openPostgres, type Database } from '../../src/store/db'
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
  if (!url) return openEmbedded({ dataDir: null, loadDataDir: await pgliteTemplateDump(), efSearch: opts.efSearch })
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
