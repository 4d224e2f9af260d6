import { AppError, notFound } from '../lib/errors'
import type { Role, WorkspaceAccessRow } from '../store/workspaces'

/** Who is calling: resolved from the API key on every request. */
export interface Caller {
  keyId: string
  userId: string
  isRoot: boolean
  /** The one workspace a restricted key may touch. */
  workspaceId: string | null
  /** The highest role a key may act with, whatever its user's role. */
  roleLimit: Role | null
  /** The user who issued the key (itself, another user, or null for the bootstrap root key): named in the audit trail. */
  issuedBy: string | null
}

/** The permission levels, lowest first; each needs the member role of the same rank (readonly < user < developer < admin < owner). */
export type Action = 'read' | 'use' | 'build' | 'manage' | 'own'
export type EffectiveRole = Role | 'owner'

const rank: Record<EffectiveRole, number> = { readonly: 0, user: 1, developer: 2, admin: 3, owner: 4 }
const needs: Record<Action, number> = { read: 0, use: 1, build: 2, manage: 3, own: 4 }

export const ROLES = ['admin', 'developer', 'user', 'readonly'] as const satisfies readonly Role[]

/** The caller's role in a workspace: owner over member role, capped by the key's role limit. */
export function effectiveRole(caller: Caller, ws: WorkspaceAccessRow): EffectiveRole | null {
  let role: EffectiveRole | null = caller.isRoot ? 'owner' : ws.owner_id === caller.userId ? 'owner' : ws.role
  if (role && caller.roleLimit && rank[caller.roleLimit] < rank[role]) role = caller.roleLimit
  return role
}

/**
 * Decides whether the caller may take `action` in the workspace. Not visible (no workspace, another
 * workspace than the key's, not a member) answers 404, so existence never leaks; visible but not
 * allowed answers 403. Archived workspaces are read-only unless the action says otherwise.
 */
export function authorize(
  caller: Caller,
  ws: WorkspaceAccessRow | null,
  action: Action,
  opts: { id: string; allowArchived?: boolean },
): WorkspaceAccessRow & { effective: EffectiveRole } {
  if (!ws || (caller.workspaceId !== null && caller.workspaceId !== ws.id)) throw notFound('workspace', opts.id)
  const effective = effectiveRole(caller, ws)
  if (!effective) throw notFound('workspace', opts.id)
  if (rank[effective] < needs[action]) {
    throw new AppError('forbidden', `role ${effective} may not ${describe[action]} in workspace ${ws.id}`)
  }
  if (action !== 'read' && ws.status === 'archived' && !opts.allowArchived) {
    throw new AppError('forbidden', `workspace ${ws.id} is archived and read-only; restore it first`)
  }
  return { ...ws, effective }
}

const describe: Record<Action, string> = {
  read: 'read',
  use: 'call agents, runs or models',
  build: 'change agents, workflows, knowledge bases or webhooks',
  manage: 'manage the workspace, its members or keys',
  own: 'transfer or delete the workspace',
}

/** Whether an effective role is `min` or above. */
export function roleAtLeast(role: EffectiveRole, min: EffectiveRole): boolean {
  return rank[role] >= rank[min]
}

/**
 * Below `developer`, a caller acts only as its own user_id: it chats, triggers and cancels runs and
 * sees conversations as itself (docs/decisions.md, "API keys"). From `developer` up, a backend acts for its end
 * users and may name any user_id (null).
 */
export function onlyUserOf(caller: Caller, role: EffectiveRole): string | null {
  return roleAtLeast(role, 'developer') ? null : caller.userId
}

/** Whether `role` is strictly below `other`: one may act for (issue keys to, revoke keys of) only those below oneself. */
export function roleBelow(role: EffectiveRole, other: EffectiveRole): boolean {
  return rank[role] < rank[other]
}

/** Whether a key may act with `role` at all (creating keys and workspaces). */
export function keyAllows(caller: Caller, role: Role): boolean {
  return caller.isRoot || !caller.roleLimit || rank[caller.roleLimit] >= rank[role]
}

export function roleAtMost(a: Role, b: Role): Role {
  return rank[a] <= rank[b] ? a : b
}

/** The role limits a member with `role` may give the keys it issues for others: those below its own from admin up, none below admin. */
export function issuableLimits(role: EffectiveRole): Role[] {
  return rank[role] < needs.manage ? [] : ROLES.filter((r) => rank[r] < rank[role])
}
