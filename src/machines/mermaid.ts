import type { AnyStateNode } from 'xstate'

/** The Mermaid stateDiagram-v2 of a machine described by describe.ts (`GET /v1/machines`, docs/machines/). */

export interface Edge {
  source: AnyStateNode
  targets: AnyStateNode[]
  event: string
  guard?: string
  actions: string[]
}

export const sortStrings = (xs: Iterable<string>) => [...new Set(xs)].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))

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

/** The stateDiagram-v2 of a machine: its states as nested blocks, its transitions as labelled arrows, tags as classes. */
export function toMermaid(root: AnyStateNode, nodes: AnyStateNode[], edges: Edge[]): string {
  const ids = mermaidIds(nodes)
  const idOf = (node: AnyStateNode) => (node === root ? ANY_STATE_ID : ids.get(node)!)
  const lines: string[] = ['stateDiagram-v2']
  const placed = placeEdges(root, edges)
  blockLines(lines, root, '  ', idOf, placed)
  if (placed.outer.some((e) => e.source === root)) lines.push(`  state "(any state)" as ${ANY_STATE_ID}`)
  for (const e of placed.outer) if (e.targets.length === 0) lines.push(`  ${ANY_STATE_ID} : ${internalLabel(e)}`)
  for (const [from, to, text] of grouped(placed.outer, idOf)) lines.push(`  ${from} --> ${to} : ${text}`)
  noteLines(lines, nodes, idOf)
  tagLines(lines, nodes, idOf)
  return `${lines.join('\n')}\n`
}

const label = (e: Edge) => mermaidText(e.guard === undefined ? e.event : `${e.event} [${e.guard}]`)
const internalLabel = (e: Edge) => mermaidText(`${e.guard === undefined ? e.event : `${e.event} [${e.guard}]`}${e.actions.length ? ` / ${e.actions.join(', ')}` : ''}`)

/**
 * One arrow per pair of states, its label every transition between them, a line each: Mermaid's
 * layout places the labels of parallel arrows between the same two states on top of each other
 * (the delivery machine's three ways from sending to failed were unreadable).
 */
function grouped(list: Edge[], idOf: (node: AnyStateNode) => string): [string, string, string][] {
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

interface PlacedEdges {
  /** Transitions between siblings, drawn inside their parent's block. */
  inner: Map<AnyStateNode, Edge[]>
  /** The others, drawn after all blocks. */
  outer: Edge[]
  /** Targetless transitions: they run their actions without leaving the state, listed in it as in UML. */
  internalOf: Map<AnyStateNode, Edge[]>
}

function placeEdges(root: AnyStateNode, edges: Edge[]): PlacedEdges {
  const placed: PlacedEdges = { inner: new Map(), outer: [], internalOf: new Map() }
  for (const e of edges) {
    if (e.targets.length === 0) {
      if (e.source !== root) placed.internalOf.set(e.source, [...(placed.internalOf.get(e.source) ?? []), e])
      else placed.outer.push(e)
      continue
    }
    const parent = e.source.parent
    if (e.source !== root && e.targets.every((t) => t.parent === parent) && parent) placed.inner.set(parent, [...(placed.inner.get(parent) ?? []), e])
    else placed.outer.push(e)
  }
  return placed
}

function blockLines(lines: string[], node: AnyStateNode, indent: string, idOf: (node: AnyStateNode) => string, placed: PlacedEdges): void {
  const children = Object.values(node.states) as AnyStateNode[]
  if (node.type === 'compound' && node.initial?.target?.[0]) lines.push(`${indent}[*] --> ${idOf(node.initial.target[0] as AnyStateNode)}`)
  children.forEach((child, i) => {
    if (node.type === 'parallel' && i > 0) lines.push(`${indent}--`)
    const id = idOf(child)
    const shown = child.type === 'history' ? (child.history === 'deep' ? 'H*' : 'H') : child.key
    if (child.type === 'compound' || child.type === 'parallel') {
      lines.push(shown === id ? `${indent}state ${id} {` : `${indent}state "${mermaidText(shown)}" as ${id} {`)
      blockLines(lines, child, `${indent}  `, idOf, placed)
      lines.push(`${indent}}`)
    } else {
      const extra = [...wrap(child.description ?? '', DESCRIPTION_WIDTH).map(mermaidText), ...(placed.internalOf.get(child) ?? []).map(internalLabel)]
      // Mermaid titles a state with its first description line unless the state was named first.
      if (shown !== id || extra.length) lines.push(`${indent}state "${mermaidText(shown)}" as ${id}`)
      for (const line of extra) lines.push(`${indent}${id} : ${line}`)
    }
    if (child.type === 'final') lines.push(`${indent}${id} --> [*]`)
  })
  for (const [from, to, text] of grouped(placed.inner.get(node) ?? [], idOf)) lines.push(`${indent}${from} --> ${to} : ${text}`)
}

/** Descriptions of compound and parallel states, which Mermaid draws as boxes with only a title. */
function noteLines(lines: string[], nodes: AnyStateNode[], idOf: (node: AnyStateNode) => string): void {
  for (const node of nodes) {
    if ((node.type === 'compound' || node.type === 'parallel') && node.description) {
      lines.push(`  note right of ${idOf(node)}`)
      for (const line of wrap(mermaidText(node.description), DESCRIPTION_WIDTH)) lines.push(`    ${line.replace(/end note/gi, 'end - note')}`)
      lines.push('  end note')
    }
  }
}

function tagLines(lines: string[], nodes: AnyStateNode[], idOf: (node: AnyStateNode) => string): void {
  const tags = sortStrings(nodes.flatMap((n) => [...n.tags]))
  tags.forEach((tag, i) => {
    const cls = `tag_${tag.replace(/[^A-Za-z0-9_]/g, '_')}`
    const tagged = nodes.filter((n) => n.tags.includes(tag) && n.type !== 'compound' && n.type !== 'parallel').map(idOf)
    if (tagged.length === 0) return
    lines.push(`  classDef ${cls} ${TAG_STYLES[i % TAG_STYLES.length]}`)
    lines.push(`  class ${tagged.join(', ')} ${cls}`)
  })
}
