import { afterAll, afterEach, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import Redis from 'ioredis'
import type { RedisPort } from '../../src/store/redis'
import { IoRedis } from '../../src/store/redis/ioredis'
import { MemoryRedis } from '../../src/store/redis/memory'
import { waitFor } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * One contract, two adapters: whatever the in-process stand-in does, real Redis must do too, and the
 * other way round. A namespace is what one Redis deployment looks like to the service: every
 * connection opened on it shares keys, timers and channels; two namespaces share nothing.
 */
interface Namespace {
  connect(): RedisPort
}

interface Adapter {
  newNamespace(): Namespace
}

function redisContract(adapter: Adapter) {
  const opened: RedisPort[] = []
  let ns: Namespace
  let redis: RedisPort
  const connect = (n = ns) => {
    const r = n.connect()
    opened.push(r)
    return r
  }
  const fresh = () => {
    ns = adapter.newNamespace()
    redis = connect()
  }
  afterEach(async () => {
    await Promise.all(opened.splice(0).map((r) => r.close()))
  })

  describe('keys', () => {
    test('setIfAbsent creates the key once (NX) with its TTL', async () => {
      fresh()
      expect(await redis.setIfAbsent('idem:a', 'first', 10_000)).toBe(true)
      expect(await redis.setIfAbsent('idem:a', 'second', 10_000)).toBe(false)
      expect(await redis.get('idem:a')).toBe('first')
      const ttl = await redis.pttl('idem:a')
      expect(ttl).toBeGreaterThan(8_000)
      expect(ttl).toBeLessThanOrEqual(10_000)
    })

    test('get, set (overwrites and resets the TTL), del; a missing key reads null with pttl -2', async () => {
      fresh()
      expect(await redis.get('k')).toBeNull()
      expect(await redis.pttl('k')).toBe(-2)
      await redis.set('k', 'v1', 1_000)
      await redis.set('k', 'v2', 60_000)
      expect(await redis.get('k')).toBe('v2')
      expect(await redis.pttl('k')).toBeGreaterThan(50_000)
      await redis.del('k')
      expect(await redis.get('k')).toBeNull()
      expect(await redis.pttl('k')).toBe(-2)
      expect(await redis.setIfAbsent('k', 'v3', 1_000)).toBe(true)
      await redis.del('never-existed')
    })

    test('delIfValue deletes the key only while it holds the value read (a stale in-flight record, not its successor)', async () => {
      fresh()
      await redis.set('idem:c', 'old', 10_000)
      expect(await redis.delIfValue('idem:c', 'other')).toBe(false)
      expect(await redis.get('idem:c')).toBe('old')
      expect(await redis.delIfValue('idem:c', 'old')).toBe(true)
      expect(await redis.get('idem:c')).toBeNull()
      expect(await redis.delIfValue('idem:c', 'old')).toBe(false)
    })

    test('a key expires after its TTL, and setIfAbsent succeeds again', async () => {
      fresh()
      expect(await redis.setIfAbsent('short', 'x', 60)).toBe(true)
      await waitFor(async () => (await redis.get('short')) === null, { timeoutMs: 3_000, what: 'the key to expire' })
      expect(await redis.pttl('short')).toBe(-2)
      expect(await redis.setIfAbsent('short', 'y', 60_000)).toBe(true)
      expect(await redis.get('short')).toBe('y')
    })

    test('values are opaque strings, kept byte for byte', async () => {
      fresh()
      const value = JSON.stringify({ status: 201, body: '{"ü":"✓ 😀"}', nul: 'a\u0000b' })
      await redis.set('bytes', value, 10_000)
      expect(await redis.get('bytes')).toBe(value)
    })

    test('every connection on a namespace sees the same keys; another namespace sees none of them', async () => {
      fresh()
      const peer = connect()
      const other = connect(adapter.newNamespace())
      expect(await redis.setIfAbsent('shared', 'a', 10_000)).toBe(true)
      expect(await peer.setIfAbsent('shared', 'b', 10_000)).toBe(false)
      expect(await peer.get('shared')).toBe('a')
      expect(await other.get('shared')).toBeNull()
      expect(await other.setIfAbsent('shared', 'c', 10_000)).toBe(true)
      expect(await redis.get('shared')).toBe('a')
    })
  })

  describe('token bucket', () => {
    test('a full bucket allows its burst, counting down, then denies with a retry time', async () => {
      fresh()
      const bucket = { capacity: 5, refillPerSecond: 1 }
      const remaining: number[] = []
      for (let i = 0; i < 5; i++) {
        const r = await redis.take('burst', bucket)
        expect(r.allowed).toBe(true)
        expect(r.retryAfterMs).toBe(0)
        remaining.push(r.remaining)
      }
      expect(remaining).toEqual([4, 3, 2, 1, 0])
      const denied = await redis.take('burst', bucket)
      expect(denied.allowed).toBe(false)
      expect(denied.remaining).toBe(0)
      expect(denied.retryAfterMs).toBeGreaterThan(0)
      expect(denied.retryAfterMs).toBeLessThanOrEqual(1_000)
      expect(denied.resetMs).toBeGreaterThan(4_000)
      expect(denied.resetMs).toBeLessThanOrEqual(5_000)
    })

    test('buckets are per key and shared by every connection of the namespace', async () => {
      fresh()
      const peer = connect()
      const bucket = { capacity: 2, refillPerSecond: 0.01 }
      expect((await redis.take('a', bucket)).allowed).toBe(true)
      expect((await peer.take('a', bucket)).allowed).toBe(true)
      expect((await peer.take('a', bucket)).allowed).toBe(false)
      expect((await redis.take('a', bucket)).allowed).toBe(false)
      const b = await peer.take('b', bucket)
      expect(b).toMatchObject({ allowed: true, remaining: 1 })
    })

    test('an empty bucket refills over time, never beyond its capacity', async () => {
      fresh()
      // One token every 250 ms.
      const bucket = { capacity: 2, refillPerSecond: 4 }
      expect((await redis.take('refill', bucket)).remaining).toBe(1)
      expect((await redis.take('refill', bucket)).remaining).toBe(0)
      const denied = await redis.take('refill', bucket)
      expect(denied.allowed).toBe(false)
      expect(denied.retryAfterMs).toBeGreaterThan(0)
      expect(denied.retryAfterMs).toBeLessThanOrEqual(250)
      // Polls 800 ms apart: by the first allowed take, at least 3.2 tokens' worth of time has passed
      // since a denied one, yet the bucket holds only its capacity of 2.
      const refilled = await waitFor(
        async () => {
          const r = await redis.take('refill', bucket)
          return r.allowed ? r : null
        },
        { timeoutMs: 5_000, intervalMs: 800, what: 'a token to refill' },
      )
      expect(refilled!.remaining).toBe(1)
      expect(refilled!.retryAfterMs).toBe(0)
    })
  })

  describe('timers', () => {
    test('claimDueTimers returns only due timers, in dueAt order, with their payloads, once', async () => {
      fresh()
      const now = Date.now()
      await redis.scheduleTimer('t:late', now + 60_000, 'late')
      await redis.scheduleTimer('t:second', now - 500, 'second')
      await redis.scheduleTimer('t:first', now - 1_000, 'first')
      await redis.scheduleTimer('t:third', now, 'third')
      const claimed = await redis.claimDueTimers(now, 10)
      expect(claimed).toEqual([
        { id: 't:first', dueAt: now - 1_000, payload: 'first' },
        { id: 't:second', dueAt: now - 500, payload: 'second' },
        { id: 't:third', dueAt: now, payload: 'third' },
      ])
      expect(await redis.claimDueTimers(now, 10)).toEqual([])
      expect(await redis.claimDueTimers(now + 60_000, 10)).toEqual([{ id: 't:late', dueAt: now + 60_000, payload: 'late' }])
    })

    test('claimDueTimers takes at most `limit`, earliest first', async () => {
      fresh()
      const now = Date.now()
      for (let i = 0; i < 5; i++) await redis.scheduleTimer(`t:${i}`, now - 5_000 + i, `p${i}`)
      expect((await redis.claimDueTimers(now, 2)).map((t) => t.id)).toEqual(['t:0', 't:1'])
      expect((await redis.claimDueTimers(now, 10)).map((t) => t.id)).toEqual(['t:2', 't:3', 't:4'])
    })

    test('with a lease, a claimed timer comes back after it unless re-armed or cancelled', async () => {
      fresh()
      const now = Date.now()
      await redis.scheduleTimer('t:a', now - 10, 'a')
      await redis.scheduleTimer('t:b', now - 5, 'b')
      await redis.scheduleTimer('t:c', now - 1, 'c')
      expect((await redis.claimDueTimers(now, 10, 5_000)).map((t) => t.id)).toEqual(['t:a', 't:b', 't:c'])
      // Claimed once within the lease, whoever asks.
      expect(await redis.claimDueTimers(now + 4_999, 10, 5_000)).toEqual([])
      await redis.scheduleTimer('t:a', now + 60_000, 'a again') // its claimer re-armed it
      await redis.cancelTimer('t:b') // its claimer settled it
      // t:c's claimer died: it fires again when the lease runs out, with its payload.
      expect(await redis.claimDueTimers(now + 5_000, 10)).toEqual([{ id: 't:c', dueAt: now + 5_000, payload: 'c' }])
      expect((await redis.claimDueTimers(now + 60_000, 10)).map((t) => t.payload)).toEqual(['a again'])
    })

    test('claiming many timers takes them in order, in pages', async () => {
      fresh()
      const now = Date.now()
      const ids = Array.from({ length: 300 }, (_, i) => `t:${String(i).padStart(3, '0')}`)
      for (const [i, id] of [...ids.entries()].reverse()) await redis.scheduleTimer(id, now - 1_000 + (i >> 1), id)
      const first = await redis.claimDueTimers(now, 200)
      const rest = await redis.claimDueTimers(now, 200)
      expect([...first, ...rest].map((t) => t.id)).toEqual(ids)
    })

    test('scheduling the same id again moves the timer (and replaces its payload)', async () => {
      fresh()
      const now = Date.now()
      await redis.scheduleTimer('delivery:dlv_1:retry', now - 10, 'attempt 2')
      await redis.scheduleTimer('delivery:dlv_1:retry', now + 30_000, 'attempt 3')
      expect(await redis.claimDueTimers(now, 10)).toEqual([])
      expect(await redis.claimDueTimers(now + 30_000, 10)).toEqual([{ id: 'delivery:dlv_1:retry', dueAt: now + 30_000, payload: 'attempt 3' }])
      expect(await redis.claimDueTimers(now + 60_000, 10)).toEqual([])
    })

    test('a cancelled timer never fires; cancelling an unknown id is harmless', async () => {
      fresh()
      const now = Date.now()
      await redis.scheduleTimer('gone', now - 10, 'x')
      await redis.scheduleTimer('kept', now - 5, 'y')
      await redis.cancelTimer('gone')
      await redis.cancelTimer('never-scheduled')
      expect((await redis.claimDueTimers(now + 3_600_000, 10)).map((t) => t.id)).toEqual(['kept'])
    })

    test('timers are shared by every connection of the namespace', async () => {
      fresh()
      const peer = connect()
      const now = Date.now()
      await redis.scheduleTimer('cross', now - 1, 'from a')
      expect(await peer.claimDueTimers(now, 10)).toEqual([{ id: 'cross', dueAt: now - 1, payload: 'from a' }])
      expect(await redis.claimDueTimers(now, 10)).toEqual([])
    })

    test('many claimers racing: each timer is claimed exactly once', async () => {
      fresh()
      const claimers = [redis, ...Array.from({ length: 4 }, () => connect())]
      const now = Date.now()
      const ids = Array.from({ length: 200 }, (_, i) => `race:${String(i).padStart(3, '0')}`)
      await Promise.all(ids.map((id, i) => redis.scheduleTimer(id, now - 1_000 + (i % 17), `payload of ${id}`)))
      const loops = claimers.map(async (c) => {
        const mine: string[] = []
        for (;;) {
          const batch = await c.claimDueTimers(now, 7)
          if (batch.length === 0) return mine
          for (const t of batch) {
            expect(t.payload).toBe(`payload of ${t.id}`)
            mine.push(t.id)
          }
        }
      })
      const results = await Promise.all(loops)
      const all = results.flat()
      expect(all.length).toBe(200)
      expect(new Set(all).size).toBe(200)
      expect([...all].sort()).toEqual(ids)
    })
  })

  describe('pub/sub', () => {
    test('a subscriber receives what is published on its channel, in order, and nothing else', async () => {
      fresh()
      const got: string[] = []
      await redis.subscribe('ch:a', (m) => got.push(m))
      const publisher = connect()
      await publisher.publish('ch:b', 'not for a')
      for (const m of ['one', 'two', 'three']) await publisher.publish('ch:a', m)
      await waitFor(() => got.length >= 3, { timeoutMs: 3_000, what: 'three messages' })
      expect(got).toEqual(['one', 'two', 'three'])
    })

    test('two subscribers on two connections both receive each message', async () => {
      fresh()
      const other = connect()
      const a: string[] = []
      const b: string[] = []
      await redis.subscribe('api-keys.revoked', (m) => a.push(m))
      await other.subscribe('api-keys.revoked', (m) => b.push(m))
      await connect().publish('api-keys.revoked', 'key_1')
      await waitFor(() => a.length === 1 && b.length === 1, { timeoutMs: 3_000, what: 'both subscribers to receive' })
      expect(a).toEqual(['key_1'])
      expect(b).toEqual(['key_1'])
    })

    test('two handlers on one connection both receive; unsubscribing one leaves the other', async () => {
      fresh()
      const a: string[] = []
      const b: string[] = []
      const offA = await redis.subscribe('ch', (m) => a.push(m))
      await redis.subscribe('ch', (m) => b.push(m))
      await redis.publish('ch', 'm1')
      await waitFor(() => a.length === 1 && b.length === 1, { timeoutMs: 3_000, what: 'both handlers' })
      await offA()
      await redis.publish('ch', 'm2')
      await waitFor(() => b.length === 2, { timeoutMs: 3_000, what: 'the remaining handler' })
      // One message is dispatched to every handler of the connection at once: had `a` still been
      // subscribed, it would have received m2 by now.
      expect(a).toEqual(['m1'])
      expect(b).toEqual(['m1', 'm2'])
    })

    test('after unsubscribe, nothing more arrives', async () => {
      fresh()
      const got: string[] = []
      const marks: string[] = []
      const off = await redis.subscribe('ch:gone', (m) => got.push(m))
      await redis.subscribe('ch:marker', (m) => marks.push(m))
      const publisher = connect()
      await publisher.publish('ch:gone', 'before')
      await waitFor(() => got.length === 1, { timeoutMs: 3_000, what: 'the first message' })
      await off()
      await off()
      await publisher.publish('ch:gone', 'after')
      await publisher.publish('ch:marker', 'mark')
      // One publisher, one subscriber connection: messages arrive in publish order, so once the
      // marker is here, "after" would have been too.
      await waitFor(() => marks.length === 1, { timeoutMs: 3_000, what: 'the marker' })
      expect(got).toEqual(['before'])
    })

    test('channels of another namespace are not heard', async () => {
      fresh()
      const got: string[] = []
      await redis.subscribe('ch', (m) => got.push(`mine:${m}`))
      const stranger = connect(adapter.newNamespace())
      await stranger.subscribe('ch', (m) => got.push(`theirs:${m}`))
      await stranger.publish('ch', 'x')
      await redis.publish('ch', 'y')
      await waitFor(() => got.length >= 2, { timeoutMs: 3_000, what: 'each namespace to hear its own' })
      expect(got.sort()).toEqual(['mine:y', 'theirs:x'])
    })
  })

  test('ping answers, and close is clean', async () => {
    fresh()
    await redis.ping()
    await redis.subscribe('x', () => {})
    const r = connect()
    await r.ping()
    await r.close()
  })
}

describe('MemoryRedis (in-process stand-in)', () => {
  test('token bucket arithmetic on a controlled clock', async () => {
    let now = 1_000_000
    const redis = new MemoryRedis(() => now)
    const bucket = { capacity: 3, refillPerSecond: 2 }
    expect((await redis.take('k', bucket)).remaining).toBe(2)
    expect((await redis.take('k', bucket)).remaining).toBe(1)
    expect(await redis.take('k', bucket)).toEqual({ allowed: true, remaining: 0, retryAfterMs: 0, resetMs: 1_500 })
    expect(await redis.take('k', bucket)).toEqual({ allowed: false, remaining: 0, retryAfterMs: 500, resetMs: 1_500 })
    now += 250
    expect(await redis.take('k', bucket)).toMatchObject({ allowed: false, retryAfterMs: 250 })
    now += 250
    expect(await redis.take('k', bucket)).toMatchObject({ allowed: true, remaining: 0 })
    now += 3_600_000
    expect(await redis.take('k', bucket)).toMatchObject({ allowed: true, remaining: 2, resetMs: 500 })
    await redis.close()
  })

  test('TTLs on a controlled clock: a key lives exactly its TTL', async () => {
    let now = 5_000
    const redis = new MemoryRedis(() => now)
    await redis.set('k', 'v', 100)
    now += 99
    expect(await redis.pttl('k')).toBe(1)
    expect(await redis.get('k')).toBe('v')
    now += 1
    expect(await redis.get('k')).toBeNull()
    expect(await redis.pttl('k')).toBe(-2)
    await redis.close()
  })

  redisContract({
    newNamespace() {
      // One process, one instance: every "connection" of a namespace is the instance itself.
      const instance = new MemoryRedis()
      return { connect: () => instance }
    },
  })
})

const url = process.env.REDIS_URL
const runPrefix = `test:redis-contract:${process.pid}:${Math.random().toString(36).slice(2, 10)}:`

if (url) {
  describe('IoRedis (real Redis at REDIS_URL)', () => {
    let n = 0
    redisContract({
      newNamespace() {
        // Separate IoRedis instances with one prefix are separate connections to one namespace,
        // which is how several service processes share Redis.
        const prefix = `${runPrefix}${n++}:`
        return { connect: () => new IoRedis(url, prefix) }
      },
    })
    afterAll(async () => {
      const admin = new Redis(url)
      let cursor = '0'
      do {
        const [next, keys] = await admin.scan(cursor, 'MATCH', `${runPrefix}*`, 'COUNT', 500)
        if (keys.length) await admin.del(...keys)
        cursor = next
      } while (cursor !== '0')
      await admin.quit()
    })
  })
} else {
  describe('IoRedis (real Redis)', () => {
    test.skip('skipped: REDIS_URL is unset (CI always sets it)', () => {})
  })
}
