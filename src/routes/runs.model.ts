/** The TypeBox schemas of the runs routes (src/routes/runs.ts), named in the OpenAPI document where shared, and the mappers from rows to them. */
import { t } from 'elysia'
import type { ListSpec } from '../lib/lists'
import { iso } from '../lib/time'
import type { RunRow } from '../store/runs'
import { Id, ListQuery, RequestId, Timestamp, UserId } from './common.model'

export const Usage = t.Object({ tokens_in: t.Integer(), tokens_out: t.Integer(), credits: t.Number() })
export const RunError = t.Object({ code: t.String(), message: t.String(), node: t.Union([t.String(), t.Null()]) })
export const Status = t.UnionEnum(['running', 'completed', 'failed', 'cancelled'])

/** A human_input node waiting for its data: POST /v1/runs/{run_id}/input with { node, data } resumes the run. */
export const RunWaiting = t.Object({
  node: t.String({ description: 'The id of the node waiting' }),
  prompt: t.String({ description: 'What the person is asked, rendered from the node\'s prompt template' }),
  schema: t.Union([t.Record(t.String(), t.Unknown()), t.Null()], { description: 'The JSON Schema the data must match (null: any JSON value)' }),
  since: Timestamp,
  expires_at: t.Union([Timestamp, t.Null()], { description: 'Past this time the node fails with input_timeout (null: it waits for as long as it takes)' }),
})

/** The run object (docs/api.md, "Runs"): answered flat by get and cancel, and as each item of the run lists. */
export const Run = t.Object({
  run_id: t.String(),
  workflow_id: t.String(),
  workflow_version: t.Integer(),
  status: Status,
  inputs: t.Record(t.String(), t.Unknown()),
  outputs: t.Record(t.String(), t.Unknown()),
  usage: Usage,
  error: t.Optional(RunError),
  duration_ms: t.Union([t.Integer(), t.Null()]),
  user_id: t.Union([t.String(), t.Null()]),
  created_at: Timestamp,
  finished_at: t.Union([Timestamp, t.Null()]),
  parent_run_id: t.Union([t.String(), t.Null()], { description: 'The run whose sub_workflow or iteration node started this one; null for a run started by a caller, a schedule or a hook' }),
  waiting: t.Union([RunWaiting, t.Null()], { description: 'What a running run waits on (a human_input node), else null' }),
})

/** A run answered on its own: the run object with the request id beside its fields, not in `data`. */
export const RunAnswer = t.Composite([t.Object({ request_id: RequestId }), Run])

/** The synchronous run response, with `error` for a failed run (docs/workflows.md, "Runs"). */
export const SyncRun = t.Object({
  request_id: t.String(),
  run_id: t.String(),
  workflow_id: t.String(),
  status: Status,
  duration_ms: t.Integer(),
  outputs: t.Record(t.String(), t.Unknown()),
  usage: Usage,
  error: t.Optional(RunError),
})

export const RunEvent = t.Object({ seq: t.Integer(), event: t.String(), data: t.Record(t.String(), t.Unknown()), created_at: Timestamp })

export const TriggerBody = t.Object(
  { inputs: t.Optional(t.Record(t.String(), t.Unknown())), user_id: t.Optional(UserId) },
  { additionalProperties: false, examples: [{ inputs: { question: 'How long do refunds take?' }, user_id: 'user_42' }] },
)

export const runList: ListSpec = {
  sortable: { created_at: 'time', finished_at: 'time' },
  nullable: ['finished_at'],
  filters: { status: { type: 'text', values: ['running', 'completed', 'failed', 'cancelled'] }, created_at: { type: 'time' }, user_id: { type: 'text' } },
}
export const allRunList: ListSpec = {
  ...runList,
  filters: { ...runList.filters, workflow_id: { type: 'text' } },
  extra: ['workspace_id'],
}
export const runFilters = {
  status: t.Optional(t.String({ description: 'running, completed, failed or cancelled; status_in=failed,cancelled for several', examples: ['failed'] })),
  created_at_after: t.Optional(t.String({ description: 'Started after this time (ISO 8601)' })),
  created_at_before: t.Optional(t.String({ description: 'Started before this time (ISO 8601)' })),
  user_id: t.Optional(t.String({ description: 'Only runs triggered for exactly this user_id; user_id_in=a,b for several' })),
}

