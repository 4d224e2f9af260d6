import { Elysia, t } from 'elysia'
import type { Deps } from '../deps'
import { resolveWorkspaceId } from '../domain/ownership'
import * as webhooks from '../domain/webhooks'
import { parseListQuery, toPage, type ListSpec } from '../lib/lists'
import { Envelope, envelope, errors, ListOf, ListQuery } from './common.model'
import { authenticated } from './plugins/auth'
import { writeKey } from './plugins/idempotency'
import {
  CreateWebhook, DeletedWebhook, Delivery, DeliveryParams, toDelivery, toWebhook, UpdateWebhook, Webhook, WebhookParams,
} from './webhooks.model'

const webhookList: ListSpec = {
  sortable: { created_at: 'time', updated_at: 'time' },
  filters: { created_at: { type: 'time' } },
  extra: ['workspace_id'],
}
const deliveryList: ListSpec = {
  sortable: { created_at: 'time', updated_at: 'time' },
  filters: {
    status: { type: 'text', values: ['pending', 'retrying', 'succeeded', 'failed'] },
    event_type: { type: 'text' },
    event_id: { type: 'text' },
    created_at: { type: 'time' },
  },
}
const tags = ['webhooks']

/** The webhooks and, under each, its deliveries: two plugins, in this order (the OpenAPI document lists them so). */
export function webhookRoutes(deps: Deps) {
  return new Elysia({ name: 'routes.webhooks' })
    .use(webhookResourceRoutes(deps))
    .use(deliveryRoutes(deps))
}

/** Registering, reading, changing and deleting a webhook. */
function webhookResourceRoutes(deps: Deps) {
  return new Elysia({ name: 'routes.webhooks.resource' })
    .use(authenticated(deps))
    .post('/webhooks', async ({ caller, requestId, body, headers, set, request }) => {
      const workspaceId = await resolveWorkspaceId(deps, caller, body.workspace_id, headers['x-workspace-id'])
      set.status = 201
      return envelope(requestId, toWebhook(await webhooks.registerWebhook(deps, caller, workspaceId, body, writeKey(request))))
    }, {
      body: CreateWebhook,
      parse: 'json',
      response: { 201: Envelope(Webhook, 'The webhook created, with its signing secret (shown this once)'), ...errors(403, 404, 409, 422) },
      detail: {
        operationId: 'createWebhook',
        tags,
        summary: 'Register a webhook (developer)',
        description: 'The URL is checked (https, a public address) now and again at every delivery. The secret signs every delivery (X-Service-Signature, webhook-signature) and is never returned.',
      },
    })
    .get('/webhooks', async ({ caller, requestId, query, headers }) => {
      const q = parseListQuery(query, webhookList)
      const workspaceId = (query as { workspace_id?: string }).workspace_id ?? headers['x-workspace-id']
      return { request_id: requestId, ...toPage(await webhooks.listWebhooks(deps, caller, workspaceId, q), q, toWebhook) }
    }, {
      query: ListQuery('created_at, updated_at', { workspace_id: t.Optional(t.String({ description: 'Only this workspace (else X-Workspace-Id); without either, every workspace the caller can read. One the caller cannot read is 404' })) }),
      response: { 200: ListOf(Webhook, 'A page of webhooks'), ...errors(403, 404) },
      detail: { operationId: 'listWebhooks', tags, summary: 'List the webhooks of every workspace the caller can read (workspace_id: of one)' },
    })
    .get('/webhooks/:id', async ({ caller, requestId, params }) =>
      envelope(requestId, toWebhook(await webhooks.loadWebhook(deps, caller, params.id, 'read'))), {
      params: WebhookParams,
      response: { 200: Envelope(Webhook, 'The webhook'), ...errors(404) },
      detail: { operationId: 'getWebhook', tags, summary: 'Get a webhook (never its secret)' },
    })
    .patch('/webhooks/:id', async ({ caller, requestId, params, body }) =>
      envelope(requestId, toWebhook(await webhooks.updateWebhook(deps, caller, params.id, body))), {
      params: WebhookParams,
      body: UpdateWebhook,
      parse: 'json',
      response: { 200: Envelope(Webhook, 'The webhook as changed'), ...errors(403, 404, 409, 422) },
      detail: { operationId: 'updateWebhook', tags, summary: 'Change the URL, events, secret (rotation with 24 h overlap) or enabled flag (developer)' },
    })
    .delete('/webhooks/:id', async ({ caller, requestId, params }) => {
      await webhooks.deleteWebhook(deps, caller, params.id)
      return envelope(requestId, { id: params.id, deleted: true as const })
    }, {
      params: WebhookParams,
      response: { 200: Envelope(DeletedWebhook, 'The webhook was deleted'), ...errors(403, 404, 409, 422) },
      detail: { operationId: 'deleteWebhook', tags, summary: 'Delete a webhook and its delivery records (developer)' },
    })
}

/** A webhook's deliveries: the ping that makes one, reading them, sending one again. */
function deliveryRoutes(deps: Deps) {
  return new Elysia({ name: 'routes.webhooks.deliveries' })
    .use(authenticated(deps))
    .post('/webhooks/:id/ping', async ({ caller, requestId, params, set }) => {
      set.status = 202
      return envelope(requestId, toDelivery(await webhooks.pingWebhook(deps, caller, params.id)))
    }, {
      params: WebhookParams,
      response: { 202: Envelope(Delivery, 'The webhook.test delivery, queued'), ...errors(403, 404, 409, 422) },
      detail: { operationId: 'pingWebhook', tags, summary: 'Send a webhook.test event to the receiver (developer)', description: 'Goes through the normal delivery path (signatures, retries); answers at once with the pending delivery.' },
    })
    .get('/webhooks/:id/deliveries', async ({ caller, requestId, params, query }) => {
      const q = parseListQuery(query, deliveryList)
      return { request_id: requestId, ...toPage(await webhooks.listDeliveries(deps, caller, params.id, q), q, toDelivery) }
    }, {
      params: WebhookParams,
      query: ListQuery('created_at, updated_at', {
        status: t.Optional(t.String({ description: 'pending, retrying, succeeded or failed; status_in=a,b for several', examples: ['failed'] })),
        event_type: t.Optional(t.String({ description: 'Only deliveries of this event type' })),
      }),
      response: { 200: ListOf(Delivery, 'A page of deliveries'), ...errors(404) },
      detail: { operationId: 'listDeliveries', tags, summary: 'List a webhook\'s deliveries with their attempts (kept 7 days)' },
    })
    .get('/webhooks/:id/deliveries/:delivery_id', async ({ caller, requestId, params }) =>
      envelope(requestId, toDelivery(await webhooks.getDelivery(deps, caller, params.id, params.delivery_id))), {
      params: DeliveryParams,
      response: { 200: Envelope(Delivery, 'The delivery with its attempts'), ...errors(404) },
      detail: { operationId: 'getDelivery', tags, summary: 'Get one delivery with its attempts' },
    })
    .post('/webhooks/:id/deliveries/:delivery_id/redeliver', async ({ caller, requestId, params, set }) => {
      set.status = 202
      return envelope(requestId, toDelivery(await webhooks.redeliver(deps, caller, params.id, params.delivery_id)))
    }, {
      params: DeliveryParams,
      response: { 202: Envelope(Delivery, 'The delivery, queued again'), ...errors(403, 404, 409, 422) },
      detail: { operationId: 'redeliverDelivery', tags, summary: 'Re-send a succeeded or failed delivery under the same delivery id (developer)', description: 'Starts a new round with the full retry schedule; 409 while the delivery is still pending or retrying.' },
    })
}
