import { AppError } from '../../lib/errors'
import { checkConfig, hasType, humanPath, isObject, Issues, NODE_SPECS, references, typeOf, type InputSpec, type Path } from './configs'
import { ERROR_HANDLE, NODE_TYPES, ON_ERROR, type Graph, type GraphEdge, type GraphNode, type NodeType, type OnError } from './types'
import type { StoredGraph, StoredNode } from '../../store/workflows'

export type { InputSpec } from './configs'

export const MAX_NODES = 500
export const MAX_EDGES = 2000
const NODE_ID = /^[A-Za-z0-9_-]{1,64}$/

const q = (s: string) => JSON.stringify(s.length > 64 ? `${s.slice(0, 64)}…` : s)
const nodeLabel = (i: number, id: unknown) => `graph.nodes[${i}]${typeof id === 'string' ? ` (id ${q(id)})` : ''}`
const edgeLabel = (j: number, e: { source?: unknown; target?: unknown }) =>
  `graph.edges[${j}]${typeof e.source === 'string' && typeof e.target === 'string' ? ` (${q(e.source)} → ${q(e.target)})` : ''}`

/**
 * Checks a graph at save time (docs/workflows.md, "Checks at save time") and returns it with only its known
 * fields. Every problem is a validation_error whose message names the node
 * (`graph.nodes[3] (id "cond1"): ...`) and whose param is its path (`graph.nodes.3.config.cases.0.when`); up
 * to 20 are listed in details.
 * Checks go in phases (shapes, edges, cycles, reachability) so a later phase sees a well-formed graph.
 */
export function validateGraph(graph: unknown): Graph {
  const issues = new Issues()
  if (!isObject(graph)) throw new AppError('validation_error', 'graph: must be an object { nodes, edges }', { param: 'graph', details: [{ path: 'graph', message: 'graph: must be an object { nodes, edges }' }] })
  for (const k of Object.keys(graph)) if (k !== 'nodes' && k !== 'edges') issues.add(`graph.${k}`, `graph.${k}: unknown field; a graph has nodes and edges`)
  const { nodes: rawNodes, edges: rawEdges } = graph
  if (!Array.isArray(rawNodes)) issues.add('graph.nodes', `graph.nodes: ${rawNodes === undefined ? 'is required' : `must be an array, not ${typeOf(rawNodes)}`}`)
  else if (rawNodes.length > MAX_NODES) issues.add('graph.nodes', `graph.nodes: has ${rawNodes.length} nodes; at most ${MAX_NODES}`)
  if (!Array.isArray(rawEdges)) issues.add('graph.edges', `graph.edges: ${rawEdges === undefined ? 'is required' : `must be an array, not ${typeOf(rawEdges)}`}`)
  else if (rawEdges.length > MAX_EDGES) issues.add('graph.edges', `graph.edges: has ${rawEdges.length} edges; at most ${MAX_EDGES}`)
  issues.throwIfAny()
  const nodes = checkNodes(rawNodes as unknown[], issues)
  const edges = checkEdges(rawEdges as unknown[], nodes, issues)
  const normalized: Graph = { nodes, edges }
  checkCycles(normalized, issues)
  checkReach(normalized, issues)
  checkReferences(normalized, issues)
  return normalized
}

