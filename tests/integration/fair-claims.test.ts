import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { newId } from '../../src/lib/ids'
import { DOCUMENT_MACHINE_VERSION } from '../../src/machines/document.machine'
import { RUN_MACHINE_VERSION } from '../../src/machines/workflow-run.machine'
import type { Database } from '../../src/store/db'
import { documentLeases } from '../../src/store/knowledge/documents'
import { claim, claimStatement, release, type LeaseTable } from '../../src/store/leases'
import { runLeases } from '../../src/store/runs'
import { insertWorkspace } from '../../src/store/workspaces'
import { freshDatabase } from '../helpers/db'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Claims shared fairly between workspaces (src/store/leases.ts `claim`) on a real database: a
 * workspace with ten thousand rows waiting does not keep another's one row waiting behind them, and
 * never holds more than its cap, for runs and for documents alike; a run waiting on its children
 * holds its lease but no place in the cap, so its children are claimed.
 */

let db: Database
const A = newId('ws')
const B = newId('ws')
const C = newId('ws')
const WAITING = 10_000
const CAP = 4

beforeAll(async () => {
  db = await freshDatabase()
  for (const id of [A, B, C]) await db.sql.begin((tx) => insertWorkspace(tx, { id, name: id, description: '', type: 'team', join_policy: 'open', owner_id: 'alice' }))
  for (const ws of [A, B, C]) {
    await db.sql`insert into workflows (id, workspace_id, name, description, graph, created_by) values (${`wf_${ws}`}, ${ws}, 'wf', '', '{"nodes":[],"edges":[]}', 'alice')`
    await db.sql`insert into knowledge_bases (id, workspace_id, name, embedding_model, dimensions, chunking, retrieval_mode, rerank_model, created_by)
                 values (${`kb_${ws}`}, ${ws}, 'kb', 'local-embed', 384, '{"chunk_size":256,"chunk_overlap":32}', 'hybrid', 'local-rerank', 'alice')`
  }
}, 120_000)
afterAll(() => db?.close())

/** `n` runs of `ws` waiting to be claimed, the oldest first (one statement: ten thousand rows in a second). */
async function waitingRuns(ws: string, n: number, opts: { depth?: number; from?: number } = {}) {
  await db.sql`
    insert into runs (id, workflow_id, workflow_version, workspace_id, user_id, status, inputs, snapshot, machine_version, depth, created_at)
    select ${ws} || '_run_' || (${opts.from ?? 0} + i), ${`wf_${ws}`}, 1, ${ws}, 'alice', 'running', '{}', '{}', ${RUN_MACHINE_VERSION}, ${opts.depth ?? 0},
           now() - interval '1 hour' + (${opts.from ?? 0} + i) * interval '1 millisecond'
    from generate_series(1, ${n}) i`
}

async function waitingDocuments(ws: string, n: number, from = 0) {
  await db.sql`
    insert into documents (id, knowledge_base_id, workspace_id, name, doc_type, size_bytes, sha256, status, snapshot, machine_version, created_by, created_at)
    select ${ws} || '_doc_' || (${from} + i), ${`kb_${ws}`}, ${ws}, 'd.md', 'md', 10, 'x', 'parsing', '{}', ${DOCUMENT_MACHINE_VERSION}, 'alice',
           now() - interval '1 hour' + (${from} + i) * interval '1 millisecond'
    from generate_series(1, ${n}) i`
}

const held = async (table: 'runs' | 'documents', ws: string) =>
  (await db.sql<{ n: number }[]>`select count(*)::int as n from ${db.sql(table)} where workspace_id = ${ws} and lease_owner is not null and lease_until > now()`)[0]!.n

/** Claims one row at a time (as a worker with one free place does) until `id` is claimed; the claims it took. */
async function claimsUntil(t: LeaseTable, id: string, max: number): Promise<{ claims: number; byWorkspace: Map<string, number> }> {
  const byWorkspace = new Map<string, number>()
  for (let i = 1; i <= max; i++) {
    const [row] = await claim<{ id: string; workspace_id: string }>(db.sql, t, 'w1', 60_000, 1, CAP)
    if (!row) break
    byWorkspace.set(row.workspace_id, (byWorkspace.get(row.workspace_id) ?? 0) + 1)
    if (row.id === id) return { claims: i, byWorkspace }
  }
  return { claims: Infinity, byWorkspace }
}

