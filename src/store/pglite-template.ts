import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { sha256Hex } from '../lib/crypto'
import { openEmbedded } from './db'
import { loadMigrations, migrate } from './migrate'

/**
 * A migrated, empty PGlite data directory, made once per installed PGlite and set of migrations
 * (`bun install` runs scripts/pglite-template.ts), which a fresh embedded data directory starts as a
 * copy of: PGlite's initdb took 5.1 s of a 7.7 s first start here, restoring the same template from a
 * `dumpDataDir()` tarball 1.4 s, copying its directory 0.1 s (bench/README.md, "Start-up"). It holds
 * the schema only, no key or secret. A data directory started from an older template still gets the
 * newer migrations; a missing or unreadable template means a normal initdb.
 */
const ROOT = join(import.meta.dir, '..', '..')
const CACHE = join(ROOT, 'node_modules', '.cache', 'agent-platform')

function pgliteVersion(): string {
  try {
    return (JSON.parse(readFileSync(join(ROOT, 'node_modules', '@electric-sql', 'pglite', 'package.json'), 'utf8')) as { version: string }).version
  } catch {
    return 'unknown'
  }
}

/** A hash of every migration: a changed or added migration makes a new template. */
export const SCHEMA_HASH = sha256Hex(loadMigrations().map((m) => `${m.version}:${m.sql}`).join('\n')).slice(0, 12)

/** Where this installation's template directory is (it exists once made). */
export function templateDir(cache = CACHE): string {
  return join(cache, `pglite-${pgliteVersion()}-${SCHEMA_HASH}`)
}

/** Initialises and migrates a PGlite data directory at `dir`, closed cleanly so that it can be copied. */
export async function makeTemplate(dir = templateDir()): Promise<string> {
  const work = `${dir}.${process.pid}`
  rmSync(work, { recursive: true, force: true })
  try {
    const db = await openEmbedded({ dataDir: work })
    try {
      await migrate(db.sql)
    } finally {
      await db.close()
    }
    rmSync(dir, { recursive: true, force: true })
    renameSync(join(work, 'pglite'), dir)
  } finally {
    rmSync(work, { recursive: true, force: true })
  }
  return dir
}

/**
 * The same, as a `dumpDataDir()` tarball for in-memory databases (the tests clone one per test file),
 * made once and kept in `file`.
 */
export async function templateDump(file: string): Promise<Blob> {
  if (existsSync(file)) return new Blob([readFileSync(file)])
  const db = await openEmbedded({ dataDir: null })
  let dump: Blob
  try {
    await migrate(db.sql)
    dump = await db.dump!()
  } finally {
    await db.close()
  }
  mkdirSync(join(file, '..'), { recursive: true })
  const tmp = `${file}.${process.pid}`
  writeFileSync(tmp, Buffer.from(await dump.arrayBuffer()))
  renameSync(tmp, file)
  return dump
}