function checkNodes(raw: unknown[], issues: Issues): GraphNode[] {
  const out: GraphNode[] = []
  const ids = new Map<string, number>()
  raw.forEach((node, i) => {
    if (!isObject(node)) return issues.add(`graph.nodes.${i}`, `graph.nodes[${i}]: must be an object { id, type, name?, config }, not ${typeOf(node)}`)
    const label = nodeLabel(i, node.id)
    const at = (field: string, message: string) => issues.add(`graph.nodes.${i}.${field}`, `${label}: ${field}: ${message}`)
    for (const k of Object.keys(node)) if (!NODE_FIELDS.includes(k)) at(k, `unknown field; a node has ${NODE_FIELDS.join(', ')}`)
    const { id, type, name, config } = node
    if (typeof id !== 'string' || !NODE_ID.test(id)) at('id', 'must be 1-64 characters of A-Z, a-z, 0-9, _ and -')
    else if (ids.has(id)) at('id', `is already the id of graph.nodes[${ids.get(id)}]`)
    else ids.set(id, i)
    if (name !== undefined && (typeof name !== 'string' || name.length > 200)) at('name', 'must be a string of at most 200 characters')
    const known = (NODE_TYPES as readonly unknown[]).includes(type)
    if (!known) at('type', `${typeof type === 'string' ? `unknown node type ${q(type)}` : 'is required'}; known types: ${NODE_TYPES.join(', ')}`)
    if (!isObject(config)) at('config', config === undefined ? 'is required (an object, {} for none)' : `must be an object, not ${typeOf(config)}`)
    else if (known) {
      checkConfig(type as NodeType, config, (path: Path, message: string) =>
        issues.add(`graph.nodes.${i}.config.${path.join('.')}`, `${label}: ${humanPath(path)}: ${message}`))
    }
    const handling = checkHandling(node, type, at)
    out.push({ id: id as string, type: type as NodeType, ...(name !== undefined ? { name: name as string } : {}), config: config as Record<string, unknown>, ...handling })
  })
  issues.throwIfAny()
  const starts = out.flatMap((n, i) => (n.type === 'start' ? [i] : []))
  if (starts.length === 0) issues.add('graph.nodes', 'graph.nodes: a graph needs exactly one start node; there is none')
  for (const i of starts.slice(1)) {
    issues.add(`graph.nodes.${i}.type`, `${nodeLabel(i, out[i]!.id)}: type: a graph has exactly one start node and ${q(out[starts[0]!]!.id)} is already one`)
  }
  if (!out.some((n) => n.type === 'end')) issues.add('graph.nodes', 'graph.nodes: a graph needs at least one end node; there is none')
  issues.throwIfAny()
  return out
}

const NODE_FIELDS = ['id', 'type', 'name', 'config', 'retry', 'timeout_ms', 'on_error']
/** Nodes that wait by design: a time limit on them is their own (`seconds`, `timeout_seconds`). */
const UNTIMED: readonly unknown[] = ['wait', 'human_input']
export const MAX_ATTEMPTS = 5
export const MAX_BACKOFF_MS = 60_000
export const MAX_NODE_TIMEOUT_MS = 86_400_000

/** A node's error handling (docs/workflows.md, "Errors and retries"): retry, timeout_ms, on_error. */
function checkHandling(node: Record<string, unknown>, type: unknown, at: (field: string, message: string) => void): Pick<GraphNode, 'retry' | 'timeout_ms' | 'on_error'> {
  const out: Pick<GraphNode, 'retry' | 'timeout_ms' | 'on_error'> = {}
  const { retry, timeout_ms: timeout, on_error: onError } = node
  const int = (v: unknown, min: number, max: number) => typeof v === 'number' && Number.isInteger(v) && v >= min && v <= max
  if (retry !== undefined) {
    if (!isObject(retry)) at('retry', `must be an object { max_attempts, backoff_ms }, not ${typeOf(retry)}`)
    else {
      let ok = true
      for (const k of Object.keys(retry)) if (k !== 'max_attempts' && k !== 'backoff_ms') (ok = false), at(`retry.${k}`, 'unknown field; retry takes max_attempts and backoff_ms')
      if (!int(retry.max_attempts, 1, MAX_ATTEMPTS)) (ok = false), at('retry.max_attempts', `must be an integer from 1 to ${MAX_ATTEMPTS}`)
      if (retry.backoff_ms !== undefined && !int(retry.backoff_ms, 0, MAX_BACKOFF_MS)) (ok = false), at('retry.backoff_ms', `must be an integer from 0 to ${MAX_BACKOFF_MS}`)
      if (ok) out.retry = { max_attempts: retry.max_attempts as number, backoff_ms: (retry.backoff_ms as number | undefined) ?? 0 }
    }
  }
  if (timeout !== undefined) {
    if (UNTIMED.includes(type)) at('timeout_ms', `a ${type as string} node waits by design; its config sets how long (${type === 'wait' ? 'seconds' : 'timeout_seconds'})`)
    else if (!int(timeout, 1, MAX_NODE_TIMEOUT_MS)) at('timeout_ms', `must be an integer from 1 to ${MAX_NODE_TIMEOUT_MS}`)
    else out.timeout_ms = timeout as number
  }
  if (onError !== undefined) {
    if (!(ON_ERROR as readonly unknown[]).includes(onError)) at('on_error', `must be one of ${ON_ERROR.join(', ')}`)
    else out.on_error = onError as OnError
  }
  return out
}

