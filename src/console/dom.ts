/**
 * Building the DOM without HTML strings: every value becomes a text node or an attribute set with
 * setAttribute, so a document name, a run output or a receiver's answer can never turn into markup.
 */
export type Child = Node | string | number | boolean | null | undefined | Child[]
type Handler = (event: Event) => void
export interface Attrs {
  [name: string]: string | number | boolean | null | undefined | Handler | Record<string, Handler>
}

export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Attrs | null = null, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag)
  for (const [name, value] of Object.entries(attrs ?? {})) {
    if (value === null || value === undefined || value === false) continue
    if (name === 'on') for (const [type, fn] of Object.entries(value as Record<string, Handler>)) el.addEventListener(type, fn)
    else if (name === 'value' && 'value' in el) (el as HTMLInputElement).value = String(value)
    else if (name === 'href' && !/^(#|\/)/.test(String(value))) throw new Error('links stay inside the console')
    else el.setAttribute(name, value === true ? '' : String(value))
  }
  append(el, children)
  return el
}

export function append(parent: Node, children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false || child === true) continue
    if (Array.isArray(child)) append(parent, child)
    else parent.appendChild(child instanceof Node ? child : document.createTextNode(String(child)))
  }
}

/** Replaces an element's content. */
export function put(el: Element, ...children: Child[]): void {
  el.replaceChildren()
  append(el, children)
}

export function table(caption: string, head: string[], rows: Child[][], empty = 'Nothing yet.'): HTMLElement {
  if (rows.length === 0) return h('p', { class: 'empty' }, `${caption}: ${empty}`)
  return h('div', { class: 'table-wrap' },
    h('table', null,
      h('caption', null, caption),
      h('thead', null, h('tr', null, head.map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', null, rows.map((r) => h('tr', null, r.map((c) => h('td', null, c))))),
    ),
  )
}

export function badge(status: string): HTMLElement {
  return h('span', { class: `badge badge-${status.replace(/[^a-z_]/g, '')}` }, status)
}

export function link(href: string, text: string): HTMLAnchorElement {
  return h('a', { href }, text)
}

export function pre(value: unknown): HTMLElement {
  return h('pre', { class: 'json' }, typeof value === 'string' ? value : JSON.stringify(value, null, 2))
}

export { duration } from './format'

export function when(iso: string | null | undefined): string {
  if (!iso) return '—'
  const d = new Date(iso)
  return Number.isNaN(d.getTime()) ? iso : d.toLocaleString()
}

export function field(label: string, control: HTMLElement, id: string): HTMLElement {
  control.id = id
  return h('div', { class: 'field' }, h('label', { for: id }, label), control)
}

/** A definition list of label → value pairs. */
export function facts(pairs: [string, Child][]): HTMLElement {
  return h('dl', { class: 'facts' }, pairs.map(([k, v]) => [h('dt', null, k), h('dd', null, v)]))
}

/** A button whose click runs an async action, disabled meanwhile, its failure shown in `status`. */
export function action(label: string, run: () => Promise<unknown>, status: HTMLElement, attrs: Attrs = {}): HTMLButtonElement {
  const button = h('button', { type: 'button', ...attrs }, label)
  button.addEventListener('click', async () => {
    button.disabled = true
    put(status)
    try {
      await run()
    } catch (err) {
      put(status, h('span', { class: 'error', role: 'alert' }, (err as Error).message))
    } finally {
      button.disabled = false
    }
  })
  return button
}
