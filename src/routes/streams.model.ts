/**
 * The server-sent event streams of the API, as the OpenAPI document declares them: a `text/event-stream`
 * answer beside the JSON one of the same route, each event named with the shape of its data. A route
 * spreads one of these into its `detail`; src/routes/openapi-refine.ts moves it into the route's 200
 * response. Each event is written as OpenAPI 3.2 describes an item of a sequential media type: its
 * `event:` name (absent for OpenAI's unnamed chunks), its `id:` where there is one, and `data:`, one
 * line of JSON whose shape is `contentSchema`.
 */
import { t, type TSchema } from 'elysia'
import { ErrorBody } from './common.model'
import { RunError, Usage } from './runs.model'

/** The detail key openapi-refine.ts reads and removes. */
export const EVENT_STREAM = 'x-event-stream'

type EventSpec = { event?: string; id?: string; data: TSchema | string; description: string }

function eventSchema(e: EventSpec): TSchema {
  const data = typeof e.data === 'string'
    ? t.Literal(e.data, { description: 'The data line, as is' })
    : t.String({ contentMediaType: 'application/json', contentSchema: e.data, description: 'A line of JSON of the shape contentSchema' })
  return t.Object(
    {
      ...(e.event ? { event: t.Literal(e.event) } : {}),
      ...(e.id ? { id: t.String({ description: e.id }) } : {}),
      data,
    },
    { title: e.event ?? (typeof e.data === 'string' ? e.data : 'chunk'), description: e.description },
  )
}

/** `detail` for a route that answers a stream too: `when` says when it does. */
function stream(when: string, events: EventSpec[]) {
  const names = events.map((e) => e.event ?? (typeof e.data === 'string' ? `data: ${e.data}` : 'unnamed chunks')).join(', ')
  return { [EVENT_STREAM]: t.Union(events.map(eventSchema), { description: `${when}: server-sent events (${names}), one event per item below.` }) }
}

const ErrorEvent: EventSpec = { event: 'error', data: ErrorBody, description: 'The stream failed after its first byte: the error body, then the stream ends' }

const NodeRef = { node: t.String({ description: 'The node\'s name, else its id' }), node_id: t.String() }
const SEQ = 'The event\'s sequence number in the run: send it back as Last-Event-ID (or ?after=) to resume after it'

/** A run's events (docs/workflows.md, "Runs"): POST /v1/workflows/{id}/runs and GET /v1/runs/{run_id}/events. */
export const RunEventStream = (when: string) =>
  stream(when, [
    { event: 'node_start', id: SEQ, data: t.Object({ ...NodeRef, started_at: t.String({ format: 'date-time' }), attempt: t.Integer() }), description: 'A node began (each attempt of a retried node)' },
    { event: 'node_end', id: SEQ, data: t.Object({ ...NodeRef, duration_ms: t.Integer(), output: t.Record(t.String(), t.Unknown()), attempt: t.Integer() }), description: 'A node completed, with its output' },
    { event: 'message', id: SEQ, data: t.Object({ ...NodeRef, delta: t.String() }), description: 'A piece of an LLM node\'s answer as it is produced' },
    { event: 'usage', id: SEQ, data: Usage, description: 'The run\'s tokens and credits, sent once as it ends' },
    {
      event: 'done',
      id: SEQ,
      data: t.Object({ status: t.UnionEnum(['completed', 'failed', 'cancelled']), outputs: t.Record(t.String(), t.Unknown()), error: t.Optional(RunError) }),
      description: 'The run ended: the last event, after which the stream closes',
    },
  ])

const TurnUsage = t.Object({ tokens_in: t.Integer(), tokens_out: t.Integer(), credits: t.Number() })

/** An agent's chat turn (docs/agents.md, "A turn"): POST /v1/agents/{id}/chat with stream: true. */
export const AgentChatStream = stream('With stream: true and Accept: text/event-stream', [
  { event: 'message', data: t.Object({ delta: t.String() }), description: 'A piece of the answer as it is produced' },
  { event: 'tool_call', data: t.Object({ tool: t.String(), input: t.Record(t.String(), t.Unknown()) }), description: 'The agent calls one of its tools' },
  { event: 'tool_result', data: t.Object({ output: t.Record(t.String(), t.Unknown()), duration_ms: t.Integer() }), description: 'What the tool answered' },
  { event: 'usage', data: TurnUsage, description: 'The turn\'s tokens and credits' },
  { event: 'done', data: t.Object({ finish_reason: t.String({ description: 'stop, length, error or client_closed' }) }), description: 'The turn ended: the last event' },
  ErrorEvent,
])

const ChatCompletionChunk = t.Object({
  id: t.String(),
  object: t.Literal('chat.completion.chunk'),
  created: t.Integer(),
  model: t.String(),
  choices: t.Array(t.Object({
    index: t.Integer(),
    delta: t.Object({ role: t.Optional(t.Literal('assistant')), content: t.Optional(t.Union([t.String(), t.Null()])), tool_calls: t.Optional(t.Array(t.Record(t.String(), t.Unknown()))) }),
    finish_reason: t.Union([t.String(), t.Null()]),
  })),
  usage: t.Optional(t.Union([t.Object({ prompt_tokens: t.Integer(), completion_tokens: t.Integer(), total_tokens: t.Integer(), credits: t.Number() }), t.Null()])),
})

/** OpenAI's chunk stream: POST /v1/models/llm/chat and /v1/chat/completions with stream: true. */
export const ChatCompletionStream = stream('With stream: true', [
  { data: ChatCompletionChunk, description: 'A chat.completion.chunk (no event: line, as OpenAI sends them); with stream_options.include_usage, a last chunk with no choices carries usage' },
  { data: '[DONE]', description: 'The end of the stream' },
  ErrorEvent,
])
