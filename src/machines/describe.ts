import { and, not, or, stateIn, type AnyStateNode, type AnyTransitionDefinition } from 'xstate'
import { sortStrings, toMermaid, type Edge } from './mermaid'
import type { MachineEntry } from './registry'

/**
 * A machine described from its own definition (never from a hand-written list), for
 * `GET /v1/machines` and `bun run diagrams`. Deterministic: states in definition order (a parent
 * before its children), transitions in the order XState keeps them (per state: `on` in key order,
 * then `onDone`, invoke results, `after`, and last `always`), so a generated file is byte-for-byte
 * stable.
 */

export type StateType = 'atomic' | 'compound' | 'parallel' | 'final' | 'history'

export interface StateDescription {
  /** Dot path from the machine root, e.g. `running.waiting`. */
  name: string
  type: StateType
  description?: string
  tags: string[]
  /** Entry action names (the timers XState adds for `after` are left out). */
  entry: string[]
  /** Exit action names (the timer cancellations XState adds for `after` are left out). */
  exit: string[]
  final: boolean
  /** Only on history states. */
  history?: 'shallow' | 'deep'
}

export interface TransitionDescription {
  /** Dot path of the state that handles the event; `(machine)` for the machine's own handlers. */
  source: string
  /** The event type; `after <delay>` (ms or the delay's name), `always`, `onDone`, `onDone <invoke id>`, `onError <invoke id>`, `onSnapshot <invoke id>`. */
  event: string
  /** Dot path of the target; several targets (into parallel regions) joined by ", "; null when targetless. */
  target: string | null
  guard?: string
  actions: string[]
  description?: string
}

export interface MachineDescription {
  name: string
  version: number
  description: string | null
  /** The initial child of the root; null when the root is parallel. */
  initial: string | null
  states: StateDescription[]
  transitions: TransitionDescription[]
  /** Event types the machine accepts from outside, sorted (no `after`, `always` or done events). */
  events: string[]
  /** Guard names used by transitions, sorted (parts of and/or/not included). */
  guards: string[]
  /** Delays of `after` transitions: numbers (ms) ascending, then names. */
  delays: string[]
  final_states: string[]
  mermaid: string
}

/** The source name of transitions on the machine root. */
export const MACHINE_SOURCE = '(machine)'

const AND_CHECK = (and([]) as unknown as { check: unknown }).check
const OR_CHECK = (or([]) as unknown as { check: unknown }).check
const NOT_CHECK = (not('x') as unknown as { check: unknown }).check
const STATE_IN_CHECK = (stateIn('x') as unknown as { check: unknown }).check

/** Deterministic labels for inline (function) guards and actions: `inline:<n>` in traversal order. */
class Labeller {
  private readonly seen = new Map<unknown, string>()
  private next = 1

  label(fn: unknown, kind?: string): string {
    let label = this.seen.get(fn)
    if (!label) {
      label = `inline:${this.next++}${kind ? ` (${kind})` : ''}`
      this.seen.set(fn, label)
    }
    return label
  }
}

type Fn = ((...args: never[]) => unknown) & Record<string, unknown>

function actionName(action: unknown, inline: Labeller): string {
  if (typeof action === 'string') return action
  if (typeof action === 'function') {
    const type = (action as Fn).type
    // Built-in action creators (assign, emit, raise, sendTo, log, ...) carry their type.
    return inline.label(action, typeof type === 'string' ? type.replace(/^xstate\./, '') : undefined)
  }
  if (action && typeof action === 'object' && typeof (action as { type?: unknown }).type === 'string') return (action as { type: string }).type
  return inline.label(action)
}

function guardName(guard: unknown, inline: Labeller, names: Set<string>): string {
  if (typeof guard === 'string') {
    names.add(guard)
    return guard
  }
  if (typeof guard === 'function') {
    const g = guard as Fn
    if (Array.isArray(g.guards) && (g.check === AND_CHECK || g.check === OR_CHECK || g.check === NOT_CHECK)) {
      const op = g.check === AND_CHECK ? 'and' : g.check === OR_CHECK ? 'or' : 'not'
      return `${op}(${(g.guards as unknown[]).map((x) => guardName(x, inline, names)).join(', ')})`
    }
    if (g.check === STATE_IN_CHECK) {
      const label = `stateIn(${typeof g.stateValue === 'string' ? g.stateValue : JSON.stringify(g.stateValue)})`
      names.add(label)
      return label
    }
    const label = inline.label(guard)
    names.add(label)
    return label
  }
  if (guard && typeof guard === 'object' && typeof (guard as { type?: unknown }).type === 'string') {
    const name = (guard as { type: string }).type
    names.add(name)
    return name
  }
  const label = inline.label(guard)
  names.add(label)
  return label
}

const pathOf = (node: AnyStateNode) => (node.path.length === 0 ? MACHINE_SOURCE : node.path.join('.'))

