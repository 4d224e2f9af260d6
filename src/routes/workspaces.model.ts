import { t } from 'elysia'
import { ROLES } from '../domain/access'
import { JOIN_POLICIES, WORKSPACE_TYPES } from '../domain/workspaces'
import { iso } from '../lib/time'
import type { MemberRow, WorkspaceRow } from '../store/workspaces'
import { Id, Name, Timestamp, UserId } from './common.model'

// `default: undefined` because Elysia fills an absent optional UnionEnum with its first value
// (elysiajs/elysia#1332): every key issued without role_limit got role_limit "admin".
const WorkspaceType = t.UnionEnum(WORKSPACE_TYPES, { default: undefined, description: 'Workspace type (default team)' })
const JoinPolicy = t.UnionEnum(JOIN_POLICIES, { default: undefined, description: 'How users join (default approve_required)' })
export const RoleSchema = t.UnionEnum(ROLES, {
  default: undefined,
  description: 'admin = workspace administrator, developer = application builder, user = ordinary user, readonly = read only',
})
const Description = t.String({ maxLength: 2000 })

export const WorkspaceParams = t.Object({ id: Id('ws', 'Workspace id') })
export const MemberParams = t.Object({ id: Id('ws', 'Workspace id'), user_id: UserId })

export const CreateWorkspace = t.Object(
  { name: Name, description: t.Optional(Description), type: t.Optional(WorkspaceType), join_policy: t.Optional(JoinPolicy) },
  { additionalProperties: false, examples: [{ name: 'Support bots', description: 'Agents for the help desk', type: 'team', join_policy: 'approve_required' }] },
)
export const UpdateWorkspace = t.Object(
  { name: t.Optional(Name), description: t.Optional(Description) },
  { additionalProperties: false, minProperties: 1, examples: [{ description: 'Agents for the help desk (EU)' }] },
)
export const AddMember = t.Object({ user_id: UserId, role: RoleSchema }, { additionalProperties: false, examples: [{ user_id: 'user_7', role: 'developer' }] })
export const ChangeRole = t.Object({ role: RoleSchema }, { additionalProperties: false, examples: [{ role: 'readonly' }] })
export const Transfer = t.Object({ new_owner_id: UserId }, { additionalProperties: false, examples: [{ new_owner_id: 'user_7' }] })

export const Workspace = t.Object({
  id: t.String(),
  name: t.String(),
  description: t.String(),
  type: t.String(),
  owner_id: t.String(),
  member_count: t.Integer(),
  status: t.Union([t.Literal('active'), t.Literal('archived')]),
  join_policy: t.String(),
  created_at: Timestamp,
  updated_at: Timestamp,
  archived_at: t.Union([Timestamp, t.Null()]),
})

export const Member = t.Object({
  workspace_id: t.String(),
  user_id: t.String(),
  role: RoleSchema,
  is_owner: t.Boolean(),
  created_at: Timestamp,
  updated_at: Timestamp,
})

export const DeletedWorkspace = t.Object({ id: t.String(), deleted: t.Literal(true) })
export const RemovedMember = t.Object({ workspace_id: t.String(), user_id: t.String(), deleted: t.Literal(true) })

export function toWorkspace(row: WorkspaceRow): typeof Workspace.static {
  return {
    id: row.id,
    name: row.name,
    description: row.description,
    type: row.type,
    owner_id: row.owner_id,
    member_count: row.member_count,
    status: row.status,
    join_policy: row.join_policy,
    created_at: iso(row.created_at)!,
    updated_at: iso(row.updated_at)!,
    archived_at: iso(row.archived_at),
  }
}

export function toMember(row: MemberRow): typeof Member.static {
  return {
    workspace_id: row.workspace_id,
    user_id: row.user_id,
    role: row.role,
    is_owner: row.is_owner,
    created_at: iso(row.created_at)!,
    updated_at: iso(row.updated_at)!,
  }
}
