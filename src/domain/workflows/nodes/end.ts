import { renderDeep } from '../templates'
import type { Executor } from '../types'
import { invalidConfig } from './common'

/** The run's `outputs`: each value rendered, a lone placeholder keeping its type (docs/workflows.md, "end"). */
export const end: Executor = async (node, ctx) => {
  const outputs = node.config.outputs ?? {}
  if (typeof outputs !== 'object' || outputs === null || Array.isArray(outputs)) throw invalidConfig('config.outputs must be an object of templates')
  return { output: renderDeep(outputs, ctx.vars) }
}
