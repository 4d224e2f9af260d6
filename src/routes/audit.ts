import { Elysia, t } from 'elysia'
import * as audit from '../domain/audit'
import type { Deps } from '../deps'
import { parseListQuery, toPage, type ListSpec } from '../lib/lists'
import { iso } from '../lib/time'
import type { AuditRow } from '../store/audit'
import { errors, ListOf, ListQuery, Timestamp } from './common.model'
import { authenticated } from './plugins/auth'
import { WorkspaceParams } from './workspaces.model'

export const AuditEntry = t.Object(
  {
    id: t.String(),
    workspace_id: t.String(),
    user_id: t.String({ description: 'Who: the user_id of the API key that made the write' }),
    api_key_id: t.String({ description: 'The API key used (its id, never the key)' }),
    issued_by: t.Union([t.String(), t.Null()], {
      description: 'The user who issued that key: user_id itself for a key of its own, an admin or the root user ("root") for a key issued to user_id; null for the bootstrap root key',
    }),
    action: t.String({ description: 'What: "<METHOD> <route>", e.g. "POST /v1/workspaces/{id}/members"' }),
    resource_id: t.Union([t.String(), t.Null()], { description: 'The resource created or acted on' }),
    params: t.Record(t.String(), t.String(), { description: 'The path parameters of the request' }),
    status: t.Integer({ description: 'The HTTP status of the answer' }),
    request_id: t.String({ description: 'The request id (X-Request-Id), to find the request in the logs' }),
    created_at: Timestamp,
  },
  {
    description: 'One write made through the API',
    examples: [{
      id: 'aud_01jbz3k9x8q7r6s5t4v3w2y1z0',
      workspace_id: 'ws_01jbz3k9x8q7r6s5t4v3w2y1z0',
      user_id: 'user_42',
      api_key_id: 'key_01jbz3k9x8q7r6s5t4v3w2y1z0',
      issued_by: 'user_7',
      action: 'POST /v1/workspaces/{id}/members',
      resource_id: 'user_43',
      params: { id: 'ws_01jbz3k9x8q7r6s5t4v3w2y1z0' },
      status: 201,
      request_id: 'req_01jbz3k9x8q7r6s5t4v3w2y1z0',
      created_at: '2026-01-02T03:04:05.678Z',
    }],
  },
)

const auditList: ListSpec = {
  sortable: { created_at: 'time' },
  filters: { user_id: { type: 'text' }, api_key_id: { type: 'text' }, issued_by: { type: 'text' }, action: { type: 'text' }, resource_id: { type: 'text' }, status: { type: 'int' }, created_at: { type: 'time' } },
}

const toEntry = (r: AuditRow): typeof AuditEntry.static => ({
  id: r.id,
  workspace_id: r.workspace_id!,
  user_id: r.user_id,
  api_key_id: r.api_key_id,
  issued_by: r.issued_by,
  action: r.action,
  resource_id: r.resource_id,
  params: r.params,
  status: r.status,
  request_id: r.request_id,
  created_at: iso(r.created_at)!,
})

export function auditRoutes(deps: Deps) {
  return new Elysia({ name: 'routes.audit' })
    .use(authenticated(deps))
    .get('/workspaces/:id/audit-log', async ({ caller, requestId, params, query }) => {
      const q = parseListQuery(query, auditList)
      return { request_id: requestId, ...toPage(await audit.listAuditLog(deps, caller, params.id, q), q, toEntry) }
    }, {
      params: WorkspaceParams,
      query: ListQuery('created_at', {
        user_id: t.Optional(t.String({ description: 'Only writes by this user_id; user_id_in=a,b for several' })),
        api_key_id: t.Optional(t.String({ description: 'Only writes made with this API key' })),
        action: t.Optional(t.String({ description: 'Only this action, e.g. "DELETE /v1/agents/{id}"; action_in for several' })),
        resource_id: t.Optional(t.String({ description: 'Only writes to this resource' })),
        status: t.Optional(t.String({ description: 'Only answers of this HTTP status, e.g. 201' })),
        created_at_after: t.Optional(t.String({ description: 'Made after this time (ISO 8601)' })),
        created_at_before: t.Optional(t.String({ description: 'Made before this time (ISO 8601)' })),
      }),
      response: { 200: ListOf(AuditEntry), ...errors(403, 404) },
      detail: {
        tags: ['audit'],
        summary: 'The audit trail of a workspace: every write, who made it, when, with its request id (admin)',
        description: 'Newest first by default. Searches, model calls and agent chat turns are not recorded (docs/audit.md).',
      },
    })
}