function checkEdges(raw: unknown[], nodes: GraphNode[], issues: Issues): GraphEdge[] {
  const byId = new Map(nodes.map((n) => [n.id, n]))
  const out: GraphEdge[] = []
  const seen = new Map<string, number>()
  raw.forEach((edge, j) => {
    if (!isObject(edge)) return issues.add(`graph.edges.${j}`, `graph.edges[${j}]: must be an object { source, target, source_handle? }, not ${typeOf(edge)}`)
    const label = edgeLabel(j, edge)
    const at = (field: string, message: string) => issues.add(`graph.edges.${j}.${field}`, `${label}: ${field}: ${message}`)
    for (const k of Object.keys(edge)) if (!['source', 'target', 'source_handle'].includes(k)) at(k, 'unknown field; an edge has source, target and source_handle')
    const { source, target, source_handle: handle } = edge
    const from = typeof source === 'string' ? byId.get(source) : undefined
    const to = typeof target === 'string' ? byId.get(target) : undefined
    if (!from) at('source', typeof source === 'string' ? `no node has the id ${q(source)}` : 'must be a node id')
    if (!to) at('target', typeof target === 'string' ? `no node has the id ${q(target)}` : 'must be a node id')
    if (!from || !to) return
    if (to.type === 'start') return at('target', `no edge may enter the start node ${q(to.id)}`)
    if (from.type === 'end') return at('source', `no edge may leave the end node ${q(from.id)}`)
    if (from.id === to.id) return at('target', `an edge from node ${q(from.id)} to itself is a cycle`)
    if (handle === ERROR_HANDLE && from.on_error === 'branch') {
      // The edge a failing node follows (on_error branch).
    } else if (handle === ERROR_HANDLE && !(from.type === 'condition' && (from.config.cases as { id: string }[]).some((c) => c.id === ERROR_HANDLE))) {
      return at('source_handle', `"error" edges are followed when a node fails with on_error "branch"; ${q(from.id)} has on_error ${q(from.on_error ?? 'fail')}`)
    } else if (from.type === 'condition') {
      const ids = (from.config.cases as { id: string }[]).map((c) => c.id)
      if (handle === undefined) return at('source_handle', `an edge leaving condition node ${q(from.id)} names the branch it takes: one of ${[...ids, 'default'].join(', ')}`)
      if (typeof handle !== 'string' || (handle !== 'default' && !ids.includes(handle))) {
        return at('source_handle', `condition node ${q(from.id)} has no case ${typeof handle === 'string' ? q(handle) : String(handle)}; one of ${[...ids, 'default'].join(', ')}`)
      }
    } else if (handle !== undefined) return at('source_handle', `only edges leaving a condition node take a source_handle (or "error", from a node with on_error "branch"); ${q(from.id)} is a ${from.type} node`)
    const key = JSON.stringify([from.id, to.id, handle ?? null])
    if (seen.has(key)) return issues.add(`graph.edges.${j}`, `${label}: repeats graph.edges[${seen.get(key)}]`)
    seen.set(key, j)
    out.push({ source: from.id, target: to.id, ...(handle !== undefined ? { source_handle: handle as string } : {}) })
  })
  nodes.forEach((n, i) => {
    if (n.on_error === 'branch' && n.type === 'condition' && (n.config.cases as { id: string }[]).some((c) => c.id === ERROR_HANDLE)) {
      issues.add(`graph.nodes.${i}.on_error`, `${nodeLabel(i, n.id)}: on_error: "branch" leaves by the handle "error", which is also the id of one of its cases; rename the case`)
    }
    if (n.on_error === 'branch' && !out.some((e) => e.source === n.id && e.source_handle === ERROR_HANDLE)) {
      issues.add(`graph.nodes.${i}.on_error`, `${nodeLabel(i, n.id)}: on_error: "branch" follows the node's edges with source_handle "error", and none leaves it; add one`)
    }
  })
  issues.throwIfAny()
  return out
}

