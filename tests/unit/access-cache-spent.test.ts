import { afterEach, beforeEach, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { AccessCache } from '../../src/domain/access-cache'
import { accessChanged, accessCommitted, accessGeneration, heldBatchOver, heldBatchSent, lastChangeOf, onAccessCommitted, spendId } from '../../src/store/access-generation'
import type { AccessAndBudget } from '../../src/store/credits'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The embedded database's kept answers across a batch of this process' charges (src/domain/access-cache.ts,
 * `spent`): a hard-limit answer takes the batch's new total instead of being read again, but only where
 * the batch's announce is the last change of the workspace's spend and nothing else about it changed.
 */
const PERIOD = '2026-11-01'
let seq = 0

function reader(cache: AccessCache, hard = true) {
  const ws = `ws_spent${++seq}`
  const key = `${ws} u ${PERIOD}`
  let reads = 0
  const answer = (): AccessAndBudget => ({ access: { id: ws, owner_id: 'u', status: 'active', role: 'admin' }, budget: { credits: '100', period: 'month', hard_limit: hard, used: '1.000000' } })
  return {
    ws,
    get reads() {
      return reads
    },
    get: () => cache.get(ws, key, async () => (reads++, answer()), PERIOD),
    /** What a batch of charges does: its announce before it is sent, then its committed total. */
    batch: (used: string, period = PERIOD) => {
      accessChanged(spendId(ws))
      const generation = accessGeneration()
      return () => cache.spent([{ workspace_id: ws, period, used, generation }])
    },
  }
}

describe('a batch of this process\' charges and the kept answers (embedded)', () => {
  test('a hard-limit answer takes the batch\'s total, without a read', async () => {
    const cache = new AccessCache(Infinity)
    const r = reader(cache)
    await r.get()
    const committed = r.batch('1.500000')
    committed()
    const a = await r.get()
    expect(r.reads).toBe(1)
    expect(a!.budget!.used).toBe('1.500000')
    // The next batch again.
    r.batch('2.000000')()
    expect((await r.get())!.budget!.used).toBe('2.000000')
    expect(r.reads).toBe(1)
  })

  test('the spend changed again after the batch was sent: read again', async () => {
    const cache = new AccessCache(Infinity)
    const r = reader(cache)
    await r.get()
    const committed = r.batch('1.500000')
    // Another charge of the workspace (an agent's transaction) sent after the batch.
    accessChanged(spendId(r.ws))
    committed()
    await r.get()
    expect(r.reads).toBe(2)
  })

  test('the workspace itself changed: read again', async () => {
    const cache = new AccessCache(Infinity)
    const r = reader(cache)
    await r.get()
    accessChanged(r.ws)
    r.batch('1.500000')()
    await r.get()
    expect(r.reads).toBe(2)
  })

  test('another period\'s total leaves the answer dropped', async () => {
    const cache = new AccessCache(Infinity)
    const r = reader(cache)
    await r.get()
    r.batch('1.500000', '2026-12-01')()
    await r.get()
    expect(r.reads).toBe(2)
  })

  test('an answer read after the batch was sent is left as it was read', async () => {
    const cache = new AccessCache(Infinity)
    const r = reader(cache)
    const committed = r.batch('1.500000')
    const a = await r.get()
    committed()
    const b = await r.get()
    expect(r.reads).toBe(1)
    expect(b).toBe(a)
    expect(b!.budget!.used).toBe('1.000000')
  })

  test('an answer kept without its period is dropped as before', async () => {
    const cache = new AccessCache(Infinity)
    const r = reader(cache)
    const key = `${r.ws} v ${PERIOD}`
    let reads = 0
    const read = async (): Promise<AccessAndBudget> => (reads++, { access: { id: r.ws, owner_id: 'u', status: 'active', role: 'admin' }, budget: { credits: '100', period: 'month', hard_limit: true, used: '1.000000' } })
    await cache.get(r.ws, key, read)
    r.batch('1.500000')()
    await cache.get(r.ws, key, read)
    expect(reads).toBe(2)
  })
})

describe('a batch of this process\' charges and the kept answers (server mode: announced again once committed)', () => {
  /** What the charge outbox does in server mode: the announce before sending, then the one after the commit. */
  async function serverBatch(cache: AccessCache, r: ReturnType<typeof reader>, used: string, meanwhile = () => {}) {
    const id = spendId(r.ws)
    accessChanged(id)
    const sent = new Map([[id, accessGeneration()]])
    meanwhile()
    await accessCommitted([id], sent)
    const generation = sent.get(id)
    if (generation !== undefined) cache.spent([{ workspace_id: r.ws, period: PERIOD, used, generation }])
  }
  let off: () => void = () => {}
  const published: string[][] = []
  beforeEach(() => {
    // An announcer is what makes this process announce committed writes (the access cache's publish).
    off = onAccessCommitted(async (ids) => void published.push([...ids]))
  })
  afterEach(() => off())

  test('nothing else changed the spend while the batch ran: the answer takes its total, without a read', async () => {
    const cache = new AccessCache(Infinity)
    const r = reader(cache)
    await r.get()
    await serverBatch(cache, r, '1.500000')
    expect(published.at(-1)).toEqual([spendId(r.ws)])
    expect((await r.get())!.budget!.used).toBe('1.500000')
    expect(r.reads).toBe(1)
  })

  test('another process\' batch heard while it ran (it may have committed after it): read again', async () => {
    const cache = new AccessCache(Infinity)
    const r = reader(cache)
    await r.get()
    // The subscription's handler for another process' message (src/domain/access-cache.ts, `start`).
    await serverBatch(cache, r, '1.500000', () => accessChanged(spendId(r.ws)))
    await r.get()
    expect(r.reads).toBe(2)
  })

  test('another change heard after the commit\'s announce, before the total is handed over: read again', async () => {
    const cache = new AccessCache(Infinity)
    const r = reader(cache)
    await r.get()
    const id = spendId(r.ws)
    accessChanged(id)
    const sent = new Map([[id, accessGeneration()]])
    await accessCommitted([id], sent)
    accessChanged(id)
    cache.spent([{ workspace_id: r.ws, period: PERIOD, used: '1.500000', generation: sent.get(id)! }])
    await r.get()
    expect(r.reads).toBe(2)
  })
})

describe('a batch of this process\' held charges in flight and the kept answers', () => {
  /** What the charge outbox does when it sends a batch: the announce, and the batch marked as held. */
  function send(ws: string): { id: string; sent: Map<string, number> } {
    const id = spendId(ws)
    const before = lastChangeOf(id)
    accessChanged(id)
    heldBatchSent(id, before, lastChangeOf(id))
    return { id, sent: new Map([[id, accessGeneration()]]) }
  }

  test('an answer read before the batch was sent stays good while it is in flight, then takes its total', async () => {
    const cache = new AccessCache(Infinity)
    const r = reader(cache)
    await r.get()
    const { id, sent } = send(r.ws)
    expect((await r.get())!.budget!.used).toBe('1.000000')
    expect(r.reads).toBe(1)
    cache.spent([{ workspace_id: r.ws, period: PERIOD, used: '1.500000', generation: sent.get(id)! }])
    heldBatchOver(id)
    expect((await r.get())!.budget!.used).toBe('1.500000')
    expect(r.reads).toBe(1)
  })

  test('server mode: still good after the commit\'s announce, until another change is heard', async () => {
    const off = onAccessCommitted(async () => {})
    try {
      const cache = new AccessCache(Infinity)
      const r = reader(cache)
      await r.get()
      const { id, sent } = send(r.ws)
      await accessCommitted([id], sent)
      await r.get()
      expect(r.reads).toBe(1)
      // Another process' batch heard: the answer may be missing it.
      accessChanged(id)
      await r.get()
      expect(r.reads).toBe(2)
      heldBatchOver(id)
    } finally {
      off()
    }
  })

  test('the batch over without handing its total (it failed): read again', async () => {
    const cache = new AccessCache(Infinity)
    const r = reader(cache)
    await r.get()
    const { id } = send(r.ws)
    heldBatchOver(id)
    await r.get()
    expect(r.reads).toBe(2)
  })

  test('the spend changed between the answer\'s read and the batch: read again', async () => {
    const cache = new AccessCache(Infinity)
    const r = reader(cache)
    await r.get()
    // An agent's charge committed (not held): the answer misses it.
    accessChanged(spendId(r.ws))
    const { id } = send(r.ws)
    await r.get()
    expect(r.reads).toBe(2)
    heldBatchOver(id)
  })

  test('the workspace changed meanwhile: read again', async () => {
    const cache = new AccessCache(Infinity)
    const r = reader(cache)
    await r.get()
    const { id } = send(r.ws)
    accessChanged(r.ws)
    await r.get()
    expect(r.reads).toBe(2)
    heldBatchOver(id)
  })
})
