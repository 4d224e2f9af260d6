import type { Deps } from '../deps'
import { safeEqual } from '../lib/crypto'
import { AppError, invalid } from '../lib/errors'
import { newId } from '../lib/ids'
import type { ListQuery } from '../lib/lists'
import { resolveDestination, UnsafeUrlError, urlPolicy, type UrlPolicy } from '../lib/net-guard'
import * as deliveries from '../store/deliveries'
import { emit, markEventsDispatched } from '../store/events'
import { recorded, type WriteKey } from '../store/idempotent-writes'
import * as store from '../store/webhooks'
import { findWorkspaceAccess } from '../store/workspaces'
import { authorize, type Action, type Caller } from './access'
import { advanceDelivery, DELIVERY_TIMER, newDelivery } from './deliveries'
import { listScope, loadOwned } from './ownership'

/** The event types a webhook may subscribe to (docs/webhooks.md, "Registering"). */
export const EVENT_TYPES = [
  'workflow.run.completed',
  'workflow.run.failed',
  'workflow.run.cancelled',
  'workflow.run.waiting',
  'agent.message.received',
  'knowledge.document.ready',
  'knowledge.document.failed',
  'model.failover.triggered',
  'credit.budget.threshold',
  'webhook.test',
] as const

/** After a rotation the old secret keeps signing beside the new one this long (24 h). */
export const ROTATION_OVERLAP_MS = 86_400_000

async function checkUrl(url: string, policy: UrlPolicy): Promise<string> {
  try {
    return (await resolveDestination(url, policy)).url.toString()
  } catch (err) {
    if (err instanceof UnsafeUrlError) throw invalid('url', err.message)
    throw err
  }
}

function checkEvents(events: string[]): string[] {
  const unique = [...new Set(events)]
  for (const e of unique) {
    if (!(EVENT_TYPES as readonly string[]).includes(e)) throw invalid('events', `unknown event "${e}"; known: ${EVENT_TYPES.join(', ')}`)
  }
  return unique
}

/** Loads a webhook the caller may act on; one it may not see answers 404 for the webhook itself. */
export function loadWebhook(deps: Pick<Deps, 'db'>, caller: Caller, id: string, action: Action): Promise<store.WebhookRow> {
  return loadOwned(deps, caller, 'webhook', id, action, store.findWebhook)
}

export async function registerWebhook(
  deps: Pick<Deps, 'db' | 'config' | 'secretBox'>,
  caller: Caller,
  workspaceId: string,
  input: { url: string; events: string[]; secret: string },
  key?: WriteKey,
): Promise<store.WebhookRow> {
  authorize(caller, await findWorkspaceAccess(deps.db.sql, workspaceId, caller.userId), 'build', { id: workspaceId })
  const events = checkEvents(input.events)
  const url = await checkUrl(input.url, urlPolicy(deps.config))
  return deps.db.sql.begin(async (tx) =>
    recorded(tx, key, 'webhook', await store.insertWebhook(tx, {
      id: newId('whk'),
      workspace_id: workspaceId,
      url,
      events,
      secret_encrypted: deps.secretBox.seal(input.secret),
      created_by: caller.userId,
    })),
  )
}

/** Every workspace the caller can read, or the one named (docs/api.md, "Lists"). */
export async function listWebhooks(deps: Pick<Deps, 'db'>, caller: Caller, workspaceId: string | undefined, q: ListQuery) {
  return store.listWebhooks(deps.db.sql, await listScope(deps, caller, workspaceId), q)
}

export async function updateWebhook(
  deps: Pick<Deps, 'db' | 'config' | 'secretBox'>,
  caller: Caller,
  id: string,
  input: { url?: string; events?: string[]; secret?: string; enabled?: boolean },
): Promise<store.WebhookRow> {
  await loadWebhook(deps, caller, id, 'build')
  const patch: store.WebhookPatch = { enabled: input.enabled }
  if (input.events !== undefined) patch.events = checkEvents(input.events)
  if (input.url !== undefined) patch.url = await checkUrl(input.url, urlPolicy(deps.config))
  return deps.db.sql.begin(async (tx) => {
    const current = await store.lockWebhook(tx, id)
    if (input.secret !== undefined && !safeEqual(input.secret, deps.secretBox.open(current.secret_encrypted))) {
      patch.secret = {
        encrypted: deps.secretBox.seal(input.secret),
        previousEncrypted: current.secret_encrypted,
        previousExpiresAt: new Date(Date.now() + ROTATION_OVERLAP_MS),
      }
    }
    return store.updateWebhook(tx, id, patch)
  })
}

export async function deleteWebhook(deps: Pick<Deps, 'db'>, caller: Caller, id: string): Promise<store.WebhookRow> {
  const row = await loadWebhook(deps, caller, id, 'build')
  await deps.db.sql.begin((tx) => store.deleteWebhook(tx, id))
  return row
}

/**
 * `webhook.test` through the normal path: an outbox event (already dispatched, to this webhook only)
 * and a delivery whose machine and timer do the rest. Sent even to a disabled webhook: a person asked.
 */
export async function pingWebhook(deps: Pick<Deps, 'db' | 'config' | 'timers'>, caller: Caller, id: string): Promise<deliveries.DeliveryRow> {
  const hook = await loadWebhook(deps, caller, id, 'build')
  const now = Date.now()
  const row = await deps.db.sql.begin(async (tx) => {
    const data = { webhook_id: hook.id, message: 'This is a test event sent by the ping endpoint.' }
    const event = await emit(tx, hook.workspace_id, 'webhook.test', data)
    await markEventsDispatched(tx, [event.id])
    const delivery = newDelivery(deps.config, { webhook_id: hook.id, event_id: event.id, event_type: 'webhook.test', data }, { manual: true, now })
    await deliveries.insertDeliveries(tx, [delivery])
    return deliveries.lockDelivery(tx, hook.id, delivery.id)
  })
  await deps.timers.schedule(DELIVERY_TIMER, [{ id: row.id, at: row.next_attempt_at }])
  return row
}

export async function listDeliveries(deps: Pick<Deps, 'db'>, caller: Caller, webhookId: string, q: ListQuery) {
  await loadWebhook(deps, caller, webhookId, 'read')
  return deliveries.listDeliveries(deps.db.sql, webhookId, q)
}

export async function getDelivery(deps: Pick<Deps, 'db'>, caller: Caller, webhookId: string, id: string) {
  await loadWebhook(deps, caller, webhookId, 'read')
  return deliveries.getDelivery(deps.db.sql, webhookId, id)
}

/** Re-sends a settled delivery under the same delivery id, with the full retry schedule again. */
export async function redeliver(deps: Pick<Deps, 'db' | 'timers'>, caller: Caller, webhookId: string, id: string): Promise<deliveries.DeliveryRow> {
  await loadWebhook(deps, caller, webhookId, 'build')
  const row = await deps.db.sql.begin(async (tx) => {
    const current = await deliveries.lockDelivery(tx, webhookId, id)
    const next = advanceDelivery(current, { type: 'redelivery.requested' }, Date.now())
    if (!next) {
      throw new AppError('conflict', `delivery ${id} is ${current.status}; only a succeeded or failed delivery can be redelivered`)
    }
    await deliveries.saveDeliveries(tx, [next.update])
    return deliveries.lockDelivery(tx, webhookId, id)
  })
  await deps.timers.schedule(DELIVERY_TIMER, [{ id: row.id, at: row.next_attempt_at }])
  return row
}
