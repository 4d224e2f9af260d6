import { AppError, invalid, notFound } from '../lib/errors'
import { newId } from '../lib/ids'
import type { ListQuery } from '../lib/lists'
import type { Pool as Sql } from '../store/db'
import type { WorkspaceScope } from '../store/lists'
import * as store from '../store/workspaces'
import { changingAccess } from '../store/access-generation'
import { recordWrite, type WriteKey } from '../store/idempotent-writes'
import type { Role } from '../store/workspaces'
import { revokeKeysBeyondIssuer, revokeKeysOfFormerMember } from '../store/api-keys'
import { authorize, issuableLimits, keyAllows, type Action, type Caller, type EffectiveRole } from './access'

export const WORKSPACE_TYPES = ['team', 'personal'] as const
export const JOIN_POLICIES = ['approve_required', 'invite_only', 'open'] as const

/** Loads the workspace with the caller's role and checks the action, in one query. */
export async function access(sql: Sql, caller: Caller, id: string, action: Action, allowArchived = false) {
  return authorize(caller, await store.findWorkspaceAccess(sql, id, caller.userId), action, { id, allowArchived })
}

/**
 * Loads a resource of a workspace (webhook, workflow, run...) that the caller may take `action` on.
 * A missing one, or one of a workspace the caller may not see, answers 404 for the resource itself,
 * so its existence never leaks; visible but not allowed answers 403.
 */
export async function loadOwned<R extends { workspace_id: string }>(
  sql: Sql,
  caller: Caller,
  what: string,
  id: string,
  action: Action,
  find: (sql: Sql, id: string) => Promise<R | null>,
): Promise<R> {
  return (await loadOwnedWithRole(sql, caller, what, id, action, find)).row
}

/** `loadOwned`, with the caller's effective role in the resource's workspace (one access query for both). */
export async function loadOwnedWithRole<R extends { workspace_id: string }>(
  sql: Sql,
  caller: Caller,
  what: string,
  id: string,
  action: Action,
  find: (sql: Sql, id: string) => Promise<R | null>,
): Promise<{ row: R; role: EffectiveRole }> {
  const row = await find(sql, id)
  if (!row) throw notFound(what, id)
  try {
    const ws = authorize(caller, await store.findWorkspaceAccess(sql, row.workspace_id, caller.userId), action, { id: row.workspace_id })
    return { row, role: ws.effective }
  } catch (err) {
    if (err instanceof AppError && err.code === 'not_found') throw notFound(what, id)
    throw err
  }
}

export async function createWorkspace(
  sql: Sql,
  caller: Caller,
  input: { name: string; description?: string; type?: string; join_policy?: string },
  key?: WriteKey,
) {
  if (caller.workspaceId !== null) {
    throw new AppError('forbidden', 'a key restricted to one workspace cannot create workspaces')
  }
  if (!keyAllows(caller, 'user')) throw new AppError('forbidden', 'a readonly key cannot create workspaces')
  const id = newId('ws')
  // Announced too: a call that named this id before it existed may have kept "no such workspace".
  return changingAccess([id], () =>
    sql.begin(async (tx) => {
      const row = await store.insertWorkspace(tx, {
        id,
        name: input.name,
        description: input.description ?? '',
        type: input.type ?? 'team',
        join_policy: input.join_policy ?? 'approve_required',
        owner_id: caller.userId,
      })
      await recordWrite(tx, key, 'workspace', id)
      return row
    }),
  )
}

export function listWorkspaces(sql: Sql, caller: Caller, q: ListQuery) {
  if (!caller.isRoot) return store.listWorkspaces(sql, { userId: caller.userId, workspaceId: caller.workspaceId }, q)
  const filters = caller.workspaceId ? [...q.filters, { field: 'id', op: 'eq' as const, value: caller.workspaceId }] : q.filters
  return store.listWorkspaces(sql, { all: true }, { ...q, filters })
}

export async function updateWorkspace(sql: Sql, caller: Caller, id: string, patch: { name?: string; description?: string }) {
  await access(sql, caller, id, 'manage')
  return sql.begin((tx) => store.updateWorkspace(tx, id, patch))
}

export async function deleteWorkspace(sql: Sql, caller: Caller, id: string) {
  await access(sql, caller, id, 'own', true)
  await changingAccess([id], () => sql.begin((tx) => store.deleteWorkspace(tx, id)))
}

export async function setStatus(sql: Sql, caller: Caller, id: string, status: 'active' | 'archived') {
  const ws = await access(sql, caller, id, 'manage', true)
  if (ws.status === status) return ws
  return changingAccess([id], () => sql.begin((tx) => store.setWorkspaceStatus(tx, id, status)))
}