/** Pre-order walk of the state nodes below `node`, in definition order. */
function descendants(node: AnyStateNode): AnyStateNode[] {
  const out: AnyStateNode[] = []
  for (const child of Object.values(node.states) as AnyStateNode[]) out.push(child, ...descendants(child))
  return out
}

/** XState adds a delayed `raise` on entry and a `cancel` on exit for every `after` delay. */
function isAfterTimer(action: unknown): boolean {
  if (typeof action !== 'function') return false
  const a = action as Fn
  const id = a.type === 'xstate.raise' ? a.id : a.type === 'xstate.cancel' ? a.sendId : undefined
  return typeof id === 'string' && id.startsWith('xstate.after.')
}

function delayLabel(delay: unknown, inline: Labeller): string {
  return typeof delay === 'number' || typeof delay === 'string' ? String(delay) : inline.label(delay)
}

function compareDelays(a: string, b: string): number {
  const na = /^\d+(\.\d+)?$/.test(a) ? Number(a) : null
  const nb = /^\d+(\.\d+)?$/.test(b) ? Number(b) : null
  if (na !== null && nb !== null) return na - nb
  if (na !== null) return -1
  if (nb !== null) return 1
  return a < b ? -1 : a > b ? 1 : 0
}

/** Describes one registry entry: pure, from `machine.root` alone. */
export function describeMachine(entry: MachineEntry): MachineDescription {
  const { machine } = entry
  const root = machine.root as AnyStateNode
  const actionLabels = new Labeller()
  const guardLabels = new Labeller()
  const delayLabels = new Labeller()
  const guardNames = new Set<string>()
  const events = new Set<string>()
  const delays = new Set<string>()

  const nodes = descendants(root)
  const states: StateDescription[] = nodes.map((node) => ({
    name: pathOf(node),
    type: node.type,
    ...(node.description === undefined ? {} : { description: node.description }),
    tags: [...node.tags],
    entry: node.entry.filter((a) => !isAfterTimer(a)).map((a) => actionName(a, actionLabels)),
    exit: node.exit.filter((a) => !isAfterTimer(a)).map((a) => actionName(a, actionLabels)),
    final: node.type === 'final',
    ...(node.type === 'history' ? { history: node.history === 'deep' ? ('deep' as const) : ('shallow' as const) } : {}),
  }))

  const transitions: TransitionDescription[] = []
  const edges: Edge[] = []
  for (const node of [root, ...nodes]) {
    const delayed = new Set<unknown>(node.after)
    const internal = new Map<string, string>()
    if (node.config.onDone) internal.set(`xstate.done.state.${node.id}`, 'onDone')
    for (const inv of node.invoke) {
      internal.set(`xstate.done.actor.${inv.id}`, `onDone ${inv.id}`)
      internal.set(`xstate.error.actor.${inv.id}`, `onError ${inv.id}`)
      internal.set(`xstate.snapshot.${inv.id}`, `onSnapshot ${inv.id}`)
    }
    const add = (t: AnyTransitionDefinition, event: string) => {
      const targets = (t.target ?? []) as AnyStateNode[]
      const guard = t.guard === undefined ? undefined : guardName(t.guard, guardLabels, guardNames)
      const actions = t.actions.map((a) => actionName(a, actionLabels))
      // Key order of the JSON answer: source, event, target, guard, actions, description.
      transitions.push({
        source: pathOf(node),
        event,
        target: targets.length ? targets.map(pathOf).join(', ') : null,
        ...(guard === undefined ? {} : { guard }),
        actions,
        ...(typeof t.description === 'string' ? { description: t.description } : {}),
      })
      edges.push({ source: node, targets, event, guard, actions })
    }
    for (const [eventType, list] of node.transitions) {
      for (const t of list) {
        if (delayed.has(t)) {
          const delay = delayLabel((t as { delay?: unknown }).delay, delayLabels)
          delays.add(delay)
          add(t, `after ${delay}`)
        } else if (internal.has(eventType)) {
          add(t, internal.get(eventType)!)
        } else {
          events.add(eventType)
          add(t, eventType)
        }
      }
    }
    for (const t of node.always ?? []) add(t, 'always')
  }

  const initialTarget = root.type === 'compound' ? root.initial?.target?.[0] : undefined
  const description: Omit<MachineDescription, 'mermaid'> = {
    name: entry.name,
    version: entry.version,
    description: root.description ?? null,
    initial: initialTarget ? pathOf(initialTarget) : null,
    states,
    transitions,
    events: sortStrings(events),
    guards: sortStrings(guardNames),
    delays: [...delays].sort(compareDelays),
    final_states: states.filter((s) => s.final).map((s) => s.name),
  }
  return { ...description, mermaid: toMermaid(root, nodes, edges) }
}
