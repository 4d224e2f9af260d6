import type { Executor } from '../types'

/** The engine checked the inputs against the start node's declarations; they are its output. */
export const start: Executor = async (_node, ctx) => ({ output: ctx.vars.inputs })
