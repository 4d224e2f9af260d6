import type { NodeError, GraphNode } from '../types'
import { ERROR_HANDLE } from '../types'
import { endEvent } from './log'
import type { Transit } from './types'

/**
 * A node's last attempt failed: by its on_error, the run fails, goes on with the error as the
 * output, or takes the error edges. `still`: whether the node is still where the failure finds it
 * (a wait timing out may have been answered meanwhile); nothing is written otherwise.
 */
export function settleFailure(transit: Transit, node: GraphNode, e: NodeError, durationMs: number, attempt: number, still: () => boolean): Promise<void> {
  const error = { code: e.code, message: e.message }
  const onError = node.on_error ?? 'fail'
  if (onError === 'fail') {
    return transit(() => (still() ? {
      events: [{ type: 'node.failed', node: node.id, code: e.code, message: e.message, durationMs }],
      log: [endEvent(node, durationMs, { error }, attempt)],
      usage: e.usage,
    } : { events: [], log: [] }))
  }
  const output = { error }
  return transit(() => (!still() ? { events: [], log: [] } : {
    events: [{ type: 'node.completed', node: node.id, output, handle: onError === 'branch' ? ERROR_HANDLE : undefined, durationMs, end: false }],
    log: [endEvent(node, durationMs, output, attempt)],
    usage: e.usage,
  }))
}
