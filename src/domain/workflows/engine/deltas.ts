import { RunNotRunning } from '../transitions'
import type { GraphNode } from '../types'
import type { Drive } from './types'

/** LLM deltas are written to the run's log in pieces at most this old, not one row per token. */
const DELTA_FLUSH_MS = 50

/**
 * The `message` events of a node's attempt (an LLM's or an agent's tokens): gathered and appended
 * to the run's log as one event every DELTA_FLUSH_MS, and what is left when the attempt ends.
 */
export function deltaBatcher(d: Drive, node: GraphNode): { add(text: string): void; flush(): Promise<void> } {
  let pending = ''
  let flushAt = 0
  const flush = async () => {
    if (!pending) return
    const delta = pending
    pending = ''
    await d.transit(() => ({ events: [], log: [{ type: 'message', data: { node: node.name ?? node.id, node_id: node.id, delta } }], logOnly: true })).catch((err) => {
      // The run ended under the node (a cancel whose pub/sub message was lost, a take-over): stop it now.
      if (err instanceof RunNotRunning) d.ac.abort(err)
    })
  }
  return {
    add(text) {
      pending += text
      if (Date.now() - flushAt >= DELTA_FLUSH_MS) {
        flushAt = Date.now()
        void flush()
      }
    },
    flush,
  }
}
