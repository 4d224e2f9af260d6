import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import type postgres from 'postgres'

const dir = join(import.meta.dir, 'migrations')

export interface Migration {
  version: number
  name: string
  sql: string
}

/** Forward-only numbered migrations: `NNNNN_name.sql`, never edited once landed. */
export function loadMigrations(): Migration[] {
  return readdirSync(dir)
    .filter((f) => /^\d{5}_[a-z0-9_]+\.sql$/.test(f))
    .sort()
    .map((f) => ({ version: Number(f.slice(0, 5)), name: f.slice(6, -4), sql: readFileSync(join(dir, f), 'utf8') }))
}

/**
 * Applies what is missing, all in one transaction under an advisory lock, so several processes
 * starting at once apply each migration exactly once. Returns the versions applied now.
 */
export async function migrate(sql: postgres.Sql, migrations = loadMigrations()): Promise<number[]> {
  return sql.begin(async (tx) => {
    await tx`select pg_advisory_xact_lock(7465001)`
    await tx`create table if not exists schema_migrations (
      version integer primary key,
      name text not null,
      applied_at timestamptz not null default now()
    )`
    const done = new Set((await tx<{ version: number }[]>`select version from schema_migrations`).map((r) => r.version))
    const applied: number[] = []
    for (const m of migrations) {
      if (done.has(m.version)) continue
      await tx.unsafe(m.sql)
      await tx`insert into schema_migrations (version, name) values (${m.version}, ${m.name})`
      applied.push(m.version)
    }
    return applied
  })
}
