import type { Logger } from 'pino'
import { randomBase62 } from '../lib/ids'
import { accessChangedSince, accessGeneration, accessChanged, everyAccessChanged, goodSince as heldGoodSince, lastAccessChange, onAccessCommitted, spendId } from '../store/access-generation'
import type { accessAndBudget, SpentTotal } from '../store/credits'
import type { RedisPort } from '../store/redis'
import type { Unsubscribe } from '../store/redis/port'

type Answer = Awaited<ReturnType<typeof accessAndBudget>>

/** Entries kept at most; the oldest goes first. */
const MAX_ENTRIES = 10_000
/** Where every process publishes the workspaces whose access or budget a committed write changed. */
export const ACCESS_CHANNEL = 'access.changed'
/** This process, in its messages: its own changes were applied when they were committed. */
const ORIGIN = randomBase62(16)

/**
 * The answers of the hot read before a model call (`accessAndBudget`: the workspace, the caller's
 * role, the budget and the period's committed spend), kept until a write that could change one of
 * them (store/access-generation.ts): one query less per call while nothing changes. An answer with a
 * hard-limit budget also depends on the workspace's spend (`spendId`), which every batch of its
 * charges announces; any other answer outlives those batches. A batch of this process' own charges
 * hands its new committed total to the answers it would drop instead (`spent`; in server mode only
 * where no other change of the spend was heard while it ran): a busy hard-limit workspace's calls do
 * not read their access again after each batch. A knowledge
 * search keeps its base's row here too (domain/knowledge/search.ts), under the base's own id, which
 * its update and delete announce as a workspace's change is announced.
 *
 * - Embedded database: its one connection answers in order and no other process writes it, so an
 *   answer stays good until a write of its workspace is sent. No time limit.
 * - Server mode (`start`): every committed change of a workspace (row, members, budget, a batch of
 *   charges) is published on Redis (`ACCESS_CHANNEL`, "<process> <workspace ids>") before the write's
 *   caller hears back, and each process drops that workspace's answers when the message arrives. An
 *   answer is kept only if no change of its workspace arrived between its read's sending and its
 *   answer, and for `ttlMs` at most: the bound for a change that was never published (a manual
 *   UPDATE, a process killed between its commit and its publish, a message lost). While the
 *   subscription is lost nothing is kept or served; once it is back, everything is dropped.
 */
export class AccessCache {
  private entries = new Map<string, Entry>()
  /** The keys of the hard-limit answers, by the spend they hold (`spendKey`): what `spent` updates. */
  private bySpend = new Map<string, Set<string>>()
  /** False while the subscription that tells of other processes' changes is lost. */
  private live = true
  private stops: (() => unknown)[] = []

  /** `ttlMs`: how long an answer is kept at most (Infinity on the embedded database; 0 keeps nothing). */
  constructor(private readonly ttlMs: number) {}

  get enabled(): boolean {
    return this.ttlMs > 0 && this.live
  }

  /** Server mode: other processes' changes arrive over Redis, this process' are published there. */
  async start(redis: RedisPort, log: Logger): Promise<void> {
    if (this.ttlMs <= 0) return
    const unsubscribe: Unsubscribe = await redis.subscribe(
      ACCESS_CHANNEL,
      (message) => {
        const ids = message.split(' ')
        // This process' own changes were applied when they were committed.
        if (ids[0] === ORIGIN) return
        for (let i = 1; i < ids.length; i++) accessChanged(ids[i]!)
      },
      (lost) => {
        everyAccessChanged()
        this.entries.clear()
        this.bySpend.clear()
        this.live = !lost
      },
    )
    let failures = 0
    const off = onAccessCommitted(async (ids) => {
      try {
        await redis.publish(ACCESS_CHANNEL, `${ORIGIN} ${ids.join(' ')}`)
      } catch (err) {
        // The write is committed; other processes follow it within ttlMs.
        if (failures++ % 100 === 0) log.warn({ err, workspaces: ids }, `access cache: a change could not be published; other processes see it within ${this.ttlMs} ms`)
      }
    })
    this.stops.push(off, unsubscribe)
  }

  async stop(): Promise<void> {
    for (const stop of this.stops.splice(0)) await stop()
  }

  /** The access answer kept under `key` (about `workspaceId`; its spend that of `period`, YYYY-MM-DD), else `read`'s, kept. */
  async get(workspaceId: string, key: string, read: () => Promise<Answer>, period?: string): Promise<Answer> {
    const hit = this.peek<Answer>(key)
    if (hit !== undefined) return hit
    const sent = this.begin()
    const answer = await read()
    this.keepAccess(workspaceId, period, key, sent, answer)
    return answer
  }

  /**
   * `keep` for an access answer about `workspaceId` whose budget's spend is that of `period`
   * (YYYY-MM-DD; without it, a batch of charges drops the answer instead of updating it: `spent`).
   */
  keepAccess(workspaceId: string, period: string | undefined, key: string, sent: Sent, answer: Answer): void {
    const ids = accessIds(workspaceId, answer)
    this.keep(ids, key, sent, answer, typeof ids === 'string' || period === undefined ? undefined : spendKey(workspaceId, period))
  }

