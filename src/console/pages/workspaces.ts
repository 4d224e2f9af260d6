import { api, listAll } from '../api'
import type { PageContext } from '../context'
import { badge, facts, h, link, put, table, when } from '../dom'
import type { AuditEntry, Member, Usage, Workspace } from '../types'

export async function workspacesPage(ctx: PageContext) {
  const list = await listAll<Workspace>('/workspaces', {}, ctx.signal)
  put(ctx.main,
    h('h1', null, 'Workspaces'),
    table('Workspaces this key can see', ['Name', 'ID', 'Type', 'Status', 'Members', 'Owner', 'Created'],
      list.map((w) => [link(`#/workspaces/${encodeURIComponent(w.id)}`, w.name), h('code', null, w.id), w.type, badge(w.status), w.member_count, w.owner_id, when(w.created_at)])),
  )
}

export async function workspacePage(ctx: PageContext) {
  const id = ctx.params[0]!
  const path = `/workspaces/${encodeURIComponent(id)}`
  const [ws, members, usage, audit] = await Promise.all([
    api<{ data: Workspace }>('GET', path, undefined, ctx.signal),
    listAll<Member>(`${path}/members`, {}, ctx.signal),
    // Usage and the audit log need admin; a lower role sees the rest of the page.
    api<{ data: Usage }>('GET', `${path}/usage`, undefined, ctx.signal).catch((err: Error) => err),
    api<{ data: AuditEntry[] }>('GET', `${path}/audit-log?limit=50`, undefined, ctx.signal).catch((err: Error) => err),
  ])
  const w = ws.data
  put(ctx.main,
    h('p', { class: 'crumbs' }, link('#/workspaces', 'Workspaces'), ' / ', w.name),
    h('h1', null, w.name),
    facts([['ID', h('code', null, w.id)], ['Type', w.type], ['Status', badge(w.status)], ['Owner', w.owner_id], ['Description', w.description || '—'], ['Created', when(w.created_at)]]),
    h('h2', null, 'Members'),
    table('Members and their roles', ['User', 'Role', 'Owner', 'Since'], members.map((m) => [m.user_id, badge(m.role), m.is_owner ? 'yes' : '', when(m.created_at)])),
    h('h2', null, 'Usage and budget'),
    usage instanceof Error ? h('p', { class: 'error' }, usage.message) : usageView(usage.data),
    h('h2', null, 'Audit log'),
    audit instanceof Error
      ? h('p', { class: 'error' }, audit.message)
      : table('The last 50 writes, newest first', ['When', 'Who', 'Action', 'Resource', 'Status', 'Request'],
        audit.data.map((e) => [when(e.created_at), e.user_id, h('code', null, e.action), e.resource_id ?? '—', e.status, h('code', null, e.request_id)])),
  )
}

function usageView(u: Usage): HTMLElement {
  const b = u.budget
  return h('section', { 'aria-label': 'Usage and budget' },
    h('p', null, `From ${when(u.from)} to ${when(u.to)}`),
    facts([
      ['Calls', u.total.calls],
      ['Tokens in / out', `${u.total.tokens_in} / ${u.total.tokens_out}`],
      ['Credits used', u.total.credits],
      ['Budget', b ? `${b.used} of ${b.credits} credits used this ${b.period} (${b.remaining} left)${b.hard_limit ? ', hard limit' : ''}` : 'none set'],
      ['Alert thresholds', b?.thresholds.length ? b.thresholds.map((t) => `${t} %`).join(', ') : '—'],
    ]),
    b ? h('progress', { max: String(b.credits || 1), value: String(Math.min(b.used, b.credits)), 'aria-label': 'Budget used' }) : null,
    table('Usage by model', ['Model', 'Calls', 'Tokens in', 'Tokens out', 'Credits'], u.by_model.map((m) => [m.model, m.calls, m.tokens_in, m.tokens_out, m.credits])),
  )
}
