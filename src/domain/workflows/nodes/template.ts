import { renderText } from '../templates'
import type { Executor } from '../types'
import { invalidConfig } from './common'

export const template: Executor = async (node, ctx) => {
  const source = node.config.template
  if (typeof source !== 'string') throw invalidConfig('config.template must be a string')
  return { output: { text: renderText(source, ctx.vars) } }
}