  /**
   * A batch of this process' charges is committed: the hard-limit answers it made out of date
   * (their spend announced by the batch, nothing else changed since their read) hold its new total
   * instead, as a read sent with the batch would have answered. Only where the batch's announce is
   * still the spend's last change. On the embedded database, whose one connection answers in order,
   * a read sent after the batch sees it, and the batch saw every write sent before it. In server mode
   * the batch is announced once more when committed (`changingAccess`), and its generation is that
   * announce's only when nothing else changed the spend between the two (another process' batch, heard
   * over Redis, may have committed after it): its total, read under the period row's lock, holds every
   * charge committed before it. A change committed after it and heard later drops the answer then, as
   * it drops an answer read just before that change. The answer keeps its read's time: `ttlMs` still
   * bounds it. Called in the same turn as the charges leave the held credits (charge-outbox.ts), so a
   * check never counts them twice.
   */
  spent(totals: readonly SpentTotal[]): void {
    if (!this.enabled) return
    for (const t of totals) {
      if (!lastAccessChange(spendId(t.workspace_id), t.generation)) continue
      const keys = this.bySpend.get(spendKey(t.workspace_id, t.period))
      if (!keys) continue
      for (const key of keys) {
        const e = this.entries.get(key)!
        const answer = e.answer as NonNullable<Answer>
        // Read after the batch was sent: it saw it. Its workspace changed since its read: dropped.
        if (e.generation >= t.generation || accessChangedSince(t.workspace_id, e.generation) || !answer.budget) continue
        e.answer = { ...answer, budget: { ...answer.budget, used: t.used } }
        e.generation = t.generation
      }
    }
  }

  /** A kept answer that is still good (its workspace unchanged since its read, within `ttlMs`), or undefined. */
  peek<T>(key: string): T | undefined {
    if (!this.enabled) return undefined
    const hit = this.entries.get(key)
    if (!hit || !goodSince(hit.ids, hit.generation) || this.now() - hit.at >= this.ttlMs) return undefined
    return hit.answer as T
  }

  /** Taken just before a read is sent; `keep` needs it. */
  begin(): Sent {
    return { generation: accessGeneration(), at: this.now() }
  }

  /**
   * Keeps `answer` (read about `ids`, sent at `sent`), only if none of them changed since the read
   * was sent: it may not have seen that change. `ids` are the ids that every write changing the
   * answer announces (store/access-generation.ts): a workspace's (`accessIds` for an access answer),
   * or a knowledge base's for its row (domain/knowledge/bases.ts announces its updates and deletes).
   */
  keep(ids: string | readonly string[], key: string, sent: Sent, answer: unknown, spend?: string): void {
    if (!this.enabled || changedSince(ids, sent.generation)) return
    if (this.entries.has(key)) this.drop(key)
    else if (this.entries.size >= MAX_ENTRIES) this.drop(this.entries.keys().next().value!)
    this.entries.set(key, { ids, generation: sent.generation, at: sent.at, answer, spend })
    if (spend !== undefined) {
      const keys = this.bySpend.get(spend)
      if (keys) keys.add(key)
      else this.bySpend.set(spend, new Set([key]))
    }
  }

  private drop(key: string): void {
    const spend = this.entries.get(key)?.spend
    this.entries.delete(key)
    if (spend === undefined) return
    const keys = this.bySpend.get(spend)!
    keys.delete(key)
    if (keys.size === 0) this.bySpend.delete(spend)
  }

  private now(): number {
    return this.ttlMs === Infinity ? 0 : Date.now()
  }
}

interface Entry {
  ids: string | readonly string[]
  generation: number
  at: number
  answer: unknown
  /** A hard-limit access answer: the workspace's spend and period its `used` is (`spendKey`). */
  spend?: string
}

const spendKey = (workspaceId: string, period: string) => `${workspaceId} ${period}`

/** What an access answer about `workspaceId` depends on: the workspace, and its spend when a hard limit compares it. */
function accessIds(workspaceId: string, answer: Answer): string | readonly string[] {
  return answer?.budget?.hard_limit ? [workspaceId, spendId(workspaceId)] : workspaceId
}

/** Whether an answer kept at `generation` about `ids` is still good (a batch of held charges in flight leaves it so: store/access-generation.ts, `goodSince`). */
function goodSince(ids: string | readonly string[], generation: number): boolean {
  if (typeof ids === 'string') return heldGoodSince(ids, generation)
  for (const id of ids) if (!heldGoodSince(id, generation)) return false
  return true
}

function changedSince(ids: string | readonly string[], generation: number): boolean {
  if (typeof ids === 'string') return accessChangedSince(ids, generation)
  for (const id of ids) if (accessChangedSince(id, generation)) return true
  return false
}

/** When a read was sent: the generation (store/access-generation.ts) and the time. */
export interface Sent {
  generation: number
  at: number
}
