import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import Redis from 'ioredis'
import { RedisUnavailableError } from '../../src/store/redis'
import { IoRedis } from '../../src/store/redis/ioredis'
import { waitFor } from '../helpers/harness'
import { freePort, killAll, listening, spawnProcess, type Spawned } from '../helpers/process'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The ioredis adapter when Redis cannot serve: a real redis-server of this file's own, killed with
 * SIGKILL and started again, or held busy by a script. Every command and every subscription fails
 * with RedisUnavailableError (which the API answers as 503), never with ioredis' own errors (its
 * MaxRetriesPerRequestError was a 500); leaving a channel never fails, and the channels left while
 * the connection was lost are left for good once it is back.
 */
let port: number
let server: Spawned | undefined
let redis: IoRedis

const start = () => {
  server = spawnProcess(['redis-server', '--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--busy-reply-threshold', '100'])
}
/** A plain client of the test's own (no ready check: its INFO would meet BUSY too). */
function admin() {
  const client = new Redis(port, '127.0.0.1', { maxRetriesPerRequest: 1, enableReadyCheck: false })
  client.on('error', () => {})
  return client
}
const answers = () => listening(port)
async function channels(): Promise<string[]> {
  const a = admin()
  try {
    return ((await a.pubsub('CHANNELS')) as string[]).sort()
  } finally {
    a.disconnect()
  }
}

beforeAll(async () => {
  port = freePort()
  start()
  await waitFor(answers, { what: 'redis-server to listen' })
  redis = new IoRedis(`redis://127.0.0.1:${port}`, 'unavail:')
  await redis.ping()
})

afterAll(async () => {
  await redis?.close()
  await killAll()
})

async function expectUnavailable(what: string, p: Promise<unknown>) {
  const err = await p.then(() => null, (e) => e)
  expect([what, err?.constructor?.name]).toEqual([what, 'RedisUnavailableError'])
  expect(err).toBeInstanceOf(RedisUnavailableError)
}

describe('Redis killed', () => {
  let kept: string[] = []
  let unsubscribeKept: () => Promise<void>

  test('every command and a new subscription fail with RedisUnavailableError; leaving a channel does not fail', async () => {
    unsubscribeKept = await redis.subscribe('kept', (m) => kept.push(m))
    const unsubscribeLeft = await redis.subscribe('left', () => {})
    expect(await channels()).toEqual(['unavail:kept', 'unavail:left'])

    await server!.stop('SIGKILL')
    await waitFor(async () => !(await answers()), { what: 'redis-server to be gone' })
    await expectUnavailable('get', redis.get('k'))
    await expectUnavailable('set', redis.set('k', 'v', 1000))
    await expectUnavailable('setIfAbsent', redis.setIfAbsent('k', 'v', 1000))
    await expectUnavailable('del', redis.del('k'))
    await expectUnavailable('take', redis.take('b', { capacity: 1, refillPerSecond: 1 }))
    await expectUnavailable('scheduleTimer', redis.scheduleTimer('t', Date.now(), 'p'))
    await expectUnavailable('claimDueTimers', redis.claimDueTimers(Date.now(), 10))
    await expectUnavailable('publish', redis.publish('kept', 'lost'))
    await expectUnavailable('subscribe', redis.subscribe('new', () => {}))
    await expectUnavailable('ping', redis.ping())
    // The subscription went with the connection: leaving it succeeds.
    await unsubscribeLeft()
  }, 30_000)

  test('Redis back: the kept channel delivers again, the channel left during the outage is left for good, a failed subscribe can be retried', async () => {
    start()
    await waitFor(answers, { what: 'redis-server to listen again' })
    await waitFor(async () => (await channels()).join() === 'unavail:kept', { timeoutMs: 10_000, what: 'only the kept channel to be subscribed again' })
    const received = await redis.subscribe('new', () => {})
    expect(await channels()).toEqual(['unavail:kept', 'unavail:new'])
    await received()
    await redis.publish('kept', 'hello')
    await waitFor(() => kept.includes('hello'), { what: 'the kept channel to deliver' })
    await unsubscribeKept()
    expect(await channels()).toEqual([])
  }, 30_000)
})

describe('Redis busy (a script running past busy-reply-threshold)', () => {
  test('its BUSY reply is RedisUnavailableError, not an error of ours', async () => {
    const blocker = admin()
    const looping = blocker.eval('while true do end', 0).catch(() => {})
    try {
      await waitFor(async () => (await redis.get('k').then(() => 'ok', (e) => e)) instanceof RedisUnavailableError, {
        timeoutMs: 10_000,
        what: 'a command to meet BUSY',
      })
      const err = await redis.get('k').then(() => null, (e) => e)
      expect(err).toBeInstanceOf(RedisUnavailableError)
      expect(String(err.message)).toContain('BUSY')
    } finally {
      const killer = admin()
      await killer.script('KILL').catch(() => {})
      killer.disconnect()
      await looping
      blocker.disconnect()
    }
    await waitFor(async () => (await redis.get('k').then(() => true, () => false)), { what: 'Redis to serve again' })
  }, 30_000)
})
