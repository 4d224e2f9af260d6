import { closeSync, mkdirSync, openSync, readdirSync, readFileSync, rmSync, unlinkSync, writeSync } from 'node:fs'
import { join } from 'node:path'
import type { Logger } from 'pino'
import { newId } from '../lib/ids'
import { traceContext, tracingOn, type TraceCarrier } from '../lib/tracing'
import type { Pool } from '../store/db'
import { tryFlock } from '../store/data-dir-lock'
import { addCharges, periodStart, type Charge, type JournaledCharge, type SpentTotal } from '../store/credits'
import { changingAccess, heldBatchOver, heldBatchSent, lastChangeOf, spendId } from '../store/access-generation'

/** Charges in one statement at most: a backlog (a replay, a database that was away) goes in several. */
const MAX_ROWS = 500
/** A batch flushed at once when this many charges wait, whatever the interval. */
const FLUSH_AT = 200
/** After a failed flush (the database away), the next try waits this long, then doubles, to this most. */
const RETRY_MS = [100, 1000, 5000]
/**
 * The first batch after a segment has been open this long closes it (and deletes it once committed):
 * one open(2) and one unlink(2) a second at most, not one per batch. Each cost ~0.1 ms on the path of
 * the call whose charge opened the segment, which at one call at a time was every call.
 */
const SEGMENT_MS = 1000
const SEGMENT = /^(\d{9})\.log$/
const LOCK = 'owner.lock'

export interface ChargeOutboxOptions {
  sql: Pool
  /** The directory of every process' journal (DATA_DIR/credits): each process writes in a directory of its own inside it. */
  dir: string
  log: Logger
  /** How long a charge waits for the next batch (0: a batch per event-loop turn). */
  flushMs: number
  /**
   * Each batch's statement with its generic plan, in a transaction of its own (store/credits.ts,
   * `addCharges`): for PostgreSQL, where planning it for each batch cost more than running it. Not
   * for the embedded database, where the transaction's two extra round trips cost more (+0.3 ms a
   * batch) than the planning saves.
   */
  genericPlan?: boolean
  /** How long a segment stays open before a batch closes it (SEGMENT_MS; 0: every batch closes it). */
  segmentMs?: number
  /** Called after a batch fired thresholds: their events are in the outbox. */
  nudgeEvents: () => void
  /**
   * Told each committed batch's new period totals, in the same turn as its charges stop being held
   * (`pending`): the access cache's kept answers take them (access-cache.ts, `spent`).
   */
  spent?: (totals: readonly SpentTotal[]) => void
}

/**
 * The write-behind of model call charges (docs/models.md, "Credits and budgets"). A call's charge is
 * appended to this process' journal with one write(2) before its answer is sent, and written to
 * PostgreSQL with the charges of other calls a few milliseconds later, in one statement
 * (`addCharges`) that is idempotent by ledger id. What the journal holds survives the process being
 * killed (SIGKILL included: the kernel has the bytes), not a power loss before the kernel writes it
 * back; the journal is replayed at the next start on the same DATA_DIR, and a charge that was both
 * written and still journaled is inserted once.
 *
 * Layout: DATA_DIR/credits/<process>/NNNNNNNNN.log, one JSON line per charge, and `owner.lock`, on
 * which the process holds an flock(2) for its life. The first batch after the segment being written
 * has been open for SEGMENT_MS closes it (the next charge opens a new one) and deletes the closed
 * segments once committed; the open one may hold charges already committed, which a replay inserts
 * no second time. At start-up a process replays every other process directory whose lock it can
 * take (its owner is gone), then deletes it. A process that cannot write its batches (the database
 * away) keeps them, retrying, and at shutdown leaves its directory for the next start.
 *
 * The hard limit (`pending`) counts the charges this process holds beside the committed total.
 */
export class ChargeOutbox {
  private queue: JournaledCharge[] = []
  private traces: (TraceCarrier | null)[] = []
  /** Credits and count of the charges held, by workspace and period. */
  private held = new Map<string, { credits: number; count: number }>()
  private fd = -1
  /** When the segment being written was opened (performance.now()). */
  private openedAt = 0
  private seq = 0
  /** Closed segments whose charges are all committed, in `queue`, or in the batch being written. */
  private sealed: string[] = []
  private timer: ReturnType<typeof setTimeout> | null = null
  private flushing: Promise<void> | null = null
  private failures = 0
  private closed = false

  private constructor(
    private readonly o: ChargeOutboxOptions,
    private readonly own: string,
    private readonly lockFd: number,
  ) {}

