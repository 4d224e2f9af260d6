import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { FairGate } from '../../src/lib/fair-gate'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The gate the run worker's steps go through (src/lib/fair-gate.ts): a workspace with a thousand
 * steps queued must not put them before another workspace's one step.
 */

/** A piece of work that ends when told to; records when it started. */
function piece(log: string[], name: string) {
  let end!: () => void
  const ended = new Promise<void>((resolve) => (end = resolve))
  return { work: async () => { log.push(name); await ended }, end: () => end() }
}

/** Lets every queued promise callback run (the gate admits in callbacks, not at once). */
const settle = async () => {
  for (let i = 0; i < 10; i++) await Promise.resolve()
}

describe('FairGate', () => {
  test('one slot: a key with one piece waits for the piece in flight, not for the other key\'s queue', async () => {
    const gate = new FairGate(1)
    const started: string[] = []
    const a = Array.from({ length: 100 }, (_, i) => piece(started, `a${i}`))
    const done = a.map((p) => gate.run('A', p.work))
    await settle()
    expect(started).toEqual(['a0'])
    expect(gate.queued).toBe(99)
    const b = [piece(started, 'b0'), piece(started, 'b1')]
    const doneB = gate.run('B', b[0]!.work)
    await settle()
    a[0]!.end()
    await settle()
    expect(started).toEqual(['a0', 'b0'])
    // B's next piece, queued while its first runs, comes after A's next: they alternate.
    const doneB1 = gate.run('B', b[1]!.work)
    b[0]!.end()
    await settle()
    expect(started).toEqual(['a0', 'b0', 'a1'])
    a[1]!.end()
    await settle()
    expect(started).toEqual(['a0', 'b0', 'a1', 'b1'])
    b[1]!.end()
    for (const p of a.slice(2)) {
      await settle()
      p.end()
    }
    await Promise.all([...done, doneB, doneB1])
    expect(started).toHaveLength(102)
    expect(gate.queued).toBe(0)
  })

  test('several slots are shared between the keys with work: a key alone takes them all, two take half each', async () => {
    const gate = new FairGate(4)
    const started: string[] = []
    const a = Array.from({ length: 8 }, (_, i) => piece(started, `a${i}`))
    const doneA = a.map((p) => gate.run('A', p.work))
    await settle()
    expect(started).toEqual(['a0', 'a1', 'a2', 'a3'])
    const b = Array.from({ length: 4 }, (_, i) => piece(started, `b${i}`))
    const doneB = b.map((p) => gate.run('B', p.work))
    await settle()
    // Full: nothing more starts until a slot is free.
    expect(started).toHaveLength(4)
    for (const p of a.slice(0, 4)) p.end()
    await settle()
    // A holds nothing now and B waits: each may have two in flight; B began to wait second but has none.
    expect(started.slice(4).sort()).toEqual(['a4', 'a5', 'b0', 'b1'])
    for (const p of [...a.slice(4), ...b]) {
      p.end()
      await settle()
    }
    await Promise.all([...doneA, ...doneB])
    expect(started).toHaveLength(12)
  })

  test('a key present between its pieces keeps its share free: the other key fills only the rest', async () => {
    const gate = new FairGate(4)
    const started: string[] = []
    // B has a run in hand but no step queued yet (it is between steps).
    gate.enter('B')
    const a = Array.from({ length: 6 }, (_, i) => piece(started, `a${i}`))
    const doneA = a.map((p) => gate.run('A', p.work))
    await settle()
    // Two keys share four slots: A gets two, two stay free for B.
    expect(started).toEqual(['a0', 'a1'])
    const b = piece(started, 'b0')
    const doneB = gate.run('B', b.work)
    await settle()
    // B's step arrives and starts at once, with no A step to wait for.
    expect(started).toEqual(['a0', 'a1', 'b0'])
    b.end()
    await doneB
    gate.leave('B')
    await settle()
    // B gone: A takes every slot again (its two in flight and two more).
    expect(started).toEqual(['a0', 'a1', 'b0', 'a2', 'a3'])
    for (const p of a) {
      p.end()
      await settle()
    }
    await Promise.all(doneA)
  })

  test('housekeeping (the null key) takes turns but does not shrink a workspace\'s share', async () => {
    const gate = new FairGate(2)
    const started: string[] = []
    const claim = piece(started, 'claim')
    const c = gate.run(null, claim.work)
    const a = [piece(started, 'a0'), piece(started, 'a1')]
    const doneA = a.map((p) => gate.run('A', p.work))
    await settle()
    // The claim holds one slot; A alone is owed both, and gets the one left.
    expect(started).toEqual(['claim', 'a0'])
    claim.end()
    await settle()
    expect(started).toEqual(['claim', 'a0', 'a1'])
    for (const p of a) p.end()
    await Promise.all([c, ...doneA])
  })

  test('a piece that throws gives its slot back', async () => {
    const gate = new FairGate(1)
    await expect(gate.run('A', async () => { throw new Error('boom') })).rejects.toThrow('boom')
    expect(await gate.run('B', async () => 'ran')).toBe('ran')
  })

  test('a gate without a slot is refused', () => {
    expect(() => new FairGate(0)).toThrow('at least one slot')
  })
})
