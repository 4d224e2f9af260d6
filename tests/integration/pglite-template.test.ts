import { afterAll, beforeAll, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { cpSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { openEmbedded } from '../../src/store/db'
import { loadMigrations, migrate } from '../../src/store/migrate'
import { makeTemplate, templateDir } from '../../src/store/pglite-template'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * A fresh embedded data directory starts as a copy of the migrated template instead of PGlite's
 * initdb (the bulk of a first start), an existing one never does, and a template that cannot be read
 * means a normal initdb: whatever the template, the directory ends migrated and usable.
 */
let dir: string
let template: string
const all = loadMigrations().map((m) => m.version)

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'ap-template-'))
  // The installation's own (bun install makes it), read only; made here if it is missing.
  template = existsSync(templateDir()) ? templateDir() : await makeTemplate(join(dir, 'template'))
}, 60_000)

afterAll(() => rmSync(dir, { recursive: true, force: true }))

const versions = async (db: Awaited<ReturnType<typeof openEmbedded>>) =>
  (await db.sql<{ version: number }[]>`select version from schema_migrations order by version`).map((r) => r.version)

test('a fresh data directory starts from the template, already migrated; a restart opens it as it is', async () => {
  const dataDir = join(dir, 'fresh')
  const first = await openEmbedded({ dataDir, template })
  expect(first.startedFrom).toBe('template')
  expect(await versions(first)).toEqual(all)
  expect(await migrate(first.sql)).toEqual([])
  await first.sql`insert into schema_migrations (version, name) values (-1, 'written after the start')`
  await first.close()
  // The template is a copy's source, never the database itself.
  const other = await openEmbedded({ dataDir: join(dir, 'other'), template })
  expect(await versions(other)).toEqual(all)
  await other.close()
  const again = await openEmbedded({ dataDir, template: join(dir, 'no-such-template') })
  expect(again.startedFrom).toBe('existing')
  expect(await versions(again)).toEqual([-1, ...all])
  await again.close()
}, 60_000)

test('a template from an older schema still gets the newer migrations', async () => {
  const older = join(dir, 'older')
  const db = await openEmbedded({ dataDir: older })
  await migrate(db.sql, loadMigrations().slice(0, -1))
  await db.close()
  const fresh = await openEmbedded({ dataDir: join(dir, 'from-older'), template: join(older, 'pglite') })
  expect(fresh.startedFrom).toBe('template')
  expect(await migrate(fresh.sql)).toEqual([all.at(-1)!])
  expect(await versions(fresh)).toEqual(all)
  await fresh.close()
}, 60_000)

test('an unreadable template falls back to initdb, and migrations make it whole', async () => {
  const broken = join(dir, 'broken')
  cpSync(template, broken, { recursive: true })
  rmSync(join(broken, 'global'), { recursive: true })
  writeFileSync(join(broken, 'PG_VERSION'), 'not a version\n')
  const dataDir = join(dir, 'corrupt')
  const db = await openEmbedded({ dataDir, template: broken })
  expect(db.startedFrom).toBe('initdb')
  expect((await migrate(db.sql)).length).toBe(all.length)
  expect(existsSync(join(dataDir, 'pglite.copy'))).toBe(false)
  await db.close()
}, 60_000)

test('no template: initdb, as before', async () => {
  const db = await openEmbedded({ dataDir: join(dir, 'none'), template: join(dir, 'missing') })
  expect(db.startedFrom).toBe('initdb')
  await db.close()
}, 60_000)
