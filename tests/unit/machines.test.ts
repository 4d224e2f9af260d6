import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { and, assign, createMachine, not, setup } from 'xstate'
import { describeMachine, MACHINE_SOURCE, type MachineDescription } from '../../src/machines/describe'
import { mermaidText } from '../../src/machines/mermaid'
import { machines } from '../../src/machines/registry'
import { DELIVERY_MACHINE_VERSION, deliveryMachine } from '../../src/machines/webhook-delivery.machine'

setDefaultTimeout(TEST_TIMEOUT_MS)

const delivery = () => describeMachine({ name: 'webhook-delivery', machine: deliveryMachine, version: DELIVERY_MACHINE_VERSION })

/** Every `a : text` and `a --> b : text` line: the text after the first colon must not end the label early. */
function labelsAreParseable(mermaid: string) {
  for (const line of mermaid.split('\n')) {
    const at = line.indexOf(' : ')
    if (at < 0) continue
    expect({ line, breaks: /[:;\n]/.test(line.slice(at + 3)) }).toEqual({ line, breaks: false })
  }
}

describe('webhook-delivery', () => {
  test('its states, in definition order, with descriptions, tags and entry actions', () => {
    const d = delivery()
    expect(d.name).toBe('webhook-delivery')
    expect(d.version).toBe(DELIVERY_MACHINE_VERSION)
    expect(d.description).toBe(deliveryMachine.root.description!)
    expect(d.initial).toBe('pending')
    expect(d.states.map((s) => s.name)).toEqual(['pending', 'sending', 'retrying', 'succeeded', 'failed'])
    expect(d.states.every((s) => s.type === 'atomic' && !s.final && typeof s.description === 'string')).toBe(true)
    const byName = Object.fromEntries(d.states.map((s) => [s.name, s]))
    expect(byName.sending!.entry).toEqual(['countAttempt', 'scheduleLease'])
    expect(byName.succeeded!.tags).toEqual(['settled'])
    expect(byName.failed!.tags).toEqual(['settled'])
    expect(byName.pending!.tags).toEqual([])
    expect(d.final_states).toEqual([])
  })

  test('its transitions, guards in the order XState tries them', () => {
    const d = delivery()
    const failed = d.transitions.filter((t) => t.source === 'sending' && t.event === 'attempt.failed')
    expect(failed).toEqual([
      { source: 'sending', event: 'attempt.failed', target: 'failed', guard: 'isPermanent', actions: [], description: '4xx other than 429: no retry' },
      { source: 'sending', event: 'attempt.failed', target: 'retrying', guard: 'canRetry', actions: ['scheduleRetry'], description: '5xx, 3xx, 429, time-out or network error' },
      { source: 'sending', event: 'attempt.failed', target: 'failed', actions: [], description: 'the last retry failed too' },
    ])
    expect(d.transitions).toContainEqual({ source: 'failed', event: 'redelivery.requested', target: 'pending', actions: ['startRound'] })
    expect(d.events).toEqual(['attempt.abandoned', 'attempt.failed', 'attempt.succeeded', 'redelivery.requested', 'timer.fired'])
    expect(d.events).toContain('timer.fired')
    expect(d.events).toContain('redelivery.requested')
    expect(d.guards).toEqual(['canRetry', 'isPermanent'])
    expect(d.delays).toEqual([])
  })

  test('its Mermaid diagram', () => {
    const { mermaid } = delivery()
    expect(mermaid).toStartWith('stateDiagram-v2\n')
    expect(mermaid).toContain('[*] --> pending')
    expect(mermaid).toContain('sending --> failed : attempt.failed [isPermanent]')
    expect(mermaid).toContain('retrying --> sending : timer.fired')
    // A description, with its ";" and ":" made harmless.
    expect(mermaid).toContain('state "failed" as failed\n  failed : A 4xx, or every retry failed, kept 7 days, can')
    expect(mermaid).toContain('class succeeded, failed tag_settled')
    expect(mermaid).not.toContain('--> [*]')
    labelsAreParseable(mermaid)
  })

  test('is deterministic: the same description every time, and the registry entry is described the same', () => {
    const a = JSON.stringify(delivery())
    expect(JSON.stringify(delivery())).toBe(a)
    expect(JSON.stringify(describeMachine(machines.find((m) => m.name === 'webhook-delivery')!))).toBe(a)
  })
})

