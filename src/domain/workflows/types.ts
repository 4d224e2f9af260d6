import type { Config } from '../../config'
import type { CallContext, Gateway } from '../models/gateway'

/** A workflow graph (docs/workflows.md, "The graph"). */
export interface GraphNode {
  id: string
  type: NodeType
  name?: string
  config: Record<string, unknown>
}

export interface GraphEdge {
  source: string
  target: string
  /** A condition node's case id (or `default`) that this edge leaves by. */
  source_handle?: string
}

export interface Graph {
  nodes: GraphNode[]
  edges: GraphEdge[]
}

export const NODE_TYPES = ['start', 'llm', 'template', 'condition', 'code', 'http_request', 'knowledge_retrieval', 'wait', 'end'] as const
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
  ) {
    super(message)
  }
}
