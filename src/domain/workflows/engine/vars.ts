import type { NodeProgress } from '../../../machines/workflow-run.machine'
import { inputSpec } from '../graph'
import type { Graph, Variables } from '../types'

/**
 * What templates see: the run's inputs and the outputs of the nodes settled so far. A node on a
 * branch not taken reads as null, and so does an optional input left out: a template at a join may
 * name either.
 */
export function varsOf(graph: Graph, inputs: Record<string, unknown>, progress: Record<string, NodeProgress>): Variables {
  return {
    inputs: { ...Object.fromEntries(inputSpec(graph).map((i) => [i.name, null])), ...inputs },
    nodes: Object.fromEntries(
      Object.entries(progress)
        .filter(([, p]) => p.status === 'completed' || p.status === 'skipped')
        .map(([id, p]) => [id, { output: p.status === 'completed' ? p.output : null }]),
    ),
  }
}
