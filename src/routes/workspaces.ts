import { Elysia, t } from 'elysia'
import { access } from '../domain/ownership'
import * as workspaces from '../domain/workspaces'
import type { Deps } from '../deps'
import { parseListQuery, toPage, type ListSpec } from '../lib/lists'
import { authenticated } from './plugins/auth'
import { writeKey } from './plugins/idempotency'
import { Envelope, envelope, errors, ListOf, ListQuery } from './common.model'
import {
  AddMember, ChangeRole, CreateWorkspace, DeletedWorkspace, Member, MemberParams, RemovedMember, toMember, toWorkspace,
  Transfer, UpdateWorkspace, Workspace, WorkspaceParams,
} from './workspaces.model'

const workspaceList: ListSpec = {
  sortable: { created_at: 'time', name: 'text' },
  filters: { status: { type: 'text', values: ['active', 'archived'] }, type: { type: 'text' }, owner_id: { type: 'text' }, created_at: { type: 'time' } },
}
const memberList: ListSpec = {
  sortable: { created_at: 'time', user_id: 'text' },
  filters: { role: { type: 'text', values: ['admin', 'developer', 'user', 'readonly'] }, created_at: { type: 'time' } },
}
const tags = ['workspaces']

/**
 * The workspace resource and its members (docs/api.md, "Keys, roles and workspaces"), one plugin per
 * part, registered in this order (the OpenAPI document lists the routes as they are registered).
 */
export function workspaceRoutes(deps: Deps) {
  return new Elysia({ name: 'routes.workspaces' })
    .use(workspaceResourceRoutes(deps))
    .use(workspaceLifecycleRoutes(deps))
    .use(memberRoutes(deps))
}

/** List, create, read, rename and delete workspaces. */
function workspaceResourceRoutes(deps: Deps) {
  return new Elysia({ name: 'routes.workspaces.resource' })
    .use(authenticated(deps))
    .get('/workspaces', async ({ caller, requestId, query }) => {
      const q = parseListQuery(query, workspaceList)
      return { request_id: requestId, ...toPage(await workspaces.listWorkspaces(deps, caller, q), q, toWorkspace) }
    }, {
      query: ListQuery('created_at, name', { status: t.Optional(t.String({ description: 'active or archived; status_in=active,archived for several' })) }),
      response: { 200: ListOf(Workspace, 'A page of workspaces'), ...errors() },
      detail: { operationId: 'listWorkspaces', tags, summary: 'List the workspaces the caller can see', description: 'Root keys see every workspace; others those they are members of. Filters: status, status_in, type, owner_id, created_at_after, created_at_before.' },
    })
    .post('/workspaces', async ({ caller, requestId, body, set, request }) => {
      set.status = 201
      return envelope(requestId, toWorkspace(await workspaces.createWorkspace(deps, caller, body, writeKey(request))))
    }, {
      body: CreateWorkspace,
      parse: 'json',
      response: { 201: Envelope(Workspace, 'The workspace created'), ...errors(403, 409, 413, 422) },
      detail: { operationId: 'createWorkspace', tags, summary: 'Create a workspace; the caller becomes its owner (and an admin member)' },
    })
    .get('/workspaces/:id', async ({ caller, requestId, params }) =>
      envelope(requestId, toWorkspace(await access(deps, caller, params.id, 'read'))), {
      params: WorkspaceParams,
      response: { 200: Envelope(Workspace, 'The workspace'), ...errors(404) },
      detail: { operationId: 'getWorkspace', tags, summary: 'Get a workspace' },
    })
    .patch('/workspaces/:id', async ({ caller, requestId, params, body }) =>
      envelope(requestId, toWorkspace(await workspaces.updateWorkspace(deps, caller, params.id, body))), {
      params: WorkspaceParams,
      body: UpdateWorkspace,
      parse: 'json',
      response: { 200: Envelope(Workspace, 'The workspace as changed'), ...errors(403, 404, 409, 422) },
      detail: { operationId: 'updateWorkspace', tags, summary: 'Update a workspace name or description (admin)' },
    })
    .delete('/workspaces/:id', async ({ caller, requestId, params }) => {
      await workspaces.deleteWorkspace(deps, caller, params.id)
      await deps.apiKeys.forgetWorkspace(params.id)
      return envelope(requestId, { id: params.id, deleted: true as const })
    }, {
      params: WorkspaceParams,
      response: { 200: Envelope(DeletedWorkspace, 'The workspace was deleted'), ...errors(403, 404, 409, 422) },
      detail: { operationId: 'deleteWorkspace', tags, summary: 'Delete a workspace and everything inside it, irreversibly (owner)' },
    })
}

