import { notFound } from '../lib/errors'
import type { ListQuery } from '../lib/lists'
import type { Sql, Tx } from './db'
import { inWorkspaces, listClauses, type WorkspaceScope } from './lists'

export interface WebhookRow {
  id: string
  workspace_id: string
  url: string
  events: string[]
  secret_encrypted: string
  previous_secret_encrypted: string | null
  previous_secret_expires_at: Date | null
  enabled: boolean
  disabled_reason: string | null
  failing_since: Date | null
  created_by: string
  created_at: Date
  updated_at: Date
}

export async function insertWebhook(
  tx: Tx,
  w: Pick<WebhookRow, 'id' | 'workspace_id' | 'url' | 'events' | 'secret_encrypted' | 'created_by'>,
): Promise<WebhookRow> {
  const [row] = await tx<WebhookRow[]>`
    insert into webhooks (id, workspace_id, url, events, secret_encrypted, created_by)
    values (${w.id}, ${w.workspace_id}, ${w.url}, ${w.events}, ${w.secret_encrypted}, ${w.created_by})
    returning *`
  return row!
}

export async function findWebhook(sql: Sql, id: string): Promise<WebhookRow | null> {
  const [row] = await sql<WebhookRow[]>`select * from webhooks where id = ${id}`
  return row ?? null
}

export async function lockWebhook(tx: Tx, id: string): Promise<WebhookRow> {
  const [row] = await tx<WebhookRow[]>`select * from webhooks where id = ${id} for update`
  if (!row) throw notFound('webhook', id)
  return row
}

export async function listWebhooks(sql: Sql, scope: WorkspaceScope, q: ListQuery): Promise<WebhookRow[]> {
  const c = listClauses(sql, q)
  return sql<WebhookRow[]>`
    select * from webhooks where ${inWorkspaces(sql, scope)} ${c.and}
    order by ${c.orderBy} limit ${c.limit}`
}

export interface WebhookPatch {
  url?: string
  events?: string[]
  enabled?: boolean
  /** A rotation: the new sealed secret, and the old one kept signing until `previousExpiresAt`. */
  secret?: { encrypted: string; previousEncrypted: string; previousExpiresAt: Date }
}

export async function updateWebhook(tx: Tx, id: string, p: WebhookPatch): Promise<WebhookRow> {
  const [row] = await tx<WebhookRow[]>`
    update webhooks set
      url = coalesce(${p.url ?? null}, url),
      events = coalesce(${p.events ?? null}::text[], events),
      enabled = coalesce(${p.enabled ?? null}::boolean, enabled),
      -- Enabling by hand forgets the failure streak that disabled it.
      disabled_reason = case when ${p.enabled ?? null}::boolean then null else disabled_reason end,
      failing_since = case when ${p.enabled ?? null}::boolean then null else failing_since end,
      secret_encrypted = coalesce(${p.secret?.encrypted ?? null}, secret_encrypted),
      previous_secret_encrypted = coalesce(${p.secret?.previousEncrypted ?? null}, previous_secret_encrypted),
      previous_secret_expires_at = coalesce(${p.secret?.previousExpiresAt ?? null}::timestamptz, previous_secret_expires_at),
      updated_at = now()
    where id = ${id}
    returning *`
  if (!row) throw notFound('webhook', id)
  return row
}

export async function deleteWebhook(tx: Tx, id: string): Promise<void> {
  await tx`delete from webhooks where id = ${id}`
}

/** Enabled webhooks of these workspaces: the fan-out's subscription table for one batch of events. */
export async function enabledWebhooksOf(tx: Tx, workspaceIds: string[]): Promise<Pick<WebhookRow, 'id' | 'workspace_id' | 'events'>[]> {
  if (workspaceIds.length === 0) return []
  return tx`select id, workspace_id, events from webhooks where enabled and workspace_id in ${tx(workspaceIds)}`
}

/** A success ends the webhook's failure streak. */
export async function clearFailureStreaks(tx: Tx, ids: string[]): Promise<void> {
  if (ids.length === 0) return
  await tx`update webhooks set failing_since = null where id in ${tx(ids)} and failing_since is not null`
}

/**
 * A delivery failed for good: start the streak if none runs, and disable the webhooks whose streak
 * is older than `disableAfterMs` (5 days). Returns the ids disabled now.
 */
export async function recordFailures(tx: Tx, ids: string[], disableAfterMs: number): Promise<string[]> {
  if (ids.length === 0) return []
  await tx`update webhooks set failing_since = now() where id in ${tx(ids)} and failing_since is null`
  const rows = await tx<{ id: string }[]>`
    update webhooks set enabled = false, updated_at = now(),
      disabled_reason = ${`every delivery failed for ${span(disableAfterMs)}; PATCH enabled: true to resume`}
    where id in ${tx(ids)} and enabled and failing_since <= now() - ${disableAfterMs}::int * interval '1 millisecond'
    returning id`
  return rows.map((r) => r.id)
}

/** "5 days", "90 minutes", "1500 ms": the largest unit that divides the span exactly. */
function span(ms: number): string {
  for (const [unit, size] of [['day', 86_400_000], ['hour', 3_600_000], ['minute', 60_000], ['second', 1000]] as const) {
    if (ms >= size && ms % size === 0) return `${ms / size} ${unit}${ms === size ? '' : 's'}`
  }
  return `${ms} ms`
}
