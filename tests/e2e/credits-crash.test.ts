import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import postgres from 'postgres'
import { generateKey } from '../../src/domain/api-keys'
import { openEmbedded } from '../../src/store/db'
import { startFakeProvider, type FakeProvider } from '../helpers/fake-provider'
import { apiCall, EMBEDDED, killAll, spawnService, type ServiceProcess } from '../helpers/process'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * A model call's charge is journaled before its answer is sent and written to the ledger in a batch
 * a few ms later (docs/models.md, "Credits and budgets"): the real service as a subprocess, SIGKILLed
 * while charges are held, then restarted on the same DATA_DIR. Every call that was answered 200
 * (streamed or not, one at a time or many at once) is in the ledger exactly once, the period's total
 * is their sum, and each threshold fired once. In the embedded default unless DATABASE_URL is set,
 * then on a database of this file's own on that server.
 */
let tmp: string
let fake: FakeProvider
let admin: postgres.Sql | null = null
const databases: string[] = []

beforeAll(async () => {
  tmp = mkdtempSync(join(tmpdir(), 'ap-e2e-credits-crash-'))
  fake = await startFakeProvider()
  if (process.env.DATABASE_URL) admin = postgres(process.env.DATABASE_URL, { max: 1, onnotice: () => {} })
})

afterAll(async () => {
  await killAll()
  await fake?.close()
  for (const name of databases) await admin!.unsafe(`drop database if exists "${name}" with (force)`).catch(() => {})
  await admin?.end()
  if (tmp) rmSync(tmp, { recursive: true, force: true })
})

interface Setup {
  dataDir: string
  rootKey: string
  modelsFile: string
  /** Server mode: the database of this test. */
  databaseUrl: string | null
}

async function setup(name: string): Promise<Setup> {
  const dir = join(tmp, name)
  const modelsFile = join(dir, 'models.json')
  mkdirSync(dir, { recursive: true })
  writeFileSync(modelsFile, JSON.stringify({
    providers: [{ id: 'fake', kind: 'openai', base_url: fake.baseUrl, api_key: 'sk-fake', timeout_ms: 5000 }],
    models: [{ id: 'priced', type: 'llm', vendor: 'test', routes: [{ provider: 'fake', model: 'up' }], pricing: { input_per_1k: 1, output_per_1k: 2 } }],
  }))
  let databaseUrl: string | null = null
  if (admin) {
    const db = `ap_e2e_credits_${process.pid}_${Math.random().toString(36).slice(2, 8)}`
    await admin.unsafe(`create database "${db}"`)
    databases.push(db)
    const u = new URL(process.env.DATABASE_URL!)
    u.pathname = `/${db}`
    databaseUrl = u.toString()
  }
  return { dataDir: join(dir, 'data'), rootKey: generateKey(), modelsFile, databaseUrl }
}

function start(s: Setup, env: Record<string, string> = {}): ServiceProcess {
  return spawnService({
    env: {
      ...EMBEDDED, DATA_DIR: s.dataDir, BOOTSTRAP_API_KEY: s.rootKey, MODELS_FILE: s.modelsFile, RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000',
      ...(s.databaseUrl ? { DATABASE_URL: s.databaseUrl } : {}),
      ...env,
    },
  })
}

/** The stopped service's database, read directly: the ledger by request id and the threshold events. */
async function readBack(s: Setup): Promise<{ ledger: Map<string, number>; credits: number; used: number; thresholds: number[] }> {
  const db = s.databaseUrl ? { sql: postgres(s.databaseUrl, { max: 1, onnotice: () => {} }), close: null as null | (() => Promise<void>) } : await openEmbedded({ dataDir: s.dataDir })
  try {
    const rows = await db.sql<{ request_id: string; n: number }[]>`select request_id, count(*)::int as n from credit_ledger group by request_id`
    const [sum] = await db.sql<{ credits: string | null }[]>`select sum(credits)::text as credits from credit_ledger`
    const [period] = await db.sql<{ used: string | null }[]>`select sum(used)::text as used from credit_periods`
    const events = await db.sql<{ t: number }[]>`select (data->>'threshold_percent')::int as t from events where type = 'credit.budget.threshold' order by 1`
    return { ledger: new Map(rows.map((r) => [r.request_id, r.n])), credits: Number(sum?.credits ?? 0), used: Number(period?.used ?? 0), thresholds: events.map((e) => e.t) }
  } finally {
    if (db.close) await db.close()
    else await (db.sql as postgres.Sql).end()
  }
}

async function workspaceWithBudget(sp: ServiceProcess, rootKey: string, credits: number, thresholds: number[]): Promise<string> {
  const ws = await apiCall(sp, rootKey, 'POST', '/v1/workspaces', { name: 'Crash credits' })
  expect(ws.status).toBe(201)
  const id = ws.body.data.id as string
  expect((await apiCall(sp, rootKey, 'PUT', `/v1/workspaces/${id}/budget`, { credits, period: 'month', thresholds, hard_limit: true })).status).toBe(200)
  return id
}

