import type { ListQuery } from '../lib/lists'
import type { Sql } from './db'
import { jsonb } from './db'
import { listClauses } from './lists'

export interface AuditRow {
  id: string
  workspace_id: string | null
  user_id: string
  api_key_id: string
  /** The user who issued the key (differs from user_id for a key issued by an admin or root). */
  issued_by: string | null
  action: string
  resource_id: string | null
  params: Record<string, string>
  status: number
  request_id: string
  created_at: Date
}

export async function insertAudit(sql: Sql, row: Omit<AuditRow, 'created_at'>): Promise<void> {
  await sql`
    insert into audit_log (id, workspace_id, user_id, api_key_id, issued_by, action, resource_id, params, status, request_id)
    values (${row.id}, ${row.workspace_id}, ${row.user_id}, ${row.api_key_id}, ${row.issued_by}, ${row.action}, ${row.resource_id}, ${jsonb(sql, row.params)}, ${row.status}, ${row.request_id})`
}

export async function listAudit(sql: Sql, workspaceId: string, q: ListQuery): Promise<AuditRow[]> {
  const c = listClauses(sql, q)
  return sql<AuditRow[]>`
    select id, workspace_id, user_id, api_key_id, issued_by, action, resource_id, params, status, request_id, created_at
    from audit_log where workspace_id = ${workspaceId} ${c.and} order by ${c.orderBy} limit ${c.limit}`
}

/** The tables whose rows name their workspace, for the routes that act on one by id. */
export type OwnedTable = 'api_keys' | 'webhooks' | 'workflows' | 'runs' | 'triggers' | 'knowledge_bases' | 'documents' | 'agents' | 'conversations'

export async function workspaceOfRow(sql: Sql, table: OwnedTable, id: string): Promise<string | null> {
  const [row] = await sql<{ workspace_id: string | null }[]>`select workspace_id from ${sql(table)} where id = ${id}`
  return row?.workspace_id ?? null
}
