import { accessChanged } from './access-generation'
import { AppError, notFound } from '../lib/errors'
import type { ListQuery } from '../lib/lists'
import type { Sql, Tx } from './db'
import { listClauses } from './lists'

export type Role = 'admin' | 'developer' | 'user' | 'readonly'

export interface WorkspaceRow {
  id: string
  name: string
  description: string
  type: string
  join_policy: string
  owner_id: string
  status: 'active' | 'archived'
  member_count: number
  created_at: Date
  updated_at: Date
  archived_at: Date | null
}

/** A workspace with the role of one user in it (null when that user is not a member). */
export interface WorkspaceAccessRow extends WorkspaceRow {
  role: Role | null
}

export interface MemberRow {
  workspace_id: string
  user_id: string
  role: Role
  is_owner: boolean
  created_at: Date
  updated_at: Date
}

const memberColumns = (sql: Sql) => sql`
  workspace_id, user_id, role, created_at, updated_at,
  user_id = (select w.owner_id from workspaces w where w.id = workspace_id) as is_owner`

const columns = (sql: Sql) => sql`
  w.id, w.name, w.description, w.type, w.join_policy, w.owner_id, w.status, w.created_at, w.updated_at,
  w.archived_at, (select count(*)::int from workspace_members c where c.workspace_id = w.id) as member_count`

export async function insertWorkspace(
  tx: Tx,
  w: { id: string; name: string; description: string; type: string; join_policy: string; owner_id: string },
): Promise<WorkspaceRow> {
  accessChanged(w.id)
  await tx`insert into workspaces (id, name, description, type, join_policy, owner_id)
           values (${w.id}, ${w.name}, ${w.description}, ${w.type}, ${w.join_policy}, ${w.owner_id})`
  await tx`insert into workspace_members (workspace_id, user_id, role) values (${w.id}, ${w.owner_id}, 'admin')`
  return getWorkspace(tx, w.id)
}

export async function getWorkspace(sql: Sql, id: string): Promise<WorkspaceRow> {
  const [row] = await sql<WorkspaceRow[]>`select ${columns(sql)} from workspaces w where w.id = ${id}`
  if (!row) throw notFound('workspace', id)
  return row
}

/**
 * The hot read of every workspace-scoped request: the workspace and the caller's role in it, in one
 * query. `null` when the workspace does not exist.
 */
export async function findWorkspaceAccess(sql: Sql, id: string, userId: string): Promise<WorkspaceAccessRow | null> {
  const [row] = await sql<WorkspaceAccessRow[]>`
    select ${columns(sql)}, m.role
    from workspaces w left join workspace_members m on m.workspace_id = w.id and m.user_id = ${userId}
    where w.id = ${id}`
  return row ?? null
}

/** Locks the workspace row for the rest of the transaction (membership and ownership changes). */
export async function lockWorkspace(tx: Tx, id: string): Promise<WorkspaceRow> {
  const [row] = await tx<{ id: string }[]>`select id from workspaces where id = ${id} for update`
  if (!row) throw notFound('workspace', id)
  return getWorkspace(tx, id)
}

/** Workspaces visible to a caller: all (root), those it is a member of, or just one (a restricted key). */
export async function listWorkspaces(
  sql: Sql,
  scope: { all: true } | { userId: string; workspaceId: string | null },
  q: ListQuery,
): Promise<WorkspaceRow[]> {
  const c = listClauses(sql, q, { alias: 'w' })
  const visible =
    'all' in scope
      ? sql`true`
      : scope.workspaceId
        ? sql`w.id = ${scope.workspaceId} and exists (select 1 from workspace_members m where m.workspace_id = w.id and m.user_id = ${scope.userId})`
        : sql`exists (select 1 from workspace_members m where m.workspace_id = w.id and m.user_id = ${scope.userId})`
  return sql<WorkspaceRow[]>`
    select ${columns(sql)} from workspaces w where ${visible} ${c.and} order by ${c.orderBy} limit ${c.limit}`
}

export async function updateWorkspace(tx: Tx, id: string, patch: { name?: string; description?: string }): Promise<WorkspaceRow> {
  // Name and description: nothing the check before a model call reads (no accessChanged).
  await tx`update workspaces set
             name = coalesce(${patch.name ?? null}, name),
             description = coalesce(${patch.description ?? null}, description),
             updated_at = now()
           where id = ${id}`
  return getWorkspace(tx, id)
}

export async function setWorkspaceStatus(tx: Tx, id: string, status: 'active' | 'archived'): Promise<WorkspaceRow> {
  accessChanged(id)
  await tx`update workspaces set status = ${status}, updated_at = now(),
             archived_at = ${status === 'archived' ? tx`now()` : null}
           where id = ${id}`
  return getWorkspace(tx, id)
}

