/** The TypeBox schemas of the api-keys routes (src/routes/api-keys.ts), named in the OpenAPI document where shared, and the mappers from rows to them. */
import { t } from 'elysia'
import type { ListSpec } from '../lib/lists'
import { iso } from '../lib/time'
import type { ApiKeyRow } from '../store/api-keys'
import { Id, Name, Timestamp, UserId } from './common.model'
import { RoleSchema } from './workspaces.model'

export const ApiKey = t.Object({
  id: t.String(),
  name: t.String(),
  prefix: t.String({ description: 'The first characters of the key, to tell keys apart' }),
  user_id: t.String(),
  issued_by: t.Union([t.String(), t.Null()], { description: 'The user who issued the key (user_id itself, an admin of its workspace, or "root"); null for the bootstrap root key' }),
  workspace_id: t.Union([t.String(), t.Null()]),
  role_limit: t.Union([RoleSchema, t.Null()]),
  root: t.Boolean(),
  expires_at: t.Union([Timestamp, t.Null()]),
  revoked_at: t.Union([Timestamp, t.Null()]),
  last_used_at: t.Union([Timestamp, t.Null()]),
  created_at: Timestamp,
})
export const CreatedApiKey = t.Composite([ApiKey, t.Object({ key: t.String({ description: 'The key itself: shown once, never again' }) })])
export const CreateApiKey = t.Object(
  {
    user_id: UserId,
    name: Name,
    workspace_id: t.Optional(Id('ws', 'Restrict the key to this workspace')),
    role_limit: t.Optional(RoleSchema),
    expires_at: t.Optional(t.String({ description: 'ISO 8601 time (an offset is converted to UTC)', examples: ['2027-01-01T00:00:00Z'] })),
  },
  { additionalProperties: false, examples: [{ user_id: 'user_42', name: 'CI pipeline', workspace_id: 'ws_01jbz3k9x8q7r6s5t4v3w2y1z0', role_limit: 'developer' }] },
)

export const keyList: ListSpec = {
  sortable: { created_at: 'time', name: 'text' },
  filters: { user_id: { type: 'text' }, workspace_id: { type: 'text' }, created_at: { type: 'time' } },
}

export function toApiKey(row: ApiKeyRow): typeof ApiKey.static {
  return {
    id: row.id,
    name: row.name,
    prefix: row.prefix,
    user_id: row.user_id,
    issued_by: row.issued_by,
    workspace_id: row.workspace_id,
    role_limit: row.role_limit,
    root: row.is_root,
    expires_at: iso(row.expires_at),
    revoked_at: iso(row.revoked_at),
    last_used_at: iso(row.last_used_at),
    created_at: iso(row.created_at)!,
  }
}
