import { newId } from '../../lib/ids'
import type { ListQuery } from '../../lib/lists'
import type { Pool } from '../../store/db'
import * as store from '../../store/workflows'
import type { Action, Caller } from '../access'
import { access, loadOwned } from '../workspaces'
import { validateGraph } from './graph'

export interface WorkflowInput {
  name: string
  description?: string
  graph: unknown
}

/**
 * Loads a workflow the caller may take `action` on (read it, change it, or run it with 'use'); one of
 * a workspace it may not see answers 404 for the workflow itself, so its existence never leaks.
 */
export function loadWorkflow(sql: Pool, caller: Caller, id: string, action: Action): Promise<store.WorkflowRow> {
  return loadOwned(sql, caller, 'workflow', id, action, store.findWorkflow)
}

export async function createWorkflow(sql: Pool, caller: Caller, workspaceId: string, input: WorkflowInput): Promise<store.WorkflowRow> {
  await access(sql, caller, workspaceId, 'build')
  const graph = validateGraph(input.graph)
  return sql.begin((tx) =>
    store.insertWorkflow(tx, {
      id: newId('wf'),
      workspace_id: workspaceId,
      name: input.name,
      description: input.description ?? '',
      graph,
      created_by: caller.userId,
    }),
  )
}

export async function listWorkflows(sql: Pool, caller: Caller, workspaceId: string, q: ListQuery): Promise<store.WorkflowRow[]> {
  await access(sql, caller, workspaceId, 'read')
  return store.listWorkflows(sql, workspaceId, q)
}

/** PUT: name, description and graph replaced as a whole; the version goes up by one. */
export async function replaceWorkflow(sql: Pool, caller: Caller, id: string, input: WorkflowInput): Promise<store.WorkflowRow> {
  await loadWorkflow(sql, caller, id, 'build')
  const graph = validateGraph(input.graph)
  return sql.begin(async (tx) => {
    await store.lockWorkflow(tx, id)
    return store.updateWorkflow(tx, id, { name: input.name, description: input.description ?? '', graph })
  })
}

/** Deletes the workflow for good, with its versions and runs. */
export async function deleteWorkflow(sql: Pool, caller: Caller, id: string): Promise<void> {
  await loadWorkflow(sql, caller, id, 'build')
  await sql.begin((tx) => store.deleteWorkflow(tx, id))
}
