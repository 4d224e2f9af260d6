import { afterAll, beforeAll, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createLogger } from '../../src/boot'
import { ChargeOutbox } from '../../src/domain/charge-outbox'
import { newId } from '../../src/lib/ids'
import { tryFlock } from '../../src/store/data-dir-lock'
import type { Database } from '../../src/store/db'
import { freshDatabase } from '../helpers/db'

setDefaultTimeout(TEST_TIMEOUT_MS)

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

test('a batch closes the segment being written only once it has been open for segmentMs; the closed segments go once their charges are committed, and a replay of the open one charges nothing twice', async () => {
  const credits = join(dir, 'credits-rotation')
  const charge = (requestId: string) => ({ workspace_id: ws, model: 'm', kind: 'chat' as const, tokens_in: 1, tokens_out: 1, credits: 0.5, request_id: requestId })
  const own = () => readdirSync(credits).filter((d) => d !== '2-2-live')
  const segments = () => readdirSync(join(credits, own()[0]!)).filter((f) => f.endsWith('.log')).sort()
  const ledger = async (prefix: string) => Number((await db.sql<{ n: number }[]>`select count(*)::int as n from credit_ledger where request_id like ${`${prefix}%`}`)[0]!.n)

  // Kept open across batches: one file for every charge, whose lines are all committed.
  const kept = await ChargeOutbox.open({ sql: db.sql, dir: credits, log, flushMs: 5, nudgeEvents: () => {}, segmentMs: 60_000 })
  for (let i = 0; i < 3; i++) {
    kept.add(charge(`kept-${i}`))
    await kept.flush()
  }
  expect(await ledger('kept-')).toBe(3)
  expect(segments()).toEqual(['000000001.log'])
  // What a crash would leave: replayed by the next start, it inserts nothing a second time.
  const journal = join(credits, own()[0]!)
  const copy = join(credits, '3-3-crashed')
  mkdirSync(copy)
  writeFileSync(join(copy, 'owner.lock'), '')
  writeFileSync(join(copy, '000000001.log'), await Bun.file(join(journal, '000000001.log')).text())
  await kept.close()
  const [before] = await db.sql<{ used: string }[]>`select used::text as used from credit_periods where workspace_id = ${ws}`
  const replaying = await ChargeOutbox.open({ sql: db.sql, dir: credits, log, flushMs: 5, nudgeEvents: () => {} })
  expect(existsSync(copy)).toBe(false)
  expect(await ledger('kept-')).toBe(3)
  const [after] = await db.sql<{ used: string }[]>`select used::text as used from credit_periods where workspace_id = ${ws}`
  expect(after!.used).toBe(before!.used)
  await replaying.close()

  // Closed by every batch (segmentMs 0): each batch's file is gone once it is committed.
  const rotating = await ChargeOutbox.open({ sql: db.sql, dir: credits, log, flushMs: 5, nudgeEvents: () => {}, segmentMs: 0 })
  for (let i = 0; i < 3; i++) {
    rotating.add(charge(`rotating-${i}`))
    await rotating.flush()
    expect(segments()).toEqual([])
  }
  expect(await ledger('rotating-')).toBe(3)
  await rotating.close()
  expect(own()).toEqual([])
})
