import { api, listAll, query } from '../api'
import { every, type PageContext } from '../context'
import { actorDiagram } from '../diagram'
import { deliveryPath } from '../paths'
import { action, badge, duration, facts, field, h, link, pre, put, table, when } from '../dom'
import { noWorkspace } from './shared'
import type { Attempt, Delivery, Webhook } from '../types'

const STATUSES = ['pending', 'retrying', 'succeeded', 'failed'] as const

export async function webhooksPage(ctx: PageContext) {
  if (!ctx.workspaceId) return noWorkspace(ctx)
  const list = await listAll<Webhook>('/webhooks', { workspace_id: ctx.workspaceId }, ctx.signal)
  // An enabled endpoint whose deliveries fail is not healthy: each row says how its last ones went.
  const recent = await Promise.all(list.map((w) => listAll<Delivery>(`/webhooks/${encodeURIComponent(w.id)}/deliveries`, {}, ctx.signal, RECENT)))
  put(ctx.main,
    h('h1', null, 'Webhooks'),
    table('Webhook endpoints of the workspace', ['URL', 'Events', 'State', 'Recent deliveries', 'Created'],
      list.map((w, i) => [link(`#/webhooks/${encodeURIComponent(w.id)}`, w.url), w.events.join(', '), w.enabled ? badge('enabled') : [badge('disabled'), w.disabled_reason ? ` ${w.disabled_reason}` : ''], health(recent[i]!), when(w.created_at)])),
  )
}

const RECENT = 10

/** The last deliveries of an endpoint in a word: failing when every finished one of them failed. */
function health(deliveries: Delivery[]): HTMLElement | string {
  const finished = deliveries.filter((d) => d.status === 'succeeded' || d.status === 'failed')
  const failed = finished.filter((d) => d.status === 'failed').length
  const retrying = deliveries.filter((d) => d.status === 'retrying').length
  if (finished.length === 0 && retrying === 0) return 'none yet'
  const label = failed > 0 && failed === finished.length ? 'failing' : retrying > 0 || failed > 0 ? 'degraded' : 'healthy'
  return h('span', { class: `health ${label}`, 'data-health': label }, `${label}: ${finished.length - failed} of the last ${finished.length} delivered${retrying ? `, ${retrying} retrying` : ''}`)
}

export async function webhookPage(ctx: PageContext) {
  const id = ctx.params[0]!
  const path = `/webhooks/${encodeURIComponent(id)}`
  const status = h('div', { class: 'status', role: 'status' })
  const info = h('div')
  const deliveries = h('div', { 'aria-live': 'polite' })
  const filter = h('select', null, h('option', { value: '' }, 'all'), STATUSES.map((s) => h('option', { value: s }, s)))
  filter.value = ctx.query.get('status') ?? ''
  filter.addEventListener('change', () => {
    location.hash = `#/webhooks/${encodeURIComponent(id)}${query({ status: filter.value })}`
  })

  let hook: Webhook
  const showHook = async () => {
    hook = (await api<{ data: Webhook }>('GET', path, undefined, ctx.signal)).data
    put(info,
      facts([
        ['URL', hook.url],
        ['Events', hook.events.join(', ')],
        ['State', hook.enabled ? badge('enabled') : [badge('disabled'), hook.disabled_reason ? ` (${hook.disabled_reason})` : '']],
        ['Previous secret valid until', when(hook.previous_secret_expires_at)],
        ['Created', when(hook.created_at)],
      ]),
      h('div', { class: 'actions' },
        action('Ping', async () => {
          await api('POST', `${path}/ping`, undefined, ctx.signal)
          put(status, 'A webhook.test delivery was queued.')
          await showDeliveries()
        }, status),
        action(hook.enabled ? 'Disable' : 'Enable', async () => {
          await api('PATCH', path, { enabled: !hook.enabled }, ctx.signal)
          put(status, hook.enabled ? 'Disabled.' : 'Enabled.')
          await showHook()
        }, status),
        action('Rotate secret', async () => {
          if (!confirm('Rotate the signing secret? The old one keeps signing beside the new one for 24 hours.')) return
          const secret = newSecret()
          await api('PATCH', path, { secret }, ctx.signal)
          put(status, h('div', { class: 'notice' }, 'New secret (shown once, copy it to the receiver now): ', h('code', { class: 'secret' }, secret)))
          await showHook()
        }, status),
      ),
    )
  }
  const showDeliveries = async () => {
    const list = await api<{ data: Delivery[] }>('GET', `${path}/deliveries${query({ status: filter.value, limit: 50 })}`, undefined, ctx.signal)
    put(deliveries, table(`Deliveries${filter.value ? ` (${filter.value})` : ''}, newest first`, ['Event', 'Status', 'Attempts', 'Last answer', 'Next attempt', 'Created'],
      list.data.map((d) => {
        const last = d.attempts.at(-1)
        return [
          link(`#/webhooks/${encodeURIComponent(id)}/deliveries/${encodeURIComponent(d.id)}`, d.event),
          badge(d.status),
          d.attempts_count,
          last ? (last.status_code ?? last.error ?? '—') : '—',
          when(d.next_attempt_at),
          when(d.created_at),
        ]
      })))
    return list.data.some((d) => d.status === 'pending' || d.status === 'retrying')
  }

  await showHook()
  put(ctx.main,
    h('p', { class: 'crumbs' }, link('#/webhooks', 'Webhooks'), ' / ', hook!.url),
    h('h1', null, 'Webhook'),
    info,
    status,
    h('h2', null, 'Deliveries'),
    field('Delivery status', filter, 'delivery-status'),
    deliveries,
  )
  await showDeliveries()
  every(2000, ctx.signal, showDeliveries)
}

