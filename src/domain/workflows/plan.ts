import type { NodeProgress } from '../../machines/workflow-run.machine'
import { ERROR_HANDLE, type Graph } from './types'

/**
 * Whether an edge leaving by `edge` is followed from a node that completed by `node`: a node that
 * failed into its error branch follows only its `error` edges; otherwise plain edges, and a
 * condition's edges of the case it matched.
 */
function follows(edge: string | undefined, node: string | undefined): boolean {
  if (node === ERROR_HANDLE) return edge === ERROR_HANDLE
  return edge === undefined || edge === node
}

/**
 * Which nodes can start now, and which will never run (every incoming edge settled, none taken: a
 * branch a condition did not choose). A node starts once all its incoming edges are settled and at
 * least one was taken, so independent branches run in parallel and join before a node with several
 * incoming edges. Skips propagate to a fixpoint.
 */
export function plan(graph: Graph, progress: Record<string, NodeProgress>): { ready: string[]; skip: string[] } {
  const status = (id: string) => progress[id]?.status
  const skipped = new Set<string>()
  const ready: string[] = []
  const incoming = new Map<string, Graph['edges']>()
  for (const e of graph.edges) incoming.set(e.target, [...(incoming.get(e.target) ?? []), e])
  for (let changed = true; changed; ) {
    changed = false
    ready.length = 0
    for (const node of graph.nodes) {
      if (status(node.id) !== undefined || skipped.has(node.id)) continue
      const edges = incoming.get(node.id) ?? []
      if (edges.length === 0) {
        if (node.type === 'start') ready.push(node.id)
        continue
      }
      let settled = true
      let taken = false
      for (const e of edges) {
        const s = skipped.has(e.source) ? 'skipped' : status(e.source)
        if (s !== 'completed' && s !== 'skipped') {
          settled = false
          break
        }
        if (s === 'completed' && follows(e.source_handle, progress[e.source]!.handle)) taken = true
      }
      if (!settled) continue
      if (taken) ready.push(node.id)
      else {
        skipped.add(node.id)
        changed = true
      }
    }
  }
  return { ready, skip: [...skipped] }
}
