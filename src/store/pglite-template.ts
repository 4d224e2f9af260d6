import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { sha256Hex } from '../lib/crypto'
import { openEmbedded } from './db'
import { loadMigrations, migrate } from './migrate'

/**
 * A migrated, empty PGlite data directory as a tarball, made once per installed PGlite and set of
 * migrations (`bun install` runs scripts/pglite-template.ts), from which a fresh embedded data directory
 * starts: PGlite's initdb alone took 5.1 s of a 7.7 s first start here, loading the template 1.4 s
 * (bench/README.md, "Start-up"). It holds the schema only, no key or secret. A data directory started
 * from an older template still gets the newer migrations; a missing or unreadable template means a
 * normal initdb.
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

export function templateFile(dir = CACHE): string {
  return join(dir, `pglite-${pgliteVersion()}-${SCHEMA_HASH}.tar.gz`)
}

/** The template of this installation, if it was made. */
export function readTemplate(file = templateFile()): Blob | undefined {
  return existsSync(file) ? new Blob([readFileSync(file)]) : undefined
}

/** Initialises and migrates an in-memory PGlite, and writes its tarball to `file` (atomically). */
export async function makeTemplate(file = templateFile()): Promise<Blob> {
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
