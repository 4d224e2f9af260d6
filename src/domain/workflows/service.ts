import type { Deps } from '../../deps'
import { newId } from '../../lib/ids'
import type { ListQuery } from '../../lib/lists'
import type { Pool } from '../../store/db'
import { recorded, type WriteKey } from '../../store/idempotent-writes'
import * as store from '../../store/workflows'
import type { Action, Caller } from '../access'
import { access, listScope, loadOwned } from '../ownership'
import { agentNodeTarget, workspaceKnowledgeBase, workspaceWorkflow } from '../references'
import { AppError } from '../../lib/errors'
import { validateGraph } from './graph'
import type { Graph, NodeType } from './types'

export interface WorkflowInput {
  name: string
  description?: string
  graph: unknown
}

/**
 * Loads a workflow the caller may take `action` on (read it, change it, or run it with 'use'); one of
 * a workspace it may not see answers 404 for the workflow itself, so its existence never leaks.
 */
export function loadWorkflow(deps: Pick<Deps, 'db'>, caller: Caller, id: string, action: Action): Promise<store.WorkflowRow> {
  return loadOwned(deps, caller, 'workflow', id, action, store.findWorkflow)
}

export async function createWorkflow(deps: Pick<Deps, 'db'>, caller: Caller, workspaceId: string, input: WorkflowInput, key?: WriteKey): Promise<store.WorkflowRow> {
  await access(deps, caller, workspaceId, 'build')
  const graph = validateGraph(input.graph)
  await checkReferences(deps, workspaceId, graph)
  return deps.db.sql.begin(async (tx) =>
    recorded(tx, key, 'workflow', await store.insertWorkflow(tx, {
      id: newId('wf'),
      workspace_id: workspaceId,
      name: input.name,
      description: input.description ?? '',
      graph,
      created_by: caller.userId,
    })),
  )
}

/** Every workspace the caller can read, or the one named (docs/api.md, "Lists"). */
export async function listWorkflows(deps: Pick<Deps, 'db'>, caller: Caller, workspaceId: string | undefined, q: ListQuery): Promise<store.WorkflowRow[]> {
  return store.listWorkflows(deps.db.sql, await listScope(deps, caller, workspaceId), q)
}

/** PUT: name, description and graph replaced as a whole; the version goes up by one. */
export async function replaceWorkflow(deps: Pick<Deps, 'db'>, caller: Caller, id: string, input: WorkflowInput): Promise<store.WorkflowRow> {
  const current = await loadWorkflow(deps, caller, id, 'build')
  const graph = validateGraph(input.graph)
  refuseSelfCalls(id, graph)
  await checkReferences(deps, current.workspace_id, graph)
  return deps.db.sql.begin(async (tx) => {
    await store.lockWorkflow(tx, id)
    return store.updateWorkflow(tx, id, { name: input.name, description: input.description ?? '', graph })
  })
}

/** Deletes the workflow for good, with its versions and runs. */
export async function deleteWorkflow(deps: Pick<Deps, 'db'>, caller: Caller, id: string): Promise<void> {
  await loadWorkflow(deps, caller, id, 'build')
  await deps.db.sql.begin((tx) => store.deleteWorkflow(tx, id))
}

/**
 * What a node's config names in its workspace, by node type: each id must be a resource of the
 * workflow's own workspace when the graph is saved (src/domain/references.ts). The run checks again,
 * since a resource may be deleted after the save.
 */
type CheckIn = (deps: Pick<Deps, 'db'>, workspaceId: string, id: string, param: string) => Promise<unknown>
const REFERENCES: Partial<Record<NodeType, { key: string; check: CheckIn }[]>> = {
  knowledge_retrieval: [{ key: 'knowledge_base_ids', check: workspaceKnowledgeBase }],
  sub_workflow: [{ key: 'workflow_id', check: workspaceWorkflow }],
  iteration: [{ key: 'workflow_id', check: workspaceWorkflow }],
  agent: [{ key: 'agent_id', check: agentNodeTarget }],
}

/**
 * A graph whose sub_workflow or iteration node runs its own workflow would start runs without end:
 * refused when saved. Longer cycles (a calls b, b calls a) cannot be told from a legitimate change
 * being made in two steps; the depth limit ends them when they run (max_depth_exceeded).
 */
function refuseSelfCalls(id: string, graph: Graph): void {
  graph.nodes.forEach((n, i) => {
    if ((n.type === 'sub_workflow' || n.type === 'iteration') && n.config.workflow_id === id) {
      const param = `graph.nodes.${i}.config.workflow_id`
      throw new AppError('validation_error', `${param}: node ${JSON.stringify(n.id)} runs this workflow itself; a workflow may not call itself`, { param, details: [{ path: param, message: 'a workflow may not call itself' }] })
    }
  })
}

async function checkReferences(deps: Pick<Deps, 'db'>, workspaceId: string, graph: Graph): Promise<void> {
  for (const [n, node] of graph.nodes.entries()) {
    for (const { key, check } of REFERENCES[node.type] ?? []) {
      const value = node.config[key]
      const ids = Array.isArray(value) ? value : [value]
      for (const [i, id] of ids.entries()) {
        // validateGraph has checked the shape: ids are non-empty strings.
        await check(deps, workspaceId, id as string, `graph.nodes.${n}.config.${key}${Array.isArray(value) ? `.${i}` : ''}`)
      }
    }
  }
}