/** Iterative depth-first search; the first edge back into the current path is reported with its cycle. */
function checkCycles(graph: Graph, issues: Issues): void {
  const out = new Map<string, number[]>(graph.nodes.map((n) => [n.id, []]))
  graph.edges.forEach((e, j) => out.get(e.source)!.push(j))
  const state = new Map<string, 1 | 2>() // 1: on the current path, 2: done
  for (const root of graph.nodes) {
    if (state.has(root.id)) continue
    const stack: { id: string; next: number }[] = [{ id: root.id, next: 0 }]
    state.set(root.id, 1)
    while (stack.length > 0) {
      const top = stack[stack.length - 1]!
      const j = out.get(top.id)![top.next++]
      if (j === undefined) {
        state.set(top.id, 2)
        stack.pop()
        continue
      }
      const target = graph.edges[j]!.target
      const s = state.get(target)
      if (s === 1) {
        const path = stack.slice(stack.findIndex((f) => f.id === target)).map((f) => q(f.id))
        issues.add(`graph.edges.${j}`, `${edgeLabel(j, graph.edges[j]!)}: closes a cycle ${[...path, q(target)].join(' → ')}; a workflow graph has no cycles`)
        return issues.throwIfAny()
      }
      if (s === undefined) {
        state.set(target, 1)
        stack.push({ id: target, next: 0 })
      }
    }
  }
}

function reachable(from: string[], step: Map<string, string[]>): Set<string> {
  const seen = new Set(from)
  const stack = [...from]
  for (let id = stack.pop(); id !== undefined; id = stack.pop()) {
    for (const next of step.get(id) ?? []) if (!seen.has(next)) seen.add(next), stack.push(next)
  }
  return seen
}

function checkReach(graph: Graph, issues: Issues): void {
  const { forward, backward } = index(graph)
  const start = startNode(graph)
  const fromStart = reachable([start.id], forward)
  const toEnd = reachable(graph.nodes.filter((n) => n.type === 'end').map((n) => n.id), backward)
  graph.nodes.forEach((n, i) => {
    if (!fromStart.has(n.id)) issues.add(`graph.nodes.${i}`, `${nodeLabel(i, n.id)}: is not reachable from the start node ${q(start.id)}; connect it or remove it`)
    else if (!toEnd.has(n.id)) issues.add(`graph.nodes.${i}`, `${nodeLabel(i, n.id)}: no end node is reachable from it; every path must lead to an end node`)
  })
  graph.nodes.forEach((n, i) => {
    if (n.type !== 'condition') return
    const taken = new Set(outgoing(graph, n.id).map((e) => e.source_handle))
    const cases = n.config.cases as { id: string }[]
    cases.forEach((c, k) => {
      if (!taken.has(c.id)) issues.add(`graph.nodes.${i}.config.cases.${k}.id`, `${nodeLabel(i, n.id)}: cases[${k}].id: no edge leaves by case ${q(c.id)}; add one with source_handle ${q(c.id)}`)
    })
    if (!taken.has('default')) issues.add(`graph.nodes.${i}`, `${nodeLabel(i, n.id)}: no edge leaves by the default branch (taken when no case matches); add one with source_handle "default"`)
  })
  issues.throwIfAny()
}