/** Only the current owner may transfer (docs/decisions.md, "Workspaces"), to a current member, who becomes admin. */
export async function transferWorkspace(sql: Sql, caller: Caller, id: string, newOwnerId: string) {
  // 'own' also refuses keys capped by a role limit and archived workspaces; root passes it but is no owner.
  const ws = await access(sql, caller, id, 'own')
  if (ws.owner_id !== caller.userId) throw new AppError('forbidden', 'only the current owner of the workspace may transfer it')
  return changingAccess([id], () => sql.begin(async (tx) => {
    const locked = await store.lockWorkspace(tx, id)
    if (locked.owner_id !== caller.userId) throw new AppError('conflict', 'the workspace changed owner meanwhile')
    if (newOwnerId === locked.owner_id) throw new AppError('conflict', `${newOwnerId} already owns workspace ${id}`, { param: 'new_owner_id' })
    if (!(await store.getMember(tx, id, newOwnerId))) {
      throw new AppError('conflict', `the new owner must be a member of workspace ${id}; add ${newOwnerId} first`, { param: 'new_owner_id' })
    }
    await store.upsertMember(tx, id, newOwnerId, 'admin')
    // The previous owner stays, as an admin, and keeps only the keys for others an admin could issue.
    await store.upsertMember(tx, id, locked.owner_id, 'admin')
    await revokeKeysBeyondIssuer(tx, id, locked.owner_id, issuableLimits('admin'))
    return store.setWorkspaceOwner(tx, id, newOwnerId)
  }))
}

export async function listMembers(sql: Sql, caller: Caller, id: string, q: ListQuery) {
  await access(sql, caller, id, 'read')
  return store.listMembers(sql, id, q)
}

export async function addMember(sql: Sql, caller: Caller, id: string, userId: string, role: Role, key?: WriteKey) {
  await access(sql, caller, id, 'manage')
  return changingAccess([id], () => sql.begin(async (tx) => {
    await store.lockWorkspace(tx, id)
    // First: a retry of an addition already made is answered from it, not refused as a conflict.
    await recordWrite(tx, key, 'member', `${id}/${userId}`)
    return store.insertMember(tx, id, userId, role)
  }))
}

/**
 * Keys outlive the membership that allowed them only as far as it still would: a role change revokes
 * the keys the member issued for others beyond its new role, a removal revokes the member's keys
 * restricted to the workspace and every key it issued there (the routes then drop them from every
 * process's cache: ApiKeys.forgetWorkspace).
 */
export async function changeMemberRole(sql: Sql, caller: Caller, id: string, userId: string, role: Role) {
  await access(sql, caller, id, 'manage')
  return changingAccess([id], () => sql.begin(async (tx) => {
    const ws = await store.lockWorkspace(tx, id)
    if (ws.owner_id === userId && role !== 'admin') {
      throw new AppError('conflict', 'the owner is always an admin; transfer ownership first', { param: 'role' })
    }
    const member = await store.updateMemberRole(tx, id, userId, role)
    // The keys it issued for others that its new role could not issue stop working with it: they
    // were allowed by a role it no longer has (and it may have kept them).
    if (ws.owner_id !== userId) await revokeKeysBeyondIssuer(tx, id, userId, issuableLimits(role))
    return member
  }))
}

export async function removeMember(sql: Sql, caller: Caller, id: string, userId: string) {
  await access(sql, caller, id, 'manage')
  return changingAccess([id], () => sql.begin(async (tx) => {
    const ws = await store.lockWorkspace(tx, id)
    if (ws.owner_id === userId) throw new AppError('conflict', 'the owner cannot be removed; transfer ownership first')
    const member = await store.deleteMember(tx, id, userId)
    // Its keys restricted to this workspace would come back to life if it were added again, and the
    // keys it issued here for others were allowed by a membership it no longer has.
    await revokeKeysOfFormerMember(tx, id, userId)
    return member
  }))
}

/**
 * The workspace of a call that names none (docs/api.md, "Keys, roles and workspaces"): body or query > X-Workspace-Id
 * header > the key's workspace > the user's only workspace; otherwise a 400 naming `workspace_id`.
 */
export async function resolveWorkspaceId(
  sql: Sql,
  caller: Caller,
  explicit: string | undefined,
  header: string | undefined,
): Promise<string> {
  const named = explicit ?? header ?? caller.workspaceId
  if (named) return named
  const ids = await store.memberWorkspaceIds(sql, caller.userId)
  if (ids.length === 1) return ids[0]!
  throw invalid('workspace_id', ids.length === 0 ? 'is required: the caller belongs to no workspace' : 'is required: the caller belongs to several workspaces')
}

/**
 * The workspaces a list covers (docs/api.md, "Lists"). A list never needs a workspace: naming none
 * covers every workspace the caller can read (root: all; a key restricted to a workspace: its own;
 * anyone else: those it is a member of). A named one (`workspace_id`, else X-Workspace-Id) is a
 * filter, and one the caller cannot read answers 404 as it does for any resource of it.
 */
export async function listScope(sql: Sql, caller: Caller, named: string | undefined): Promise<WorkspaceScope> {
  if (named !== undefined) {
    await access(sql, caller, named, 'read')
    return [named]
  }
  if (caller.isRoot) return caller.workspaceId === null ? 'all' : [caller.workspaceId]
  const ids = await store.readableWorkspaceIds(sql, caller.userId)
  return caller.workspaceId === null ? ids : ids.filter((id) => id === caller.workspaceId)
}
