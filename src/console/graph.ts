import { h, put, table, duration, when } from './dom'
import { layers, stateText, type GraphEdge } from './layout'
import type { RunNodes } from './types'
export type { RunNodes }

/** GET /v1/runs/{run_id}/nodes. */

const SVG = 'http://www.w3.org/2000/svg'
// Box sizes in SVG units: a 22-character name fits the box at the stylesheet's 13px.
const W = 180
const H = 64
const GAP_X = 80
const GAP_Y = 24
const PAD = 12

/** An SVG element; like h(), every value is set as an attribute, never parsed as markup. */
function s(tag: string, attrs: Record<string, string | number> = {}, ...children: (Node | string)[]): SVGElement {
  const el = document.createElementNS(SVG, tag) as SVGElement
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v))
  for (const c of children) el.append(c)
  return el
}

const clip = (text: string, max = 22) => (text.length > max ? `${text.slice(0, max - 1)}…` : text)
const stateClass = (state: string) => `state-${state.replace(/[^a-z]/g, '')}`

/** The workflow graph drawn left to right, each node with its state, and the same as a table. */
export function drawRunGraph(figure: HTMLElement, nodes: RunNodes): void {
  const states = new Map(nodes.data.map((n) => [n.node, n]))
  const { placed, columns, rows } = layers(nodes.graph.nodes.map((n) => n.id), nodes.graph.edges)
  const at = new Map(placed.map((p) => [p.id, { x: PAD + p.column * (W + GAP_X), y: PAD + p.row * (H + GAP_Y) }]))
  const width = PAD * 2 + columns * W + Math.max(0, columns - 1) * GAP_X
  const height = PAD * 2 + rows * H + Math.max(0, rows - 1) * GAP_Y

  const svg = s('svg', {
    viewBox: `0 0 ${width} ${height}`, width, height, class: 'run-graph', role: 'img',
    'aria-label': `Workflow graph, ${nodes.graph.nodes.length} nodes: ${nodes.graph.nodes.map((n) => `${n.id} ${stateText(states.get(n.id)?.state ?? 'pending', states.get(n.id)?.attempt)}`).join(', ')}`,
  })
  svg.append(s('defs', {}, s('marker', { id: 'run-graph-arrow', viewBox: '0 0 10 10', refX: 10, refY: 5, markerWidth: 8, markerHeight: 8, orient: 'auto-start-reverse', class: 'arrow' },
    s('path', { d: 'M 0 0 L 10 5 L 0 10 z' }))))

  for (const e of nodes.graph.edges) {
    const a = at.get(e.source)
    const b = at.get(e.target)
    if (!a || !b) continue
    const x1 = a.x + W
    const y1 = a.y + H / 2
    const x2 = b.x
    const y2 = b.y + H / 2
    // A back or same-column edge (not in a saved graph) still gets a visible curve.
    const bend = Math.max(40, Math.abs(x2 - x1) / 2)
    const g = s('g', { class: `edge${e.source_handle === 'error' ? ' edge-error' : ''}`, 'data-source': e.source, 'data-target': e.target },
      s('path', { d: `M ${x1} ${y1} C ${x1 + bend} ${y1}, ${x2 - bend} ${y2}, ${x2} ${y2}`, 'marker-end': 'url(#run-graph-arrow)' }))
    if (e.source_handle) {
      // Just before the target, where the edge arrives level: the branches of one condition part at
      // their source, and labels there would pile onto each other.
      g.append(s('text', { x: x2 - 8, y: y2 - 6, 'text-anchor': 'end', class: 'edge-label' }, clip(e.source_handle, 12)))
    }
    svg.append(g)
  }

  for (const n of nodes.graph.nodes) {
    const p = at.get(n.id)!
    const st = states.get(n.id)
    const state = st?.state ?? 'pending'
    const title = `${n.id}${n.name ? ` (${n.name})` : ''}, ${n.type}: ${stateText(state, st?.attempt)}${st?.error ? ` — ${st.error.code}: ${st.error.message}` : ''}`
    svg.append(s('g', { class: `gnode ${stateClass(state)}`, 'data-node': n.id, 'data-state': state, transform: `translate(${p.x} ${p.y})` },
      s('title', {}, title),
      s('rect', { width: W, height: H, rx: 8, ry: 8 }),
      s('text', { x: 10, y: 20, class: 'gnode-name' }, clip(n.name ?? n.id)),
      s('text', { x: 10, y: 37, class: 'gnode-type' }, clip(n.name ? `${n.type} · ${n.id}` : n.type, 26)),
      s('text', { x: 10, y: 55, class: 'gnode-state' }, stateText(state, st?.attempt)),
    ))
  }

  figure.classList.add('graph')
  figure.dataset.states = nodes.data.map((n) => `${n.node}:${n.state}`).join(' ')
  put(figure,
    h('div', { class: 'canvas' }, svg),
    table('Node states', ['Node', 'Type', 'State', 'Attempt', 'Started', 'Duration', 'Until', 'Error'],
      nodes.data.map((n) => [
        n.name ? `${n.node} (${n.name})` : n.node, n.type,
        h('span', { class: `node-state ${stateClass(n.state)}`, 'data-state': n.state }, stateText(n.state, null)),
        n.attempt ?? '—', when(n.started_at), duration(n.duration_ms), when(n.until),
        n.error ? `${n.error.code}: ${n.error.message}` : '',
      ])),
  )
}
