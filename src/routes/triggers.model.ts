import { t } from 'elysia'
import type { ListSpec } from '../lib/lists'
import { iso } from '../lib/time'
import type { TriggerRow } from '../store/triggers'
import { Id, Timestamp } from './common.model'

export const TriggerParams = t.Object({ id: Id('trg', 'Trigger id') })
export const WorkflowTriggerParams = t.Object({ id: Id('wf', 'Workflow id') })
export const HookParams = t.Object({
  trigger_id: Id('trg', 'Trigger id (of a webhook trigger)'),
  token: t.String({ description: 'The token of the trigger\'s url (the credential of a call)' }),
})
export const RotateTriggerParams = t.Object({ id: Id('wf', 'Workflow id'), trigger_id: Id('trg', 'Trigger id (of a webhook trigger)') })

export const triggerList: ListSpec = {
  sortable: { created_at: 'time', updated_at: 'time' },
  filters: { type: { type: 'text', values: ['schedule', 'webhook'] }, created_at: { type: 'time' } },
}

const Cron = t.String({ minLength: 1, maxLength: 200, description: 'Five cron fields: minute hour day-of-month month day-of-week (a sixth field, seconds, is refused)', examples: ['0 9 * * 1-5'] })
const Timezone = t.String({ minLength: 1, maxLength: 64, description: 'IANA time zone the cron fields are read in (default UTC); daylight-saving changes follow it', examples: ['Europe/Berlin'] })
const Inputs = t.Record(t.String(), t.Unknown(), {
  description: 'schedule: the run inputs as they are; webhook: for each input, a template over {{body.*}}, {{query.*}} and {{headers.*}} (header names lower-case). A template that is one placeholder keeps the value\'s JSON type',
  examples: [{ order_id: '{{body.order.id}}', source: 'shop-{{headers.x-shop}}' }],
})
const Secret = t.String({ minLength: 8, maxLength: 256, description: 'Webhook only: calls must carry X-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>; stored encrypted, never returned' })
const Enabled = t.Boolean({ description: 'false pauses the trigger: no ticks, and hook calls answer 409' })

export const CreateTrigger = t.Object(
  {
    // Not t.UnionEnum: it defaults to its first value, so a body without a type would be a schedule.
    type: t.Union([t.Literal('schedule'), t.Literal('webhook')], { description: 'schedule: a run at each cron tick; webhook: a run per call to its url' }),
    cron: t.Optional(Cron),
    timezone: t.Optional(Timezone),
    inputs: t.Optional(Inputs),
    secret: t.Optional(Secret),
    enabled: t.Optional(Enabled),
  },
  {
    additionalProperties: false,
    examples: [
      { type: 'schedule', cron: '0 9 * * 1-5', timezone: 'Europe/Berlin', inputs: { report: 'daily' } },
      { type: 'webhook', inputs: { order_id: '{{body.order.id}}', ref: '{{query.ref}}' }, secret: 'a-long-random-secret' },
    ],
  },
)

export const UpdateTrigger = t.Object(
  {
    cron: t.Optional(Cron),
    timezone: t.Optional(Timezone),
    inputs: t.Optional(Inputs),
    secret: t.Optional(t.Union([Secret, t.Null()], { description: 'Webhook only: a new secret, or null to accept unsigned calls' })),
    enabled: t.Optional(Enabled),
  },
  { additionalProperties: false, minProperties: 1, examples: [{ enabled: false }, { cron: '*/15 * * * *' }] },
)

export const Trigger = t.Object(
  {
    id: t.String(),
    workflow_id: t.String(),
    workspace_id: t.String({ description: 'The workflow\'s workspace' }),
    type: t.UnionEnum(['schedule', 'webhook']),
    enabled: t.Boolean(),
    cron: t.Union([t.String(), t.Null()], { description: 'Schedules only' }),
    timezone: t.Union([t.String(), t.Null()], { description: 'Schedules only' }),
    inputs: t.Record(t.String(), t.Unknown()),
    next_run_at: t.Union([Timestamp, t.Null()], { description: 'The next tick of an enabled schedule; null otherwise' }),
    last_run_at: t.Union([Timestamp, t.Null()]),
    last_run_id: t.Union([t.String(), t.Null()]),
    url: t.Union([t.String(), t.Null()], { description: 'Webhooks only: where to POST (no API key needed): /v1/hooks/<id>/<token>, the token being the credential; POST .../triggers/{trigger_id}/rotate gives it a new one' }),
    created_at: Timestamp,
    updated_at: Timestamp,
  },
  {
    description: 'A trigger of a workflow; a webhook trigger\'s secret is never returned',
    examples: [{
      id: 'trg_01jbz3k9x8q7r6s5t4v3w2y1z0', workflow_id: 'wf_01jbz3k9x8q7r6s5t4v3w2y1z0', workspace_id: 'ws_01jbz3k9x8q7r6s5t4v3w2y1z0', type: 'schedule', enabled: true, cron: '0 9 * * 1-5', timezone: 'Europe/Berlin',
      inputs: {}, next_run_at: '2026-01-05T08:00:00.000Z', last_run_at: null, last_run_id: null, url: null, created_at: '2026-01-02T03:04:05.678Z', updated_at: '2026-01-02T03:04:05.678Z',
    }],
  },
)

export const DeletedTrigger = t.Object({ id: t.String(), deleted: t.Literal(true) })

export const HookStarted = t.Object({ request_id: t.String(), run_id: t.String(), status: t.Literal('running') })

export const HookReplayed = t.Object(
  {
    request_id: t.String(),
    run_id: t.Union([t.String(), t.Null()], { description: 'The run the first call with this delivery id started (null while it is still starting it)' }),
    status: t.Literal('replayed'),
  },
  { description: 'A signed call whose delivery id (webhook-id, X-GitHub-Delivery, X-Hook-Delivery) was seen in the last 24 hours: nothing started' },
)

/** `base` is the origin and BASE_PATH the request came to: a webhook trigger's url is under it. */
export function toTrigger(row: TriggerRow, base: string): typeof Trigger.static {
  return {
    id: row.id,
    workflow_id: row.workflow_id,
    workspace_id: row.workspace_id,
    type: row.type,
    enabled: row.enabled,
    cron: row.cron,
    timezone: row.timezone,
    inputs: row.inputs,
    next_run_at: iso(row.next_run_at),
    last_run_at: iso(row.last_run_at),
    last_run_id: row.last_run_id,
    url: row.type === 'webhook' ? `${base}/v1/hooks/${row.id}/${row.hook_token}` : null,
    created_at: iso(row.created_at)!,
    updated_at: iso(row.updated_at)!,
  }
}
