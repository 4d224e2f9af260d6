import { RunNotRunning } from '../transitions'
import type { GraphNode, NodeError } from '../types'
import { endEvent } from './log'
import { settleFailure } from './on-error'
import type { Drive } from './types'

/** Failures that another attempt cannot change: the node's own configuration, its inputs, the engine's limits. */
const FINAL_CODES = new Set(['invalid_config', 'invalid_input', 'template_error', 'expression_error', 'max_depth_exceeded', 'too_many_items', 'input_timeout', 'ssrf_refused', 'budget_exceeded', 'model_not_found', 'agent_not_found'])
const retryable = (code: string) => !FINAL_CODES.has(code)

/**
 * An attempt failed with `e` (docs/workflows.md, "Errors and retries"): by the node's retry policy
 * another attempt follows its back-off (doubling from backoff_ms), its state in the snapshot
 * (`retrying` until then, so a worker that takes the run over resumes the back-off); after the last
 * attempt, or a failure no attempt can change, the node's on_error decides.
 */
export async function failedAttempt(d: Drive, node: GraphNode, e: NodeError, durationMs: number, attempt: number): Promise<void> {
  const policy = node.retry
  if (policy && attempt < policy.max_attempts && retryable(e.code)) {
    const until = Date.now() + policy.backoff_ms * 2 ** (attempt - 1)
    await d.transit(() => ({
      events: [{ type: 'node.retrying', node: node.id, attempt: attempt + 1, until: new Date(until).toISOString(), code: e.code, message: e.message }],
      log: [endEvent(node, durationMs, { error: { code: e.code, message: e.message } }, attempt)],
      usage: e.usage,
    }))
    d.retry(node.id, attempt + 1, until)
    return
  }
  await settleFailure(d.transit, node, e, durationMs, attempt, () => true)
}

/** A back-off's pause, cut short (RunNotRunning) when the run's work is aborted. */
export function abortableSleep(ms: number, signal: AbortSignal): Promise<void> {
  if (ms <= 0) return Promise.resolve()
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => {
      signal.removeEventListener('abort', stop)
      resolve()
    }, ms)
    const stop = () => {
      clearTimeout(t)
      reject(new RunNotRunning('aborted'))
    }
    if (signal.aborted) return stop()
    signal.addEventListener('abort', stop, { once: true })
  })
}
