/** The TypeBox schemas of the machines routes (src/routes/machines.ts), named in the OpenAPI document where shared, and the mappers from rows to them. */
import { t } from 'elysia'
import { machines } from '../machines/registry'
import { errors } from './common.model'

export const MachineState = t.Object(
  {
    name: t.String({ description: 'Dot path from the machine root, e.g. running.waiting' }),
    type: t.Union([t.Literal('atomic'), t.Literal('compound'), t.Literal('parallel'), t.Literal('final'), t.Literal('history')]),
    description: t.Optional(t.String()),
    tags: t.Array(t.String(), { description: 'State tags, e.g. settled' }),
    entry: t.Array(t.String(), { description: 'Entry action names (inline ones as inline:<n>)' }),
    exit: t.Array(t.String(), { description: 'Exit action names (inline ones as inline:<n>)' }),
    final: t.Boolean({ description: 'A final state: the machine (or its parent state) is done there' }),
    history: t.Optional(t.Union([t.Literal('shallow'), t.Literal('deep')], { description: 'Only on history states' })),
  },
  {
    description: 'A state of the machine, in definition order (a parent before its children)',
    examples: [{ name: 'succeeded', type: 'atomic', description: 'The receiver answered 2xx.', tags: ['settled'], entry: ['cancelTimer'], exit: [], final: false }],
  },
)

export const MachineTransition = t.Object(
  {
    source: t.String({ description: 'The state that handles the event; (machine) for the machine\'s own handlers' }),
    event: t.String({ description: 'Event type; "after <delay>" for a delayed transition, "always" for an eventless one, "onDone" when a compound state is done' }),
    target: t.Union([t.String(), t.Null()], { description: 'Target state (several joined by ", "); null for a transition that only runs actions' }),
    guard: t.Optional(t.String({ description: 'Guard name; and(...), or(...), not(...) for combined guards, inline:<n> for inline ones' })),
    actions: t.Array(t.String(), { description: 'Action names, in order' }),
    description: t.Optional(t.String()),
  },
  {
    description: 'A transition, in the order XState tries them (for one event, the first whose guard passes is taken)',
    examples: [{ source: 'sending', event: 'attempt.failed', target: 'failed', guard: 'isPermanent', actions: [], description: '4xx other than 429: no retry' }],
  },
)

export const Machine = t.Object(
  {
    name: t.String({ description: 'The machine\'s name: kebab-case, also its id' }),
    version: t.Integer({ description: 'Stored beside every persisted snapshot; bumped when a change would misread old snapshots' }),
    description: t.Union([t.String(), t.Null()]),
    initial: t.Union([t.String(), t.Null()], { description: 'The initial state; null when the root is parallel' }),
    states: t.Array(MachineState),
    transitions: t.Array(MachineTransition),
    events: t.Array(t.String(), { description: 'Event types the machine accepts, sorted' }),
    guards: t.Array(t.String(), { description: 'Guard names its transitions use, sorted' }),
    delays: t.Array(t.String(), { description: 'Delays of its after transitions: milliseconds, or the delay\'s name' }),
    final_states: t.Array(t.String()),
    mermaid: t.String({ description: 'The diagram as Mermaid stateDiagram-v2 text (docs/machines/<name>.md shows it rendered)' }),
  },
  {
    description: 'A state machine described from its XState definition',
    examples: [
      {
        name: 'webhook-delivery',
        version: 1,
        description: 'One webhook delivery: signed POSTs to the receiver, retried on 5xx, 3xx, 429, time-out and network errors.',
        initial: 'pending',
        states: [
          { name: 'pending', type: 'atomic', description: 'Its timer is due at once.', tags: [], entry: ['scheduleNow'], exit: [], final: false },
          { name: 'sending', type: 'atomic', tags: [], entry: ['countAttempt', 'scheduleLease'], exit: [], final: false },
          { name: 'succeeded', type: 'atomic', tags: ['settled'], entry: ['cancelTimer'], exit: [], final: false },
        ],
        transitions: [
          { source: 'pending', event: 'timer.fired', target: 'sending', actions: [] },
          { source: 'sending', event: 'attempt.succeeded', target: 'succeeded', actions: [], description: '2xx' },
        ],
        events: ['attempt.succeeded', 'timer.fired'],
        guards: [],
        delays: [],
        final_states: [],
        mermaid: 'stateDiagram-v2\n  [*] --> pending\n  pending --> sending : timer.fired\n  sending --> succeeded : attempt.succeeded\n',
      },
    ],
  },
)

export const MachineParams = t.Object({
  name: t.String({ minLength: 1, maxLength: 64, pattern: '^[a-z0-9]+(-[a-z0-9]+)*$', description: 'Machine name (kebab-case)', examples: ['webhook-delivery'] }),
})