/** Template references must name a declared input, or a node upstream (its output exists by then). */
function checkReferences(graph: Graph, issues: Issues): void {
  const declared = new Set(inputSpec(graph).map((s) => s.name))
  const { backward } = index(graph)
  graph.nodes.forEach((n, i) => {
    let upstream: Set<string> | null = null
    for (const [path, text] of NODE_SPECS[n.type].templates(n.config)) {
      for (const ref of references(text)) {
        const at = (message: string) => issues.add(`graph.nodes.${i}.config.${path.join('.')}`, `${nodeLabel(i, n.id)}: ${humanPath(path)}: ${message}`)
        if (ref.kind === 'inputs') {
          if (!declared.has(ref.name)) at(`{{inputs.${ref.name}}}: the start node declares no input ${q(ref.name)}`)
          continue
        }
        upstream ??= reachable([n.id], backward)
        if (ref.name === n.id || !upstream.has(ref.name)) {
          at(`{{nodes.${ref.name}...}}: ${graph.nodes.some((m) => m.id === ref.name) ? `node ${q(ref.name)} does not run before this node` : `no node has the id ${q(ref.name)}`}`)
        }
      }
    }
  })
  issues.throwIfAny()
}

interface Index {
  forward: Map<string, string[]>
  backward: Map<string, string[]>
  out: Map<string, GraphEdge[]>
  in: Map<string, GraphEdge[]>
}

// Graphs are immutable once validated; the engine asks for the same node's edges at every step.
const indexes = new WeakMap<Graph, Index>()

function index(graph: Graph): Index {
  let ix = indexes.get(graph)
  if (ix) return ix
  ix = { forward: new Map(), backward: new Map(), out: new Map(), in: new Map() }
  for (const e of graph.edges) {
    push(ix.forward, e.source, e.target)
    push(ix.backward, e.target, e.source)
    push(ix.out, e.source, e)
    push(ix.in, e.target, e)
  }
  indexes.set(graph, ix)
  return ix
}

function push<K, V>(m: Map<K, V[]>, k: K, v: V): void {
  const list = m.get(k)
  if (list) list.push(v)
  else m.set(k, [v])
}

export function startNode<N extends StoredNode>(graph: { nodes: N[] }): N {
  const start = graph.nodes.find((n) => n.type === 'start')
  if (!start) throw new Error('graph has no start node (it was not validated)')
  return start
}

export function outgoing(graph: Graph, nodeId: string): GraphEdge[] {
  return index(graph).out.get(nodeId) ?? []
}

export function incoming(graph: Graph, nodeId: string): GraphEdge[] {
  return index(graph).in.get(nodeId) ?? []
}

/** The start node's declared inputs. */
export function inputSpec(graph: StoredGraph): InputSpec[] {
  return (startNode(graph).config.inputs as InputSpec[] | undefined) ?? []
}

/** A graph as read back from the store: it was made by `validateGraph` before it was written, so its node types are known. */
export function storedGraph(graph: StoredGraph): Graph {
  return graph as Graph
}

const invalidInput = (param: string, message: string) =>
  new AppError('validation_error', `${param}: ${message}`, { param, details: [{ path: param, message }] })

/**
 * A run's inputs against the start node's declarations: unknown, missing required and mistyped inputs
 * are refused naming the input (`inputs.<name>`); absent optional inputs take their default.
 */
export function validateInputs(graph: StoredGraph, inputs: unknown): Record<string, unknown> {
  if (inputs === undefined || inputs === null) inputs = {}
  if (!isObject(inputs)) throw invalidInput('inputs', `must be an object of input values, not ${typeOf(inputs)}`)
  const specs = inputSpec(graph)
  const byName = new Map(specs.map((s) => [s.name, s]))
  for (const name of Object.keys(inputs)) {
    if (!byName.has(name)) {
      throw invalidInput(`inputs.${name}`, `unknown input; this workflow declares ${specs.length ? specs.map((s) => s.name).join(', ') : 'no inputs'}`)
    }
  }
  const out: Record<string, unknown> = {}
  for (const spec of specs) {
    const value = Object.hasOwn(inputs, spec.name) ? inputs[spec.name] : undefined
    if (value === undefined) {
      if (spec.required) throw invalidInput(`inputs.${spec.name}`, `is required (${spec.type})`)
      if ('default' in spec) out[spec.name] = structuredClone(spec.default)
      continue
    }
    if (!hasType(value, spec.type)) throw invalidInput(`inputs.${spec.name}`, `must be ${spec.type === 'array' || spec.type === 'object' ? 'an' : 'a'} ${spec.type}, not ${typeOf(value)}`)
    out[spec.name] = value
  }
  return out
}
