import { Elysia } from 'elysia'
import type { Deps } from '../../deps'
import { newId } from '../../lib/ids'
import * as store from '../../store/audit'
import type { AnswerStep } from './respond'
import { stateOf, type PendingAudit } from './request-state'

/**
 * The audit trail (docs/audit.md), everything that writes it: every successful write through the API is recorded with who made
 * it (user_id, API key and who issued that key), what (method and route, the resource, the path parameters), when, its status
 * and the request id, under the workspace it belongs to.
 *
 * Not recorded, because they change no resource of the workspace: searches, model calls (LLM chat,
 * embeddings, rerank, the OpenAI-compatible routes; their own record is the usage ledger) and agent
 * chat turns (their record is the conversation, with its user_id and times).
 */
const NOT_AUDITED = new Set([
  'POST /v1/knowledge-bases/:id/search',
  'POST /v1/models/llm/chat',
  'POST /v1/models/embeddings',
  'POST /v1/models/rerank',
  'POST /v1/chat/completions',
  'POST /v1/embeddings',
  'POST /v1/agents/:id/chat',
])

/** Routes that act on a row by id: its workspace is read before the handler runs (a delete removes it). */
const OWNED_BY: Record<string, [store.OwnedTable, string]> = {
  'DELETE /v1/api-keys/:id': ['api_keys', 'id'],
  'PATCH /v1/webhooks/:id': ['webhooks', 'id'],
  'DELETE /v1/webhooks/:id': ['webhooks', 'id'],
  'POST /v1/webhooks/:id/ping': ['webhooks', 'id'],
  'POST /v1/webhooks/:id/deliveries/:delivery_id/redeliver': ['webhooks', 'id'],
  'PUT /v1/workflows/:id': ['workflows', 'id'],
  'DELETE /v1/workflows/:id': ['workflows', 'id'],
  'POST /v1/workflows/:id/runs': ['workflows', 'id'],
  'POST /v1/runs/:run_id/cancel': ['runs', 'run_id'],
  'POST /v1/workflows/:id/triggers': ['workflows', 'id'],
  'PATCH /v1/triggers/:id': ['triggers', 'id'],
  'DELETE /v1/triggers/:id': ['triggers', 'id'],
  'POST /v1/workflows/:id/triggers/:trigger_id/rotate': ['triggers', 'trigger_id'],
  'PATCH /v1/knowledge-bases/:id': ['knowledge_bases', 'id'],
  'DELETE /v1/knowledge-bases/:id': ['knowledge_bases', 'id'],
  'POST /v1/knowledge-bases/:id/documents': ['knowledge_bases', 'id'],
  'DELETE /v1/documents/:document_id': ['documents', 'document_id'],
  'POST /v1/documents/:document_id/reparse': ['documents', 'document_id'],
  'PATCH /v1/agents/:id': ['agents', 'id'],
  'DELETE /v1/agents/:id': ['agents', 'id'],
  'DELETE /v1/conversations/:conversation_id': ['conversations', 'conversation_id'],
}

const WRITES = new Set(['POST', 'PUT', 'PATCH', 'DELETE'])

/**
 * Before the handler: whether this request is audited, and the workspace of the row it acts on.
 * `route` is Elysia's route template without BASE_PATH.
 */
export async function prepareAudit(deps: Deps, method: string, route: string, params: Record<string, string>): Promise<PendingAudit | undefined> {
  if (!WRITES.has(method)) return
  const key = `${method} ${route}`
  if (NOT_AUDITED.has(key)) return
  let workspaceId: string | null = null
  if (route.startsWith('/v1/workspaces/:id')) workspaceId = params.id ?? null
  const owned = OWNED_BY[key]
  if (owned && params[owned[1]]) workspaceId = await store.workspaceOfRow(deps.db.sql, owned[0], params[owned[1]]!)
  return { action: `${method} ${route.replace(/:([A-Za-z_]+)/g, '{$1}')}`, workspaceId, params }
}

/**
 * After a successful write: records the request's pending entry (once: it is taken off the request),
 * with the workspace and resource the answer names when the request did not (a create). The write
 * itself has committed: a failure here is logged with the request id (from which the entry can be
 * rebuilt with the access log) and never fails the answer.
 */
export async function recordAudit(
  deps: Deps,
  state: { audit?: PendingAudit; caller?: { userId: string; keyId: string; issuedBy: string | null }; id: string },
  status: number,
  body: unknown,
): Promise<void> {
  const pending = state.audit
  if (!pending || !state.caller) return
  state.audit = undefined
  const answer = (body ?? {}) as { data?: { id?: unknown; workspace_id?: unknown; user_id?: unknown }; run_id?: unknown; document_id?: unknown }
  const created = pending.action === 'POST /v1/workspaces' ? answer.data?.id : undefined
  // A deleted workspace's trail went with it; the deletion is kept outside any workspace.
  const workspaceId = pending.action === 'DELETE /v1/workspaces/{id}' ? null : (pending.workspaceId ?? str(answer.data?.workspace_id) ?? str(created))
  const values = Object.values(pending.params)
  const resourceId = str(answer.run_id) ?? str(answer.document_id) ?? str(answer.data?.id) ?? str(answer.data?.user_id) ?? values[values.length - 1] ?? null
  try {
    await store.insertAudit(deps.db.sql, {
      id: newId('aud'),
      workspace_id: workspaceId,
      user_id: state.caller.userId,
      api_key_id: state.caller.keyId,
      issued_by: state.caller.issuedBy,
      action: pending.action,
      resource_id: resourceId,
      params: pending.params,
      status,
      request_id: state.id,
    })
  } catch (err) {
    deps.log.error({ request_id: state.id, err, action: pending.action }, 'the audit record of a write failed')
  }
}

const str = (v: unknown) => (typeof v === 'string' ? v : null)

/**
 * Before the handler of an authenticated route (after the rate limit and the Idempotency-Key, used by
 * auth.ts's `authenticated`): what the request will record. A replayed answer never gets here (the
 * idempotency hook before this one answered it), so it is not recorded again.
 */
export function audit(deps: Deps) {
  const base = deps.config.basePath.length
  return new Elysia({ name: 'audit' }).onBeforeHandle({ as: 'scoped' }, async ({ request, route, params }) => {
    stateOf(request).audit = await prepareAudit(deps, request.method, route.slice(base), (params ?? {}) as Record<string, string>)
  })
}

/** The one exit's step (respond.ts) that records a successful write's pending entry: nothing for a failure or a request with none. */
export function auditAtExit(deps: Deps): AnswerStep {
  return (state, status, body) => (state.audit && status < 400 ? recordAudit(deps, state, status, body) : null)
}
