import type { Deps } from '../../../deps'
import { failSpan, tracingOn, withSpan } from '../../../lib/tracing'
import type { RunRow } from '../../../store/runs'
import { agentPort } from '../../agents/node-port'
import { searchBases } from '../../knowledge/search'
import { executors } from '../nodes'
import { RunNotRunning } from '../transitions'
import { NodeError, type GraphNode, type NodeContext, type NodeResult, type Variables } from '../types'
import { deltaBatcher } from './deltas'
import { endEvent } from './log'
import { failedAttempt } from './retries'
import type { Drive } from './types'
import { varsOf } from './vars'

/**
 * One attempt of `node` (started, its node.started persisted): executed with the run's outputs so
 * far, then its end written: node.completed, or what a failure leads to (another attempt, or the
 * node's on_error). A run stopped under it throws RunNotRunning and writes nothing.
 */
export async function runAttempt(deps: Deps, d: Drive, node: GraphNode): Promise<void> {
  const run = d.run
  const started = Date.now()
  const attempt = run.snapshot.context.progress[node.id]?.attempt ?? 1
  const outcome = await execute(deps, d, run, node, attempt)
  if (outcome === null) throw new RunNotRunning('aborted')
  const durationMs = Date.now() - started
  if (outcome instanceof NodeError) return failedAttempt(d, node, outcome, durationMs, attempt)
  await d.transit(() => ({
    events: [{ type: 'node.completed', node: node.id, output: outcome.output, handle: outcome.handle, durationMs, end: node.type === 'end' }],
    log: [endEvent(node, durationMs, outcome.output, attempt)],
    usage: outcome.usage,
  }))
}

/**
 * The node's executor, in a span of its own (a child of the run's) and within its time limit:
 * its result, the NodeError it failed with, or null when the run's work was aborted (a cancel, a
 * lost lease), which is no failure of the node's span.
 */
async function execute(deps: Deps, d: Drive, run: RunRow, node: GraphNode, attempt: number): Promise<NodeResult | NodeError | null> {
  const vars = varsOf(d.graph, run.inputs, run.snapshot.context.progress)
  const deltas = deltaBatcher(d, node)
  const limit = timeLimit(node, d.ac.signal)
  const attributes = () => ({ run_id: run.id, node_id: node.id, 'node.type': node.type, 'node.attempt': attempt, workspace_id: run.workspace_id })
  try {
    return await withSpan(`workflow.node ${node.type}`, attributes, async (span) => {
      try {
        const work = executors[node.type](node, nodeContext(deps, d, run, vars, limit.signal, deltas.add))
        const result = await (limit.timedOut ? Promise.race([work, limit.timedOut]) : work)
        await deltas.flush()
        return result
      } catch (err) {
        if (d.ac.signal.aborted) {
          span.setAttribute('node.outcome', 'aborted')
          return null
        }
        const timeout = limit.signal.reason instanceof NodeError ? limit.signal.reason : null
        const e = timeout ?? (err instanceof NodeError ? err : new NodeError('internal', (err as Error).message))
        if (tracingOn) failSpan(span, e)
        return e
      }
    }, { parent: d.ctx })
  } finally {
    limit.clear()
  }
}

/** What an executor may use, for a node of `run`: its workspace's models, knowledge bases, agents and child runs. */
function nodeContext(deps: Deps, d: Drive, run: RunRow, vars: Variables, signal: AbortSignal, delta: (text: string) => void): NodeContext {
  return {
    vars,
    signal,
    config: deps.config,
    gateway: deps.models,
    call: { workspaceId: run.workspace_id, requestId: run.request_id ?? run.id },
    knowledge: { search: (ids, input, s) => searchBases(deps, run.workspace_id, ids, input, { workspaceId: run.workspace_id, requestId: run.request_id ?? run.id }, s) },
    children: d.children,
    agents: agentPort(deps, run),
    delta,
  }
}

/**
 * An attempt's own time limit (timeout_ms) aborts what it does, as a cancel would, and fails it
 * with node_timeout: `signal` aborts on either, `timedOut` rejects at the limit.
 */
function timeLimit(node: GraphNode, runSignal: AbortSignal): { signal: AbortSignal; timedOut: Promise<never> | null; clear(): void } {
  const ac = new AbortController()
  const abort = () => ac.abort(runSignal.reason)
  runSignal.addEventListener('abort', abort, { once: true })
  let timer: ReturnType<typeof setTimeout> | undefined
  const timedOut = node.timeout_ms === undefined ? null : new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const err = new NodeError('node_timeout', `no result within timeout_ms (${node.timeout_ms} ms)`)
      ac.abort(err)
      reject(err)
    }, node.timeout_ms)
  })
  return {
    signal: ac.signal,
    timedOut,
    clear() {
      clearTimeout(timer)
      runSignal.removeEventListener('abort', abort)
    },
  }
}
