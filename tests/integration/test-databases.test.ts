import { expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { freshDatabase } from '../helpers/db'
import { newId } from '../../src/lib/ids'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The test files' embedded databases (tests/helpers/db.ts) are reset to the template and kept for the
 * next file: nothing one file leaves may reach the next, and an instance whose schema a test changed
 * is not kept. Embedded only (server mode clones a new database per file).
 */
const embedded = !process.env.DATABASE_URL

test.skipIf(!embedded)('what a file leaves (rows, its own tables and indexes, settings, locks) is gone for the next', async () => {
  const first = await freshDatabase()
  const port = (first.sql.options as unknown as { port: number[] }).port[0]
  const ws = newId('ws')
  await first.sql`insert into workspaces (id, name, type, join_policy, owner_id) values (${ws}, 'left behind', 'team', 'invite', 'u1')`
  await first.sql`create table scratch (x int)`
  await first.sql`create index workspaces_name_scratch_idx on workspaces (name)`
  await first.sql`set work_mem = '7MB'`
  await first.sql`select pg_advisory_lock(4242)`
  await first.sql`analyze workspaces`
  await first.close()

  const second = await freshDatabase()
  // The same instance, handed on (a new one would prove nothing).
  expect((second.sql.options as unknown as { port: number[] }).port[0]).toBe(port)
  expect((await second.sql`select id from workspaces`).length).toBe(0)
  expect([...(await second.sql`select to_regclass('public.scratch') as t, to_regclass('public.workspaces_name_scratch_idx') as i`)]).toEqual([{ t: null, i: null }])
  expect((await second.sql`show work_mem`)[0]!.work_mem).not.toBe('7MB')
  expect((await second.sql`select pg_try_advisory_lock(4242) as got`)[0]!.got).toBe(true)
  expect((await second.sql`select 1 from pg_statistic where starelid = 'workspaces'::regclass`).length).toBe(0)
  expect((await second.sql`select count(*)::int as n from schema_migrations`)[0]!.n).toBeGreaterThan(0)
  await second.close()
})

test.skipIf(!embedded)('an instance whose schema a file changed is closed, not handed on', async () => {
  const first = await freshDatabase()
  const port = (first.sql.options as unknown as { port: number[] }).port[0]
  await first.sql`alter table workspaces add column scratch int`
  await first.close()
  const second = await freshDatabase()
  expect((second.sql.options as unknown as { port: number[] }).port[0]).not.toBe(port)
  expect((await second.sql`select column_name from information_schema.columns where table_name = 'workspaces' and column_name = 'scratch'`).length).toBe(0)
  await second.close()
})

test.skipIf(!embedded)("a closed lease's client fails instead of reaching the next file's database", async () => {
  const first = await freshDatabase()
  const stale = first.sql
  await first.close()
  const second = await freshDatabase()
  await expect(stale`insert into workspaces (id, name, type, join_policy, owner_id) values (${newId('ws')}, 'stray', 'team', 'invite', 'u1')`).rejects.toThrow()
  expect((await second.sql`select id from workspaces`).length).toBe(0)
  await second.close()
})
