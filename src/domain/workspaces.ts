import type { Deps } from '../deps'
import { AppError } from '../lib/errors'
import { newId } from '../lib/ids'
import type { ListQuery } from '../lib/lists'
import * as store from '../store/workspaces'
import { changingAccess } from '../store/access-generation'
import { recordWrite, type WriteKey } from '../store/idempotent-writes'
import type { Role } from '../store/workspaces'
import { revokeKeysBeyondIssuer, revokeKeysOfFormerMember } from '../store/api-keys'
import { issuableLimits, keyAllows, type Caller } from './access'
import { access } from './ownership'

export const WORKSPACE_TYPES = ['team', 'personal'] as const
export const JOIN_POLICIES = ['approve_required', 'invite_only', 'open'] as const

export async function createWorkspace(
  deps: Pick<Deps, 'db'>,
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
    deps.db.sql.begin(async (tx) => {
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

export function listWorkspaces(deps: Pick<Deps, 'db'>, caller: Caller, q: ListQuery) {
  if (!caller.isRoot) return store.listWorkspaces(deps.db.sql, { userId: caller.userId, workspaceId: caller.workspaceId }, q)
  const filters = caller.workspaceId ? [...q.filters, { field: 'id', op: 'eq' as const, value: caller.workspaceId }] : q.filters
  return store.listWorkspaces(deps.db.sql, { all: true }, { ...q, filters })
}

export async function updateWorkspace(deps: Pick<Deps, 'db'>, caller: Caller, id: string, patch: { name?: string; description?: string }) {
  await access(deps, caller, id, 'manage')
  return deps.db.sql.begin((tx) => store.updateWorkspace(tx, id, patch))
}

export async function deleteWorkspace(deps: Pick<Deps, 'db'>, caller: Caller, id: string) {
  await access(deps, caller, id, 'own', true)
  await changingAccess([id], () => deps.db.sql.begin((tx) => store.deleteWorkspace(tx, id)))
}

export async function setStatus(deps: Pick<Deps, 'db'>, caller: Caller, id: string, status: 'active' | 'archived') {
  const ws = await access(deps, caller, id, 'manage', true)
  if (ws.status === status) return ws
  return changingAccess([id], () => deps.db.sql.begin((tx) => store.setWorkspaceStatus(tx, id, status)))
}

/** Only the current owner may transfer (docs/decisions.md, "Workspaces"), to a current member, who becomes admin. */
export async function transferWorkspace(deps: Pick<Deps, 'db'>, caller: Caller, id: string, newOwnerId: string) {
  // 'own' also refuses keys capped by a role limit and archived workspaces; root passes it but is no owner.
  const ws = await access(deps, caller, id, 'own')
  if (ws.owner_id !== caller.userId) throw new AppError('forbidden', 'only the current owner of the workspace may transfer it')
  return changingAccess([id], () => deps.db.sql.begin(async (tx) => {
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

export async function listMembers(deps: Pick<Deps, 'db'>, caller: Caller, id: string, q: ListQuery) {
  await access(deps, caller, id, 'read')
  return store.listMembers(deps.db.sql, id, q)
}

export async function addMember(deps: Pick<Deps, 'db'>, caller: Caller, id: string, userId: string, role: Role, key?: WriteKey) {
  await access(deps, caller, id, 'manage')
  return changingAccess([id], () => deps.db.sql.begin(async (tx) => {
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
export async function changeMemberRole(deps: Pick<Deps, 'db'>, caller: Caller, id: string, userId: string, role: Role) {
  await access(deps, caller, id, 'manage')
  return changingAccess([id], () => deps.db.sql.begin(async (tx) => {
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

export async function removeMember(deps: Pick<Deps, 'db'>, caller: Caller, id: string, userId: string) {
  await access(deps, caller, id, 'manage')
  return changingAccess([id], () => deps.db.sql.begin(async (tx) => {
    const ws = await store.lockWorkspace(tx, id)
    if (ws.owner_id === userId) throw new AppError('conflict', 'the owner cannot be removed; transfer ownership first')
    const member = await store.deleteMember(tx, id, userId)
    // Its keys restricted to this workspace would come back to life if it were added again, and the
    // keys it issued here for others were allowed by a membership it no longer has.
    await revokeKeysOfFormerMember(tx, id, userId)
    return member
  }))
}