  /** Replays the journals of processes that are gone, then opens this process' own. */
  static async open(o: ChargeOutboxOptions): Promise<ChargeOutbox> {
    mkdirSync(o.dir, { recursive: true })
    await replayOrphans(o)
    const own = join(o.dir, `${Date.now()}-${process.pid}-${newId('crd').slice(-6)}`)
    mkdirSync(own)
    const lockFd = openSync(join(own, LOCK), 'w')
    tryFlock(lockFd)
    return new ChargeOutbox(o, own, lockFd)
  }

  /**
   * Journals `c` (one write(2)) and queues it for the next batch; returns once the kernel has the
   * line. Its ledger id is fixed here: a replay of the line never charges it twice.
   */
  add(c: Charge, at = Date.now()): void {
    if (this.closed) throw new Error('the charge outbox is closed')
    const entry: JournaledCharge = { ...c, id: newId('crd'), at }
    if (this.fd < 0) {
      this.fd = openSync(join(this.own, `${String(++this.seq).padStart(9, '0')}.log`), 'a')
      this.openedAt = performance.now()
    }
    const line = Buffer.from(`${JSON.stringify([entry.id, entry.workspace_id, entry.model, entry.kind, entry.tokens_in, entry.tokens_out, entry.credits, entry.request_id, entry.at])}\n`)
    for (let off = 0; off < line.length; ) off += writeSync(this.fd, line, off)
    this.queue.push(entry)
    this.traces.push(tracingOn ? traceContext() : null)
    const key = heldKey(entry.workspace_id, periodStart(new Date(at)))
    const h = this.held.get(key)
    if (h) {
      h.credits += entry.credits
      h.count++
    } else this.held.set(key, { credits: entry.credits, count: 1 })
    if (this.queue.length >= FLUSH_AT) this.schedule(0)
    else this.schedule(this.o.flushMs)
  }

  /** Credits held for `workspaceId` in the period of `at`, not yet in the committed total. */
  pending(workspaceId: string, at = new Date()): number {
    if (this.held.size === 0) return 0
    return this.held.get(heldKey(workspaceId, periodStart(at)))?.credits ?? 0
  }

  /** Every charge added before the call is committed (a read of the ledger follows; shutdown). */
  async flush(): Promise<void> {
    while (this.flushing) await this.flushing.catch(() => {})
    if (this.queue.length === 0) return
    await this.run()
  }

  /** Writes what is held; a process that could not leaves its journal for the next start. */
  async close(): Promise<void> {
    if (this.closed) return
    try {
      await this.flush()
    } catch (err) {
      this.o.log.error({ err, held: this.queue.length }, 'credits: the last charges could not be written; they stay journaled for the next start')
    }
    this.closed = true
    if (this.timer) clearTimeout(this.timer)
    this.timer = null
    this.seal()
    const clean = this.queue.length === 0
    if (clean) rmSync(this.own, { recursive: true, force: true })
    closeSync(this.lockFd)
  }

  private schedule(ms: number): void {
    if (this.flushing || this.closed) return
    if (this.timer) {
      if (ms > 0) return
      clearTimeout(this.timer)
    }
    this.timer = setTimeout(() => {
      this.timer = null
      if (!this.flushing) this.run().catch(() => {})
    }, ms)
  }

  private seal(): void {
    if (this.fd < 0) return
    closeSync(this.fd)
    this.fd = -1
    this.sealed.push(`${String(this.seq).padStart(9, '0')}.log`)
  }

  private run(): Promise<void> {
    const p = this.write().finally(() => {
      this.flushing = null
      if (this.queue.length > 0) this.schedule(this.failures > 0 ? RETRY_MS[Math.min(this.failures, RETRY_MS.length) - 1]! : this.o.flushMs)
    })
    this.flushing = p
    return p
  }

