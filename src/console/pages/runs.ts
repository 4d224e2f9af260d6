import { api, ApiError, listAll, query, stream } from '../api'
import { every, type PageContext } from '../context'
import { actorDiagram } from '../diagram'
import { runPath } from '../paths'
import { action, badge, duration, facts, field, h, link, pre, put, table, when } from '../dom'
import { drawRunGraph, type RunNodes } from '../graph'
import { inputForm, type Waiting } from '../input-form'
import { noWorkspace } from './shared'
import type { Run, RunEvent, Trigger, Workflow } from '../types'

const STATUSES = ['running', 'completed', 'failed', 'cancelled'] as const

/** A run's id linked to its page, marked when a sub_workflow or iteration node of another run started it. */
const runLink = (r: Run) => [
  link(`#/runs/${encodeURIComponent(r.run_id)}`, r.run_id),
  r.parent_run_id ? [' ', h('span', { class: 'child-run', title: `Child run of ${r.parent_run_id}` }, 'child')] : null,
]

export async function workflowsPage(ctx: PageContext) {
  if (!ctx.workspaceId) return noWorkspace(ctx)
  const wanted = ctx.query.get('status') ?? ''
  const [list, recent] = await Promise.all([
    listAll<Workflow>('/workflows', { workspace_id: ctx.workspaceId }, ctx.signal),
    // The latest runs of every workflow at once (GET /v1/runs), failed ones with the filter.
    listAll<Run>('/runs', { workspace_id: ctx.workspaceId, status: wanted || undefined }, ctx.signal, 50),
  ])
  const names = new Map(list.map((w) => [w.id, w.name]))
  const status = h('select', null, h('option', { value: '' }, 'all'), STATUSES.map((s) => h('option', { value: s }, s)))
  status.value = wanted
  const filters = h('form', { class: 'filters', 'aria-label': 'Filter recent runs' }, field('Status', status, 'recent-status'), h('button', { type: 'submit' }, 'Filter'))
  filters.addEventListener('submit', (e) => {
    e.preventDefault()
    location.hash = `#/runs${query({ status: status.value })}`
  })
  put(ctx.main,
    h('h1', null, 'Runs'),
    h('h2', null, 'Recent runs, every workflow'),
    filters,
    table('Recent runs across workflows, newest first', ['Run', 'Workflow', 'Status', 'Duration', 'Error', 'Started'],
      recent.map((r) => [runLink(r), link(`#/workflows/${encodeURIComponent(r.workflow_id)}`, names.get(r.workflow_id) ?? r.workflow_id), badge(r.status), duration(r.duration_ms), r.error ? `${r.error.code}: ${r.error.message}` : '', when(r.created_at)])),
    h('h2', null, 'Workflows'),
    h('p', null, 'Choose a workflow to see all its runs or start one.'),
    table('Workflows of the workspace', ['Workflow', 'Version', 'Updated'], list.map((w) => [link(`#/workflows/${encodeURIComponent(w.id)}`, w.name), w.version, when(w.updated_at)])),
  )
}

/** GET /v1/workflows/{id}/triggers (docs/api.md, "Triggers"). */

/** The workflow's schedules and hooks; a service without triggers (404) gets a note, not a broken page. */
async function triggersSection(path: string, signal: AbortSignal): Promise<HTMLElement> {
  const title = h('h2', { id: 'triggers' }, 'Triggers')
  let list: Trigger[]
  try {
    list = (await api<{ data: Trigger[] }>('GET', `${path}/triggers`, undefined, signal)).data
  } catch (err) {
    const why = err instanceof ApiError && err.status === 404 ? 'This service does not offer triggers (GET /v1/workflows/{id}/triggers answered 404).' : `Triggers unavailable: ${(err as Error).message}`
    return h('section', { class: 'triggers', 'aria-labelledby': 'triggers' }, title, h('p', { class: 'notice' }, why))
  }
  return h('section', { class: 'triggers', 'aria-labelledby': 'triggers' }, title,
    table('Triggers of the workflow', ['Trigger', 'Type', 'Schedule', 'Next run', 'Last run', 'Enabled', 'Hook URL'],
      list.map((t) => [
        t.id, t.type,
        t.type === 'schedule' ? `${t.cron ?? '—'} (${t.timezone ?? 'UTC'})` : '—',
        when(t.next_run_at),
        t.last_run_id ? link(`#/runs/${encodeURIComponent(t.last_run_id)}`, when(t.last_run_at)) : when(t.last_run_at),
        badge(t.enabled ? 'enabled' : 'disabled'),
        t.type === 'webhook' && t.url ? hookUrl(path, t) : '—',
      ]), 'none; a schedule or a hook is added through the API (POST /v1/workflows/{id}/triggers).'))
}

