import { api, listAll, stream } from '../api'
import type { PageContext } from '../context'
import { duration, facts, field, h, link, pre, put, table, when } from '../dom'
import { noWorkspace } from './shared'
import type { Agent } from '../types'

export async function agentsPage(ctx: PageContext) {
  if (!ctx.workspaceId) return noWorkspace(ctx)
  const list = await listAll<Agent>('/agents', { workspace_id: ctx.workspaceId }, ctx.signal)
  put(ctx.main,
    h('h1', null, 'Agents'),
    h('p', null, 'Choose an agent to try it in a chat panel.'),
    table('Agents of the workspace', ['Agent', 'Type', 'Model', 'Status', 'Updated'],
      list.map((a) => [link(`#/agents/${encodeURIComponent(a.id)}`, a.name), a.type, a.model, a.status, when(a.updated_at)])),
  )
}

export async function agentPage(ctx: PageContext) {
  const id = ctx.params[0]!
  const agent = (await api<{ data: Agent }>('GET', `/agents/${encodeURIComponent(id)}`, undefined, ctx.signal)).data
  const transcript = h('ol', { class: 'transcript', 'aria-live': 'polite', 'aria-label': 'Conversation' })
  const message = h('textarea', { rows: '3', required: true, placeholder: 'Ask the agent something' })
  const userId = h('input', { type: 'text', value: 'console', required: true })
  const send = h('button', { type: 'submit' }, 'Send')
  const conversation = h('span', { class: 'conversation' }, 'new conversation')
  const status = h('div', { class: 'status', role: 'status' })
  let conversationId: string | undefined
  const form = h('form', { class: 'chat', 'aria-label': 'Chat with the agent' },
    field('Message', message, 'chat-message'), field('User id', userId, 'chat-user'),
    h('div', { class: 'actions' },
      send,
      h('button', { type: 'button', class: 'secondary', on: { click: () => { conversationId = undefined; put(conversation, 'new conversation'); transcript.replaceChildren() } } }, 'New conversation'),
    ),
    status,
  )
  // Enter sends, Shift+Enter starts a new line.
  message.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey) {
      e.preventDefault()
      form.requestSubmit()
    }
  })
  form.addEventListener('submit', async (e) => {
    e.preventDefault()
    const text = message.value.trim()
    if (!text) return
    message.value = ''
    send.disabled = true
    put(status)
    transcript.append(h('li', { class: 'turn user' }, h('span', { class: 'who' }, 'You'), h('p', null, text)))
    const answer = h('p', { class: 'answer' })
    const tools = h('div', { class: 'tools-used' })
    const meta = h('div', { class: 'turn-meta' })
    transcript.append(h('li', { class: 'turn assistant' }, h('span', { class: 'who' }, agent.name), tools, answer, meta))
    try {
      await stream('POST', `/agents/${encodeURIComponent(id)}/chat`, { message: text, user_id: userId.value, conversation_id: conversationId, stream: true }, (event, data) => {
        const d = (data ?? {}) as Record<string, unknown>
        if (event === 'message') answer.append(String(d.delta ?? ''))
        else if (event === 'tool_call') tools.append(h('details', { class: 'tool-call' }, h('summary', null, `Tool call: ${String(d.tool)}`), pre(d.input ?? {})))
        else if (event === 'tool_result') tools.append(h('details', { class: 'tool-result' }, h('summary', null, `Tool result (${duration(d.duration_ms as number | undefined)})`), pre(d.output ?? {})))
        else if (event === 'usage') put(meta, `${String(d.tokens_in ?? 0)} tokens in, ${String(d.tokens_out ?? 0)} out, ${String(d.credits ?? 0)} credits`)
        else if (event === 'error') {
          const err = (d.error ?? d) as { code?: string; message?: string }
          answer.append(h('span', { class: 'error', role: 'alert' }, ` ${err.code ?? 'error'}: ${err.message ?? ''}`))
        }
      }, ctx.signal, {}, (headers) => {
        conversationId = headers.get('x-conversation-id') ?? conversationId
        if (conversationId) put(conversation, conversationId)
      })
    } catch (err) {
      if (!ctx.signal.aborted) put(status, h('span', { class: 'error', role: 'alert' }, (err as Error).message))
    } finally {
      send.disabled = false
      message.focus()
    }
  })
  put(ctx.main,
    h('p', { class: 'crumbs' }, link('#/agents', 'Agents'), ' / ', agent.name),
    h('h1', null, agent.name),
    facts([['Type', agent.type], ['Model', agent.model], ['Tools', (agent.tools ?? []).map((t) => t.name ?? t.type).join(', ') || '—'], ['Conversation', conversation]]),
    h('section', { class: 'chat-panel', 'aria-label': 'Chat panel' }, transcript, form),
  )
}
