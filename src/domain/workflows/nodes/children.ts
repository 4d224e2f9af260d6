import { addUsage, ZERO_USAGE } from '../../../lib/usage'
import { DEFAULT_ITERATION_CONCURRENCY } from '../configs'
import { render } from '../templates'
import { NodeError, type ChildEnd, type ChildPort, type Executor, type GraphNode, type NodeContext, type NodeUsage, type Variables } from '../types'
import { invalidConfig } from './common'

function port(ctx: NodeContext): ChildPort {
  if (!ctx.children) throw new NodeError('internal', 'this node starts runs of another workflow and needs a run to belong to')
  return ctx.children
}

function inputsOf(node: GraphNode, vars: Variables): Record<string, unknown> {
  const out: Record<string, unknown> = {}
  for (const [name, template] of Object.entries((node.config.inputs ?? {}) as Record<string, string>)) out[name] = render(template, vars)
  return out
}

const usageOf = (ends: (ChildEnd | null)[]): NodeUsage => ends.reduce<NodeUsage>((u, e) => (e ? addUsage(u, e.usage) : u), { ...ZERO_USAGE })

/** A child that did not complete, as the error of the node that waited for it: its own code, so a cause deep down stays visible. */
function childFailure(end: ChildEnd, prefix: string, usage: NodeUsage): NodeError {
  const why = end.status === 'cancelled' ? 'was cancelled' : `failed: ${end.error?.message ?? 'no error recorded'}`
  const which = end.run_id ? `${prefix} (run ${end.run_id})` : prefix
  return new NodeError(end.status === 'cancelled' ? 'child_cancelled' : (end.error?.code ?? 'child_failed'), `${which} ${why}`, usage)
}

/** sub_workflow: one run of another workflow, its outputs the node's (docs/workflows.md, "Sub-workflows and iteration"). */
export const subWorkflow: Executor = async (node, ctx) => {
  const workflowId = node.config.workflow_id
  if (typeof workflowId !== 'string') throw invalidConfig('workflow_id: must be a workflow id')
  const [end] = await port(ctx).run(node, workflowId, [inputsOf(node, ctx.vars)], { concurrency: 1, stopOnFailure: true }, ctx.signal)
  const usage = usageOf([end ?? null])
  if (!end || end.status !== 'completed') throw childFailure(end!, `the sub-workflow ${workflowId}`, usage)
  return { output: end.outputs, usage }
}

/**
 * iteration: a run of another workflow per item of an array, `concurrency` at once, results in item
 * order. `on_item_error: "skip"` leaves a failed item's result null and lists its index in `failed`;
 * "fail" (the default) fails the node at the first failed item and cancels the items still running.
 */
export const iteration: Executor = async (node, ctx) => {
  const { workflow_id: workflowId, items: template, item_input: itemInput } = node.config
  if (typeof workflowId !== 'string' || typeof template !== 'string' || typeof itemInput !== 'string') throw invalidConfig('workflow_id, items and item_input are required')
  const items = render(template, ctx.vars)
  if (!Array.isArray(items)) throw new NodeError('invalid_input', `items: must give an array, gave ${items === null ? 'null' : typeof items}`)
  const max = ctx.config.iterationMaxItems
  if (items.length > max) throw new NodeError('too_many_items', `items: ${items.length} items; an iteration runs over at most ${max} (ITERATION_MAX_ITEMS)`)
  const skip = node.config.on_item_error === 'skip'
  const base = inputsOf(node, ctx.vars)
  const ends = await port(ctx).run(
    node,
    workflowId,
    items.map((item) => ({ ...base, [itemInput]: item })),
    { concurrency: (node.config.concurrency as number | undefined) ?? DEFAULT_ITERATION_CONCURRENCY, stopOnFailure: !skip },
    ctx.signal,
  )
  const usage = usageOf(ends)
  const failed: number[] = []
  ends.forEach((end, i) => {
    if (end?.status !== 'completed') failed.push(i)
  })
  if (!skip && failed.length > 0) {
    const first = ends.find((e) => e && e.status !== 'completed')
    throw first ? childFailure(first, `item ${ends.indexOf(first)}`, usage) : new NodeError('internal', 'an item ended without a run')
  }
  return { output: { results: ends.map((e) => (e?.status === 'completed' ? e.outputs : null)), failed }, usage }
}