/** Archive, restore and transfer: who may still change a workspace, and who owns it. */
function workspaceLifecycleRoutes(deps: Deps) {
  return new Elysia({ name: 'routes.workspaces.lifecycle' })
    .use(authenticated(deps))
    .post('/workspaces/:id/archive', async ({ caller, requestId, params }) =>
      envelope(requestId, toWorkspace(await workspaces.setStatus(deps, caller, params.id, 'archived'))), {
      params: WorkspaceParams,
      response: { 200: Envelope(Workspace, 'The workspace, now archived'), ...errors(403, 404, 409, 422) },
      detail: { operationId: 'archiveWorkspace', tags, summary: 'Archive a workspace: it becomes read-only (admin)' },
    })
    .post('/workspaces/:id/restore', async ({ caller, requestId, params }) =>
      envelope(requestId, toWorkspace(await workspaces.setStatus(deps, caller, params.id, 'active'))), {
      params: WorkspaceParams,
      response: { 200: Envelope(Workspace, 'The workspace, active again'), ...errors(403, 404, 409, 422) },
      detail: { operationId: 'restoreWorkspace', tags, summary: 'Restore an archived workspace (admin)' },
    })
    .post('/workspaces/:id/transfer', async ({ caller, requestId, params, body }) => {
      const ws = await workspaces.transferWorkspace(deps, caller, params.id, body.new_owner_id)
      await deps.apiKeys.forgetWorkspace(params.id)
      return envelope(requestId, toWorkspace(ws))
    }, {
      params: WorkspaceParams,
      body: Transfer,
      parse: 'json',
      response: { 200: Envelope(Workspace, 'The workspace under its new owner'), ...errors(403, 404, 409, 422) },
      detail: { operationId: 'transferWorkspace', tags, summary: 'Transfer ownership to a current member (current owner only)', description: 'The new owner becomes an admin; the previous owner stays an admin member, and the keys it issued for other admins are revoked (an admin may not issue them).' },
    })
}

/** The members of a workspace and their roles. */
function memberRoutes(deps: Deps) {
  return new Elysia({ name: 'routes.workspaces.members' })
    .use(authenticated(deps))
    .get('/workspaces/:id/members', async ({ caller, requestId, params, query }) => {
      const q = parseListQuery(query, memberList)
      return { request_id: requestId, ...toPage(await workspaces.listMembers(deps, caller, params.id, q), q, toMember) }
    }, {
      params: WorkspaceParams,
      query: ListQuery('created_at, user_id', { role: t.Optional(t.String()) }),
      response: { 200: ListOf(Member, 'A page of members'), ...errors(404) },
      detail: { operationId: 'listMembers', tags: ['members'], summary: 'List the members of a workspace' },
    })
    .post('/workspaces/:id/members', async ({ caller, requestId, params, body, set, request }) => {
      set.status = 201
      return envelope(requestId, toMember(await workspaces.addMember(deps, caller, params.id, body.user_id, body.role, writeKey(request))))
    }, {
      params: WorkspaceParams,
      body: AddMember,
      parse: 'json',
      response: { 201: Envelope(Member, 'The member added'), ...errors(403, 404, 409, 422) },
      detail: { operationId: 'addMember', tags: ['members'], summary: 'Add a member with a role (admin)' },
    })
    .patch('/workspaces/:id/members/:user_id', async ({ caller, requestId, params, body }) => {
      const member = await workspaces.changeMemberRole(deps, caller, params.id, params.user_id, body.role)
      await deps.apiKeys.forgetWorkspace(params.id)
      return envelope(requestId, toMember(member))
    }, {
      params: MemberParams,
      body: ChangeRole,
      parse: 'json',
      response: { 200: Envelope(Member, 'The member with the new role'), ...errors(403, 404, 409, 422) },
      detail: { operationId: 'updateMember', tags: ['members'], summary: "Change a member's role (admin); the owner stays admin", description: 'The keys the member issued for others that its new role could not issue (below admin: all of them) are revoked at once.' },
    })
    .delete('/workspaces/:id/members/:user_id', async ({ caller, requestId, params }) => {
      const removed = await workspaces.removeMember(deps, caller, params.id, params.user_id)
      await deps.apiKeys.forgetWorkspace(params.id)
      return envelope(requestId, { workspace_id: removed.workspace_id, user_id: removed.user_id, deleted: true as const })
    }, {
      params: MemberParams,
      response: { 200: Envelope(RemovedMember, 'The member was removed'), ...errors(403, 404, 409, 422) },
      detail: { operationId: 'removeMember', tags: ['members'], summary: 'Remove a member (admin); the owner cannot be removed', description: "The member's keys restricted to the workspace, and the keys it issued there for others, are revoked at once." },
    })
}
