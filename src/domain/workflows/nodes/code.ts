import { NodeError, type Executor } from '../types'
import { abortedError, invalidConfig } from './common'
import { codePool } from './code-pool'

/**
 * The code node: `source` defines `function main(vars)`, called with `{ inputs, nodes }` and returning
 * an object, the node's output. Sandboxed in QuickJS (code-sandbox.ts) in a worker thread
 * (code-pool.ts) under these limits.
 */
export const CODE_LIMITS = {
  defaultTimeoutMs: 1_000,
  maxTimeoutMs: 10_000,
  memoryBytes: 32 * 1024 * 1024,
  /**
   * QuickJS' own count; about 1 500 frames of a small recursive function. Larger values let some
   * recursion overflow the worker thread's real stack first (a worker's stack is smaller than the main
   * thread's, and Bun offers no setting for it), which costs a worker restart (still `code_memory`).
   */
  stackBytes: 256 * 1024,
  /** The output is stored in the run and sent in its events. */
  outputBytes: 1024 * 1024,
}

const CODES = { error: 'code_error', timeout: 'code_timeout', memory: 'code_memory', internal: 'internal' } as const

export const code: Executor = async (node, ctx) => {
  const { source, timeout_ms } = node.config
  if (typeof source !== 'string') throw invalidConfig('config.source must be JavaScript defining function main(vars)')
  const timeoutMs = timeout_ms ?? CODE_LIMITS.defaultTimeoutMs
  if (typeof timeoutMs !== 'number' || !Number.isInteger(timeoutMs) || timeoutMs < 1 || timeoutMs > CODE_LIMITS.maxTimeoutMs) {
    throw invalidConfig(`config.timeout_ms must be an integer from 1 to ${CODE_LIMITS.maxTimeoutMs}`)
  }
  const vars = JSON.stringify({ inputs: ctx.vars.inputs, nodes: ctx.vars.nodes })
  const result = await codePool().run(
    { source, vars, timeoutMs, memoryBytes: CODE_LIMITS.memoryBytes, stackBytes: CODE_LIMITS.stackBytes, outputBytes: CODE_LIMITS.outputBytes },
    ctx.signal,
  )
  if (result.ok) return { output: JSON.parse(result.json) as Record<string, unknown> }
  if (result.kind === 'aborted' || ctx.signal.aborted) throw abortedError()
  throw new NodeError(CODES[result.kind], result.message)
}
