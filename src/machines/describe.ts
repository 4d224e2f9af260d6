import { and, not, or, stateIn, type AnyStateNode, type AnyTransitionDefinition } from 'xstate'
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

const sortStrings = (xs: Iterable<string>) => [...new Set(xs)].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))

interface Edge {
  source: AnyStateNode
  targets: AnyStateNode[]
  event: string
  guard?: string
  actions: string[]
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

// ---------------------------------------------------------------------------------------------
// Mermaid stateDiagram-v2

/**
 * Text after a `:` in stateDiagram-v2 runs to the next `:`, `;` or newline, and Mermaid's `#59;`
 * entity codes are not decoded in state diagrams (they show as garbage), so the few characters that
 * would break the parser or the HTML label are replaced by look-alikes: `: ` → ` - `, other `:` → `.`,
 * `;` → `,`, `"` → `'`, `<` `>` → `‹` `›`. The tables of the generated page keep the exact text.
 */
export function mermaidText(s: string): string {
  return s
    .replace(/\s+/g, ' ')
    .trim()
    .replace(/:(?=\s|$)/g, ' -')
    .replace(/:/g, '.')
    .replace(/;/g, ',')
    .replace(/"/g, "'")
    .replace(/</g, '‹')
    .replace(/>/g, '›')
    .replace(/%%/g, '%')
    .replace(/(direction)\s+(TB|BT|RL|LR)\b/gi, '$1 - $2')
}

/** Splits text into lines of at most `width` characters at spaces (a longer word stays whole). */
function wrap(text: string, width: number): string[] {
  const lines: string[] = []
  let line = ''
  for (const word of text.replace(/\s+/g, ' ').trim().split(' ')) {
    if (line && line.length + 1 + word.length > width) {
      lines.push(line)
      line = word
    } else line = line ? `${line} ${word}` : word
  }
  if (line) lines.push(line)
  return lines
}

const DESCRIPTION_WIDTH = 48
const TAG_STYLES = [
  'fill:#e8f5e9,stroke:#2e7d32,stroke-width:2px',
  'fill:#e3f2fd,stroke:#1565c0,stroke-width:2px',
  'fill:#fff3e0,stroke:#ef6c00,stroke-width:2px',
  'fill:#f3e5f5,stroke:#6a1b9a,stroke-width:2px',
  'fill:#fce4ec,stroke:#ad1457,stroke-width:2px',
]

function mermaidIds(nodes: AnyStateNode[]): Map<AnyStateNode, string> {
  const ids = new Map<AnyStateNode, string>()
  const taken = new Set<string>(['root', ANY_STATE_ID])
  for (const node of nodes) {
    let base = node.path.join('_').replace(/[^A-Za-z0-9_]/g, '_')
    // `default` is a keyword wherever it starts an id; Mermaid names [*] of a block `<id>_start`/`_end`.
    if (/^(default|root$|[0-9])/i.test(base) || base === '') base = `s_${base}`
    if (/_(start|end)$/.test(base)) base = `${base}_`
    let id = base
    for (let n = 2; taken.has(id); n++) id = `${base}_${n}`
    taken.add(id)
    ids.set(node, id)
  }
  return ids
}

const ANY_STATE_ID = 'any_state_'

function toMermaid(root: AnyStateNode, nodes: AnyStateNode[], edges: Edge[]): string {
  const ids = mermaidIds(nodes)
  const idOf = (node: AnyStateNode) => (node === root ? ANY_STATE_ID : ids.get(node)!)
  const lines: string[] = ['stateDiagram-v2']
  const label = (e: Edge) => mermaidText(e.guard === undefined ? e.event : `${e.event} [${e.guard}]`)
  const internalLabel = (e: Edge) => mermaidText(`${e.guard === undefined ? e.event : `${e.event} [${e.guard}]`}${e.actions.length ? ` / ${e.actions.join(', ')}` : ''}`)

  /**
   * One arrow per pair of states, its label every transition between them, a line each: Mermaid's
   * layout places the labels of parallel arrows between the same two states on top of each other
   * (the delivery machine's three ways from sending to failed were unreadable).
   */
  const grouped = (list: Edge[]): [string, string, string][] => {
    const pairs = new Map<string, [string, string, string[]]>()
    for (const e of list) {
      for (const t of e.targets) {
        const key = `${idOf(e.source)} ${idOf(t)}`
        const pair = pairs.get(key) ?? [idOf(e.source), idOf(t), []]
        pair[2].push(label(e))
        pairs.set(key, pair)
      }
    }
    return [...pairs.values()].map(([from, to, labels]) => [from, to, labels.join('<br>')])
  }

  // Transitions between siblings are drawn inside their parent's block, the others after all blocks.
  const inner = new Map<AnyStateNode, Edge[]>()
  const outer: Edge[] = []
  const internalOf = new Map<AnyStateNode, Edge[]>()
  for (const e of edges) {
    if (e.targets.length === 0) {
      // A targetless transition runs its actions without leaving the state: listed in the state, as in UML.
      if (e.source !== root) internalOf.set(e.source, [...(internalOf.get(e.source) ?? []), e])
      else outer.push(e)
      continue
    }
    const parent = e.source.parent
    if (e.source !== root && e.targets.every((t) => t.parent === parent) && parent) inner.set(parent, [...(inner.get(parent) ?? []), e])
    else outer.push(e)
  }

  const block = (node: AnyStateNode, indent: string) => {
    const children = Object.values(node.states) as AnyStateNode[]
    if (node.type === 'compound' && node.initial?.target?.[0]) lines.push(`${indent}[*] --> ${idOf(node.initial.target[0] as AnyStateNode)}`)
    children.forEach((child, i) => {
      if (node.type === 'parallel' && i > 0) lines.push(`${indent}--`)
      const id = idOf(child)
      const shown = child.type === 'history' ? (child.history === 'deep' ? 'H*' : 'H') : child.key
      if (child.type === 'compound' || child.type === 'parallel') {
        lines.push(shown === id ? `${indent}state ${id} {` : `${indent}state "${mermaidText(shown)}" as ${id} {`)
        block(child, `${indent}  `)
        lines.push(`${indent}}`)
      } else {
        const extra = [
          ...wrap(child.description ?? '', DESCRIPTION_WIDTH).map(mermaidText),
          ...(internalOf.get(child) ?? []).map(internalLabel),
        ]
        // Mermaid titles a state with its first description line unless the state was named first.
        if (shown !== id || extra.length) lines.push(`${indent}state "${mermaidText(shown)}" as ${id}`)
        for (const line of extra) lines.push(`${indent}${id} : ${line}`)
      }
      if (child.type === 'final') lines.push(`${indent}${id} --> [*]`)
    })
    for (const [from, to, text] of grouped(inner.get(node) ?? [])) lines.push(`${indent}${from} --> ${to} : ${text}`)
  }
  block(root, '  ')

  if (outer.some((e) => e.source === root)) lines.push(`  state "(any state)" as ${ANY_STATE_ID}`)
  for (const e of outer) if (e.targets.length === 0) lines.push(`  ${ANY_STATE_ID} : ${internalLabel(e)}`)
  for (const [from, to, text] of grouped(outer)) lines.push(`  ${from} --> ${to} : ${text}`)

  // Descriptions of compound and parallel states, which Mermaid draws as boxes with only a title.
  for (const node of nodes) {
    if ((node.type === 'compound' || node.type === 'parallel') && node.description) {
      lines.push(`  note right of ${idOf(node)}`)
      for (const line of wrap(mermaidText(node.description), DESCRIPTION_WIDTH)) lines.push(`    ${line.replace(/end note/gi, 'end - note')}`)
      lines.push('  end note')
    }
  }

  const tags = sortStrings(nodes.flatMap((n) => [...n.tags]))
  tags.forEach((tag, i) => {
    const cls = `tag_${tag.replace(/[^A-Za-z0-9_]/g, '_')}`
    const tagged = nodes.filter((n) => n.tags.includes(tag) && n.type !== 'compound' && n.type !== 'parallel').map(idOf)
    if (tagged.length === 0) return
    lines.push(`  classDef ${cls} ${TAG_STYLES[i % TAG_STYLES.length]}`)
    lines.push(`  class ${tagged.join(', ')} ${cls}`)
  })
  return `${lines.join('\n')}\n`
}
