import { t } from 'elysia'
import { NODE_TYPES } from '../domain/workflows/types'
import { iso } from '../lib/time'
import type { WorkflowRow } from '../store/workflows'
import { Id, Name, Timestamp } from './common.model'

export const WorkflowParams = t.Object({ id: Id('wf', 'Workflow id') })

// The graph's shape only: node types, configs, edges, cycles and reachability are checked by
// validateGraph (src/domain/workflows/graph.ts), whose errors name the node. docs/workflows.md has it all.
const Node = t.Object({
  id: t.String({ description: '1-64 characters of A-Z, a-z, 0-9, _ and -, unique in the graph', examples: ['classify'] }),
  type: t.String({ description: `One of: ${NODE_TYPES.join(', ')}`, examples: ['llm'] }),
  name: t.Optional(t.String({ description: 'A label for people (at most 200 characters)' })),
  config: t.Record(t.String(), t.Unknown(), { description: 'Per node type (docs/workflows.md, "Node types")' }),
})
const Edge = t.Object({
  source: t.String({ description: 'Node id the edge leaves' }),
  target: t.String({ description: 'Node id the edge enters' }),
  source_handle: t.Optional(t.String({ description: 'Edges leaving a condition node only: the case id (or "default") that takes this edge' })),
})

const exampleGraph = {
  nodes: [
    { id: 'start', type: 'start', config: { inputs: [{ name: 'question', type: 'string', required: true }] } },
    { id: 'answer', type: 'llm', config: { model: 'gpt-4o-mini', messages: [{ role: 'user', content: '{{inputs.question}}' }], temperature: 0.2 } },
    { id: 'end', type: 'end', config: { outputs: { answer: '{{nodes.answer.output.text}}' } } },
  ],
  edges: [{ source: 'start', target: 'answer' }, { source: 'answer', target: 'end' }],
}

export const Graph = t.Object(
  {
    nodes: t.Array(Node, { description: 'At most 500 nodes: exactly one start, at least one end' }),
    edges: t.Array(Edge, { description: 'At most 2000 edges; no cycles; every node reachable from start and reaching an end' }),
  },
  { description: 'The workflow graph (docs/workflows.md)', examples: [exampleGraph] },
)

const Description = t.String({ maxLength: 2000, description: 'Free text (at most 2000 characters)' })

export const CreateWorkflow = t.Object(
  {
    workspace_id: t.Optional(Id('ws', 'The workspace (else X-Workspace-Id, the key\'s workspace or the caller\'s only one)')),
    name: Name,
    description: t.Optional(Description),
    graph: Graph,
  },
  { additionalProperties: false, examples: [{ workspace_id: 'ws_01jbz3k9x8q7r6s5t4v3w2y1z0', name: 'Answer a question', description: 'One LLM call', graph: exampleGraph }] },
)

export const ReplaceWorkflow = t.Object(
  {
    name: Name,
    description: t.Optional(t.String({ ...Description, description: 'Free text; absent means empty (PUT replaces the whole definition)' })),
    graph: Graph,
  },
  { additionalProperties: false, examples: [{ name: 'Answer a question', graph: exampleGraph }] },
)

export const Workflow = t.Object(
  {
    id: t.String(),
    workspace_id: t.String(),
    name: t.String(),
    description: t.String(),
    graph: Graph,
    version: t.Integer({ description: '1 at creation, +1 at every PUT; a run records the version it ran' }),
    created_by: t.String(),
    created_at: Timestamp,
    updated_at: Timestamp,
  },
  {
    examples: [{
      id: 'wf_01jbz3k9x8q7r6s5t4v3w2y1z0', workspace_id: 'ws_01jbz3k9x8q7r6s5t4v3w2y1z0', name: 'Answer a question', description: 'One LLM call', graph: exampleGraph,
      version: 1, created_by: 'user_42', created_at: '2026-01-02T03:04:05.678Z', updated_at: '2026-01-02T03:04:05.678Z',
    }],
  },
)

export const DeletedWorkflow = t.Object({ id: t.String(), deleted: t.Literal(true) })

export function toWorkflow(row: WorkflowRow): typeof Workflow.static {
  return {
    id: row.id,
    workspace_id: row.workspace_id,
    name: row.name,
    description: row.description,
    graph: row.graph as typeof Graph.static,
    version: row.version,
    created_by: row.created_by,
    created_at: iso(row.created_at)!,
    updated_at: iso(row.updated_at)!,
  }
}
