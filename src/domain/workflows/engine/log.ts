import type { LogEvent } from '../transitions'
import type { GraphNode } from '../types'

/** A node's attempt began: the run log's `node_start` (docs/workflows.md, "Runs"). */
export function startEvent(node: GraphNode, at: string, attempt: number): LogEvent {
  return { type: 'node_start', data: { node: node.name ?? node.id, node_id: node.id, started_at: at, attempt } }
}

/** A node's attempt ended, with its output (or its error): the run log's `node_end`. */
export function endEvent(node: GraphNode, durationMs: number, output: unknown, attempt: number): LogEvent {
  return { type: 'node_end', data: { node: node.name ?? node.id, node_id: node.id, duration_ms: durationMs, output: (output ?? {}) as Record<string, unknown>, attempt } }
}
