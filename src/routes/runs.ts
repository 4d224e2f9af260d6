import { Elysia, t } from 'elysia'
import type { Deps } from '../deps'
import * as runsDomain from '../domain/workflows/runs'
import { invalid } from '../lib/errors'
import { parseListQuery, toPage } from '../lib/lists'
import { iso } from '../lib/time'
import type { RunEventRow } from '../store/runs'
import { Described, errors, ListOf } from './common.model'
import { authenticated } from './plugins/auth'
import { writeKey } from './plugins/idempotency'
import { sseResponse, type SseEvent } from './plugins/sse'
import { RunEventStream } from './streams.model'
import {
  AllRunsQuery, EventsQuery, InputBody, Run, RunAnswer, RunNodes, RunEvents, RunParams, RunStarted, RunsQuery, SyncRun, TriggerBody, TriggerQuery, WorkflowParams,
  allRunList, runAnswer, runList, toRun, toSync,
} from './runs.model'

const toSse = (e: RunEventRow): SseEvent => ({ id: String(e.seq), event: e.type, data: JSON.stringify(e.data) })

async function* sseOf(events: AsyncIterable<RunEventRow>): AsyncGenerator<SseEvent> {
  for await (const e of events) yield toSse(e)
}

const wantsStream = (accept: string | undefined) => (accept ?? '').includes('text/event-stream')
const tags = ['runs']

/**
 * The runs: started (synchronously, async or streamed), read, cancelled, given a person's input,
 * followed node by node or event by event. One plugin per concern, used in the order of the OpenAPI
 * document; each applies the auth plugin itself, so every route keeps its hooks.
 */
export function runRoutes(deps: Deps) {
  return new Elysia({ name: 'routes.runs' })
    .use(runStarts(deps))
    .use(runReads(deps))
    .use(runActions(deps))
    .use(runProgress(deps))
}

/** POST /workflows/{id}/runs: a run started, answered when it ends, at once (async) or as its stream. */
function runStarts(deps: Deps) {
  return new Elysia({ name: 'routes.runs.starts' })
    .use(authenticated(deps))
    .post('/workflows/:id/runs', async ({ caller, requestId, params, query, body, headers, request, set, route }) => {
      const run = await runsDomain.createRun(deps, caller, params.id, body ?? {}, requestId, writeKey(request))
      if (query.async === 'true' || query.async === '1') {
        set.status = 202
        // Cast: this handler answers a 202 body, a stream or a 200 body; Elysia types an async handler as a Promise of one of them, not of their union.
        return { request_id: requestId, run_id: run.id, status: 'running' } satisfies typeof RunStarted.static as never
      }
      if (wantsStream(headers.accept)) {
        // A client that disconnects stops reading, not the run (docs/workflows.md, "Runs"); X-Run-Id names
        // the run to resume from (GET /v1/runs/{run_id}/events with Last-Event-ID), since no event carries it.
        set.headers['x-run-id'] = run.id
        const abort = new AbortController()
        // Cast: as above.
        return sseResponse(deps, { request, set, route, events: sseOf(runsDomain.followRun(deps, run.id, 0, abort.signal)), abort, idempotent: {
          status: 202,
          body: { request_id: requestId, run_id: run.id, status: 'running' },
        } }) as never
      }
      const done = await runsDomain.waitForRun(deps, run.id, deps.config.syncRunTimeoutMs)
      if (done.status === 'running') set.status = 202
      return toSync(requestId, done)
    }, {
      params: WorkflowParams,
      query: TriggerQuery,
      body: t.Optional(TriggerBody),
      parse: 'json',
      response: {
        200: Described(SyncRun, 'The run ended within SYNC_RUN_TIMEOUT_MS: its outputs, or its error'),
        202: Described(t.Union([SyncRun, RunStarted]), 'With ?async=true, or a synchronous run still running after SYNC_RUN_TIMEOUT_MS: the run id to poll or follow'),
        ...errors(402, 403, 404, 409, 422),
      },
      detail: {
        operationId: 'runWorkflow',
        ...RunEventStream('With Accept: text/event-stream (not with ?async=true)'),
        tags,
        summary: 'Run a workflow: synchronously, with ?async=true, or streamed with Accept: text/event-stream',
        description: 'Synchronous runs wait up to SYNC_RUN_TIMEOUT_MS, then answer 202 with status running. Streams send node_start, node_end, message (LLM deltas), usage and done events, each with an id: line for Last-Event-ID; the stream\'s X-Run-Id header names the run, to resume with GET /v1/runs/{run_id}/events.',
      },
    })
}

/** The run objects: listed across workflows or of one, and one by its id. */
function runReads(deps: Deps) {
  return new Elysia({ name: 'routes.runs.reads' })
    .use(authenticated(deps))
    .get('/runs', async ({ caller, requestId, query, headers }) => {
      const q = parseListQuery(query, allRunList)
      const workspaceId = (query as { workspace_id?: string }).workspace_id ?? headers['x-workspace-id']
      return { request_id: requestId, ...toPage(await runsDomain.listAllRuns(deps, caller, workspaceId, q), q, toRun) }
    }, {
      query: AllRunsQuery,
      response: { 200: ListOf(Run, 'A page of runs'), ...errors(404) },
      detail: {
        operationId: 'listRuns',
        tags,
        summary: 'List runs across workflows: every run the caller can read',
        description: 'Without workspace_id, the runs of every workspace the caller can read (a key restricted to a workspace: its own; root: all); workspace_id narrows them to one, and a workspace the caller cannot read is 404. Recent failures: ?status=failed.',
      },
    })
    .get('/runs/:run_id', async ({ caller, requestId, params }) => runAnswer(requestId, await runsDomain.loadRun(deps, caller, params.run_id)), {
      params: RunParams,
      response: { 200: Described(RunAnswer, 'The run object'), ...errors(404) },
      detail: { operationId: 'getRun', tags, summary: 'Get a run (poll an async run here)', description: 'The run object, flat: its fields beside request_id (docs/api.md, "Runs").' },
    })
    .get('/workflows/:id/runs', async ({ caller, requestId, params, query }) => {
      const q = parseListQuery(query, runList)
      return { request_id: requestId, ...toPage(await runsDomain.listRuns(deps, caller, params.id, q), q, toRun) }
    }, {
      params: WorkflowParams,
      query: RunsQuery,
      response: { 200: ListOf(Run, 'A page of the workflow\'s runs'), ...errors(404) },
      detail: { operationId: 'listWorkflowRuns', tags, summary: 'List a workflow\'s runs' },
    })
}