/**
 * A hook's URL (its token is the credential) and a button that gives it a new token: POST
 * .../triggers/{trigger_id}/rotate answers the trigger with its new url; the old one stops working.
 */
function hookUrl(path: string, t: Trigger): HTMLElement {
  const code = h('code', null, t.url ?? '')
  const status = h('span', { class: 'status', role: 'status' })
  const rotate = h('button', { type: 'button', class: 'secondary', on: { click: async () => {
    if (!confirm('Give this hook a new URL? The current URL stops working at once.')) return
    rotate.disabled = true
    try {
      const next = await api<{ data: Trigger }>('POST', `${path}/triggers/${encodeURIComponent(t.id)}/rotate`)
      code.textContent = next.data.url ?? ''
      status.textContent = 'New URL: the old one no longer works.'
    } catch (err) {
      status.textContent = `Could not rotate: ${(err as Error).message}`
    } finally {
      rotate.disabled = false
    }
  } } }, 'Rotate URL')
  return h('div', { class: 'hook-url' }, code, rotate, status)
}

/** datetime-local (the browser's time zone) ↔ ISO 8601 UTC for the API's created_at filters. */
const toIso = (local: string) => (local ? new Date(local).toISOString() : '')
const toLocal = (iso: string | null) => {
  if (!iso) return ''
  const d = new Date(iso)
  if (Number.isNaN(d.getTime())) return ''
  return new Date(d.getTime() - d.getTimezoneOffset() * 60_000).toISOString().slice(0, 16)
}

export async function workflowPage(ctx: PageContext) {
  const id = ctx.params[0]!
  const path = `/workflows/${encodeURIComponent(id)}`
  const [wf, triggers] = await Promise.all([
    api<{ data: Workflow }>('GET', path, undefined, ctx.signal).then((r) => r.data),
    triggersSection(path, ctx.signal),
  ])
  const status = h('select', null, h('option', { value: '' }, 'all'), STATUSES.map((s) => h('option', { value: s }, s)))
  status.value = ctx.query.get('status') ?? ''
  const after = h('input', { type: 'datetime-local', value: toLocal(ctx.query.get('created_at_after')) })
  const before = h('input', { type: 'datetime-local', value: toLocal(ctx.query.get('created_at_before')) })
  const filters = h('form', { class: 'filters', 'aria-label': 'Filter runs' },
    field('Status', status, 'run-status'), field('Started after', after, 'run-after'), field('Started before', before, 'run-before'),
    h('button', { type: 'submit' }, 'Filter'),
  )
  filters.addEventListener('submit', (e) => {
    e.preventDefault()
    location.hash = `${path}${query({ status: status.value, created_at_after: toIso(after.value), created_at_before: toIso(before.value) })}`
  })
  const inputs = h('textarea', { rows: '4', spellcheck: 'false' }, '{}')
  const userId = h('input', { type: 'text', value: 'console' })
  const startStatus = h('div', { class: 'status', role: 'status' })
  const start = h('form', { class: 'start-run', 'aria-label': 'Start a run' },
    field('Inputs (JSON)', inputs, 'run-inputs'), field('User id', userId, 'run-user'),
    h('button', { type: 'submit' }, 'Start run'), startStatus,
  )
  start.addEventListener('submit', async (e) => {
    e.preventDefault()
    let parsed: unknown
    try {
      parsed = JSON.parse(inputs.value || '{}')
    } catch (err) {
      put(startStatus, h('span', { class: 'error', role: 'alert' }, `Inputs are not JSON: ${(err as Error).message}`))
      return
    }
    try {
      const r = await api<{ run_id: string }>('POST', `${path}/runs?async=true`, { inputs: parsed, user_id: userId.value || undefined }, ctx.signal)
      location.hash = `#/runs/${encodeURIComponent(r.run_id)}`
    } catch (err) {
      put(startStatus, h('span', { class: 'error', role: 'alert' }, (err as Error).message))
    }
  })
  const runs = h('div', { 'aria-live': 'polite' })
  const show = async () => {
    const filter = { status: ctx.query.get('status') ?? undefined, created_at_after: ctx.query.get('created_at_after') ?? undefined, created_at_before: ctx.query.get('created_at_before') ?? undefined }
    const list = await listAll<Run>(`${path}/runs`, filter, ctx.signal, 200)
    put(runs, table('Runs, newest first', ['Run', 'Status', 'Version', 'Duration', 'Credits', 'User', 'Started'],
      list.map((r) => [runLink(r), badge(r.status), r.workflow_version, duration(r.duration_ms), r.usage.credits, r.user_id ?? '—', when(r.created_at)])))
    return list.some((r) => r.status === 'running')
  }
  put(ctx.main,
    h('p', { class: 'crumbs' }, link('#/runs', 'Runs'), ' / ', wf.name),
    h('h1', null, wf.name),
    h('details', null, h('summary', null, 'Start a run'), start),
    triggers,
    h('h2', null, 'Runs'),
    filters,
    runs,
  )
  await show()
  every(3000, ctx.signal, show)
}

