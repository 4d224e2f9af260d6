import { notFound } from '../lib/errors'
import type { ListQuery } from '../lib/lists'
import type { Sql, Tx } from './db'
import { insertKeyed, type WriteKey } from './idempotent-writes'
import { listClauses } from './lists'
import type { Role } from './workspaces'

export interface ApiKeyRow {
  id: string
  key_hash: string
  prefix: string
  name: string
  user_id: string
  workspace_id: string | null
  role_limit: Role | null
  is_root: boolean
  created_by: string | null
  /** The user of the key that created this one (null for the bootstrap root key). */
  issued_by: string | null
  expires_at: Date | null
  revoked_at: Date | null
  last_used_at: Date | null
  created_at: Date
}

/** With `written`, the key it is issued under and the plain key, kept sealed for the retry that must show it again. */
export async function insertApiKey(
  sql: Sql,
  k: Pick<ApiKeyRow, 'id' | 'key_hash' | 'prefix' | 'name' | 'user_id' | 'workspace_id' | 'role_limit' | 'is_root' | 'created_by' | 'issued_by' | 'expires_at'>,
  written?: { key: WriteKey | undefined; plain: string },
): Promise<ApiKeyRow> {
  const insert = sql<ApiKeyRow[]>`
    insert into api_keys (id, key_hash, prefix, name, user_id, workspace_id, role_limit, is_root, created_by, issued_by, expires_at)
    values (${k.id}, ${k.key_hash}, ${k.prefix}, ${k.name}, ${k.user_id}, ${k.workspace_id}, ${k.role_limit},
            ${k.is_root}, ${k.created_by}, ${k.issued_by}, ${k.expires_at})
    returning *`
  const key = written?.key
  const [row] = await insertKeyed(sql, key, 'api_key', insert, key ? key.seal(written!.plain) : null)
  return row!
}

export async function findApiKeyByHash(sql: Sql, hash: string): Promise<ApiKeyRow | null> {
  const [row] = await sql<ApiKeyRow[]>`select * from api_keys where key_hash = ${hash}`
  return row ?? null
}

export async function getApiKey(sql: Sql, id: string): Promise<ApiKeyRow> {
  const [row] = await sql<ApiKeyRow[]>`select * from api_keys where id = ${id}`
  if (!row) throw notFound('api key', id)
  return row
}

/** Serialises the root-key bootstrap of processes starting at once, until the transaction ends. */
export async function lockApiKeyBootstrap(tx: Tx): Promise<void> {
  await tx`select pg_advisory_xact_lock(7465003)`
}

export async function countApiKeys(sql: Sql): Promise<number> {
  const [row] = await sql<{ n: number }[]>`select count(*)::int as n from api_keys`
  return row!.n
}

/** Keys visible to a caller: all (root), or its own plus those of the workspaces it administers. */
export async function listApiKeys(
  sql: Sql,
  scope: { all: true } | { userId: string; adminOf: string[] },
  q: ListQuery,
): Promise<ApiKeyRow[]> {
  const c = listClauses(sql, q)
  const visible =
    'all' in scope
      ? sql`true`
      : scope.adminOf.length > 0
        ? sql`(user_id = ${scope.userId} or workspace_id in ${sql(scope.adminOf)})`
        : sql`user_id = ${scope.userId}`
  return sql<ApiKeyRow[]>`select * from api_keys where ${visible} ${c.and} order by ${c.orderBy} limit ${c.limit}`
}

export async function revokeApiKey(sql: Sql, id: string): Promise<ApiKeyRow> {
  const [row] = await sql<ApiKeyRow[]>`
    update api_keys set revoked_at = coalesce(revoked_at, now()) where id = ${id} returning *`
  if (!row) throw notFound('api key', id)
  return row
}

/** Records use at most once a minute per key, so authentication stays free of writes on the hot path. */
export async function touchApiKeys(sql: Sql, ids: string[]): Promise<void> {
  if (ids.length === 0) return
  await sql`update api_keys set last_used_at = now() where id in ${sql(ids)}`
}

/**
 * A member leaves a workspace: its keys restricted to it, and the keys it issued there for others
 * (it saw them in plain), are revoked. Returns the revoked ids.
 */
export async function revokeKeysOfFormerMember(tx: Tx, workspaceId: string, userId: string): Promise<string[]> {
  const rows = await tx<{ id: string }[]>`
    update api_keys set revoked_at = now()
    where workspace_id = ${workspaceId} and revoked_at is null and not is_root
      and (user_id = ${userId} or issued_by = ${userId})
    returning id`
  return rows.map((r) => r.id)
}

/**
 * A member's role drops: the keys it issued in the workspace for others that it could no longer issue
 * (a role_limit not among `issuable`, or none) are revoked. Returns the revoked ids.
 */
export async function revokeKeysBeyondIssuer(tx: Tx, workspaceId: string, issuerId: string, issuable: Role[]): Promise<string[]> {
  const beyond = issuable.length === 0 ? tx`true` : tx`(role_limit is null or role_limit not in ${tx(issuable)})`
  const rows = await tx<{ id: string }[]>`
    update api_keys set revoked_at = now()
    where workspace_id = ${workspaceId} and revoked_at is null and not is_root
      and issued_by = ${issuerId} and user_id <> ${issuerId} and ${beyond}
    returning id`
  return rows.map((r) => r.id)
}
