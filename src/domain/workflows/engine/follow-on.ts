import type { NodeProgress, RunEvent } from '../../../machines/workflow-run.machine'
import type { RunRow } from '../../../store/runs'
import { plan } from '../plan'
import { renderText } from '../templates'
import type { LogEvent } from '../transitions'
import type { Graph, GraphNode } from '../types'
import { startEvent } from './log'
import { varsOf } from './vars'

/** Nodes the engine holds instead of executing: a wait (a durable timer), a human_input (a person's data). */
export const HELD = new Set(['wait', 'human_input'])

/**
 * What follows a transition in the same write: nodes on branches not taken are skipped, and the
 * nodes now ready start (a `wait` node starts waiting: it holds no worker, only its `until`; a
 * `human_input` node starts waiting for its data, its prompt rendered now).
 */
export function followOn(graph: Graph, run: RunRow, progress: Record<string, NodeProgress>, now: number): { events: RunEvent[]; log: LogEvent[]; started: string[] } {
  const { ready, skip } = plan(graph, progress)
  const events: RunEvent[] = skip.map((node) => ({ type: 'node.skipped' as const, node }))
  const log: LogEvent[] = []
  const at = new Date(now).toISOString()
  for (const id of ready) {
    const node = graph.nodes.find((n) => n.id === id)!
    events.push({ type: 'node.started', node: id, at })
    if (node.type === 'wait') events.push({ type: 'node.waiting', node: id, until: new Date(now + Number(node.config.seconds) * 1000).toISOString() })
    if (node.type === 'human_input') events.push(askInput(graph, run, progress, node, now))
    log.push(startEvent(node, at, 1))
  }
  return { events, log, started: ready }
}

function askInput(graph: Graph, run: RunRow, progress: Record<string, NodeProgress>, node: GraphNode, now: number): RunEvent {
  let prompt: string
  try {
    prompt = renderText(node.config.prompt as string, varsOf(graph, run.inputs, progress))
  } catch (err) {
    prompt = `${node.config.prompt as string} (not rendered: ${(err as Error).message})`
  }
  const seconds = node.config.timeout_seconds as number | undefined
  return {
    type: 'node.waiting',
    node: node.id,
    input: { prompt, schema: (node.config.schema as Record<string, unknown> | undefined) ?? null },
    ...(seconds !== undefined ? { until: new Date(now + seconds * 1000).toISOString() } : {}),
  }
}
