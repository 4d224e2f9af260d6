import Redis, { ReplyError } from 'ioredis'
import { RedisUnavailableError, type DueTimer, type RedisPort, type TakeResult, type TokenBucket, type Unsubscribe } from './port'

// Token bucket in one round trip. The clock is Redis' own (TIME), so several processes whose clocks
// drift still share one bucket fairly.
const TAKE = `
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local b = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(b[1])
local at = tonumber(b[2])
if tokens == nil then tokens = capacity; at = now end
tokens = math.min(capacity, tokens + (math.max(0, now - at) / 1000) * rate)
local allowed = 0
if tokens >= 1 then tokens = tokens - 1; allowed = 1 end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', now)
redis.call('PEXPIRE', KEYS[1], math.ceil(capacity / rate * 1000) + 1000)
return { allowed, tostring(tokens) }
`

// Claims due timers: read and removal (or postponement) happen in one script, so each timer fires in
// exactly one worker. With ARGV[3] > 0 a claimed timer is not removed but pushed ARGV[3] ms later: if
// its claimer dies before re-arming or cancelling it, it fires again elsewhere.
const CLAIM = `
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
local lease = tonumber(ARGV[3])
for i = 1, #due, 2 do
  local id = due[i]
  local payload = redis.call('HGET', KEYS[2], id)
  if lease > 0 then
    redis.call('ZADD', KEYS[1], tonumber(ARGV[1]) + lease, id)
  else
    redis.call('ZREM', KEYS[1], id)
    redis.call('HDEL', KEYS[2], id)
  end
  table.insert(out, id)
  table.insert(out, due[i + 1])
  table.insert(out, payload or '')
end
return out
`

// Compare and delete: the key goes only if it still holds the value the caller read.
const DEL_IF = `
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`

type Scripted = Redis & {
  apTake(key: string, capacity: number, rate: number): Promise<[number, string]>
  apClaim(zset: string, hash: string, now: number, limit: number, lease: number): Promise<string[]>
  apDelIf(key: string, value: string): Promise<number>
}

const COMMAND_TIMEOUT_MS = 2000

/**
 * Error replies that say Redis cannot serve now, not that the command was wrong: starting up and
 * loading its data, a script running too long, a replica or a cluster without its primary, a disk
 * that refuses writes.
 */
const NOT_SERVING = /^(LOADING|BUSY|MASTERDOWN|READONLY|TRYAGAIN|CLUSTERDOWN|MISCONF)\b/

/**
 * A failed command: Redis's own error replies pass through (a bug of ours), unless they say it cannot
 * serve now; anything else (refused, reset, timed out, ioredis giving up after its retries:
 * MaxRetriesPerRequestError) means it was not reached.
 */
function unreachable(err: unknown): never {
  if (err instanceof ReplyError && !NOT_SERVING.test((err as Error).message)) throw err
  throw new RedisUnavailableError(err)
}

/** The client's states once a connection was lost: no command is queued then, it fails at once. */
const LOST = new Set(['reconnecting', 'close', 'end'])

export class IoRedis implements RedisPort {
  readonly kind = 'redis' as const
  private client: Scripted
  private subscriber: Redis | null = null
  private handlers = new Map<string, Set<(message: string) => void>>()
  /** Channels left while the subscriber's connection was lost: ioredis subscribes them again on reconnect. */
  private stale = new Set<string>()
  /** Told when the subscriber's connection is lost and when it is back (`subscribe`'s `onReset`). */
  private resets = new Set<(lost: boolean) => void>()
  private subscriberLost = false

  /** `prefix` namespaces every key and channel (tests give each file its own). */
  constructor(url: string, private readonly prefix = 'ap:') {
    // A command waits at most COMMAND_TIMEOUT_MS (a Redis that hangs); while disconnected, it waits for
    // two reconnection attempts at most, which come every 500 ms at the slowest (ioredis' default
    // backs off to 2 s: a request waited ~4 s for its 503).
    const client = new Redis(url, {
      keyPrefix: prefix,
      maxRetriesPerRequest: 2,
      enableAutoPipelining: true,
      // The rate limit's take is written at once: auto-pipelined, it would wait for setImmediate, after
      // the request's body is parsed and validated, instead of overlapping them (src/routes/plugins/auth.ts;
      // ~0.3 ms more before a model call's upstream request in bench:peers' streams, bench/README.peers.md).
      autoPipeliningIgnoredCommands: ['apTake'],
      commandTimeout: COMMAND_TIMEOUT_MS,
      retryStrategy: (times) => Math.min(times * 50, 500),
    })
    client.defineCommand('apTake', { numberOfKeys: 1, lua: TAKE })
    client.defineCommand('apClaim', { numberOfKeys: 2, lua: CLAIM })
    client.defineCommand('apDelIf', { numberOfKeys: 1, lua: DEL_IF })
    // Errors surface on the commands themselves (and /readyz); without a listener ioredis logs each one.
    client.on('error', () => {})
    this.client = client as Scripted
  }

  /**
   * Runs one command. While the connection is lost, fails at once instead of waiting in ioredis'
   * offline queue (a request would wait for two reconnection attempts per command, seconds in all);
   * while it first connects, commands wait for it.
   */
  private run<T>(command: () => Promise<T>, connection: Redis = this.client): Promise<T> {
    if (LOST.has(connection.status)) return Promise.reject(new RedisUnavailableError(new Error(`connection ${connection.status}`)))
    try {
      return command().catch(unreachable)
    } catch (err) {
      // ioredis throws synchronously for some states (a connection ended by quit()).
      return Promise.reject(new RedisUnavailableError(err))
    }
  }

