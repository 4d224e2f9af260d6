import type { Config } from '../../config'
import type { CallContext, Gateway } from '../models/gateway'
import type { StoredEdge, StoredGraph, StoredNode } from '../../store/workflows'

/**
 * A workflow graph (docs/workflows.md, "The graph"): what the store holds (src/store/workflows.ts),
 * its node types and failure handling named; `validateGraph` makes one, and a stored one was made so.
 */
export interface GraphNode extends StoredNode {
  type: NodeType
  on_error?: OnError
}

export const ON_ERROR = ['fail', 'continue', 'branch'] as const
export type OnError = (typeof ON_ERROR)[number]

/** The source_handle of the edges a node with `on_error: "branch"` follows when it fails. */
export const ERROR_HANDLE = 'error'

export type GraphEdge = StoredEdge

export interface Graph extends StoredGraph {
  nodes: GraphNode[]
  edges: GraphEdge[]
}

export const NODE_TYPES = [
  'start', 'llm', 'template', 'condition', 'code', 'http_request', 'knowledge_retrieval', 'wait', 'sub_workflow', 'iteration', 'human_input', 'agent', 'end',
] as const
export type NodeType = (typeof NODE_TYPES)[number]

/** What templates and expressions see: `inputs.<name>` and `nodes.<id>.output.<path>`. */
export interface Variables {
  inputs: Record<string, unknown>
  nodes: Record<string, { output: unknown }>
}

export interface NodeUsage {
  tokens_in: number
  tokens_out: number
  credits: number
}

export interface NodeResult {
  output: unknown
  /** A condition's matched case id (or `default`): only edges with this source_handle are followed. */
  handle?: string
  usage?: NodeUsage
}

/** What an executor may use. Executors are pure of storage: the engine persists what they return. */
export interface NodeContext {
  vars: Variables
  /** Aborted on cancel (and on a lost lease): executors must stop their work (LLM stream, HTTP). */
  signal: AbortSignal
  config: Config
  gateway: Gateway
  call: CallContext
  /** LLM nodes stream their tokens here (the run's `message` events). */
  delta(text: string): void
  /** knowledge_retrieval: searches bases of the run's workspace (another workspace's base is not found). */
  knowledge: KnowledgePort
  /** sub_workflow and iteration: runs of another workflow started by this node (absent where nodes run without a run, in tests of one executor). */
  children?: ChildPort
  /** agent: a turn of an agent of the run's workspace (absent where nodes run without a run). */
  agents?: AgentPort
}

export interface AgentTurnInput {
  agentId: string
  message: string
  /** The conversation's user_id; the run's own user_id when left out. */
  userId?: string
  conversationId?: string
}

export interface AgentTurnEnd {
  text: string
  conversation_id: string
  message_id: string
  tool_calls: { tool: string; input: Record<string, unknown>; output: Record<string, unknown>; duration_ms: number }[]
  usage: NodeUsage
  finish_reason: string
}

export interface AgentPort {
  /** One turn of the agent; its answer's deltas go to `delta` as they come. Failures are NodeErrors. */
  turn(input: AgentTurnInput, delta: (text: string) => void, signal: AbortSignal): Promise<AgentTurnEnd>
}

/** How a child run ended. */
export interface ChildEnd {
  /** Null when no run was started: the item's inputs did not fit the workflow's. */
  run_id: string | null
  status: 'completed' | 'failed' | 'cancelled'
  outputs: Record<string, unknown>
  error: { code: string; message: string; node: string | null } | null
  usage: NodeUsage
}

export interface ChildPort {
  /**
   * Runs `workflowId` once per item of `inputs` (each a child run with this run as its parent), at
   * most `concurrency` at once, and answers each child's end in item order. Exactly once per item: a
   * node run again after a crash finds the children it had started. `stopOnFailure`: the first
   * failed child cancels the others still running and ends the wait.
   */
  run(node: GraphNode, workflowId: string, inputs: Record<string, unknown>[], opts: { concurrency: number; stopOnFailure: boolean }, signal: AbortSignal): Promise<(ChildEnd | null)[]>
}

export interface KnowledgePort {
  search(
    knowledgeBaseIds: string[],
    input: { query: string; top_k: number; filters?: Record<string, unknown> },
    signal: AbortSignal,
  ): Promise<{ chunk_id: string; document_id: string; document_name: string; content: string; score: number; metadata: Record<string, unknown>; knowledge_base_id: string }[]>
}

export type Executor = (node: GraphNode, ctx: NodeContext) => Promise<NodeResult>

/** A node failure with the error code of the run's `error: { code, message, node }` (docs/workflows.md, "Runs"). */
export class NodeError extends Error {
  override name = 'NodeError'
  constructor(
    readonly code: string,
    message: string,
    /** What the node spent before it failed (child runs that completed): added to the run's usage all the same. */
    readonly usage?: NodeUsage,
  ) {
    super(message)
  }
}