  /** One batch: everything queued, its segments deleted once it is committed. */
  private async write(): Promise<void> {
    if (this.timer) clearTimeout(this.timer)
    this.timer = null
    const batch = this.queue
    const traces = this.traces
    this.queue = []
    this.traces = []
    // Every charge of a segment closed now is in this batch or committed by an earlier one (a failed
    // batch's charges went back into the queue): this batch's commit covers it.
    if (performance.now() - this.openedAt >= (this.o.segmentMs ?? SEGMENT_MS)) this.seal()
    const segments = this.sealed
    this.sealed = []
    const spent: SpentTotal[] = []
    const heldIds: string[] = []
    try {
      for (let i = 0; i < batch.length; i += MAX_ROWS) {
        const slice = batch.slice(i, i + MAX_ROWS)
        // Each spend id with the generation of the batch's announce: in server mode that of the commit's
        // announce, where nothing else changed the spend in between (store/access-generation.ts).
        const sent = new Map<string, number>()
        const ids = spendIdsOf(slice)
        const before = ids.map(lastChangeOf)
        const result = await changingAccess(ids, async () => {
          const written = addCharges(this.o.sql, slice, traces.slice(i, i + MAX_ROWS), this.o.genericPlan)
          // Announced as it was called: its charges are held until this batch is over, so the answers
          // read before it stay good meanwhile (store/access-generation.ts, `goodSince`).
          ids.forEach((id, k) => heldBatchSent(id, before[k]!, lastChangeOf(id)))
          heldIds.push(...ids)
          const r = await written
          for (const t of r.spent) sent.set(spendId(t.workspace_id), t.generation)
          return r
        }, sent)
        if (result.fired.length > 0) this.o.nudgeEvents()
        for (const t of result.spent) {
          const generation = sent.get(spendId(t.workspace_id))
          // Not there: the spend changed again meanwhile; the kept answers that hold it stay dropped.
          if (generation !== undefined) spent.push({ ...t, generation })
        }
      }
    } catch (err) {
      // Kept, journaled and counted against the hard limit, for the next try (a replay is harmless).
      this.queue = batch.concat(this.queue)
      this.traces = traces.concat(this.traces)
      this.sealed = segments.concat(this.sealed)
      this.failures++
      for (const id of heldIds) heldBatchOver(id)
      this.o.log.error({ err, held: this.queue.length }, 'credits: writing a batch of charges failed; retrying')
      throw err
    }
    this.failures = 0
    for (const c of batch) {
      const key = heldKey(c.workspace_id, periodStart(new Date(c.at)))
      const h = this.held.get(key)!
      if (--h.count === 0) this.held.delete(key)
      else h.credits -= c.credits
    }
    // No await since the last statement answered: a check sees these credits either held or committed, once.
    this.o.spent?.(spent)
    for (const id of heldIds) heldBatchOver(id)
    // Last: a segment that cannot be deleted is replayed by a later start, which writes nothing twice.
    for (const segment of segments) {
      try {
        unlinkSync(join(this.own, segment))
      } catch (err) {
        this.o.log.warn({ err, segment }, 'credits: a written journal segment could not be deleted')
      }
    }
  }
}

const heldKey = (workspaceId: string, period: string) => `${workspaceId} ${period}`

/** The spend ids of a batch's workspaces, each once: their period's spend changes (announced: store/access-generation.ts). */
function spendIdsOf(charges: readonly JournaledCharge[]): string[] {
  const ids = new Set<string>()
  for (const c of charges) ids.add(spendId(c.workspace_id))
  return [...ids]
}

/**
 * The journals of processes that are gone (their lock free): every line written to the ledger
 * (lines already there are skipped by id), then the directory deleted. A line torn by a kill
 * mid-write belongs to a call that was never answered: skipped.
 */
async function replayOrphans(o: ChargeOutboxOptions): Promise<void> {
  for (const name of readdirSync(o.dir)) {
    const dir = join(o.dir, name)
    let lockFd: number
    try {
      lockFd = openSync(join(dir, LOCK), 'r')
    } catch {
      continue // not a process directory, or one still being created
    }
    try {
      if (!tryFlock(lockFd)) continue // its process is alive
      const charges: JournaledCharge[] = []
      let torn = 0
      for (const file of readdirSync(dir).filter((n) => SEGMENT.test(n)).sort()) {
        for (const line of readFileSync(join(dir, file), 'utf8').split('\n')) {
          if (line === '') continue
          const c = parseLine(line)
          if (c) charges.push(c)
          else torn++
        }
      }
      for (let i = 0; i < charges.length; i += MAX_ROWS) {
        const slice = charges.slice(i, i + MAX_ROWS)
        const { fired } = await changingAccess(spendIdsOf(slice), () => addCharges(o.sql, slice, [], o.genericPlan))
        if (fired.length > 0) o.nudgeEvents()
      }
      if (charges.length > 0 || torn > 0) o.log.info({ journal: dir, charges: charges.length, torn }, 'credits: replayed the journal of a process that stopped without writing it')
      rmSync(dir, { recursive: true, force: true })
    } finally {
      closeSync(lockFd)
    }
  }
}

function parseLine(line: string): JournaledCharge | null {
  let v: unknown
  try {
    v = JSON.parse(line)
  } catch {
    return null
  }
  if (!Array.isArray(v) || v.length !== 9) return null
  const [id, workspace_id, model, kind, tokens_in, tokens_out, credits, request_id, at] = v
  if (typeof id !== 'string' || typeof workspace_id !== 'string' || typeof model !== 'string' || (kind !== 'chat' && kind !== 'embedding' && kind !== 'rerank')) return null
  if (typeof tokens_in !== 'number' || typeof tokens_out !== 'number' || typeof credits !== 'number' || typeof at !== 'number') return null
  if (request_id !== null && typeof request_id !== 'string') return null
  return { id, workspace_id, model, kind, tokens_in, tokens_out, credits, request_id, at }
}
