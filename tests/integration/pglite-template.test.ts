import { afterAll, beforeAll, expect, test } from 'bun:test'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { openEmbedded } from '../../src/store/db'
import { loadMigrations, migrate } from '../../src/store/migrate'
import { makeTemplate, readTemplate } from '../../src/store/pglite-template'

/**
 * A fresh embedded data directory starts from the migrated template instead of PGlite's initdb (the
 * bulk of a first start), an existing one never does, and a template that cannot be read means a normal
 * initdb: whatever the template, the directory ends migrated and usable.
 */
let dir: string
let template: Blob

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'ap-template-'))
  template = await makeTemplate(join(dir, 'template.tar.gz'))
}, 60_000)

afterAll(() => rmSync(dir, { recursive: true, force: true }))

const versions = async (db: Awaited<ReturnType<typeof openEmbedded>>) =>
  (await db.sql<{ version: number }[]>`select version from schema_migrations order by version`).map((r) => r.version)

test('the template file is what makeTemplate wrote', () => {
  expect(readTemplate(join(dir, 'template.tar.gz'))?.size).toBe(template.size)
  expect(readTemplate(join(dir, 'missing.tar.gz'))).toBeUndefined()
})

test('a fresh data directory starts from the template, already migrated; a restart opens it as it is', async () => {
  const dataDir = join(dir, 'fresh')
  const first = await openEmbedded({ dataDir, template: () => template })
  expect(first.startedFrom).toBe('template')
  expect(await versions(first)).toEqual(loadMigrations().map((m) => m.version))
  expect(await migrate(first.sql)).toEqual([])
  await first.close()
  let offered = false
  const again = await openEmbedded({ dataDir, template: () => ((offered = true), template) })
  expect(again.startedFrom).toBe('existing')
  expect(offered).toBe(false)
  expect(await versions(again)).toEqual(loadMigrations().map((m) => m.version))
  await again.close()
}, 60_000)

test('an unreadable template falls back to initdb, and migrations make it whole', async () => {
  const dataDir = join(dir, 'corrupt')
  const db = await openEmbedded({ dataDir, template: () => new Blob([new Uint8Array([0x1f, 0x8b, 1, 2, 3, 4])]) })
  expect(db.startedFrom).toBe('initdb')
  expect((await migrate(db.sql)).length).toBe(loadMigrations().length)
  await db.close()
}, 60_000)

test('no template: initdb, as before', async () => {
  const db = await openEmbedded({ dataDir: join(dir, 'none'), template: () => undefined })
  expect(db.startedFrom).toBe('initdb')
  await db.close()
}, 60_000)
