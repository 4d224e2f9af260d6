import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { CatalogError, parseCatalog } from '../../src/domain/models/catalog'
import { MAX_BATCH_ATTEMPTS, MAX_RETRY_AFTER_MS, RETRY_BASE_MS, retryDelay } from '../../src/domain/models/embed-batches'
import { DEFAULT_MAX_CONCURRENCY, OpenAIProvider } from '../../src/domain/models/providers/openai'
import { ProviderError } from '../../src/domain/models/types'
import { Limiter } from '../../src/lib/limiter'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The pieces of docs/models.md "Embeddings: batches, concurrency and retries" that need no upstream:
 * the limiter's order and abort, the retry policy, the catalogue field. Tasks here are promises the
 * test settles by hand, so order is observed, never timed.
 */

/** A task the test finishes when it wants; `started` says whether the limiter let it run. */
function task(log: string[], name: string) {
  let finish!: () => void
  const t = { started: false, done: new Promise<void>((resolve) => (finish = resolve)), finish: () => finish() }
  const run = async () => {
    t.started = true
    log.push(name)
    await t.done
    return name
  }
  return { ...t, run }
}

const turn = () => new Promise((resolve) => setImmediate(resolve))
const live = () => new AbortController().signal

describe('Limiter', () => {
  test('runs at most `max` at once, the rest in the order they came', async () => {
    const limit = new Limiter(2)
    const log: string[] = []
    const tasks = ['a', 'b', 'c', 'd', 'e'].map((n) => task(log, n))
    const results = tasks.map((t) => limit.run(live(), t.run))
    await turn()
    expect(log).toEqual(['a', 'b'])
    expect([limit.running, limit.queued]).toEqual([2, 3])
    tasks[1]!.finish()
    await turn()
    expect(log).toEqual(['a', 'b', 'c'])
    tasks[0]!.finish()
    tasks[2]!.finish()
    await turn()
    expect(log).toEqual(['a', 'b', 'c', 'd', 'e'])
    expect([limit.running, limit.queued]).toEqual([2, 0])
    tasks[3]!.finish()
    tasks[4]!.finish()
    expect(await Promise.all(results)).toEqual(['a', 'b', 'c', 'd', 'e'])
    expect([limit.running, limit.queued]).toEqual([0, 0])
  })

  test('a freed slot goes to the first waiter, not to a task arriving at the same moment', async () => {
    const limit = new Limiter(1)
    const log: string[] = []
    const [a, b, c] = ['a', 'b', 'c'].map((n) => task(log, n))
    const runs = [limit.run(live(), a!.run), limit.run(live(), b!.run)]
    await turn()
    a!.finish()
    await runs[0]
    runs.push(limit.run(live(), c!.run))
    await turn()
    expect(log).toEqual(['a', 'b'])
    b!.finish()
    c!.finish()
    await Promise.all(runs)
    expect(log).toEqual(['a', 'b', 'c'])
  })

  test('a waiter whose signal aborts leaves the queue with its reason and never runs; the others keep their turn', async () => {
    const limit = new Limiter(1)
    const log: string[] = []
    const [a, b, c] = ['a', 'b', 'c'].map((n) => task(log, n))
    const ac = new AbortController()
    const ra = limit.run(live(), a!.run)
    const rb = limit.run(ac.signal, b!.run)
    const rc = limit.run(live(), c!.run)
    await turn()
    expect(limit.queued).toBe(2)
    const reason = new Error('caller left')
    ac.abort(reason)
    expect(await rb.catch((e) => e)).toBe(reason)
    expect(limit.queued).toBe(1)
    a!.finish()
    c!.finish()
    expect(await Promise.all([ra, rc])).toEqual(['a', 'c'])
    expect(log).toEqual(['a', 'c'])
    expect(b!.started).toBe(false)
  })

  test('an already aborted signal is refused at once; a task that throws still frees its slot', async () => {
    const limit = new Limiter(1)
    const ac = new AbortController()
    ac.abort(new Error('gone'))
    expect(((await limit.run(ac.signal, async () => 'ran').catch((e) => e)) as Error).message).toBe('gone')
    expect(((await limit.run(live(), async () => Promise.reject(new Error('boom'))).catch((e) => e)) as Error).message).toBe('boom')
    expect(await limit.run(live(), async () => 'next')).toBe('next')
    expect([limit.running, limit.queued]).toEqual([0, 0])
  })

  test('background tasks wait behind every other waiting task, FIFO among themselves', async () => {
    const limit = new Limiter(1)
    const log: string[] = []
    const [a, b1, b2, c, d] = ['a', 'b1', 'b2', 'c', 'd'].map((n) => task(log, n))
    const runs = [limit.run(live(), a!.run), limit.run(live(), b1!.run, true), limit.run(live(), b2!.run, true), limit.run(live(), c!.run), limit.run(live(), d!.run)]
    await turn()
    expect(limit.queued).toBe(4)
    for (const t of [a, c, d, b1, b2]) {
      t!.finish()
      await turn()
    }
    await Promise.all(runs)
    expect(log).toEqual(['a', 'c', 'd', 'b1', 'b2'])
  })

  test('needs at least one slot', () => {
    expect(() => new Limiter(0)).toThrow(RangeError)
  })
})

