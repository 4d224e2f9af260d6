import { AppError } from '../../../lib/errors'
import { NodeError } from '../types'

/**
 * What the executors share. Configs were checked when the workflow was saved (configs.ts), so these
 * guards only turn a graph that slipped past that into a clear node failure instead of a TypeError.
 */
export function invalidConfig(message: string): NodeError {
  return new NodeError('invalid_config', message)
}

/**
 * The error an executor throws once its signal is aborted (a cancel or a lost lease). The engine checks
 * the signal first and does not record it as the node's failure; the code keeps it recognisable anywhere else.
 */
export function abortedError(): NodeError {
  return new NodeError('aborted', 'the node was aborted (the run was cancelled or its worker lost the lease)')
}

export function throwIfAborted(signal: AbortSignal): void {
  if (signal.aborted) throw abortedError()
}

/** The gateway's AppErrors as the node error codes of a run's `error` (docs/workflows.md, "Runs"). */
export function fromGatewayError(err: unknown, signal: AbortSignal): unknown {
  if (signal.aborted) return abortedError()
  if (!(err instanceof AppError)) return err
  switch (err.code) {
    case 'not_found':
      return new NodeError('model_not_found', err.message)
    case 'budget_exceeded':
      return new NodeError('budget_exceeded', err.message)
    case 'upstream_timeout':
      return new NodeError('upstream_timeout', err.message)
    case 'upstream_error':
      return new NodeError('upstream_error', err.message)
    // A model of another type, or a request the provider refused (400): the node's configuration.
    case 'validation_error':
      return new NodeError('invalid_config', err.message)
    default:
      return new NodeError('upstream_error', err.message)
  }
}
