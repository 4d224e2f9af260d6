import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { createLogger } from '../../src/boot'
import { ACCESS_CHANNEL, AccessCache } from '../../src/domain/access-cache'
import { accessCommitted, spendId } from '../../src/store/access-generation'
import type { AccessAndBudget } from '../../src/store/credits'
import { IoRedis } from '../../src/store/redis/ioredis'
import { waitFor } from '../helpers/harness'
import { freePort, killAll, listening, spawnProcess, type Spawned } from '../helpers/process'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The server-mode rules of the check's kept answers (src/domain/access-cache.ts), on a real
 * redis-server of this file's own: another process' message drops a workspace's answers, and only
 * that workspace's; a read answered after a message about its workspace is not kept; this process'
 * own committed change is published; while the subscription's connection is lost nothing is kept or
 * served, and once it is back every answer is dropped. (tests/e2e/access-cache.test.ts runs two
 * service processes.)
 */
let port: number
let server: Spawned | undefined
let redis: IoRedis
/** Another process' connection: publishes as it would, and listens to what this one publishes. */
let other: IoRedis
let cache: AccessCache
const heard: string[] = []

const start = () => {
  server = spawnProcess(['redis-server', '--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'])
}
const answers = () => listening(port)

beforeAll(async () => {
  port = freePort()
  start()
  await waitFor(answers, { what: 'redis-server to listen' })
  redis = new IoRedis(`redis://127.0.0.1:${port}`, 'access:')
  other = new IoRedis(`redis://127.0.0.1:${port}`, 'access:')
  await other.subscribe(ACCESS_CHANNEL, (m) => heard.push(m))
  cache = new AccessCache(600_000)
  await cache.start(redis, createLogger('silent'))
})

afterAll(async () => {
  await cache?.stop()
  await redis?.close()
  await other?.close()
  await killAll()
})

let seq = 0
type Budget = AccessAndBudget['budget']
const answer = (ws: string, budget: Budget = null): AccessAndBudget => ({ access: { id: ws, owner_id: 'u', status: 'active', role: 'admin' }, budget })
const budget = (hard_limit: boolean): Budget => ({ credits: '100', period: 'month', hard_limit, used: '1' })

/** A key of its own and a read that counts how often it runs. */
function reader(ws = `ws_kept${++seq}`, b: Budget = null) {
  let reads = 0
  const key = `${ws} u 2026-11-01`
  return {
    ws,
    get reads() {
      return reads
    },
    get: () => cache.get(ws, key, async () => (reads++, answer(ws, b))),
  }
}

/** A message as another process sends it, and the moment it has arrived here (a second, marker message after it). */
async function fromOther(...ids: string[]) {
  const marker = `ws_marker${++seq}`
  const m = reader(marker)
  await m.get()
  // Retried while the other connection is still coming back after a restart of Redis.
  const publish = (message: string) => waitFor(() => other.publish(ACCESS_CHANNEL, message).then(() => true, () => false), { what: 'a publish' })
  await publish(`otherprocess ${ids.join(' ')}`)
  await publish(`otherprocess ${marker}`)
  // Delivered in order: once the marker's answer is dropped, the message before it was applied.
  await waitFor(async () => (await m.get(), m.reads === 2), { what: 'the message to arrive' })
}

describe('answers kept in server mode', () => {
  test('another process\' message drops its workspace\'s answers, and no other', async () => {
    const a = reader()
    const b = reader()
    await a.get()
    await b.get()
    await a.get()
    await b.get()
    expect([a.reads, b.reads]).toEqual([1, 1])
    await fromOther(a.ws)
    await a.get()
    await b.get()
    expect([a.reads, b.reads]).toEqual([2, 1])
    await a.get()
    expect(a.reads).toBe(2)
  })

  test('a workspace\'s spend drops only the answers that hold a hard-limit budget', async () => {
    const hard = reader(undefined, budget(true))
    const soft = reader(undefined, budget(false))
    const none = reader()
    const all = [hard, soft, none]
    for (const r of all) await r.get()
    // Another process' batch of charges, then one of this process.
    await fromOther(...all.map((r) => spendId(r.ws)))
    for (const r of all) await r.get()
    expect(all.map((r) => r.reads)).toEqual([2, 1, 1])
    await accessCommitted(all.map((r) => spendId(r.ws)))
    for (const r of all) await r.get()
    expect(all.map((r) => r.reads)).toEqual([3, 1, 1])
    // The workspace itself still drops every one of them.
    await fromOther(...all.map((r) => r.ws))
    for (const r of all) await r.get()
    expect(all.map((r) => r.reads)).toEqual([4, 2, 2])
  })

  test('a hard-limit answer read while its workspace\'s spend changed is not kept', async () => {
    const ws = `ws_spent${++seq}`
    let release!: () => void
    const late = cache.get(ws, `${ws} u 2026-11-01`, () => new Promise<AccessAndBudget>((resolve) => (release = () => resolve(answer(ws, budget(true))))))
    await fromOther(spendId(ws))
    release()
    await late
    const r = reader(ws, budget(true))
    await r.get()
    expect(r.reads).toBe(1)
  })

  test('a read answered after a message about its workspace is not kept', async () => {
    const ws = `ws_late${++seq}`
    let release!: () => void
    const late = cache.get(ws, `${ws} u 2026-11-01`, () => new Promise<AccessAndBudget>((resolve) => (release = () => resolve(answer(ws)))))
    await fromOther(ws)
    release()
    await late
    const r = reader(ws)
    await r.get()
    expect(r.reads).toBe(1)
    await r.get()
    expect(r.reads).toBe(1)
  })

  test('a change committed here is dropped here at once and published to the others', async () => {
    const r = reader()
    await r.get()
    await accessCommitted([r.ws])
    await r.get()
    expect(r.reads).toBe(2)
    await waitFor(() => heard.some((m) => m.split(' ').slice(1).includes(r.ws)), { what: 'the other process to hear of it' })
  })

  test('the subscription lost: nothing kept or served until it is back, then every answer dropped', async () => {
    const r = reader()
    await r.get()
    await r.get()
    expect(r.reads).toBe(1)
    server!.proc.kill('SIGKILL')
    await server!.exited
    await waitFor(() => !cache.enabled, { what: 'the cache to notice the lost connection' })
    await r.get()
    await r.get()
    expect(r.reads).toBe(3)
    start()
    await waitFor(() => cache.enabled, { timeoutMs: 15_000, what: 'the subscription to be back' })
    await r.get()
    expect(r.reads).toBe(4)
    await r.get()
    expect(r.reads).toBe(4)
    // And messages arrive again.
    await fromOther(r.ws)
    await r.get()
    expect(r.reads).toBe(5)
  })
})