describe('retryDelay', () => {
  const half = () => 0.5
  const err = (status: number | null, failover: ProviderError['failover'], retryAfterMs?: number) => new ProviderError('x', status, failover, retryAfterMs)

  test.each([
    ['429 with Retry-After 1 s', err(429, 'rate_limited', 1000), 1, 1000],
    ['429 with Retry-After at the ceiling', err(429, 'rate_limited', MAX_RETRY_AFTER_MS), 1, MAX_RETRY_AFTER_MS],
    ['429 with Retry-After past the ceiling: not retried', err(429, 'rate_limited', MAX_RETRY_AFTER_MS + 1), 1, null],
    ['429 without Retry-After, first try', err(429, 'rate_limited'), 1, Math.round(RETRY_BASE_MS * 0.75)],
    ['503, second try', err(503, 'server_error'), 2, RETRY_BASE_MS * 2 * 0.75],
    ['a refused connection, third try', err(null, 'network_error'), 3, RETRY_BASE_MS * 4 * 0.75],
    ['408 (the upstream\'s own time-out)', err(408, 'timeout'), 1, Math.round(RETRY_BASE_MS * 0.75)],
    ['our own time-out: not retried', err(null, 'timeout'), 1, null],
    ['400: not retried', err(400, null), 1, null],
    ['the last try: not retried', err(500, 'server_error'), MAX_BATCH_ATTEMPTS, null],
    ['not a ProviderError', new Error('bug'), 1, null],
  ] as const)('%s', (_, e, attempt, want) => {
    expect(retryDelay(e, attempt, half)).toBe(want)
  })

  test('the jitter keeps a backoff between half and all of its ceiling', () => {
    const e = err(500, 'server_error')
    expect(retryDelay(e, 2, () => 0)).toBe(RETRY_BASE_MS)
    expect(retryDelay(e, 2, () => 1)).toBe(RETRY_BASE_MS * 2)
  })
})

describe('catalogue max_concurrency', () => {
  const catalogue = (extra: Record<string, unknown>) => ({ providers: [{ id: 'p', kind: 'openai', base_url: 'http://127.0.0.1:1/v1', api_key: 'k', ...extra }] })

  test('sets the provider\'s limit; default 4', () => {
    const given = parseCatalog(catalogue({ max_concurrency: 12 }), {}).providers.get('p')!
    expect(new OpenAIProvider(given).embedLimit.max).toBe(12)
    const unset = parseCatalog(catalogue({}), {}).providers.get('p')!
    expect(new OpenAIProvider(unset).embedLimit.max).toBe(DEFAULT_MAX_CONCURRENCY)
    expect(DEFAULT_MAX_CONCURRENCY).toBe(4)
  })

  test.each([0, -1, 1.5, 257, '4'])('%p is refused, naming the field', (value) => {
    let error: unknown = null
    try {
      parseCatalog(catalogue({ max_concurrency: value }), {})
    } catch (err) {
      error = err
    }
    expect(error).toBeInstanceOf(CatalogError)
    expect((error as CatalogError).field).toBe('providers[0].max_concurrency')
  })
})
