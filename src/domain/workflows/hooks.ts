import type { Deps } from '../../deps'
import { safeEqual, sha256Hex } from '../../lib/crypto'
import { AppError, invalid } from '../../lib/errors'
import { serviceSignature, standardSignature } from '../../lib/signing'
import type { WriteKey } from '../../store/idempotent-writes'
import type { RunRow } from '../../store/runs'
import * as store from '../../store/triggers'
import { findWorkflow } from '../../store/workflows'
import { renderHookInputs, type HookCall } from './hook-inputs'
import { startRun } from './runs'

/**
 * A call to a webhook trigger's URL (docs/triggers.md): the trigger its id and token name, the
 * call's signature and the replay of a signed delivery, then the run it starts.
 */

/** The shape of a hook URL's token; anything else is refused before any lookup. */
export const HOOK_TOKEN = /^[A-Za-z0-9]{32,128}$/

/**
 * The webhook trigger a URL names, or null when no webhook trigger has this id and token (the same
 * answer for both, compared in constant time). One that is disabled is 409; one of an archived
 * (read-only) workspace 403, as a run started with an API key would be.
 */
export async function findHook(deps: Deps, id: string, token: string): Promise<store.TriggerRow | null> {
  const trigger = await store.findHookTrigger(deps.db.sql, id)
  // Compared even without a trigger, so that an unknown id takes the time a wrong token does.
  const ok = safeEqual(sha256Hex(token), sha256Hex(trigger?.hook_token ?? ''))
  if (!trigger || !ok) return null
  if (!trigger.enabled) throw new AppError('conflict', `trigger ${id} is disabled; PATCH enabled: true to accept calls again`)
  if (trigger.workspace_status === 'archived') throw new AppError('forbidden', `workspace ${trigger.workspace_id} is archived and read-only; restore it first`)
  return trigger
}

/** How far a Standard Webhooks `webhook-timestamp` may be from now, either way (the specification's default). */
export const SIGNATURE_TOLERANCE_S = 5 * 60

/**
 * With a secret, a call is signed one of two ways, each compared in constant time (401 otherwise):
 * Standard Webhooks (`webhook-id`, `webhook-timestamp` within 5 minutes, `webhook-signature`:
 * `v1,<base64 HMAC-SHA256 of id.timestamp.body>`, any one of its space-separated signatures), or
 * X-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>. Returns the call's delivery id, which
 * the replay check keys on: the signed `webhook-id`, else X-GitHub-Delivery or X-Hook-Delivery
 * (null without one); null for a trigger without a secret.
 */
export function checkSignature(deps: Deps, trigger: store.TriggerRow, call: HookCall, now = Date.now()): string | null {
  if (trigger.secret_encrypted === null) return null
  const h = call.headers
  const secret = deps.secretBox.open(trigger.secret_encrypted)
  if (h['webhook-signature'] !== undefined) {
    const id = h['webhook-id']
    const ts = h['webhook-timestamp']
    if (!id || !ts) throw new AppError('unauthenticated', 'webhook-signature needs webhook-id and webhook-timestamp (Standard Webhooks)')
    if (!/^\d{1,12}$/.test(ts) || Math.abs(now / 1000 - Number(ts)) > SIGNATURE_TOLERANCE_S) {
      throw new AppError('unauthenticated', `webhook-timestamp must be the sending time in Unix seconds, within ${SIGNATURE_TOLERANCE_S / 60} minutes of now`)
    }
    const expected = standardSignature([secret], id, Number(ts), call.raw).slice(3)
    const sent = h['webhook-signature'].split(' ').filter((s) => s.startsWith('v1,')).map((s) => s.slice(3))
    // Every candidate is compared, so the time taken says nothing about which one matched.
    let match = false
    for (const s of sent) match = safeEqual(s, expected) || match
    if (!match) throw new AppError('unauthenticated', 'webhook-signature does not match webhook-id, webhook-timestamp and the body')
    return id
  }
  const sent = h['x-signature-256']
  if (sent === undefined) {
    throw new AppError('unauthenticated', 'this trigger needs a signature: X-Signature-256: sha256=<hex HMAC-SHA256 of the body under its secret>, or Standard Webhooks headers (webhook-id, webhook-timestamp, webhook-signature)')
  }
  const expected = serviceSignature(secret, call.raw)
  if (!safeEqual(sent.trim().toLowerCase(), expected)) throw new AppError('unauthenticated', 'X-Signature-256 does not match the body')
  return h['x-github-delivery'] || h['x-hook-delivery'] || null
}

/** How long a signed call's delivery id is remembered: the same id again within it is a replay. */
export const DELIVERY_TTL_MS = 24 * 3600_000
const deliveryKey = (triggerId: string, deliveryId: string) => `hook-delivery:${triggerId}:${sha256Hex(deliveryId)}`

/**
 * Claims a signed call's delivery id for 24 hours, per trigger. Null when it is new; otherwise the
 * run the first call started (an empty string while that call is still starting it).
 */
export async function claimDelivery(deps: Deps, triggerId: string, deliveryId: string): Promise<string | null> {
  if (deliveryId.length > 256) throw invalid('delivery_id', 'a delivery id (webhook-id, X-GitHub-Delivery, X-Hook-Delivery) has at most 256 characters')
  const key = deliveryKey(triggerId, deliveryId)
  // Claimed for 10 minutes until the run starts (a process that dies meanwhile does not block the id for a day).
  if (await deps.redis.setIfAbsent(key, '', 10 * 60_000)) return null
  return (await deps.redis.get(key)) ?? ''
}

/** The call's run started: a replay answers it. Or it failed before starting one: the sender may retry. */
export async function settleDelivery(deps: Deps, triggerId: string, deliveryId: string, runId: string | null): Promise<void> {
  const key = deliveryKey(triggerId, deliveryId)
  if (runId === null) await deps.redis.del(key)
  else await deps.redis.set(key, runId, DELIVERY_TTL_MS)
}

/** Starts the hook's run: inputs rendered from the call and validated against the workflow (400 naming the input). */
export async function runHook(deps: Deps, trigger: store.TriggerRow, call: HookCall, requestId: string, key?: WriteKey): Promise<RunRow> {
  const wf = await findWorkflow(deps.db.sql, trigger.workflow_id)
  if (!wf) throw new AppError('not_found', `webhook trigger ${trigger.id} not found`)
  const inputs = renderHookInputs(trigger.inputs, call, trigger.secret_encrypted !== null)
  const run = await startRun(deps, wf, { inputs, userId: `webhook:${trigger.id}`, requestId }, key)
  await store.recordHookRun(deps.db.sql, trigger.id, run.id)
  return run
}