/** Deletes the workspace; every table that belongs to a workspace cascades from it. */
export async function deleteWorkspace(tx: Tx, id: string): Promise<void> {
  accessChanged(id)
  const rows = await tx`delete from workspaces where id = ${id} returning id`
  if (rows.length === 0) throw notFound('workspace', id)
}

export async function setWorkspaceOwner(tx: Tx, id: string, ownerId: string): Promise<WorkspaceRow> {
  accessChanged(id)
  await tx`update workspaces set owner_id = ${ownerId}, updated_at = now() where id = ${id}`
  return getWorkspace(tx, id)
}

export async function listMembers(sql: Sql, workspaceId: string, q: ListQuery): Promise<(MemberRow & { id: string })[]> {
  const c = listClauses(sql, q, { idColumn: 'user_id' })
  return sql<(MemberRow & { id: string })[]>`
    select ${memberColumns(sql)}, user_id as id
    from workspace_members where workspace_id = ${workspaceId} ${c.and} order by ${c.orderBy} limit ${c.limit}`
}

export async function getMember(sql: Sql, workspaceId: string, userId: string): Promise<MemberRow | null> {
  const [row] = await sql<MemberRow[]>`
    select ${memberColumns(sql)}
    from workspace_members where workspace_id = ${workspaceId} and user_id = ${userId}`
  return row ?? null
}

export async function insertMember(tx: Tx, workspaceId: string, userId: string, role: Role): Promise<MemberRow> {
  accessChanged(workspaceId)
  const [row] = await tx<MemberRow[]>`
    insert into workspace_members (workspace_id, user_id, role) values (${workspaceId}, ${userId}, ${role})
    on conflict do nothing
    returning ${memberColumns(tx)}`
  if (!row) throw new AppError('conflict', `user ${userId} is already a member of workspace ${workspaceId}`, { param: 'user_id' })
  return row
}

/** Sets a member's role, adding the member when absent (used by transfer). */
export async function upsertMember(tx: Tx, workspaceId: string, userId: string, role: Role): Promise<MemberRow> {
  accessChanged(workspaceId)
  const [row] = await tx<MemberRow[]>`
    insert into workspace_members (workspace_id, user_id, role) values (${workspaceId}, ${userId}, ${role})
    on conflict (workspace_id, user_id) do update set role = excluded.role, updated_at = now()
    returning ${memberColumns(tx)}`
  return row!
}

export async function updateMemberRole(tx: Tx, workspaceId: string, userId: string, role: Role): Promise<MemberRow> {
  accessChanged(workspaceId)
  const [row] = await tx<MemberRow[]>`
    update workspace_members set role = ${role}, updated_at = now()
    where workspace_id = ${workspaceId} and user_id = ${userId}
    returning ${memberColumns(tx)}`
  if (!row) throw notFound('member', userId)
  return row
}

export async function deleteMember(tx: Tx, workspaceId: string, userId: string): Promise<MemberRow> {
  accessChanged(workspaceId)
  const [row] = await tx<MemberRow[]>`
    delete from workspace_members where workspace_id = ${workspaceId} and user_id = ${userId}
    returning ${memberColumns(tx)}`
  if (!row) throw notFound('member', userId)
  return row
}

/** Up to two workspace ids the user belongs to: enough to tell "exactly one" from "several". */
/**
 * Every workspace the user is a member of (the owner is always an admin member): the workspaces a
 * list that names none covers (docs/api.md, "Lists").
 */
export async function readableWorkspaceIds(sql: Sql, userId: string): Promise<string[]> {
  const rows = await sql<{ workspace_id: string }[]>`select workspace_id from workspace_members where user_id = ${userId}`
  return rows.map((r) => r.workspace_id)
}

export async function memberWorkspaceIds(sql: Sql, userId: string): Promise<string[]> {
  const rows = await sql<{ workspace_id: string }[]>`
    select workspace_id from workspace_members where user_id = ${userId} order by workspace_id limit 2`
  return rows.map((r) => r.workspace_id)
}

/** Workspaces where the user is admin or owner (for listing the keys it may see). */
export async function adminWorkspaceIds(sql: Sql, userId: string): Promise<string[]> {
  const rows = await sql<{ id: string }[]>`
    select w.id from workspaces w
    where w.owner_id = ${userId}
       or exists (select 1 from workspace_members m where m.workspace_id = w.id and m.user_id = ${userId} and m.role = 'admin')`
  return rows.map((r) => r.id)
}