export const RunParams = t.Object({ run_id: Id('run', 'Run id') })
export const WorkflowParams = t.Object({ id: Id('wf', 'Workflow id') })

export const TriggerQuery = t.Object(
  { async: t.Optional(t.UnionEnum(['true', 'false', '1', '0'], { default: undefined, description: 'true: answer { run_id, status } at once' })) },
  { additionalProperties: false },
)

/** The answer to an asynchronous trigger (?async=true): the run's id, to poll or follow. */
export const RunStarted = t.Object({ request_id: t.String(), run_id: t.String(), status: t.Literal('running') })

export const RunsQuery = ListQuery('created_at, finished_at', runFilters)
export const AllRunsQuery = ListQuery('created_at, finished_at', {
  ...runFilters,
  workflow_id: t.Optional(t.String({ description: 'Only runs of this workflow; workflow_id_in=a,b for several' })),
  workspace_id: t.Optional(t.String({ description: 'Only runs of this workspace (else X-Workspace-Id); without either, every workspace the caller can read' })),
})

export const EventsQuery = t.Object(
  { after: t.Optional(t.String({ pattern: '^[0-9]{1,9}$', description: 'Only events after this sequence number (as Last-Event-ID)' })) },
  { additionalProperties: false },
)
export const InputBody = t.Object(
  {
    node: t.String({ minLength: 1, maxLength: 64, description: 'The id of the human_input node the data is for (the run\'s waiting.node)' }),
    data: t.Unknown({ description: 'The data asked for, matching the node\'s schema' }),
  },
  { additionalProperties: false, examples: [{ node: 'approve', data: { approved: true, comment: 'Fine by me' } }] },
)

export const NodeView = t.Object({
  node: t.String({ description: 'The node\'s id' }),
  name: t.Union([t.String(), t.Null()]),
  type: t.String(),
  state: t.UnionEnum(['pending', 'running', 'retrying', 'waiting', 'completed', 'failed', 'skipped', 'cancelled'], {
    description: 'pending: not started yet; skipped: on a branch not taken (or never reached by a run that completed or failed); cancelled: not ended (pending, running, retrying or waiting) when its run was cancelled',
  }),
  attempt: t.Union([t.Integer(), t.Null()], { description: 'The attempt in flight, or the next one while retrying' }),
  started_at: t.Union([Timestamp, t.Null()]),
  duration_ms: t.Union([t.Integer(), t.Null()]),
  until: t.Union([Timestamp, t.Null()], { description: 'retrying: when the next attempt starts; waiting: when the wait ends or the input times out' }),
  error: t.Union([t.Object({ code: t.String(), message: t.String() }), t.Null()], { description: 'The last failed attempt\'s error' }),
})

export const RunNodes = t.Object({
  request_id: RequestId,
  graph: t.Object({ nodes: t.Array(t.Record(t.String(), t.Unknown())), edges: t.Array(t.Record(t.String(), t.Unknown())) }, { description: 'The graph of the workflow version the run runs' }),
  data: t.Array(NodeView),
})

export const RunEvents = t.Object({ request_id: t.String(), data: t.Array(RunEvent) })

export function toRun(r: RunRow): typeof Run.static {
  const out: typeof Run.static = {
    run_id: r.id,
    workflow_id: r.workflow_id,
    workflow_version: r.workflow_version,
    status: r.status,
    inputs: r.inputs,
    outputs: r.outputs ?? {},
    usage: r.usage,
    duration_ms: r.duration_ms,
    user_id: r.user_id,
    created_at: iso(r.created_at)!,
    finished_at: iso(r.finished_at),
    parent_run_id: r.parent_run_id ?? null,
    waiting: r.status === 'running' ? (r.waiting ?? null) : null,
  }
  if (r.error) out.error = r.error
  return out
}

export const runAnswer = (requestId: string, r: RunRow): typeof RunAnswer.static => ({ request_id: requestId, ...toRun(r) })

export function toSync(requestId: string, r: RunRow): typeof SyncRun.static {
  const out: typeof SyncRun.static = {
    request_id: requestId,
    run_id: r.id,
    workflow_id: r.workflow_id,
    status: r.status,
    duration_ms: r.duration_ms ?? Date.now() - r.created_at.getTime(),
    outputs: r.outputs ?? {},
    usage: r.usage,
  }
  if (r.error) out.error = r.error
  return out
}