describe('every kind of state (an ad-hoc machine)', () => {
  const log = () => {}
  const inlineAction = () => {}
  const machine = setup({
    guards: { ready: () => true, big: () => false },
    delays: { SHORT: 50 },
    actions: { log, track: () => {} },
  }).createMachine({
    id: 'adhoc',
    description: 'Every kind of state',
    initial: 'idle',
    on: { RESET: { target: '.idle', description: 'from anywhere' }, PING: { actions: 'log' } },
    states: {
      idle: {
        description: 'Waits: then times out; or starts',
        entry: ['log', assign({})],
        on: { START: { target: 'running', guard: and(['ready', not('big')]) }, POKE: { actions: ['track', inlineAction] } },
        after: { 1000: 'done', SHORT: { target: 'running', guard: ({ context }) => context !== undefined } },
      },
      running: {
        description: 'Does the work',
        initial: 'waiting',
        tags: ['busy'],
        states: {
          waiting: { always: [{ guard: 'ready', target: 'working' }], tags: ['busy'] },
          working: { on: { FINISH: 'finished' }, exit: 'log' },
          finished: { type: 'final' },
          hist: { type: 'history', history: 'deep' },
        },
        onDone: 'both',
      },
      both: {
        type: 'parallel',
        states: {
          left: { initial: 'a', states: { a: { on: { NEXT: 'b' } }, b: { type: 'final' } } },
          right: { initial: 'c', states: { c: { on: { NEXT: 'd', JUMP: '#adhoc.running.working' } }, d: { type: 'final' } } },
        },
        onDone: 'done',
      },
      done: { type: 'final', tags: ['settled'] },
    },
  })
  const d: MachineDescription = describeMachine({ name: 'adhoc', machine, version: 3 })
  const state = (name: string) => d.states.find((s) => s.name === name)!
  const from = (source: string) => d.transitions.filter((t) => t.source === source)

  test('states: dot paths in definition order, parents first, with their types', () => {
    expect(d.states.map((s) => [s.name, s.type])).toEqual([
      ['idle', 'atomic'],
      ['running', 'compound'],
      ['running.waiting', 'atomic'],
      ['running.working', 'atomic'],
      ['running.finished', 'final'],
      ['running.hist', 'history'],
      ['both', 'parallel'],
      ['both.left', 'compound'],
      ['both.left.a', 'atomic'],
      ['both.left.b', 'final'],
      ['both.right', 'compound'],
      ['both.right.c', 'atomic'],
      ['both.right.d', 'final'],
      ['done', 'final'],
    ])
    expect(state('running.hist').history).toBe('deep')
    expect(state('done')).toEqual({ name: 'done', type: 'final', tags: ['settled'], entry: [], exit: [], final: true })
    expect(d.final_states).toEqual(['running.finished', 'both.left.b', 'both.right.d', 'done'])
    expect(d.initial).toBe('idle')
    expect(d.version).toBe(3)
  })

  test('entry and exit: named and inline actions, without the timers XState adds for `after`', () => {
    // XState itself puts a delayed raise per `after` delay on entry and a cancel on exit.
    expect(machine.root.states.idle!.entry.length).toBe(4)
    expect(machine.root.states.idle!.exit.length).toBe(2)
    expect(state('idle').entry).toEqual(['log', 'inline:1 (assign)'])
    expect(state('idle').exit).toEqual([])
    expect(state('running.working').exit).toEqual(['log'])
  })

  test('after, always, onDone, targetless, root and cross-level transitions', () => {
    expect(from(MACHINE_SOURCE)).toEqual([
      { source: MACHINE_SOURCE, event: 'RESET', target: 'idle', actions: [], description: 'from anywhere' },
      { source: MACHINE_SOURCE, event: 'PING', target: null, actions: ['log'] },
    ])
    expect(from('idle')).toEqual([
      { source: 'idle', event: 'START', target: 'running', guard: 'and(ready, not(big))', actions: [] },
      { source: 'idle', event: 'POKE', target: null, actions: ['track', 'inline:2'] },
      { source: 'idle', event: 'after 1000', target: 'done', actions: [] },
      { source: 'idle', event: 'after SHORT', target: 'running', guard: 'inline:1', actions: [] },
    ])
    expect(from('running.waiting')).toEqual([{ source: 'running.waiting', event: 'always', target: 'running.working', guard: 'ready', actions: [] }])
    expect(from('running')).toEqual([{ source: 'running', event: 'onDone', target: 'both', actions: [] }])
    expect(from('both.right.c').map((t) => [t.event, t.target])).toEqual([['NEXT', 'both.right.d'], ['JUMP', 'running.working']])
    expect(d.events).toEqual(['FINISH', 'JUMP', 'NEXT', 'PING', 'POKE', 'RESET', 'START'])
    expect(d.guards).toEqual(['big', 'inline:1', 'ready'])
    expect(d.delays).toEqual(['1000', 'SHORT'])
  })

  test('the diagram: compound blocks with their own [*], parallel regions split by --, finals, notes, tags', () => {
    const m = d.mermaid
    expect(m).toStartWith('stateDiagram-v2\n  [*] --> idle\n')
    expect(m).toContain('  state running {\n    [*] --> running_waiting\n')
    expect(m).toContain('    running_waiting --> running_working : always [ready]\n')
    expect(m).toContain('    running_finished --> [*]\n')
    expect(m).toContain('    state "H*" as running_hist\n')
    expect(m).toMatch(/ {2}state both \{\n {4}state "left" as both_left \{[\s\S]*\n {4}--\n {4}state "right" as both_right \{/)
    expect(m).toContain('  done --> [*]\n')
    expect(m).toContain('  idle --> done : after 1000\n')
    // Two transitions between the same states: one arrow, a label line each (parallel arrows' labels overlap).
    expect(m).toContain('  idle --> running : START [and(ready, not(big))]<br>after SHORT [inline.1]\n')
    expect(m).toContain('  running --> both : onDone\n')
    expect(m).toContain('  both_right_c --> running_working : JUMP\n')
    expect(m).toContain('  any_state_ --> idle : RESET\n')
    expect(m).toContain('  idle : POKE / track, inline.2\n')
    expect(m).toContain('  idle : Waits - then times out, or starts\n')
    expect(m).toContain('  note right of running\n    Does the work\n  end note\n')
    expect(m).toContain('  class running_waiting tag_busy\n')
    expect(m).toContain('  class done tag_settled\n')
    labelsAreParseable(m)
  })

  test('a parallel root has no initial state', () => {
    const p = describeMachine({
      name: 'par',
      version: 1,
      machine: createMachine({ id: 'par', type: 'parallel', states: { x: { initial: 'a', states: { a: {} } }, y: { initial: 'b', states: { b: {} } } } }),
    })
    expect(p.initial).toBeNull()
    expect(p.description).toBeNull()
    expect(p.mermaid).toContain('  state x {\n    [*] --> x_a\n')
    expect(p.mermaid).toContain('  --\n  state y {')
  })

  test('Mermaid ids never clash with keywords or each other', () => {
    const p = describeMachine({
      name: 'ids',
      version: 1,
      machine: createMachine({ id: 'ids', initial: 'default', states: { default: { on: { GO: 'a-b' } }, 'a-b': {}, a_b: {}, root: {} } }),
    })
    expect(p.mermaid).toContain('[*] --> s_default')
    expect(p.mermaid).toContain('state "default" as s_default')
    expect(p.mermaid).toContain('state "a-b" as a_b\n')
    expect(p.mermaid).toContain('state "a_b" as a_b_2\n')
    expect(p.mermaid).toContain('state "root" as s_root\n')
    expect(p.mermaid).toContain('s_default --> a_b : GO')
  })
})

test('mermaidText replaces what would end or break a label', () => {
  expect(mermaidText('a: b; c:d "e" <f>\n g %% direction LR')).toBe("a - b, c.d 'e' ‹f› g % direction - LR")
})