export async function runPage(ctx: PageContext) {
  const id = ctx.params[0]!
  const path = `/runs/${encodeURIComponent(id)}`
  const status = h('div', { class: 'status', role: 'status' })
  const info = h('div', { 'aria-live': 'polite' })
  const waitingBox = h('div')
  const graph = h('figure', { class: 'graph' }, h('p', { class: 'loading' }, 'Loading the graph…'))
  const diagram = actorDiagram('workflow-run')
  const timeline = h('ol', { class: 'timeline', 'aria-label': 'Run events' })
  const started = new Map<string, number>()
  let run: Run
  let shownWaiting = ''

  const showGraph = async () => {
    try {
      drawRunGraph(graph, await api<RunNodes>('GET', `${path}/nodes`, undefined, ctx.signal))
    } catch (err) {
      if (!ctx.signal.aborted) put(graph, h('p', { class: 'error', role: 'alert' }, `Graph unavailable: ${(err as Error).message}`))
    }
  }
  // Events come in bursts (node_end, then the next node_start): one /nodes call per burst.
  let pending: ReturnType<typeof setTimeout> | undefined
  const refreshGraph = () => {
    clearTimeout(pending)
    pending = setTimeout(() => void (ctx.signal.aborted || showGraph()), 200)
  }
  ctx.signal.addEventListener('abort', () => clearTimeout(pending))

  // The form is rebuilt only when another input is asked for, so a refresh never wipes what is typed.
  const showWaiting = () => {
    const w = run.status === 'running' ? run.waiting ?? null : null
    const key = w ? `${w.node}|${w.since}` : ''
    if (key === shownWaiting) return
    shownWaiting = key
    put(waitingBox, w ? inputForm(w, async (data) => {
      run = await api<Run>('POST', `${path}/input`, { node: w.node, data }, ctx.signal)
      put(status, `Input sent to ${w.node}.`)
      await showRun()
      refreshGraph()
    }) : null)
  }

  const showRun = async () => {
    const before = run ? `${run.status}|${run.waiting?.node ?? ''}` : ''
    run = await api<Run>('GET', path, undefined, ctx.signal)
    put(info,
      facts([
        ['Status', badge(run.status)],
        ['Workflow', link(`#/workflows/${encodeURIComponent(run.workflow_id)}`, `${run.workflow_id} (version ${run.workflow_version})`)],
        run.parent_run_id ? ['Parent run', link(`#/runs/${encodeURIComponent(run.parent_run_id)}`, run.parent_run_id)] : null,
        ['Started', when(run.created_at)],
        ['Finished', when(run.finished_at)],
        ['Duration', duration(run.duration_ms)],
        ['Usage', `${run.usage.tokens_in} tokens in, ${run.usage.tokens_out} out, ${run.usage.credits} credits`],
        ['Error', run.error ? `${run.error.code}: ${run.error.message}${run.error.node ? ` (node ${run.error.node})` : ''}` : '—'],
      ].filter((pair): pair is [string, HTMLElement | string] => pair !== null)),
      h('div', { class: 'actions' },
        run.status === 'running'
          ? action('Cancel', async () => {
            await api('POST', `${path}/cancel`, undefined, ctx.signal)
            put(status, 'Cancelled.')
            await showRun()
          }, status)
          : null,
      ),
      h('details', null, h('summary', null, 'Inputs and outputs'), h('h3', null, 'Inputs'), pre(run.inputs), h('h3', null, 'Outputs'), pre(run.outputs)),
    )
    showWaiting()
    // A run that starts or stops waiting, or ends, may do so with no event the page saw (a time-out).
    if (before && before !== `${run.status}|${run.waiting?.node ?? ''}`) refreshGraph()
    await diagram.show(runPath(run.status))
  }

  const addEvent = (e: { seq?: number; event: string; data: Record<string, unknown>; created_at?: string }) => {
    const d = e.data ?? {}
    const node = String(d.node ?? d.node_id ?? '')
    let detail: HTMLElement | string = ''
    if (e.event === 'node_start') started.set(node, Date.now())
    if (e.event === 'node_end') detail = h('details', null, h('summary', null, `output, ${duration(d.duration_ms as number | undefined)}`), pre(d.output ?? {}))
    else if (e.event === 'message') detail = String(d.delta ?? d.content ?? '')
    else if (e.event !== 'node_start') detail = pre(d)
    timeline.append(h('li', { class: `ev ev-${e.event.replace(/[^a-z_]/g, '')}`, 'data-event': e.event },
      h('span', { class: 'ev-name' }, e.event), ' ', node ? h('strong', null, node) : null, ' ',
      e.event === 'node_end' ? h('span', { class: 'duration' }, duration(d.duration_ms as number | undefined)) : null, ' ', detail,
    ))
  }

  await showRun()
  put(ctx.main,
    h('p', { class: 'crumbs' }, link('#/runs', 'Runs'), ' / ', link(`#/workflows/${encodeURIComponent(run!.workflow_id)}`, 'Workflow'), ' / ', id),
    h('h1', null, `Run ${id}`),
    status,
    info,
    waitingBox,
    h('section', { 'aria-labelledby': 'gr' }, h('h2', { id: 'gr' }, 'Graph'), graph),
    h('div', { class: 'two' },
      h('section', { 'aria-labelledby': 'tl' }, h('h2', { id: 'tl' }, 'Event timeline'), timeline),
      h('section', { 'aria-labelledby': 'sm' }, h('h2', { id: 'sm' }, 'State machine'), diagram.figure),
    ),
  )
  await showGraph()
  if (run!.status !== 'running') {
    const events = await api<{ data: RunEvent[] }>('GET', `${path}/events`, undefined, ctx.signal)
    for (const e of events.data) addEvent(e)
    return
  }
  // Live: the run's event stream, and its status polled (a cancel from elsewhere ends the stream too).
  every(1000, ctx.signal, async () => {
    await showRun()
    return run.status === 'running'
  })
  let lastId: string | undefined
  for (let attempt = 0; attempt < 20 && !ctx.signal.aborted; attempt++) {
    try {
      await stream('GET', `${path}/events`, undefined, (event, data, eventId) => {
        if (eventId) lastId = eventId
        if (event === 'node_start' || event === 'node_end' || event === 'done') refreshGraph()
        addEvent({ event, data: (data ?? {}) as Record<string, unknown> })
      }, ctx.signal, lastId ? { 'last-event-id': lastId } : {})
      break
    } catch (err) {
      if (ctx.signal.aborted) return
      await new Promise((r) => setTimeout(r, 1000))
    }
  }
  if (!ctx.signal.aborted) {
    await showRun()
    refreshGraph()
  }
}
