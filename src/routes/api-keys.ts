import { Elysia, t } from 'elysia'
import type { Deps } from '../deps'
import { invalid } from '../lib/errors'
import { parseListQuery, toPage } from '../lib/lists'
import { parseTime } from '../lib/time'
import { Envelope, envelope, errors, Id, ListOf, ListQuery } from './common.model'
import { authenticated } from './plugins/auth'
import { writeKey } from './plugins/idempotency'
import { ApiKey, CreatedApiKey, CreateApiKey, keyList, toApiKey } from './api-keys.model'

const tags = ['api-keys']

export function apiKeyRoutes(deps: Deps) {
  return new Elysia({ name: 'routes.api-keys' })
    .use(authenticated(deps))
    .post('/api-keys', async ({ caller, requestId, body, set, request }) => {
      let expires: Date | undefined
      if (body.expires_at !== undefined) {
        expires = parseTime(body.expires_at) ?? undefined
        if (!expires) throw invalid('expires_at', 'must be an ISO 8601 time')
      }
      const { row, key } = await deps.apiKeys.create(caller, { ...body, expires_at: expires }, writeKey(request))
      set.status = 201
      return envelope(requestId, { ...toApiKey(row), key })
    }, {
      body: CreateApiKey,
      parse: 'json',
      response: { 201: Envelope(CreatedApiKey, 'The key issued, with its secret (shown this once)'), ...errors(403, 404, 409, 422) },
      detail: { operationId: 'createApiKey', tags, summary: 'Issue an API key (shown once)', description: 'Root may issue any key; anyone a key for itself; a workspace admin (or the owner) keys restricted to its workspace for members whose role is below its own (an admin never for another admin or the owner: 403). A key for a member gets the member\'s role at the time as its `role_limit` (or a lower one asked for), so a later promotion does not raise it; a key for oneself follows one\'s role; no key exceeds the issuing key\'s own limit. The key records who issued it (`issued_by`), and so does every audit entry of its writes.' },
    })
    .get('/api-keys', async ({ caller, requestId, query }) => {
      const q = parseListQuery(query, keyList)
      return { request_id: requestId, ...toPage(await deps.apiKeys.list(caller, q), q, toApiKey) }
    }, {
      query: ListQuery('created_at, name', { user_id: t.Optional(t.String()), workspace_id: t.Optional(t.String()) }),
      response: { 200: ListOf(ApiKey, 'A page of API keys (never their secrets)'), ...errors() },
      detail: { operationId: 'listApiKeys', tags, summary: 'List API keys the caller may manage (never the keys themselves)' },
    })
    .delete('/api-keys/:id', async ({ caller, requestId, params }) =>
      envelope(requestId, toApiKey(await deps.apiKeys.revoke(caller, params.id))), {
      params: t.Object({ id: Id('key', 'API key id') }),
      response: { 200: Envelope(ApiKey, 'The key, now revoked'), ...errors(403, 404, 422) },
      detail: { operationId: 'revokeApiKey', tags, summary: 'Revoke an API key, effective at once in every process', description: 'Root, the key\'s own user, or an admin of the key\'s workspace for a member below its own role (or a former member). A key of the owner or of another admin is 403 to an admin; a key the caller may not see is 404.' },
    })
}
