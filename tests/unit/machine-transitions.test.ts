import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import type { AnyStateMachine } from 'xstate'
import { describeMachine } from '../../src/machines/describe'
import type { MachineDefinition } from '../../src/machines/definition'
import { documentDefinition, type DocumentEvent } from '../../src/machines/document.machine'
import { advance, start, type Persisted } from '../../src/machines/runner'
import { deliveryDefinition, type DeliveryEvent } from '../../src/machines/webhook-delivery.machine'
import { runDefinition, type RunEvent } from '../../src/machines/workflow-run.machine'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Every machine explored from its initial snapshot with a catalogue of events (each event type with
 * the payloads that choose between its guarded branches), breadth first and bounded, through the
 * pure runner as the workers use it:
 * - every snapshot reached survives a JSON round trip, and the round-tripped snapshot takes every
 *   event exactly as the original does (what a worker reloads is what was saved);
 * - the transitions taken are exactly those the machine's page lists (docs/machines/<name>.md,
 *   generated from the same definition): none missing, none extra;
 * - an event the page lists for no transition out of a state is refused there (null), and a final
 *   state refuses everything.
 */
interface Case {
  def: MachineDefinition<any>
  input?: unknown
  events: { type: string }[]
  /** How many snapshots to explore at most. */
  limit: number
}

const at = '2026-01-01T00:00:00.000Z'
const chunking = { chunk_size: 200, chunk_overlap: 20 }

const cases: Case[] = [
  {
    def: runDefinition,
    limit: 400,
    events: [
      { type: 'node.started', node: 'a', at },
      { type: 'node.started', node: 'b', at },
      { type: 'node.waiting', node: 'a', until: at },
      { type: 'node.waiting', node: 'b', input: { prompt: 'Approve?', schema: null } },
      { type: 'node.retrying', node: 'a', attempt: 2, until: at, code: 'http_error', message: 'status 503' },
      { type: 'node.started', node: 'a', at, attempt: 2 },
      { type: 'node.completed', node: 'a', output: { text: 'x' }, durationMs: 1, end: false },
      { type: 'node.completed', node: 'b', output: { done: true }, handle: 'yes', durationMs: 2, end: true },
      { type: 'node.skipped', node: 'b' },
      { type: 'node.failed', node: 'a', code: 'boom', message: 'failed', durationMs: 3 },
      { type: 'cancel.requested' },
    ] as RunEvent[],
  },
  {
    def: documentDefinition,
    limit: 200,
    events: [
      { type: 'upload.stored', chunking },
      { type: 'parsed' },
      { type: 'chunked', chunks: 3 },
      { type: 'indexed' },
      { type: 'failed', code: 'parse_error', message: 'bad file' },
      { type: 'reparse.requested', chunking },
      { type: 'restart.requested', chunking: { chunk_size: 100, chunk_overlap: 0 } },
    ] as DocumentEvent[],
  },
  {
    def: deliveryDefinition,
    input: { delays: [10, 20], leaseMs: 1000, manual: false },
    limit: 300,
    events: [
      { type: 'timer.fired' },
      { type: 'attempt.succeeded', statusCode: 200 },
      { type: 'attempt.failed', retryable: true },
      { type: 'attempt.failed', retryable: true, retryAfterMs: 50 },
      { type: 'attempt.failed', retryable: false },
      { type: 'attempt.abandoned' },
      { type: 'redelivery.requested' },
    ] as DeliveryEvent[],
  },
]

const roundTrip = <T>(v: T): T => JSON.parse(JSON.stringify(v)) as T
const key = (p: Persisted<unknown>) => JSON.stringify(p)

interface Explored {
  snapshots: Persisted<unknown>[]
  taken: Set<string>
}

function explore(c: Case): Explored {
  const machine = c.def.machine as AnyStateMachine
  const first = start(machine, c.input as never).persisted as Persisted<unknown>
  const seen = new Map([[key(first), first]])
  const queue = [first]
  const taken = new Set<string>()
  while (queue.length > 0 && seen.size < c.limit) {
    const snapshot = queue.shift()!
    for (const event of c.events) {
      const step = advance(machine, snapshot as never, event as never, { memo: false })
      if (!step) continue
      taken.add(`${snapshot.value} ${event.type} ${step.state}`)
      const next = step.persisted as Persisted<unknown>
      if (!seen.has(key(next))) {
        seen.set(key(next), next)
        queue.push(next)
      }
    }
  }
  return { snapshots: [...seen.values()], taken }
}

describe.each(cases.map((c) => [c.def.name, c] as const))('%s', (_, c) => {
  const machine = c.def.machine as AnyStateMachine
  const explored = explore(c)
  const described = describeMachine(c.def)
  // The page's transitions table (docs/machines/<name>.md) as (source, event, target); a targetless
  // one stays in its state. Read from the page itself: a machine changed without its page fails here.
  const page = readFileSync(join(import.meta.dir, '..', '..', 'docs', 'machines', `${c.def.name}.md`), 'utf8')
  const rows = page
    .slice(page.indexOf('## Transitions'))
    .split('\n')
    .filter((line) => line.startsWith('| `'))
    .map((line) => line.split('|').map((cell) => cell.trim()))
    .map(([, from, event, , target]) => ({ from: from!.replaceAll('`', ''), event: event!.replaceAll('`', ''), target: target!.startsWith('`') ? target!.replaceAll('`', '') : null }))
  const listed = new Set(rows.map((t) => `${t.from} ${t.event} ${t.target ?? t.from}`))
  const listedFrom = (state: string) => new Set(rows.filter((t) => t.from === state).map((t) => t.event))

  test('the page lists the transitions the definition has', () => {
    expect(rows.length).toBe(described.transitions.length)
  })

  test('the exploration reaches every state of the machine', () => {
    expect(new Set(explored.snapshots.map((s) => s.value))).toEqual(new Set(described.states.map((s) => s.name)))
  })

  test('every snapshot reached survives a JSON round trip and takes every event as the original does', () => {
    for (const snapshot of explored.snapshots) {
      const again = roundTrip(snapshot)
      expect(again).toEqual(snapshot)
      expect(machine.resolveState(again as never).value).toBe(snapshot.value)
      for (const event of c.events) {
        const a = advance(machine, snapshot as never, event as never, { memo: false })
        const b = advance(machine, again as never, event as never, { memo: false })
        expect(b).toEqual(a)
      }
    }
  })

  test('the transitions taken are exactly those the machine\'s page lists', () => {
    expect([...explored.taken].sort()).toEqual([...listed].sort())
  })

  test('an event the page lists no transition for is refused, the snapshot unchanged', () => {
    let refusals = 0
    for (const snapshot of explored.snapshots) {
      const allowed = listedFrom(snapshot.value)
      const before = roundTrip(snapshot)
      for (const event of c.events.filter((e) => !allowed.has(e.type))) {
        expect(advance(machine, snapshot as never, event as never, { memo: false })).toBeNull()
        refusals++
      }
      expect(snapshot).toEqual(before)
    }
    expect(refusals).toBeGreaterThan(0)
  })

  test('a final state refuses every event', () => {
    for (const snapshot of explored.snapshots.filter((s) => described.final_states.includes(s.value))) {
      for (const event of c.events) expect(advance(machine, snapshot as never, event as never, { memo: false })).toBeNull()
    }
  })
})
