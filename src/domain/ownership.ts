import type { Deps } from '../deps'
import { AppError, invalid, notFound } from '../lib/errors'
import type { Pool as Sql } from '../store/db'
import type { WorkspaceScope } from '../store/lists'
import * as store from '../store/workspaces'
import { authorize, type Action, type Caller, type EffectiveRole } from './access'

/**
 * Which workspace a call acts in and what the caller may do there: the workspace (or the workspace a
 * resource belongs to) loaded with the caller's role, in one query, and judged by the rules of
 * access.ts. The workspace resource itself (create, members, transfer) is workspaces.ts.
 */

/** Loads the workspace with the caller's role and checks the action, in one query. */
export async function access(deps: Pick<Deps, 'db'>, caller: Caller, id: string, action: Action, allowArchived = false) {
  return authorize(caller, await store.findWorkspaceAccess(deps.db.sql, id, caller.userId), action, { id, allowArchived })
}

/**
 * Loads a resource of a workspace (webhook, workflow, run...) that the caller may take `action` on.
 * A missing one, or one of a workspace the caller may not see, answers 404 for the resource itself,
 * so its existence never leaks; visible but not allowed answers 403.
 */
export async function loadOwned<R extends { workspace_id: string }>(
  deps: Pick<Deps, 'db'>,
  caller: Caller,
  what: string,
  id: string,
  action: Action,
  find: (sql: Sql, id: string) => Promise<R | null>,
): Promise<R> {
  return (await loadOwnedWithRole(deps, caller, what, id, action, find)).row
}

/** `loadOwned`, with the caller's effective role in the resource's workspace (one access query for both). */
export async function loadOwnedWithRole<R extends { workspace_id: string }>(
  deps: Pick<Deps, 'db'>,
  caller: Caller,
  what: string,
  id: string,
  action: Action,
  find: (sql: Sql, id: string) => Promise<R | null>,
): Promise<{ row: R; role: EffectiveRole }> {
  const sql = deps.db.sql
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

/**
 * The workspace of a call that names none (docs/api.md, "Keys, roles and workspaces"): body or query > X-Workspace-Id
 * header > the key's workspace > the user's only workspace; otherwise a 400 naming `workspace_id`.
 */
export async function resolveWorkspaceId(
  deps: Pick<Deps, 'db'>,
  caller: Caller,
  explicit: string | undefined,
  header: string | undefined,
): Promise<string> {
  const named = explicit ?? header ?? caller.workspaceId
  if (named) return named
  const ids = await store.memberWorkspaceIds(deps.db.sql, caller.userId)
  if (ids.length === 1) return ids[0]!
  throw invalid('workspace_id', ids.length === 0 ? 'is required: the caller belongs to no workspace' : 'is required: the caller belongs to several workspaces')
}

/**
 * The workspaces a list covers (docs/api.md, "Lists"). A list never needs a workspace: naming none
 * covers every workspace the caller can read (root: all; a key restricted to a workspace: its own;
 * anyone else: those it is a member of). A named one (`workspace_id`, else X-Workspace-Id) is a
 * filter, and one the caller cannot read answers 404 as it does for any resource of it.
 */
export async function listScope(deps: Pick<Deps, 'db'>, caller: Caller, named: string | undefined): Promise<WorkspaceScope> {
  if (named !== undefined) {
    await access(deps, caller, named, 'read')
    return [named]
  }
  if (caller.isRoot) return caller.workspaceId === null ? 'all' : [caller.workspaceId]
  const ids = await store.readableWorkspaceIds(deps.db.sql, caller.userId)
  return caller.workspaceId === null ? ids : ids.filter((id) => id === caller.workspaceId)
}
