import { Elysia, t } from 'elysia'
import type { Deps } from '../deps'
import { invalid } from '../lib/errors'
import { parseListQuery, toPage, type ListSpec } from '../lib/lists'
import { iso, parseTime } from '../lib/time'
import type { ApiKeyRow } from '../store/api-keys'
import { Envelope, envelope, errors, Id, ListOf, ListQuery, Name, Timestamp, UserId } from './common.model'
import { authenticated } from './plugins/auth'
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
const CreatedApiKey = t.Composite([ApiKey, t.Object({ key: t.String({ description: 'The key itself: shown once, never again' }) })])
const CreateApiKey = t.Object(
  {
    user_id: UserId,
    name: Name,
    workspace_id: t.Optional(Id('ws', 'Restrict the key to this workspace')),
    role_limit: t.Optional(RoleSchema),
    expires_at: t.Optional(t.String({ description: 'ISO 8601 time (an offset is converted to UTC)', examples: ['2027-01-01T00:00:00Z'] })),
  },
  { additionalProperties: false, examples: [{ user_id: 'user_42', name: 'CI pipeline', workspace_id: 'ws_01jbz3k9x8q7r6s5t4v3w2y1z0', role_limit: 'developer' }] },
)

const keyList: ListSpec = {
  sortable: { created_at: 'time', name: 'text' },
  filters: { user_id: { type: 'text' }, workspace_id: { type: 'text' }, created_at: { type: 'time' } },
}

function toApiKey(row: ApiKeyRow): typeof ApiKey.static {
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

const tags = ['api-keys']

export function apiKeyRoutes(deps: Deps) {
  return new Elysia({ name: 'routes.api-keys' })
    .use(authenticated(deps))
    .post('/api-keys', async ({ caller, requestId, body, set }) => {
      let expires: Date | undefined
      if (body.expires_at !== undefined) {
        expires = parseTime(body.expires_at) ?? undefined
        if (!expires) throw invalid('expires_at', 'must be an ISO 8601 time')
      }
      const { row, key } = await deps.apiKeys.create(caller, { ...body, expires_at: expires })
      set.status = 201
      return envelope(requestId, { ...toApiKey(row), key })
    }, {
      body: CreateApiKey,
      parse: 'json',
      response: { 201: Envelope(CreatedApiKey), ...errors(403, 404, 409, 422) },
      detail: { tags, summary: 'Issue an API key (shown once)', description: 'Root may issue any key; anyone a key for itself; a workspace admin (or the owner) keys restricted to its workspace for members whose role is below its own (an admin never for another admin or the owner: 403). A key never gets a role limit above its issuer\'s role in the workspace, nor above the issuing key\'s own limit; an admin\'s key for a member is capped at admin. The key records who issued it (`issued_by`), and so does every audit entry of its writes.' },
    })
    .get('/api-keys', async ({ caller, requestId, query }) => {
      const q = parseListQuery(query, keyList)
      return { request_id: requestId, ...toPage(await deps.apiKeys.list(caller, q), q, toApiKey) }
    }, {
      query: ListQuery('created_at, name', { user_id: t.Optional(t.String()), workspace_id: t.Optional(t.String()) }),
      response: { 200: ListOf(ApiKey), ...errors() },
      detail: { tags, summary: 'List API keys the caller may manage (never the keys themselves)' },
    })
    .delete('/api-keys/:id', async ({ caller, requestId, params }) =>
      envelope(requestId, toApiKey(await deps.apiKeys.revoke(caller, params.id))), {
      params: t.Object({ id: Id('key', 'API key id') }),
      response: { 200: Envelope(ApiKey), ...errors(403, 404, 422) },
      detail: { tags, summary: 'Revoke an API key, effective at once in every process', description: 'Root, the key\'s own user, or an admin of the key\'s workspace for a member below its own role (or a former member). A key of the owner or of another admin is 403 to an admin; a key the caller may not see is 404.' },
    })
}