  async setIfAbsent(key: string, value: string, ttlMs: number) {
    return (await this.run(() => this.client.set(key, value, 'PX', ttlMs, 'NX'))) === 'OK'
  }

  get(key: string) {
    return this.run(() => this.client.get(key))
  }

  async set(key: string, value: string, ttlMs: number) {
    await this.run(() => this.client.set(key, value, 'PX', ttlMs))
  }

  async del(key: string) {
    await this.run(() => this.client.del(key))
  }

  async delIfValue(key: string, value: string) {
    return (await this.run(() => this.client.apDelIf(key, value))) === 1
  }

  pttl(key: string) {
    return this.run(() => this.client.pttl(key))
  }

  async take(key: string, { capacity, refillPerSecond }: TokenBucket): Promise<TakeResult> {
    const [allowed, raw] = await this.run(() => this.client.apTake(`rl:${key}`, capacity, refillPerSecond))
    const tokens = Number(raw)
    return {
      allowed: allowed === 1,
      remaining: Math.floor(tokens),
      retryAfterMs: allowed === 1 ? 0 : Math.ceil(((1 - tokens) / refillPerSecond) * 1000),
      resetMs: Math.ceil(((capacity - tokens) / refillPerSecond) * 1000),
    }
  }

  async scheduleTimer(id: string, dueAt: number, payload: string) {
    await this.run(() => this.client.multi().zadd('timers', dueAt, id).hset('timers:payload', id, payload).exec())
  }

  async cancelTimer(id: string) {
    await this.run(() => this.client.multi().zrem('timers', id).hdel('timers:payload', id).exec())
  }

  async claimDueTimers(now: number, limit: number, leaseMs = 0): Promise<DueTimer[]> {
    const flat = await this.run(() => this.client.apClaim('timers', 'timers:payload', now, limit, leaseMs))
    const out: DueTimer[] = []
    for (let i = 0; i < flat.length; i += 3) out.push({ id: flat[i]!, dueAt: Number(flat[i + 1]), payload: flat[i + 2]! })
    return out
  }

  async publish(channel: string, message: string) {
    await this.run(() => this.client.publish(this.prefix + channel, message))
  }

  /**
   * Fails with RedisUnavailableError when Redis cannot be reached, like every command. The returned
   * function never fails: a subscription whose connection is lost is gone from Redis already, and
   * the channel is left for good once the connection is back (ioredis would subscribe it again).
   */
  async subscribe(channel: string, handler: (message: string) => void, onReset?: (lost: boolean) => void): Promise<Unsubscribe> {
    const full = this.prefix + channel
    const sub = this.subscriberConnection()
    if (onReset) this.resets.add(onReset)
    let set = this.handlers.get(full)
    if (!set) {
      const created = new Set<(message: string) => void>()
      this.handlers.set(full, created)
      try {
        await this.run(() => sub.subscribe(full), sub)
      } catch (err) {
        // Not subscribed: the next caller sends SUBSCRIBE again.
        if (this.handlers.get(full) === created) this.handlers.delete(full)
        if (onReset) this.resets.delete(onReset)
        throw err
      }
      set = created
    }
    set.add(handler)
    const handlers = set
    return async () => {
      if (onReset) this.resets.delete(onReset)
      handlers.delete(handler)
      if (handlers.size > 0 || this.handlers.get(full) !== handlers) return
      this.handlers.delete(full)
      await this.leave(full)
    }
  }

  private subscriberConnection(): Redis {
    if (!this.subscriber) {
      // A subscribed connection can do nothing else, so pub/sub gets its own.
      const sub = this.client.duplicate({ keyPrefix: '' })
      sub.on('error', () => {})
      sub.on('message', (ch: string, message: string) => {
        for (const h of this.handlers.get(ch) ?? []) h(message)
      })
      // Sent after ioredis' own re-subscription on reconnect, on the same connection.
      sub.on('ready', () => {
        for (const full of [...this.stale]) void this.leave(full)
        if (!this.subscriberLost) return
        // The PING's answer follows the re-subscription's: from then on no message is missed.
        sub.ping().then(
          () => {
            if (sub.status !== 'ready' || !this.subscriberLost) return
            this.subscriberLost = false
            for (const reset of this.resets) reset(false)
          },
          () => {},
        )
      })
      sub.on('close', () => {
        if (this.subscriberLost) return
        this.subscriberLost = true
        for (const reset of this.resets) reset(true)
      })
      this.subscriber = sub
    }
    return this.subscriber
  }

  /** UNSUBSCRIBE, or remembered for the next reconnect when it cannot be sent now; never fails. */
  private async leave(full: string) {
    const sub = this.subscriber
    // Subscribed again meanwhile: nothing to leave.
    if (!sub || this.handlers.has(full)) {
      this.stale.delete(full)
      return
    }
    this.stale.add(full)
    try {
      await this.run(() => sub.unsubscribe(full), sub)
      this.stale.delete(full)
    } catch {
      // Kept in `stale`: left once the connection is back.
    }
  }

  async ping() {
    await this.run(() => this.client.ping())
  }

  async close() {
    this.handlers.clear()
    this.stale.clear()
    this.resets.clear()
    await Promise.allSettled([this.client.quit(), this.subscriber?.quit()])
  }
}
