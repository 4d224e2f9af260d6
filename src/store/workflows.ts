import { notFound } from '../lib/errors'
import type { ListQuery } from '../lib/lists'
import type { Sql, Tx } from './db'
import { jsonb } from './db'
import { inWorkspaces, listClauses, type WorkspaceScope } from './lists'

/**
 * A workflow graph as stored (jsonb): checked by the domain before it is written
 * (src/domain/workflows/graph.ts, `validateGraph`), whose `Graph` names the node types and their
 * failure handling (docs/workflows.md, "The graph").
 */
export interface StoredGraph {
  nodes: StoredNode[]
  edges: StoredEdge[]
}

export interface StoredNode {
  id: string
  type: string
  name?: string
  config: Record<string, unknown>
  /** Attempts and the pause between them (docs/workflows.md, "Errors and retries"); one attempt when left out. */
  retry?: { max_attempts: number; backoff_ms: number }
  /** Each attempt's time limit; none when left out (not for wait and human_input nodes). */
  timeout_ms?: number
  /** After the last attempt fails: fail the run (the default), continue with the error as output, or follow the `error` edges. */
  on_error?: string
}

export interface StoredEdge {
  source: string
  target: string
  /** A condition node's case id (or `default`) that this edge leaves by. */
  source_handle?: string
}

export interface WorkflowRow {
  id: string
  workspace_id: string
  name: string
  description: string
  graph: StoredGraph
  version: number
  created_by: string
  created_at: Date
  updated_at: Date
}

export interface WorkflowVersionRow {
  workflow_id: string
  version: number
  graph: StoredGraph
  created_at: Date
}

/** Inserts a workflow at version 1, and that version's graph. */
export async function insertWorkflow(
  tx: Tx,
  w: Pick<WorkflowRow, 'id' | 'workspace_id' | 'name' | 'description' | 'graph' | 'created_by'>,
): Promise<WorkflowRow> {
  const [row] = await tx<WorkflowRow[]>`
    insert into workflows (id, workspace_id, name, description, graph, created_by)
    values (${w.id}, ${w.workspace_id}, ${w.name}, ${w.description}, ${jsonb(tx, w.graph)}, ${w.created_by})
    returning *`
  await tx`insert into workflow_versions (workflow_id, version, graph, created_at)
    values (${row!.id}, ${row!.version}, ${jsonb(tx, w.graph)}, ${row!.created_at})`
  return row!
}

export async function findWorkflow(sql: Sql, id: string): Promise<WorkflowRow | null> {
  const [row] = await sql<WorkflowRow[]>`select * from workflows where id = ${id}`
  return row ?? null
}

export async function lockWorkflow(tx: Tx, id: string): Promise<WorkflowRow> {
  const [row] = await tx<WorkflowRow[]>`select * from workflows where id = ${id} for update`
  if (!row) throw notFound('workflow', id)
  return row
}

/** Replaces name, description and graph as a whole; the version goes up by one and its graph is kept. */
export async function updateWorkflow(
  tx: Tx,
  id: string,
  w: Pick<WorkflowRow, 'name' | 'description' | 'graph'>,
): Promise<WorkflowRow> {
  const [row] = await tx<WorkflowRow[]>`
    update workflows set
      name = ${w.name},
      description = ${w.description},
      graph = ${jsonb(tx, w.graph)},
      version = version + 1,
      updated_at = now()
    where id = ${id}
    returning *`
  if (!row) throw notFound('workflow', id)
  await tx`insert into workflow_versions (workflow_id, version, graph, created_at)
    values (${id}, ${row.version}, ${jsonb(tx, w.graph)}, ${row.updated_at})`
  return row
}

export async function deleteWorkflow(tx: Tx, id: string): Promise<void> {
  await tx`delete from workflows where id = ${id}`
}

export async function listWorkflows(sql: Sql, scope: WorkspaceScope, q: ListQuery): Promise<WorkflowRow[]> {
  const c = listClauses(sql, q)
  return sql<WorkflowRow[]>`
    select * from workflows where ${inWorkspaces(sql, scope)} ${c.and}
    order by ${c.orderBy} limit ${c.limit}`
}

/** The graph of one version, as a run that recorded it ran it. */
export async function getWorkflowVersion(sql: Sql, workflowId: string, version: number): Promise<StoredGraph> {
  const [row] = await sql<Pick<WorkflowVersionRow, 'graph'>[]>`
    select graph from workflow_versions where workflow_id = ${workflowId} and version = ${version}`
  if (!row) throw notFound('workflow version', `${workflowId}@${version}`)
  return row.graph
}
