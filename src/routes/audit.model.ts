/** The TypeBox schemas of the audit routes (src/routes/audit.ts), named in the OpenAPI document where shared, and the mappers from rows to them. */
import { t } from 'elysia'
import type { ListSpec } from '../lib/lists'
import { iso } from '../lib/time'
import type { AuditRow } from '../store/audit'
import { Timestamp } from './common.model'

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

export const auditList: ListSpec = {
  sortable: { created_at: 'time' },
  filters: { user_id: { type: 'text' }, api_key_id: { type: 'text' }, issued_by: { type: 'text' }, action: { type: 'text' }, resource_id: { type: 'text' }, status: { type: 'int' }, created_at: { type: 'time' } },
}

export const toEntry = (r: AuditRow): typeof AuditEntry.static => ({
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
