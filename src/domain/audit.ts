import type { Deps } from '../deps'
import type { ListQuery } from '../lib/lists'
import * as store from '../store/audit'
import type { Caller } from './access'
import { access } from './ownership'

/** The audit trail as it is read (docs/audit.md); what writes it is src/routes/plugins/audit.ts. */

/** A workspace's audit trail, newest first by default: admins (and owners) only, archived or not. */
export async function listAuditLog(deps: Deps, caller: Caller, workspaceId: string, q: ListQuery) {
  await access(deps, caller, workspaceId, 'manage', true)
  return store.listAudit(deps.db.sql, workspaceId, q)
}
