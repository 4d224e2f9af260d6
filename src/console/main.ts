import { api, listAll, session, setOnUnauthorized } from './api'
import type { PageContext, PageRenderer } from './context'
import { h, put } from './dom'
import { agentPage, agentsPage } from './pages/agents'
import { documentPage, knowledgeBasePage, knowledgeBasesPage } from './pages/documents'
import { machinePage, machinesPage } from './pages/machines'
import { runPage, workflowPage, workflowsPage } from './pages/runs'
import { deliveryPage, webhookPage, webhooksPage } from './pages/webhooks'
import { workspacePage, workspacesPage } from './pages/workspaces'
import type { Workspace } from './types'

const NAV: [string, string][] = [
  ['workspaces', 'Workspaces'],
  ['webhooks', 'Webhooks'],
  ['runs', 'Runs'],
  ['documents', 'Documents'],
  ['machines', 'Machines'],
  ['agents', 'Agents'],
]

/** Hash routes: `#/<section>/...`, so that a reload or a shared link opens the same page. */
const ROUTES: [RegExp, string, PageRenderer][] = [
  [/^\/workspaces$/, 'workspaces', workspacesPage],
  [/^\/workspaces\/([^/]+)$/, 'workspaces', workspacePage],
  [/^\/webhooks$/, 'webhooks', webhooksPage],
  [/^\/webhooks\/([^/]+)$/, 'webhooks', webhookPage],
  [/^\/webhooks\/([^/]+)\/deliveries\/([^/]+)$/, 'webhooks', deliveryPage],
  [/^\/runs$/, 'runs', workflowsPage],
  [/^\/workflows\/([^/]+)$/, 'runs', workflowPage],
  [/^\/runs\/([^/]+)$/, 'runs', runPage],
  [/^\/documents$/, 'documents', knowledgeBasesPage],
  [/^\/knowledge-bases\/([^/]+)$/, 'documents', knowledgeBasePage],
  [/^\/knowledge-bases\/([^/]+)\/documents\/([^/]+)$/, 'documents', documentPage],
  [/^\/machines$/, 'machines', machinesPage],
  [/^\/machines\/([^/]+)$/, 'machines', machinePage],
  [/^\/agents$/, 'agents', agentsPage],
  [/^\/agents\/([^/]+)$/, 'agents', agentPage],
]

const WS_KEY = 'agent-platform.console.workspace'
const app = document.getElementById('app')!
let current: AbortController | undefined
let workspaces: Workspace[] = []

/** Set while the sign-in form is shown: a 401 there is the form's own answer, not a lost session. */
let signingIn = false

setOnUnauthorized(() => {
  if (signingIn) return
  session.key = null
  signIn('The API refused the key (401). Sign in again.')
})

function signIn(message?: string) {
  current?.abort()
  signingIn = true
  const input = h('input', { type: 'password', name: 'api_key', autocomplete: 'off', required: true, spellcheck: 'false', placeholder: 'ap_…' })
  const status = h('p', { class: 'status', role: 'status' }, message ?? '')
  const form = h('form', { class: 'sign-in', 'aria-labelledby': 'sign-in-title' },
    h('h1', { id: 'sign-in-title' }, 'Agent Platform console'),
    h('p', null, 'Sign in with an API key. It stays in this tab only (session storage) and is sent as the Bearer header to the public API.'),
    h('div', { class: 'field' }, h('label', { for: 'api-key' }, 'API key'), Object.assign(input, { id: 'api-key' })),
    h('button', { type: 'submit' }, 'Sign in'),
    status,
  )
  form.addEventListener('submit', async (e) => {
    e.preventDefault()
    session.key = input.value.trim()
    put(status, 'Checking the key…')
    try {
      await api('GET', '/workspaces?limit=1')
      signingIn = false
      await start()
    } catch (err) {
      session.key = null
      put(status, h('span', { class: 'error', role: 'alert' }, (err as Error).message))
    }
  })
  put(app, h('main', { id: 'main' }, form))
  input.focus()
}

async function start() {
  try {
    workspaces = await listAll<Workspace>('/workspaces')
  } catch (err) {
    if (!session.key) return
    workspaces = []
    console.warn(err)
  }
  if (!location.hash || location.hash === '#' || location.hash === '#/') history.replaceState(null, '', '#/workspaces')
  render()
}

function chosenWorkspace(): string | null {
  const saved = sessionStorage.getItem(WS_KEY)
  if (saved && workspaces.some((w) => w.id === saved)) return saved
  // Nothing chosen yet: the oldest active workspace (the list is newest first, and the newest is often
  // one just made and still empty), not the newest (docs/console.md).
  const active = workspaces.filter((w) => (w as { status?: string }).status !== 'archived')
  return (active.at(-1) ?? workspaces.at(-1))?.id ?? null
}

function render() {
  if (!session.key) return signIn()
  current?.abort()
  current = new AbortController()
  const path = location.hash.replace(/^#/, '') || '/workspaces'
  const [route, q = ''] = path.split('?') as [string, string?]
  const match = ROUTES.map(([re, nav, page]) => ({ m: re.exec(route), nav, page })).find((r) => r.m)
  // Opening a workspace chooses it: the other pages then show what is in it.
  const opened = /^\/workspaces\/([^/?]+)/.exec(route)?.[1]
  if (opened && workspaces.some((w) => w.id === decodeURIComponent(opened))) sessionStorage.setItem(WS_KEY, decodeURIComponent(opened))
  const select = h('select', { id: 'workspace', name: 'workspace' },
    workspaces.map((w) => h('option', { value: w.id }, `${w.name} (${w.id})`)),
  )
  const wsId = chosenWorkspace()
  if (wsId) select.value = wsId
  select.addEventListener('change', () => {
    sessionStorage.setItem(WS_KEY, select.value)
    render()
  })
  const main = h('main', { id: 'main', tabindex: '-1' })
  const header = h('header', { class: 'top' },
    h('a', { class: 'brand', href: '#/workspaces' }, 'Agent Platform'),
    h('nav', { 'aria-label': 'Sections' },
      h('ul', null, NAV.map(([key, label]) => h('li', null, h('a', { href: `#/${key}`, 'aria-current': match?.nav === key ? 'page' : null }, label)))),
    ),
    h('div', { class: 'tools' },
      h('label', { for: 'workspace' }, 'Workspace'), select,
      h('button', { type: 'button', class: 'secondary', on: { click: () => { session.key = null; sessionStorage.removeItem(WS_KEY); signIn('Signed out.') } } }, 'Sign out'),
    ),
  )
  put(app, header, main)
  if (!match) {
    put(main, h('h1', null, 'Not found'), h('p', null, `No console page at ${route}.`))
    return
  }
  const ctx: PageContext = { main, params: match.m!.slice(1).map(decodeURIComponent), query: new URLSearchParams(q), signal: current.signal, workspaceId: wsId }
  put(main, h('p', { class: 'loading' }, 'Loading…'))
  match.page(ctx).catch((err) => {
    if (ctx.signal.aborted) return
    put(main, h('h1', null, 'Something went wrong'), h('p', { class: 'error', role: 'alert' }, (err as Error).message))
  })
}

window.addEventListener('hashchange', () => {
  render()
  document.getElementById('main')?.focus({ preventScroll: true })
})
if (session.key) void start()
else signIn()
