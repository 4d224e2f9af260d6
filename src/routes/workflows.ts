import { Elysia, t } from 'elysia'
import type { Deps } from '../deps'
import * as workflows from '../domain/workflows/service'
import { resolveWorkspaceId } from '../domain/ownership'
import { parseListQuery, toPage, type ListSpec } from '../lib/lists'
import { Envelope, envelope, errors, ListOf, ListQuery } from './common.model'
import { authenticated } from './plugins/auth'
import { writeKey } from './plugins/idempotency'
import { CreateWorkflow, DeletedWorkflow, ReplaceWorkflow, toWorkflow, Workflow, WorkflowParams } from './workflows.model'

const workflowList: ListSpec = {
  sortable: { created_at: 'time', updated_at: 'time', name: 'text' },
  filters: { created_at: { type: 'time' }, name: { type: 'text' } },
  extra: ['workspace_id'],
}
const tags = ['workflows']

export function workflowRoutes(deps: Deps) {
  return new Elysia({ name: 'routes.workflows' })
    .use(authenticated(deps))
    .post('/workflows', async ({ caller, requestId, body, headers, set, request }) => {
      const workspaceId = await resolveWorkspaceId(deps, caller, body.workspace_id, headers['x-workspace-id'])
      set.status = 201
      return envelope(requestId, toWorkflow(await workflows.createWorkflow(deps, caller, workspaceId, body, writeKey(request))))
    }, {
      body: CreateWorkflow,
      parse: 'json',
      response: { 201: Envelope(Workflow, 'The workflow created (version 1)'), ...errors(403, 404, 409, 422) },
      detail: {
        operationId: 'createWorkflow',
        tags,
        summary: 'Create a workflow (developer)',
        description: 'The graph is checked now: known node types and configs, exactly one start, at least one end, no cycles, every node reachable from start and reaching an end. A failure is a 400 validation_error whose message names the node and whose param is its path (graph.nodes.3.config.cases.0.when). See docs/workflows.md.',
      },
    })
    .get('/workflows', async ({ caller, requestId, query, headers }) => {
      const q = parseListQuery(query, workflowList)
      const workspaceId = (query as { workspace_id?: string }).workspace_id ?? headers['x-workspace-id']
      return { request_id: requestId, ...toPage(await workflows.listWorkflows(deps, caller, workspaceId, q), q, toWorkflow) }
    }, {
      query: ListQuery('created_at, updated_at, name', {
        workspace_id: t.Optional(t.String({ description: 'Only this workspace (else X-Workspace-Id); without either, every workspace the caller can read. One the caller cannot read is 404' })),
        name: t.Optional(t.String({ description: 'Only workflows of exactly this name; name_in=a,b for several' })),
        created_at_after: t.Optional(t.String({ description: 'Created after this time (ISO 8601)' })),
        created_at_before: t.Optional(t.String({ description: 'Created before this time (ISO 8601)' })),
      }),
      response: { 200: ListOf(Workflow, 'A page of workflows'), ...errors(403, 404) },
      detail: { operationId: 'listWorkflows', tags, summary: 'List the workflows of every workspace the caller can read (workspace_id: of one)' },
    })
    .get('/workflows/:id', async ({ caller, requestId, params }) =>
      envelope(requestId, toWorkflow(await workflows.loadWorkflow(deps, caller, params.id, 'read'))), {
      params: WorkflowParams,
      response: { 200: Envelope(Workflow, 'The workflow'), ...errors(404) },
      detail: { operationId: 'getWorkflow', tags, summary: 'Get a workflow with its current graph and version' },
    })
    .put('/workflows/:id', async ({ caller, requestId, params, body }) =>
      envelope(requestId, toWorkflow(await workflows.replaceWorkflow(deps, caller, params.id, body))), {
      params: WorkflowParams,
      body: ReplaceWorkflow,
      parse: 'json',
      response: { 200: Envelope(Workflow, 'The workflow, a new version'), ...errors(403, 404, 409, 422) },
      detail: {
        operationId: 'updateWorkflow',
        tags,
        summary: 'Replace a workflow\'s name, description and graph (developer)',
        description: 'The whole definition is replaced (an absent description becomes empty) and checked like at creation; the version goes up by one. Runs keep the version they started with.',
      },
    })
    .delete('/workflows/:id', async ({ caller, requestId, params }) => {
      await workflows.deleteWorkflow(deps, caller, params.id)
      return envelope(requestId, { id: params.id, deleted: true as const })
    }, {
      params: WorkflowParams,
      response: { 200: Envelope(DeletedWorkflow, 'The workflow was deleted'), ...errors(403, 404, 409, 422) },
      detail: { operationId: 'deleteWorkflow', tags, summary: 'Delete a workflow with its versions and runs (developer)' },
    })
}
