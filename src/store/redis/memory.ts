import { KeyJournal } from './journal'
import type { DueTimer, RedisPort, TakeResult, TokenBucket, Unsubscribe } from './port'

/** Keys that outlive the process: those starting with one of `prefixes`, journaled in `dir`. */
export interface Durable {
  dir: string
  prefixes: string[]
}

/**
 * The in-process stand-in for Redis when REDIS_URL is unset. Single process only: its records,
 * timers and channels are invisible to any other process. Everything is forgotten with the process,
 * except the keys `durable` names (idempotency records), which a journal in DATA_DIR keeps.
 */
export class MemoryRedis implements RedisPort {
  readonly kind = 'memory' as const
  private values = new Map<string, { value: string; expiresAt: number }>()
  private buckets = new Map<string, { tokens: number; at: number }>()
  private timers = new TimerHeap()
  private channels = new Map<string, Set<(message: string) => void>>()
  private sweeper: ReturnType<typeof setInterval>
  private journal: KeyJournal | null = null
  private durablePrefixes: string[] = []

  constructor(private readonly now: () => number = Date.now, durable?: Durable) {
    if (durable) {
      const { journal, keys } = KeyJournal.open(durable.dir, now)
      this.journal = journal
      this.durablePrefixes = durable.prefixes
      this.values = keys
    }
    // Expired keys are dropped lazily on read; this sweep bounds memory for keys never read again.
    this.sweeper = setInterval(() => this.sweep(), 60_000)
    this.sweeper.unref?.()
  }

  private durable(key: string) {
    if (!this.journal) return false
    for (const p of this.durablePrefixes) if (key.startsWith(p)) return true
    return false
  }

  private write(key: string, value: string, expiresAt: number) {
    // Journaled first: a write that could not be kept fails instead of being forgotten at restart.
    if (this.durable(key)) this.journal!.set(key, value, expiresAt)
    this.values.set(key, { value, expiresAt })
  }

  private live(key: string) {
    const entry = this.values.get(key)
    if (entry && entry.expiresAt <= this.now()) {
      this.values.delete(key)
      return undefined
    }
    return entry
  }

  private sweep() {
    const now = this.now()
    for (const [key, entry] of this.values) if (entry.expiresAt <= now) this.values.delete(key)
    for (const [key, b] of this.buckets) if (now - b.at > 3_600_000) this.buckets.delete(key)
    this.journal?.prune()
  }

  async setIfAbsent(key: string, value: string, ttlMs: number) {
    if (this.live(key)) return false
    this.write(key, value, this.now() + ttlMs)
    return true
  }

  async get(key: string) {
    return this.live(key)?.value ?? null
  }

  async set(key: string, value: string, ttlMs: number) {
    this.write(key, value, this.now() + ttlMs)
  }

  async del(key: string) {
    if (this.values.delete(key) && this.durable(key)) this.journal!.del(key)
  }

  async delIfValue(key: string, value: string) {
    if (this.live(key)?.value !== value) return false
    await this.del(key)
    return true
  }

  async pttl(key: string) {
    const entry = this.live(key)
    return entry ? entry.expiresAt - this.now() : -2
  }

  async take(key: string, bucket: TokenBucket): Promise<TakeResult> {
    return takeToken(this.buckets, key, bucket, this.now())
  }

  async scheduleTimer(id: string, dueAt: number, payload: string) {
    this.timers.set({ id, dueAt, payload })
  }

  async cancelTimer(id: string) {
    this.timers.delete(id)
  }

  async claimDueTimers(now: number, limit: number, leaseMs = 0) {
    const claimed: DueTimer[] = []
    while (claimed.length < limit) {
      const t = this.timers.popDue(now)
      if (!t) break
      claimed.push(t)
    }
    if (leaseMs > 0) for (const t of claimed) this.timers.set({ ...t, dueAt: now + leaseMs })
    return claimed
  }

  async publish(channel: string, message: string) {
    const handlers = this.channels.get(channel)
    if (!handlers) return
    // Delivered on a later tick, as from a real broker: a publisher never runs subscribers inline.
    for (const handler of handlers) queueMicrotask(() => handler(message))
  }

  async subscribe(channel: string, handler: (message: string) => void): Promise<Unsubscribe> {
    let handlers = this.channels.get(channel)
    if (!handlers) this.channels.set(channel, (handlers = new Set()))
    handlers.add(handler)
    return async () => {
      handlers.delete(handler)
    }
  }

  async ping() {}

  async close() {
    clearInterval(this.sweeper)
    this.channels.clear()
    this.journal?.close()
    this.journal = null
  }
}

/** The token-bucket arithmetic, shared by the in-process adapter; the Lua script mirrors it. */
function takeToken(
  buckets: Map<string, { tokens: number; at: number }>,
  key: string,
  { capacity, refillPerSecond }: TokenBucket,
  now: number,
): TakeResult {
  const prev = buckets.get(key)
  let tokens = prev ? Math.min(capacity, prev.tokens + ((now - prev.at) / 1000) * refillPerSecond) : capacity
  const allowed = tokens >= 1
  if (allowed) tokens -= 1
  buckets.set(key, { tokens, at: now })
  return {
    allowed,
    remaining: Math.floor(tokens),
    retryAfterMs: allowed ? 0 : Math.ceil(((1 - tokens) / refillPerSecond) * 1000),
    resetMs: Math.ceil(((capacity - tokens) / refillPerSecond) * 1000),
  }
}

/**
 * Timers by due time: a binary min-heap ordered like Redis' sorted set (score, then id), with lazy
 * deletion (a map holds each id's live entry; heap entries that no longer match it are skipped). A
 * claim costs O(k log n) instead of scanning every timer, which mattered with 50 000 pending
 * deliveries polled every 25 ms.
 */
class TimerHeap {
  private heap: (DueTimer & { seq: number })[] = []
  private live = new Map<string, DueTimer & { seq: number }>()
  private seq = 0

  set(t: DueTimer) {
    const entry = { ...t, seq: ++this.seq }
    this.live.set(t.id, entry)
    this.heap.push(entry)
    this.up(this.heap.length - 1)
  }

  delete(id: string) {
    this.live.delete(id)
  }

  /** Removes and returns the earliest live timer due at `now`, or null. */
  popDue(now: number): DueTimer | null {
    while (this.heap.length > 0) {
      const top = this.heap[0]!
      if (this.live.get(top.id) !== top) {
        this.pop()
        continue
      }
      if (top.dueAt > now) return null
      this.pop()
      this.live.delete(top.id)
      return { id: top.id, dueAt: top.dueAt, payload: top.payload }
    }
    return null
  }

  private less(a: DueTimer, b: DueTimer) {
    return a.dueAt < b.dueAt || (a.dueAt === b.dueAt && a.id < b.id)
  }

  private pop() {
    const last = this.heap.pop()!
    if (this.heap.length > 0) {
      this.heap[0] = last
      this.down(0)
    }
  }

  private up(i: number) {
    const h = this.heap
    while (i > 0) {
      const p = (i - 1) >> 1
      if (!this.less(h[i]!, h[p]!)) break
      ;[h[i], h[p]] = [h[p]!, h[i]!]
      i = p
    }
  }

  private down(i: number) {
    const h = this.heap
    for (;;) {
      const l = 2 * i + 1
      const r = l + 1
      let m = i
      if (l < h.length && this.less(h[l]!, h[m]!)) m = l
      if (r < h.length && this.less(h[r]!, h[m]!)) m = r
      if (m === i) return
      ;[h[i], h[m]] = [h[m]!, h[i]!]
      i = m
    }
  }
}
