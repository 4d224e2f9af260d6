import { afterAll, beforeAll, expect, test } from 'bun:test'
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createLogger } from '../../src/boot'
import { ChargeOutbox } from '../../src/domain/charge-outbox'
import { newId } from '../../src/lib/ids'
import { tryFlock } from '../../src/store/data-dir-lock'
import type { Database } from '../../src/store/db'
import { freshDatabase } from '../helpers/db'

/**
 * The charge journal's start-up replay (docs/models.md, "Credits and budgets") on a real database:
 * the directory of a process that is gone is written and deleted, a torn last line skipped; the
 * directory of a process that still holds its lock is left alone.
 */
let db: Database
let dir: string
const ws = newId('ws')
const log = createLogger('silent')

beforeAll(async () => {
  db = await freshDatabase()
  dir = mkdtempSync(join(tmpdir(), 'ap-charge-outbox-'))
  await db.sql`insert into workspaces (id, name, type, join_policy, owner_id) values (${ws}, 'outbox', 'team', 'invite_only', 'u1')`
})

afterAll(async () => {
  await db?.close()
  if (dir) rmSync(dir, { recursive: true, force: true })
})

const line = (id: string, credits: number, requestId: string) => JSON.stringify([id, ws, 'm', 'chat', 10, 20, credits, requestId, Date.now()])

/** A process directory as a process leaves it: its lock file, one segment. */
function processDir(name: string, lines: string): string {
  const d = join(dir, 'credits', name)
  mkdirSync(d, { recursive: true })
  writeFileSync(join(d, 'owner.lock'), '')
  writeFileSync(join(d, '000000001.log'), lines)
  return d
}

test('a gone process is replayed (a torn last line skipped) and its directory deleted; a live one is left alone', async () => {
  const gone = processDir('1-1-gone', `${line(newId('crd'), 0.25, 'gone-1')}\n${line(newId('crd'), 0.5, 'gone-2')}\n["crd_torn", "${ws}", "m", "ch`)
  const live = processDir('2-2-live', `${line(newId('crd'), 1, 'live-1')}\n`)
  // Its owner holds the flock for its life, as a running process does.
  const liveLock = openSync(join(live, 'owner.lock'), 'r')
  expect(tryFlock(liveLock)).toBe(true)
  try {
    const outbox = await ChargeOutbox.open({ sql: db.sql, dir: join(dir, 'credits'), log, flushMs: 5, nudgeEvents: () => {} })
    const rows = await db.sql<{ request_id: string; credits: string }[]>`select request_id, credits::text as credits from credit_ledger where workspace_id = ${ws} order by request_id`
    expect([...rows]).toEqual([{ request_id: 'gone-1', credits: '0.250000' }, { request_id: 'gone-2', credits: '0.500000' }])
    const [period] = await db.sql<{ used: string }[]>`select used::text as used from credit_periods where workspace_id = ${ws}`
    expect(period!.used).toBe('0.750000')
    expect(existsSync(gone)).toBe(false)
    expect(existsSync(join(live, '000000001.log'))).toBe(true)

    // A charge added now is held (counted for the hard limit), then written by the next batch.
    outbox.add({ workspace_id: ws, model: 'm', kind: 'chat', tokens_in: 1, tokens_out: 1, credits: 0.125, request_id: 'now-1' })
    expect(outbox.pending(ws)).toBe(0.125)
    await outbox.flush()
    expect(outbox.pending(ws)).toBe(0)
    expect((await db.sql`select 1 from credit_ledger where request_id = 'now-1'`).length).toBe(1)
    await outbox.close()
    // Closed with nothing held: its own directory is gone, the live one's is still there.
    expect(readdirSync(join(dir, 'credits')).sort()).toEqual(['2-2-live'])
  } finally {
    closeSync(liveLock)
  }
})