/** What a caller does to a running run: cancel it, or give a waiting human_input node its data. */
function runActions(deps: Deps) {
  return new Elysia({ name: 'routes.runs.actions' })
    .use(authenticated(deps))
    .post('/runs/:run_id/cancel', async ({ caller, requestId, params }) => runAnswer(requestId, await runsDomain.cancelRun(deps, caller, params.run_id)), {
      params: RunParams,
      response: { 200: Described(RunAnswer, 'The run, now cancelled'), ...errors(403, 404, 409, 422) },
      detail: { operationId: 'cancelRun', tags, summary: 'Cancel a running run (409 run_not_running otherwise); the node in flight is aborted' },
    })
    .post('/runs/:run_id/input', async ({ caller, requestId, params, body }) => runAnswer(requestId, await runsDomain.submitInput(deps, caller, params.run_id, body)), {
      params: RunParams,
      body: InputBody,
      parse: 'json',
      response: { 200: Described(RunAnswer, 'The run, resumed'), ...errors(400, 403, 404, 409) },
      detail: {
        operationId: 'submitRunInput',
        tags,
        summary: 'Give a waiting human_input node its data; the run resumes',
        description: 'The run\'s waiting names the node, its prompt and the JSON Schema the data must match (400 naming the data\'s path otherwise). Answers the run object; 409 run_not_waiting when the node does not wait for input (answered already, past its timeout_seconds, or the run ended).',
      },
    })
}

/** A run's progress: every node with its state, and its event log (JSON, or a live stream resuming after Last-Event-ID). */
function runProgress(deps: Deps) {
  return new Elysia({ name: 'routes.runs.progress' })
    .use(authenticated(deps))
    .get('/runs/:run_id/nodes', async ({ caller, requestId, params }) => {
      const { graph, nodes } = await runsDomain.runNodes(deps, await runsDomain.loadRun(deps, caller, params.run_id))
      return { request_id: requestId, graph: graph as unknown as typeof RunNodes.static['graph'], data: nodes }
    }, {
      params: RunParams,
      response: { 200: Described(RunNodes, 'Every node of the run with its state, and the graph'), ...errors(404) },
      detail: {
        operationId: 'listRunNodes',
        tags,
        summary: 'Every node of the run with its state now (pending, running, retrying, waiting, completed, failed, skipped)',
        description: 'With the graph of the workflow version the run runs, so a client can draw it. Poll it, or follow GET /v1/runs/{run_id}/events for each change.',
      },
    })
    .get('/runs/:run_id/events', async ({ caller, requestId, params, query, headers, request, set, route }) => {
      const run = await runsDomain.loadRun(deps, caller, params.run_id)
      const lastHeader = headers['last-event-id'] ?? query.after
      const after = lastHeader === undefined ? 0 : Number(lastHeader)
      if (!Number.isInteger(after) || after < 0) throw invalid('Last-Event-ID', 'must be a non-negative integer (an event id: line)')
      if (wantsStream(headers.accept)) {
        // The run ended and the client has its last event (the terminal `done`) or asks past it:
        // nothing will ever follow. 204 is what tells an EventSource to stop reconnecting; an empty
        // 200 would have it reconnect forever (docs/workflows.md, "Runs").
        if (run.status !== 'running' && after >= run.next_seq - 1) {
          set.status = 204
          return undefined as never
        }
        const abort = new AbortController()
        // Cast: Elysia types an async handler as a Promise of one answer type (a Response, or a declared body), not of their union.
        return sseResponse(deps, { request, set, route, events: sseOf(runsDomain.followRun(deps, run.id, after, abort.signal)), abort }) as never
      }
      const events = await runsDomain.runEvents(deps, run.id, after)
      return { request_id: requestId, data: events.map((e) => ({ seq: e.seq, event: e.type, data: e.data, created_at: iso(e.created_at)! })) }
    }, {
      params: RunParams,
      query: EventsQuery,
      response: {
        200: Described(RunEvents, 'The run\'s stored events (JSON), or with Accept: text/event-stream its live stream'),
        204: t.Void({ description: 'With Accept: text/event-stream only: the run has ended and Last-Event-ID (or after) is at or past its last event (done); nothing more will come, and an EventSource stops reconnecting' }),
        ...errors(404),
      },
      detail: {
        operationId: 'streamRun',
        ...RunEventStream('With Accept: text/event-stream, after Last-Event-ID (or ?after=)'),
        tags,
        summary: 'The run\'s stored event log; with Accept: text/event-stream a live stream resuming after Last-Event-ID',
        description: 'The stream replays the stored events after Last-Event-ID, then follows the live ones while the run runs, and ends after done. Reconnecting once done was received answers 204 No Content.',
      },
    })
}