describe('claims are fair between workspaces (src/store/leases.ts)', () => {
  test('runs: B\'s one run, newer than A\'s ten thousand, is claimed by the second claim; A never holds more than its cap', async () => {
    await waitingRuns(A, WAITING)
    await waitingRuns(B, 1, { from: WAITING })
    const { claims, byWorkspace } = await claimsUntil(runLeases, `${B}_run_${WAITING + 1}`, 20)
    // Oldest first, B's run would have waited for ten thousand claims.
    expect(claims).toBeLessThanOrEqual(2)
    expect(byWorkspace.get(A) ?? 0).toBeLessThanOrEqual(1)

    // A large claim (a worker with 64 free places) takes A up to its cap and no further, across owners.
    const big = await claim<{ workspace_id: string }>(db.sql, runLeases, 'w2', 60_000, 64, CAP)
    expect(big.filter((r) => r.workspace_id === A).length).toBe(CAP - 1)
    expect(await held('runs', A)).toBe(CAP)
    expect(await claim(db.sql, runLeases, 'w3', 60_000, 64, CAP)).toEqual([])
    // One of A's runs given back: one more, and only one.
    await release(db.sql, runLeases, 'w1', `${A}_run_1`)
    const more = await claim<{ workspace_id: string }>(db.sql, runLeases, 'w3', 60_000, 64, CAP)
    expect(more.map((r) => r.workspace_id)).toEqual([A])
    expect(await held('runs', A)).toBe(CAP)
  }, 120_000)

  test('runs: a run waiting on its running children takes no place in its workspace\'s share, so the children are claimed', async () => {
    // A holds its cap of runs (the test above). One of them starts two children: it now waits on them.
    const [parent] = await db.sql<{ id: string }[]>`select id from runs where workspace_id = ${A} and lease_owner is not null order by created_at limit 1`
    await db.sql`
      insert into runs (id, workflow_id, workflow_version, workspace_id, user_id, status, inputs, snapshot, machine_version, depth, parent_run_id, parent_node, item_index, created_at)
      select ${A} || '_child_' || i, ${`wf_${A}`}, 1, ${A}, 'alice', 'running', '{}', '{}', ${RUN_MACHINE_VERSION}, 1, ${parent!.id}, 'each', i, now()
      from generate_series(1, 2) i`
    const rows = await claim<{ id: string }>(db.sql, runLeases, 'w4', 60_000, 64, CAP)
    // One place freed (the parent's): A's oldest waiting row takes it, and no more.
    expect(rows.length).toBe(1)
    expect(await held('runs', A)).toBe(CAP + 1)
  }, 120_000)

  test('documents: B\'s one document is claimed by the second claim; A never holds more than its cap', async () => {
    await waitingDocuments(A, WAITING)
    await waitingDocuments(B, 1, WAITING)
    const { claims } = await claimsUntil(documentLeases, `${B}_doc_${WAITING + 1}`, 20)
    expect(claims).toBeLessThanOrEqual(2)
    const big = await claim<{ workspace_id: string }>(db.sql, documentLeases, 'w2', 60_000, 16, CAP)
    expect(big.every((r) => r.workspace_id === A)).toBe(true)
    expect(await held('documents', A)).toBe(CAP)
    expect(await claim(db.sql, documentLeases, 'w3', 60_000, 16, CAP)).toEqual([])
  }, 120_000)

  test('two workspaces waiting alike take turns', async () => {
    await db.sql`delete from documents`
    await waitingDocuments(A, 6)
    await waitingDocuments(B, 6, 100)
    const order: string[] = []
    for (let i = 0; i < 6; i++) {
      const [row] = await claim<{ workspace_id: string }>(db.sql, documentLeases, 'w5', 60_000, 1, 100)
      order.push(row!.workspace_id === A ? 'A' : 'B')
    }
    expect(order).toEqual(['A', 'B', 'A', 'B', 'A', 'B'])
  }, 120_000)

  test('a claim reads the rows it takes, not the ten thousand waiting behind them', async () => {
    await db.sql`delete from runs`
    await waitingRuns(A, WAITING)
    await waitingRuns(B, 1, { from: WAITING })
    await db.sql`analyze runs`
    const plan = await db.sql.begin(async (tx) => {
      // The claim's own statement, explained (and executed, then rolled back).
      const rows = await tx`explain (analyze, format json) ${claimStatement(tx as never, runLeases, 'explain', 60_000, 8, CAP)}`
      throw Object.assign(new Error('rollback'), { plan: (rows[0] as any)['QUERY PLAN'] })
    }).catch((err) => err.plan)
    const scanned = maxRows(plan[0].Plan)
    if (scanned >= 1000) console.log(JSON.stringify(plan[0].Plan, null, 1))
    expect(scanned).toBeLessThan(1000)
  }, 120_000)
})

/** The most rows any node of the plan produced or read (its `Actual Rows` times its loops, and the rows its filter removed). */
function maxRows(node: any): number {
  const own = (node['Actual Rows'] ?? 0) * (node['Actual Loops'] ?? 1) + (node['Rows Removed by Filter'] ?? 0)
  return Math.max(own, ...((node.Plans ?? []) as any[]).map(maxRows))
}
