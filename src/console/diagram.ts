import { CONSOLE_BASE, api } from './api'
import { h, put } from './dom'
import { highlighted, type Highlight } from './paths'
import type { Machine } from './types'
export type { Machine }

export type { Highlight }

interface MermaidApi {
  initialize(config: Record<string, unknown>): void
  render(id: string, text: string): Promise<{ svg: string }>
}

let loading: Promise<MermaidApi> | undefined
/** Mermaid (3.5 MB) is loaded only by pages that draw a diagram, from the service itself. */
function mermaid(): Promise<MermaidApi> {
  loading ??= new Promise<MermaidApi>((resolve, reject) => {
    const script = h('script', { src: `${CONSOLE_BASE}/vendor/mermaid.min.js` })
    script.addEventListener('load', () => {
      const m = (globalThis as unknown as { mermaid: MermaidApi }).mermaid
      m.initialize({ startOnLoad: false, securityLevel: 'strict', theme: 'neutral', state: { useMaxWidth: true } })
      resolve(m)
    })
    script.addEventListener('error', () => {
      loading = undefined
      reject(new Error('the diagram library failed to load'))
    })
    document.head.append(script)
  })
  return loading
}

let machines: Promise<Machine[]> | undefined
export function loadMachines(): Promise<Machine[]> {
  machines ??= api<{ data: Machine[] }>('GET', '/machines').then((r) => r.data).catch((err) => {
    machines = undefined
    throw err
  })
  return machines
}

let seq = 0
/**
 * Draws `machine` into `figure`; with `hl`, the current state and the path so far are marked, and
 * also written out as text (the diagram alone is not accessible).
 */
export async function drawMachine(figure: HTMLElement, machine: Machine, hl?: Highlight): Promise<void> {
  figure.classList.add('diagram')
  figure.dataset.machine = machine.name
  // Set once the diagram is drawn (or failed to draw): the attributes tell what the figure shows.
  const mark = () => {
    if (!hl) return
    figure.dataset.currentState = hl.current
    figure.dataset.path = [...hl.path, hl.current].join(' ')
  }
  const caption = h('figcaption', null,
    h('strong', null, machine.name), ` (version ${machine.version})`,
    hl ? [' — current state: ', h('mark', { class: 'current-state' }, hl.current), h('span', { class: 'path' }, ` · path: ${[...hl.path, hl.current].join(' → ')}`)] : null,
  )
  const canvas = h('div', { class: 'canvas', role: 'img', 'aria-label': `State diagram of ${machine.name}${hl ? `, current state ${hl.current}` : ''}` }, 'Drawing…')
  put(figure, canvas, caption)
  try {
    const m = await mermaid()
    const { svg } = await m.render(`mmd-${++seq}`, hl ? highlighted(machine.mermaid, hl) : machine.mermaid)
    // Mermaid's own output, sanitised by its strict security level. Parsed by DOMParser, which runs
    // no script; as HTML, because its labels are HTML inside foreignObject (<br>, not <br/>).
    const svgEl = new DOMParser().parseFromString(svg, 'text/html').querySelector('svg')
    if (!svgEl) throw new Error('Mermaid drew nothing')
    put(canvas, document.importNode(svgEl, true))
  } catch (err) {
    put(canvas, h('span', { class: 'error', role: 'alert' }, `Diagram unavailable: ${(err as Error).message}`), h('pre', null, machine.mermaid))
  }
  mark()
}

/** Draws the machine called `name` (from GET /v1/machines). */
export async function drawNamed(figure: HTMLElement, name: string, hl?: Highlight): Promise<void> {
  const all = await loadMachines()
  const machine = all.find((m) => m.name === name)
  if (!machine) {
    put(figure, h('p', { class: 'error' }, `No machine named ${name}`))
    return
  }
  await drawMachine(figure, machine, hl)
}

/**
 * A figure for one actor's machine, redrawn only when its highlight changes (pages refresh every
 * second while the actor moves; Mermaid takes tens of ms per drawing).
 */
export function actorDiagram(machine: string): { figure: HTMLElement; show(hl: Highlight): Promise<void> } {
  const figure = h('figure')
  let drawn = ''
  return {
    figure,
    async show(hl) {
      const key = `${hl.current}|${hl.path.join(' ')}`
      if (key === drawn) return
      drawn = key
      await drawNamed(figure, machine, hl)
    },
  }
}
