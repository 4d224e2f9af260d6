import { api, listAll, query } from '../api'
import { every, type PageContext } from '../context'
import { actorDiagram } from '../diagram'
import { documentPath } from '../paths'
import { action, badge, facts, field, h, link, pre, put, table, when } from '../dom'
import { noWorkspace } from './shared'
import type { Doc, DocumentStatus, KnowledgeBase, SearchResult as Result } from '../types'

const STATUSES = ['uploading', 'parsing', 'chunking', 'embedding', 'ready', 'failed'] as const
const IN_FLIGHT = new Set(['uploading', 'parsing', 'chunking', 'embedding'])

export async function knowledgeBasesPage(ctx: PageContext) {
  if (!ctx.workspaceId) return noWorkspace(ctx)
  const list = await listAll<KnowledgeBase>('/knowledge-bases', { workspace_id: ctx.workspaceId }, ctx.signal)
  put(ctx.main,
    h('h1', null, 'Documents'),
    h('p', null, 'Choose a knowledge base to see its documents and search it.'),
    table('Knowledge bases of the workspace', ['Knowledge base', 'Embedding model', 'Retrieval', 'Created'],
      list.map((k) => [link(`#/knowledge-bases/${encodeURIComponent(k.id)}`, k.name), k.embedding_model, k.retrieval.mode, when(k.created_at)])),
  )
}

export async function knowledgeBasePage(ctx: PageContext) {
  const id = ctx.params[0]!
  const path = `/knowledge-bases/${encodeURIComponent(id)}`
  const kb = (await api<{ data: KnowledgeBase }>('GET', path, undefined, ctx.signal)).data
  const status = h('select', null, h('option', { value: '' }, 'all'), STATUSES.map((s) => h('option', { value: s }, s)))
  status.value = ctx.query.get('status') ?? ''
  status.addEventListener('change', () => {
    location.hash = `#/knowledge-bases/${encodeURIComponent(id)}${query({ status: status.value })}`
  })
  const docs = h('div', { 'aria-live': 'polite' })
  const show = async () => {
    const list = await listAll<Doc>(`${path}/documents`, { status: status.value || undefined }, ctx.signal, 300)
    put(docs, table('Documents, newest first', ['Document', 'Type', 'Status', 'Chunks', 'Error', 'Updated'],
      list.map((d) => [
        link(`#/knowledge-bases/${encodeURIComponent(id)}/documents/${encodeURIComponent(d.id)}`, d.name),
        d.type,
        badge(d.status),
        d.chunks_count,
        d.error ? `${d.error.code}: ${d.error.message}` : '',
        when(d.updated_at),
      ])))
    return list.some((d) => IN_FLIGHT.has(d.status))
  }
  put(ctx.main,
    h('p', { class: 'crumbs' }, link('#/documents', 'Documents'), ' / ', kb.name),
    h('h1', null, kb.name),
    facts([['Embedding model', kb.embedding_model], ['Retrieval mode', kb.retrieval.mode], ['Rerank model', kb.rerank_model], ['Description', kb.description || '—']]),
    searchBox(path, ctx),
    h('h2', null, 'Documents'),
    field('Document status', status, 'doc-status'),
    docs,
  )
  if (await show()) every(2000, ctx.signal, show)
}

function searchBox(path: string, ctx: PageContext): HTMLElement {
  const input = h('input', { type: 'search', required: true, placeholder: 'What to look for' })
  const topK = h('input', { type: 'number', min: '1', max: '50', value: '5' })
  const rerank = h('input', { type: 'checkbox' })
  const results = h('div', { 'aria-live': 'polite' })
  const form = h('form', { class: 'search', role: 'search', 'aria-label': 'Search the knowledge base' },
    h('h2', null, 'Search'),
    field('Search query', input, 'search-query'), field('Results (top_k)', topK, 'search-top-k'),
    h('div', { class: 'field inline' }, rerank, h('label', { for: 'search-rerank' }, 'Rerank')),
    h('button', { type: 'submit' }, 'Search'),
    results,
  )
  rerank.id = 'search-rerank'
  form.addEventListener('submit', async (e) => {
    e.preventDefault()
    put(results, 'Searching…')
    try {
      const r = await api<{ results: Result[] }>('POST', `${path}/search`, { query: input.value, top_k: Number(topK.value) || 5, rerank: rerank.checked }, ctx.signal)
      put(results, r.results.length === 0
        ? h('p', { class: 'empty' }, 'No result.')
        : h('ol', { class: 'results' }, r.results.map((x) => h('li', null,
          h('div', { class: 'result-head' }, h('span', { class: 'score', title: 'score' }, x.score.toFixed(3)), ' ', h('strong', null, x.document_name)),
          h('p', { class: 'content' }, x.content),
        ))))
    } catch (err) {
      put(results, h('p', { class: 'error', role: 'alert' }, (err as Error).message))
    }
  })
  return form
}

export async function documentPage(ctx: PageContext) {
  const [kbId, id] = ctx.params as [string, string]
  const status = h('div', { class: 'status', role: 'status' })
  const body = h('div', { 'aria-live': 'polite' })
  const diagram = actorDiagram('document')
  let known: Doc | undefined
  const show = async () => {
    const d = await findDocument(kbId, id, known, ctx.signal)
    known = d
    put(body,
      facts([
        ['Name', d.name], ['Status', badge(d.status)], ['Type', d.type], ['Group', d.group ?? '—'], ['Size', `${d.size_bytes} bytes`],
        ['Chunks', d.chunks_count], ['Indexed', when(d.indexed_at)], ['Error', d.error ? `${d.error.code}: ${d.error.message}` : '—'], ['Uploaded', when(d.created_at)],
      ]),
      h('div', { class: 'actions' },
        d.status === 'ready' || d.status === 'failed'
          ? action('Reparse', async () => {
            await api('POST', `/documents/${encodeURIComponent(id)}/reparse`, undefined, ctx.signal)
            put(status, 'Reparse started.')
            if (!(await show())) return
            every(1000, ctx.signal, show)
          }, status)
          : null,
      ),
      h('h2', null, 'Metadata'),
      pre(d.metadata),
    )
    await diagram.show(documentPath(d))
    return IN_FLIGHT.has(d.status)
  }
  put(ctx.main,
    h('p', { class: 'crumbs' }, link('#/documents', 'Documents'), ' / ', link(`#/knowledge-bases/${encodeURIComponent(kbId)}`, 'Knowledge base'), ' / ', 'Document'),
    h('h1', null, 'Document'),
    status,
    body,
    h('h2', null, 'State machine'),
    diagram.figure,
  )
  if (await show()) every(1000, ctx.signal, show)
}

/**
 * GET /v1/documents/{id} answers the status shape only (docs/knowledge.md, "Documents"): the name, metadata
 * and error come from the base's list, read again only when the status moved (a failure brings its error).
 */
async function findDocument(kbId: string, id: string, known: Doc | undefined, signal: AbortSignal): Promise<Doc> {
  const state = await api<DocumentStatus>('GET', `/documents/${encodeURIComponent(id)}`, undefined, signal)
  if (known && known.status === state.status) return { ...known, chunks_count: state.chunks_count, indexed_at: state.indexed_at }
  const list = await listAll<Doc>(`/knowledge-bases/${encodeURIComponent(kbId)}/documents`, {}, signal, 2000)
  const doc = list.find((d) => d.id === id)
  if (!doc) throw new Error(`document ${id} is not in this knowledge base`)
  return { ...doc, status: state.status, chunks_count: state.chunks_count, indexed_at: state.indexed_at }
}