/** One chat; its request id is ours, so that the ledger can be matched call by call. */
async function call(sp: ServiceProcess, rootKey: string, ws: string, requestId: string, stream: boolean): Promise<number> {
  const headers = { authorization: `Bearer ${rootKey}`, 'content-type': 'application/json', 'x-workspace-id': ws, 'x-request-id': requestId }
  const res = await fetch(`${sp.url}/v1/chat/completions`, { method: 'POST', headers, body: JSON.stringify({ model: 'priced', messages: [{ role: 'user', content: 'say something short' }], stream }) })
  expect(res.status).toBe(200)
  if (!stream) return ((await res.json()) as { usage: { credits: number } }).usage.credits
  expect(await res.text()).toContain('data: [DONE]')
  return -1
}

/** The journal lines this data directory holds (charges not yet written, or written and not yet deleted). */
function journaled(dataDir: string): number {
  const root = join(dataDir, 'credits')
  let n = 0
  for (const proc of readdirSync(root)) {
    for (const f of readdirSync(join(root, proc)).filter((x) => x.endsWith('.log'))) n += readFileSync(join(root, proc, f), 'utf8').split('\n').filter(Boolean).length
  }
  return n
}

// Each test has a service, a data directory and a database of its own: run together.
describe.concurrent('charges across a SIGKILL', () => {
  test('a SIGKILL right after the answers loses no charge and doubles none', async () => {
    const s = await setup('after-answers')
    let sp = start(s)
    await sp.ready()
    const ws = await workspaceWithBudget(sp, s.rootKey, 1_000_000, [50])
    const credits: number[] = []
    for (let i = 0; i < 5; i++) credits.push(await call(sp, s.rootKey, ws, `one-${i}`, false))
    credits.push(...(await Promise.all(Array.from({ length: 20 }, (_, i) => call(sp, s.rootKey, ws, `many-${i}`, i % 4 === 0)))))
    // Killed the moment the last answer is in: nothing is left to finish in the background.
    sp.proc.kill('SIGKILL')
    await sp.exited
    sp = start(s)
    await sp.ready()
    const usage = await apiCall(sp, s.rootKey, 'GET', `/v1/workspaces/${ws}/usage`)
    expect(usage.status).toBe(200)
    expect(usage.body.data.total.calls).toBe(25)
    const nonStreamed = credits.filter((c) => c >= 0)
    const each = nonStreamed[0]!
    expect(nonStreamed.every((c) => c === each)).toBe(true)
    expect(usage.body.data.total.credits).toBeCloseTo(each * 25, 6)
    expect(usage.body.data.budget.used).toBeCloseTo(each * 25, 6)
    await sp.stop('SIGTERM')
  }, 60_000)

  test('charges held when the process is SIGKILLed are written once at the next start; a journal replayed again charges nothing twice', async () => {
    const s = await setup('held')
    // A flush interval far beyond the test: every charge is still held (journaled only) when the kill comes.
    let sp = start(s, { CREDITS_FLUSH_MS: '600000' })
    await sp.ready()
    const calls = 10
    const each = await call(sp, s.rootKey, await workspaceWithBudget(sp, s.rootKey, 1000, []), 'probe', false)
    // The probe went to another workspace: the one measured gets a hard-limit budget of exactly 10
    // calls, its 50 % crossed by the 5th and its 100 % by the 10th.
    const ws = await workspaceWithBudget(sp, s.rootKey, each * calls, [50, 100])
    const ids = Array.from({ length: calls }, (_, i) => `held-${i}`)
    for (const id of ids.slice(0, 5)) await call(sp, s.rootKey, ws, id, false)
    await Promise.all(ids.slice(5).map((id, i) => call(sp, s.rootKey, ws, id, i % 2 === 0)))
    // Every charge is in the journal, none in the database yet.
    expect(journaled(s.dataDir)).toBe(calls + 1)
    // The hard limit counts the held charges: the budget is used up.
    const refused = await fetch(`${sp.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${s.rootKey}`, 'content-type': 'application/json', 'x-workspace-id': ws },
      body: JSON.stringify({ model: 'priced', messages: [{ role: 'user', content: 'one more' }] }),
    })
    expect(refused.status).toBe(402)
    sp.proc.kill('SIGKILL')
    await sp.exited
    const journal = join(s.dataDir, 'credits')
    const saved = join(s.dataDir, '..', 'journal-copy')
    cpSync(journal, saved, { recursive: true })

    // The next start replays the journal before it serves.
    sp = start(s)
    await sp.ready()
    await sp.stop('SIGTERM')
    const first = await readBack(s)
    expect(ids.map((id) => first.ledger.get(id) ?? 0)).toEqual(Array(calls).fill(1))
    expect(first.ledger.get('probe')).toBe(1)
    expect(first.credits).toBeCloseTo(each * (calls + 1), 6)
    // The period rows of both workspaces (the probe's and the 30 calls') sum to the ledger.
    expect(first.used).toBeCloseTo(first.credits, 6)
    expect(first.thresholds).toEqual([50, 100])
    expect(journaled(s.dataDir)).toBe(0)

    // The same journal again, as a crash between a batch's commit and its deletion would leave it:
    // every line is already in the ledger, so nothing is charged and no threshold fires again.
    cpSync(saved, journal, { recursive: true })
    expect(journaled(s.dataDir)).toBe(calls + 1)
    sp = start(s)
    await sp.ready()
    await sp.stop('SIGTERM')
    const again = await readBack(s)
    expect(again).toEqual(first)
    expect(journaled(s.dataDir)).toBe(0)
  }, 90_000)
})
