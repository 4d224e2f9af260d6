import { Elysia, t } from 'elysia'
import * as audit from '../domain/audit'
import type { Deps } from '../deps'
import { parseListQuery, toPage } from '../lib/lists'
import { errors, ListOf, ListQuery } from './common.model'
import { authenticated } from './plugins/auth'
import { WorkspaceParams } from './workspaces.model'
import { AuditEntry, auditList, toEntry } from './audit.model'

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
      response: { 200: ListOf(AuditEntry, 'A page of audit entries, newest first'), ...errors(403, 404) },
      detail: {
        operationId: 'listAuditLog',
        tags: ['audit'],
        summary: 'The audit trail of a workspace: every write, who made it, when, with its request id (admin)',
        description: 'Newest first by default. Searches, model calls and agent chat turns are not recorded (docs/audit.md).',
      },
    })
}