export async function deliveryPage(ctx: PageContext) {
  const [hookId, id] = ctx.params as [string, string]
  const path = `/webhooks/${encodeURIComponent(hookId)}/deliveries/${encodeURIComponent(id)}`
  const status = h('div', { class: 'status', role: 'status' })
  const body = h('div', { 'aria-live': 'polite' })
  const diagram = actorDiagram('webhook-delivery')
  const show = async () => {
    const d = (await api<{ data: Delivery }>('GET', path, undefined, ctx.signal)).data
    put(body,
      facts([['Event', d.event], ['Status', badge(d.status)], ['Delivery id', h('code', null, d.id)], ['Event id', h('code', null, d.event_id)], ['Next attempt', when(d.next_attempt_at)], ['Created', when(d.created_at)]]),
      h('div', { class: 'actions' },
        d.status === 'failed'
          ? action('Resend', async () => {
            await api('POST', `${path}/redeliver`, undefined, ctx.signal)
            put(status, 'Resent: a new attempt is on its way.')
            await show()
            every(1000, ctx.signal, show)
          }, status)
          : null,
      ),
      h('h2', null, 'Attempts'),
      table('Attempts, oldest first', ['#', 'At', 'Status code', 'Latency', 'Error', 'Response excerpt'],
        d.attempts.map((a) => [a.attempt, when(a.at), a.status_code ?? '—', duration(a.duration_ms), a.error ?? '', a.response_excerpt ? h('pre', { class: 'excerpt' }, a.response_excerpt) : '']), 'no attempt yet.'),
      h('h2', null, 'Payload'),
      pre(d.data),
    )
    await diagram.show(deliveryPath(d))
    return d.status === 'pending' || d.status === 'retrying'
  }
  put(ctx.main,
    h('p', { class: 'crumbs' }, link('#/webhooks', 'Webhooks'), ' / ', link(`#/webhooks/${encodeURIComponent(hookId)}`, 'Webhook'), ' / ', 'Delivery'),
    h('h1', null, 'Delivery'),
    status,
    body,
    h('h2', null, 'State machine'),
    diagram.figure,
  )
  if (await show()) every(1000, ctx.signal, show)
}

function newSecret(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(32))
  return `whsec_${btoa(String.fromCharCode(...bytes)).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '')}`
}
