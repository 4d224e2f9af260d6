import { t } from 'elysia'
import { EVENT_TYPES } from '../domain/webhooks'
import { iso } from '../lib/time'
import type { DeliveryRow } from '../store/deliveries'
import type { WebhookRow } from '../store/webhooks'
import { Id, Timestamp } from './common.model'

const EventName = t.String({ minLength: 1, maxLength: 100, description: `One of: ${EVENT_TYPES.join(', ')}`, examples: ['workflow.run.completed'] })
const Url = t.String({ minLength: 1, maxLength: 2048, description: 'Receiver URL: https:// only; hosts resolving to loopback, private, link-local or multicast addresses are refused', examples: ['https://example.com/hooks/agent-platform'] })
const Secret = t.String({ minLength: 8, maxLength: 256, description: 'Signing secret, 8-256 characters; stored encrypted, never returned', examples: ['whsec_c2VjcmV0LWZvci1zaWduaW5n'] })
const Events = t.Array(EventName, { minItems: 1, maxItems: EVENT_TYPES.length * 2, description: 'Subscribed event types (at least one)' })

export const WebhookParams = t.Object({ id: Id('whk', 'Webhook id') })
export const DeliveryParams = t.Object({ id: Id('whk', 'Webhook id'), delivery_id: Id('dlv', 'Delivery id (the X-Service-Delivery-Id header)') })

export const CreateWebhook = t.Object(
  {
    url: Url,
    events: Events,
    secret: Secret,
    workspace_id: t.Optional(Id('ws', 'The workspace whose events it receives (else X-Workspace-Id, the key\'s workspace or the caller\'s only one)')),
  },
  { additionalProperties: false, examples: [{ url: 'https://example.com/hooks/agent-platform', events: ['workflow.run.completed', 'workflow.run.failed'], secret: 'a-long-random-secret' }] },
)

export const UpdateWebhook = t.Object(
  {
    url: t.Optional(Url),
    events: t.Optional(Events),
    secret: t.Optional(t.String({ ...Secret, description: 'A new secret: the old one keeps signing beside it (webhook-signature) for 24 h' })),
    enabled: t.Optional(t.Boolean({ description: 'false pauses deliveries; true re-enables a webhook (also one disabled after 5 days of failures)' })),
  },
  { additionalProperties: false, minProperties: 1, examples: [{ enabled: true }, { secret: 'the-next-long-random-secret' }] },
)

export const Webhook = t.Object(
  {
    id: t.String(),
    workspace_id: t.String(),
    url: t.String(),
    events: t.Array(t.String()),
    enabled: t.Boolean(),
    disabled_reason: t.Union([t.String(), t.Null()], { description: 'Why it was disabled automatically, if it was' }),
    previous_secret_expires_at: t.Union([Timestamp, t.Null()], { description: 'After a rotation: until when the previous secret still signs' }),
    created_by: t.String(),
    created_at: Timestamp,
    updated_at: Timestamp,
  },
  {
    description: 'A webhook; its secret is never returned',
    examples: [{ id: 'whk_01jbz3k9x8q7r6s5t4v3w2y1z0', workspace_id: 'ws_01jbz3k9x8q7r6s5t4v3w2y1z0', url: 'https://example.com/hooks/agent-platform', events: ['workflow.run.completed'], enabled: true, disabled_reason: null, previous_secret_expires_at: null, created_by: 'user_42', created_at: '2026-01-02T03:04:05.678Z', updated_at: '2026-01-02T03:04:05.678Z' }],
  },
)

export const DeletedWebhook = t.Object({ id: t.String(), deleted: t.Literal(true) })

const Attempt = t.Object({
  attempt: t.Integer({ description: 'Counts over the delivery\'s life, redeliveries included' }),
  at: Timestamp,
  status_code: t.Union([t.Integer(), t.Null()], { description: 'The receiver\'s HTTP status; null when none came (time-out, network error)' }),
  duration_ms: t.Integer(),
  error: t.Union([t.String(), t.Null()]),
  response_excerpt: t.Union([t.String(), t.Null()], { description: 'The start of the receiver\'s answer, at most 1 KiB' }),
})

export const Delivery = t.Object(
  {
    id: t.String({ description: 'Sent as X-Service-Delivery-Id and webhook-id, the same on every retry and redelivery' }),
    webhook_id: t.String(),
    event_id: t.String(),
    event: t.String(),
    status: t.UnionEnum(['pending', 'retrying', 'succeeded', 'failed']),
    attempts_count: t.Integer(),
    attempts: t.Array(Attempt),
    next_attempt_at: t.Union([Timestamp, t.Null()], { description: 'When the next attempt (or the lease check of one in flight) is due; null when settled' }),
    data: t.Record(t.String(), t.Unknown(), { description: 'The event data sent' }),
    created_at: Timestamp,
    updated_at: Timestamp,
  },
  {
    examples: [{
      id: 'dlv_01jbz3k9x8q7r6s5t4v3w2y1z0', webhook_id: 'whk_01jbz3k9x8q7r6s5t4v3w2y1z0', event_id: 'evt_01jbz3k9x8q7r6s5t4v3w2y1z0', event: 'webhook.test', status: 'succeeded', attempts_count: 1,
      attempts: [{ attempt: 1, at: '2026-01-02T03:04:05.678Z', status_code: 200, duration_ms: 41, error: null, response_excerpt: '{"ok":true}' }],
      next_attempt_at: null, data: { webhook_id: 'whk_01jbz3k9x8q7r6s5t4v3w2y1z0', message: 'This is a test event sent by the ping endpoint.' }, created_at: '2026-01-02T03:04:05.678Z', updated_at: '2026-01-02T03:04:05.719Z',
    }],
  },
)

export function toWebhook(row: WebhookRow): typeof Webhook.static {
  return {
    id: row.id,
    workspace_id: row.workspace_id,
    url: row.url,
    events: row.events,
    enabled: row.enabled,
    disabled_reason: row.disabled_reason,
    previous_secret_expires_at: row.previous_secret_expires_at && row.previous_secret_expires_at.getTime() > Date.now() ? iso(row.previous_secret_expires_at) : null,
    created_by: row.created_by,
    created_at: iso(row.created_at)!,
    updated_at: iso(row.updated_at)!,
  }
}

export function toDelivery(row: DeliveryRow): typeof Delivery.static {
  return {
    id: row.id,
    webhook_id: row.webhook_id,
    event_id: row.event_id,
    event: row.event_type,
    status: row.status,
    attempts_count: row.attempts_count,
    attempts: row.attempts,
    next_attempt_at: iso(row.next_attempt_at),
    data: row.data,
    created_at: iso(row.created_at)!,
    updated_at: iso(row.updated_at)!,
  }
}
