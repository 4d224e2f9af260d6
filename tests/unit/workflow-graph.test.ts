import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { checkConfig, type Path } from '../../src/domain/workflows/configs'
import { incoming, inputSpec, outgoing, startNode, validateGraph, validateInputs } from '../../src/domain/workflows/graph'
import { NODE_TYPES, type Graph, type NodeType } from '../../src/domain/workflows/types'
import { AppError } from '../../src/lib/errors'

setDefaultTimeout(TEST_TIMEOUT_MS)

type G = { nodes: any[]; edges: any[] }

/** start(question) → answer (llm) → end: the base every invalid case bends. */
function base(): G {
  return {
    nodes: [
      { id: 'start', type: 'start', config: { inputs: [{ name: 'question', type: 'string', required: true }, { name: 'score', type: 'number', default: 0.5 }] } },
      { id: 'answer', type: 'llm', config: { model: 'gpt-4o-mini', messages: [{ role: 'user', content: '{{inputs.question}}' }] } },
      { id: 'end', type: 'end', config: { outputs: { answer: '{{nodes.answer.output.text}}' } } },
    ],
    edges: [{ source: 'start', target: 'answer' }, { source: 'answer', target: 'end' }],
  }
}

/** base() with node 1 replaced by `node` (id "n1" unless given). */
function withNode(node: { type: string; config: unknown; id?: string; [k: string]: unknown }): G {
  const g = base()
  g.nodes[1] = { id: 'n1', ...node }
  g.edges = [{ source: 'start', target: g.nodes[1].id }, { source: g.nodes[1].id, target: 'end' }]
  g.nodes[2].config.outputs = {}
  return g
}

/** start → cond1 → (a | b | default) → end. */
function branching(cases: unknown = [{ id: 'a', when: 'inputs.score > 0.5' }, { id: 'b', when: 'inputs.score > 0.2' }]): G {
  return {
    nodes: [
      { id: 'start', type: 'start', config: { inputs: [{ name: 'score', type: 'number', required: true }] } },
      { id: 'cond1', type: 'condition', config: { cases } },
      { id: 'x', type: 'template', config: { template: 'x' } },
      { id: 'end', type: 'end', config: { outputs: {} } },
    ],
    edges: [
      { source: 'start', target: 'cond1' },
      { source: 'cond1', target: 'x', source_handle: 'a' },
      { source: 'cond1', target: 'x', source_handle: 'b' },
      { source: 'cond1', target: 'end', source_handle: 'default' },
      { source: 'x', target: 'end' },
    ],
  }
}

function failure(fn: () => unknown): AppError {
  try {
    fn()
  } catch (err) {
    if (err instanceof AppError) return err
    throw err
  }
  throw new Error('did not fail')
}

const mutate = (g: G, f: (g: G) => void): G => (f(g), g)

// [case, graph, param, message fragment]
const invalid: [string, unknown, string, string][] = [
  // the whole graph
  ['not an object', null, 'graph', 'graph: must be an object'],
  ['an array', [], 'graph', 'must be an object'],
  ['nodes not an array', { nodes: {}, edges: [] }, 'graph.nodes', 'graph.nodes: must be an array, not an object'],
  ['edges missing', { nodes: [] }, 'graph.edges', 'graph.edges: is required'],
  ['unknown top-level field', mutate(base(), (g: any) => (g.extra = 1)), 'graph.extra', 'unknown field'],
  ['501 nodes', { nodes: Array.from({ length: 501 }, (_, i) => ({ id: `n${i}`, type: 'template', config: { template: '' } })), edges: [] }, 'graph.nodes', 'at most 500'],
  ['2001 edges', { nodes: base().nodes, edges: Array.from({ length: 2001 }, () => ({ source: 'start', target: 'end' })) }, 'graph.edges', 'at most 2000'],
  // nodes
  ['node not an object', mutate(base(), (g) => (g.nodes[1] = 'llm')), 'graph.nodes.1', 'graph.nodes[1]: must be an object'],
  ['id with a space', mutate(base(), (g) => (g.nodes[1].id = 'my node')), 'graph.nodes.1.id', 'graph.nodes[1] (id "my node"): id: must be 1-64 characters'],
  ['id of 65 characters', mutate(base(), (g) => (g.nodes[1].id = 'a'.repeat(65))), 'graph.nodes.1.id', 'id: must be 1-64'],
  ['empty id', mutate(base(), (g) => (g.nodes[1].id = '')), 'graph.nodes.1.id', 'graph.nodes[1] (id ""): id:'],
  ['missing id', mutate(base(), (g) => delete g.nodes[1].id), 'graph.nodes.1.id', 'graph.nodes[1]: id: must be'],
  ['duplicate id', mutate(base(), (g) => (g.nodes[2].id = 'answer')), 'graph.nodes.2.id', 'graph.nodes[2] (id "answer"): id: is already the id of graph.nodes[1]'],
  ['unknown type', mutate(base(), (g) => (g.nodes[1].type = 'python')), 'graph.nodes.1.type', 'graph.nodes[1] (id "answer"): type: unknown node type "python"; known types: start, llm'],
  ['missing config', mutate(base(), (g) => delete g.nodes[1].config), 'graph.nodes.1.config', '(id "answer"): config: is required'],
  ['config an array', mutate(base(), (g) => (g.nodes[1].config = [])), 'graph.nodes.1.config', 'config: must be an object, not an array'],
  ['unknown node field', mutate(base(), (g) => (g.nodes[1].position = { x: 1 })), 'graph.nodes.1.position', '(id "answer"): position: unknown field'],
  ['name too long', mutate(base(), (g) => (g.nodes[1].name = 'n'.repeat(201))), 'graph.nodes.1.name', 'at most 200'],
  ['no start', mutate(base(), (g) => { g.nodes[0].type = 'template'; g.nodes[0].config = { template: '' } }), 'graph.nodes', 'exactly one start node; there is none'],
  ['two starts', mutate(base(), (g) => { g.nodes.push({ id: 's2', type: 'start', config: {} }); g.edges.push({ source: 's2', target: 'end' }) }), 'graph.nodes.3.type', 'graph.nodes[3] (id "s2"): type: a graph has exactly one start node and "start" is already one'],
  ['no end', mutate(base(), (g) => { g.nodes[2].type = 'template'; g.nodes[2].config = { template: '' } }), 'graph.nodes', 'at least one end node'],
  // start
  ['start inputs not an array', mutate(base(), (g) => (g.nodes[0].config.inputs = {})), 'graph.nodes.0.config.inputs', '(id "start"): inputs: must be an array'],
  ['input name not an identifier', mutate(base(), (g) => (g.nodes[0].config.inputs[0].name = 'the question')), 'graph.nodes.0.config.inputs.0.name', '(id "start"): inputs[0].name: must be an identifier'],
  ['input name __proto__', mutate(base(), (g) => (g.nodes[0].config.inputs[1].name = '__proto__')), 'graph.nodes.0.config.inputs.1.name', 'must be an identifier'],
  ['duplicate input name', mutate(base(), (g) => (g.nodes[0].config.inputs[1].name = 'question')), 'graph.nodes.0.config.inputs.1.name', '"question" is already declared by inputs[0]'],
  ['unknown input type', mutate(base(), (g) => (g.nodes[0].config.inputs[0].type = 'file')), 'graph.nodes.0.config.inputs.0.type', 'must be one of string, number, boolean, object, array'],
  ['default of the wrong type', mutate(base(), (g) => (g.nodes[0].config.inputs[1].default = '0.5')), 'graph.nodes.0.config.inputs.1.default', "must be of the input's type number, not a string"],
  ['default on a required input', mutate(base(), (g) => (g.nodes[0].config.inputs[0].default = 'hi')), 'graph.nodes.0.config.inputs.0.default', 'a required input takes no default'],
  ['required not a boolean', mutate(base(), (g) => (g.nodes[0].config.inputs[0].required = 'yes')), 'graph.nodes.0.config.inputs.0.required', 'must be a boolean'],
  ['unknown input field', mutate(base(), (g) => (g.nodes[0].config.inputs[0].label = 'Q')), 'graph.nodes.0.config.inputs.0.label', 'unknown field'],
  // template
  ['template missing', withNode({ type: 'template', config: {} }), 'graph.nodes.1.config.template', 'graph.nodes[1] (id "n1"): template: is required'],
  ['template not a string', withNode({ type: 'template', config: { template: 42 } }), 'graph.nodes.1.config.template', 'template: must be a string, not a number'],
  // llm
  ['llm without model', mutate(base(), (g) => delete g.nodes[1].config.model), 'graph.nodes.1.config.model', '(id "answer"): model: is required'],
  ['llm with empty messages', mutate(base(), (g) => (g.nodes[1].config.messages = [])), 'graph.nodes.1.config.messages', 'must be a non-empty array'],
  ['llm message with a bad role', mutate(base(), (g) => (g.nodes[1].config.messages[0].role = 'tool')), 'graph.nodes.1.config.messages.0.role', 'messages[0].role: must be one of system, user, assistant'],
  ['llm message without content', mutate(base(), (g) => delete g.nodes[1].config.messages[0].content), 'graph.nodes.1.config.messages.0.content', 'messages[0].content: is required'],
  ['temperature 2.5', mutate(base(), (g) => (g.nodes[1].config.temperature = 2.5)), 'graph.nodes.1.config.temperature', 'must be a number from 0 to 2, not 2.5'],
  ['max_tokens 0', mutate(base(), (g) => (g.nodes[1].config.max_tokens = 0)), 'graph.nodes.1.config.max_tokens', 'must be an integer from 1'],
  ['max_tokens 1.5', mutate(base(), (g) => (g.nodes[1].config.max_tokens = 1.5)), 'graph.nodes.1.config.max_tokens', 'must be an integer'],
  ['llm config typo', mutate(base(), (g) => (g.nodes[1].config.temprature = 1)), 'graph.nodes.1.config.temprature', "unknown field; a llm node's config takes model, messages, temperature, max_tokens"],
  // condition
  ['condition with no cases', mutate(branching([]), () => {}), 'graph.nodes.1.config.cases', '(id "cond1"): cases: must be a non-empty array'],
  ['case id "default"', branching([{ id: 'default', when: 'true' }]), 'graph.nodes.1.config.cases.0.id', '"default" names the branch taken when no case matches'],
  ['duplicate case ids', branching([{ id: 'a', when: 'true' }, { id: 'a', when: 'false' }]), 'graph.nodes.1.config.cases.1.id', '"a" is already the id of cases[0]'],
  ['when not a string', branching([{ id: 'a', when: true }]), 'graph.nodes.1.config.cases.0.when', 'must be a non-empty JSONata expression'],
  ['when a JSONata syntax error', branching([{ id: 'a', when: 'inputs.score >' }, { id: 'b', when: 'true' }]), 'graph.nodes.1.config.cases.0.when', 'graph.nodes[1] (id "cond1"): cases[0].when: is not a valid JSONata expression: Unexpected end of expression (at character 14)'],
  // code
  ['code without main', withNode({ type: 'code', config: { source: 'function run(vars) { return {} }' } }), 'graph.nodes.1.config.source', '(id "n1"): source: must define function main(vars)'],
  ['code over 100 KB', withNode({ type: 'code', config: { source: `function main() { return {} }\n//${'x'.repeat(102_400)}` } }), 'graph.nodes.1.config.source', 'at most 102400'],
  ['code source not a string', withNode({ type: 'code', config: { source: ['main'] } }), 'graph.nodes.1.config.source', 'must be a string, not an array'],
  // http_request
  ['http method TRACE', withNode({ type: 'http_request', config: { method: 'TRACE', url: 'https://example.com' } }), 'graph.nodes.1.config.method', 'must be one of GET, POST, PUT, PATCH, DELETE, HEAD'],
  ['http url not a URL', withNode({ type: 'http_request', config: { method: 'GET', url: 'example.com/x' } }), 'graph.nodes.1.config.url', 'is not a valid absolute URL'],
  ['http url ftp', withNode({ type: 'http_request', config: { method: 'GET', url: 'ftp://example.com/x' } }), 'graph.nodes.1.config.url', 'must be an http:// or https:// URL'],
  ['http header not a string', withNode({ type: 'http_request', config: { method: 'GET', url: 'https://example.com', headers: { 'X-N': 1 } } }), 'graph.nodes.1.config.headers.X-N', 'headers.X-N: must be a string, not a number'],
  ['http timeout 60001', withNode({ type: 'http_request', config: { method: 'GET', url: 'https://example.com', timeout_ms: 60_001 } }), 'graph.nodes.1.config.timeout_ms', 'from 1 to 60000'],
  // knowledge_retrieval
  ['no knowledge bases', withNode({ type: 'knowledge_retrieval', config: { knowledge_base_ids: [], query: 'q' } }), 'graph.nodes.1.config.knowledge_base_ids', 'must be an array of 1 to 100'],
  ['knowledge base id not a string', withNode({ type: 'knowledge_retrieval', config: { knowledge_base_ids: [7], query: 'q' } }), 'graph.nodes.1.config.knowledge_base_ids.0', 'knowledge_base_ids[0]: must be a knowledge base id'],
  ['retrieval without query', withNode({ type: 'knowledge_retrieval', config: { knowledge_base_ids: ['kb_1'] } }), 'graph.nodes.1.config.query', 'query: is required'],
  ['top_k 101', withNode({ type: 'knowledge_retrieval', config: { knowledge_base_ids: ['kb_1'], query: 'q', top_k: 101 } }), 'graph.nodes.1.config.top_k', 'from 1 to 100'],
  ['filters an array', withNode({ type: 'knowledge_retrieval', config: { knowledge_base_ids: ['kb_1'], query: 'q', filters: [] } }), 'graph.nodes.1.config.filters', 'must be an object'],
  // wait
  ['wait 0 seconds', withNode({ type: 'wait', config: { seconds: 0 } }), 'graph.nodes.1.config.seconds', 'greater than 0 and at most 604800, not 0'],
  ['wait 8 days', withNode({ type: 'wait', config: { seconds: 8 * 86_400 } }), 'graph.nodes.1.config.seconds', 'at most 604800'],
  ['wait "10"', withNode({ type: 'wait', config: { seconds: '10' } }), 'graph.nodes.1.config.seconds', 'must be a number'],
  ['wait without seconds', withNode({ type: 'wait', config: {} }), 'graph.nodes.1.config.seconds', 'seconds: is required'],
  // end
  ['end without outputs', mutate(base(), (g) => (g.nodes[2].config = {})), 'graph.nodes.2.config.outputs', '(id "end"): outputs: is required'],
  ['end output not a string', mutate(base(), (g) => (g.nodes[2].config.outputs.n = 3)), 'graph.nodes.2.config.outputs.n', 'outputs.n: must be a string, not a number'],
  // edges
  ['edge not an object', mutate(base(), (g) => g.edges.push('start->end')), 'graph.edges.2', 'graph.edges[2]: must be an object'],
  ['edge from an unknown node', mutate(base(), (g) => g.edges.push({ source: 'ghost', target: 'end' })), 'graph.edges.2.source', 'graph.edges[2] ("ghost" → "end"): source: no node has the id "ghost"'],
  ['edge to an unknown node', mutate(base(), (g) => g.edges.push({ source: 'answer', target: 'ghost' })), 'graph.edges.2.target', 'no node has the id "ghost"'],
  ['edge into start', mutate(base(), (g) => g.edges.push({ source: 'answer', target: 'start' })), 'graph.edges.2.target', 'no edge may enter the start node "start"'],
  ['edge out of an end', mutate(base(), (g) => g.edges.push({ source: 'end', target: 'answer' })), 'graph.edges.2.source', 'no edge may leave the end node "end"'],
  ['edge to itself', mutate(base(), (g) => g.edges.push({ source: 'answer', target: 'answer' })), 'graph.edges.2.target', 'an edge from node "answer" to itself is a cycle'],
  ['repeated edge', mutate(base(), (g) => g.edges.push({ source: 'answer', target: 'end' })), 'graph.edges.2', 'repeats graph.edges[1]'],
  ['unknown edge field', mutate(base(), (g) => (g.edges[0].label = 'go')), 'graph.edges.0.label', 'unknown field'],
  ['source_handle off a non-condition', mutate(base(), (g) => (g.edges[1].source_handle = 'a')), 'graph.edges.1.source_handle', 'only edges leaving a condition node take a source_handle (or "error", from a node with on_error "branch"); "answer" is a llm node'],
  ['condition edge without handle', mutate(branching(), (g) => delete g.edges[1].source_handle), 'graph.edges.1.source_handle', 'an edge leaving condition node "cond1" names the branch it takes: one of a, b, default'],
  ['condition edge with an unknown handle', mutate(branching(), (g) => (g.edges[1].source_handle = 'c')), 'graph.edges.1.source_handle', 'condition node "cond1" has no case "c"; one of a, b, default'],
  // topology
  ['a cycle', mutate(base(), (g) => {
    g.nodes.push({ id: 'again', type: 'template', config: { template: '' } })
    g.edges.push({ source: 'answer', target: 'again' }, { source: 'again', target: 'answer' })
  }), 'graph.edges.3', 'graph.edges[3] ("again" → "answer"): closes a cycle "answer" → "again" → "answer"'],
  ['an unreachable node', mutate(base(), (g) => {
    g.nodes.push({ id: 'island', type: 'template', config: { template: '' } })
    g.edges.push({ source: 'island', target: 'end' })
  }), 'graph.nodes.3', 'graph.nodes[3] (id "island"): is not reachable from the start node "start"'],
  ['a dead end', mutate(base(), (g) => {
    g.nodes.push({ id: 'stuck', type: 'template', config: { template: '' } })
    g.edges.push({ source: 'answer', target: 'stuck' })
  }), 'graph.nodes.3', 'graph.nodes[3] (id "stuck"): no end node is reachable from it'],
  ['a case without an edge', mutate(branching(), (g) => g.edges.splice(2, 1)), 'graph.nodes.1.config.cases.1.id', 'graph.nodes[1] (id "cond1"): cases[1].id: no edge leaves by case "b"'],
  ['no default edge', mutate(branching(), (g) => g.edges.splice(3, 1)), 'graph.nodes.1', 'graph.nodes[1] (id "cond1"): no edge leaves by the default branch'],
  // references
  ['an undeclared input', mutate(base(), (g) => (g.nodes[1].config.messages[0].content = 'Q: {{inputs.questoin}}')), 'graph.nodes.1.config.messages.0.content', 'graph.nodes[1] (id "answer"): messages[0].content: {{inputs.questoin}}: the start node declares no input "questoin"'],
  ['an unknown node', mutate(base(), (g) => (g.nodes[2].config.outputs.answer = '{{nodes.anwser.output.text}}')), 'graph.nodes.2.config.outputs.answer', 'no node has the id "anwser"'],
  ['a node that runs later', mutate(base(), (g) => (g.nodes[1].config.messages[0].content = '{{nodes.end.output}}')), 'graph.nodes.1.config.messages.0.content', 'node "end" does not run before this node'],
  ['the node itself', mutate(base(), (g) => (g.nodes[1].config.messages[0].content = '{{ nodes.answer.output.text }}')), 'graph.nodes.1.config.messages.0.content', 'node "answer" does not run before this node'],
  ['a parallel branch', mutate(base(), (g) => {
    g.nodes.push({ id: 'side', type: 'template', config: { template: '{{nodes.answer.output.text}}' } })
    g.edges.push({ source: 'start', target: 'side' }, { source: 'side', target: 'end' })
  }), 'graph.nodes.3.config.template', 'graph.nodes[3] (id "side"): template: {{nodes.answer...}}: node "answer" does not run before this node'],
  ['a template in an http body', withNode({ type: 'http_request', config: { method: 'POST', url: 'https://example.com', body: { a: [{ b: '{{inputs.nope}}' }] } } }), 'graph.nodes.1.config.body.a.0.b', 'body.a[0].b: {{inputs.nope}}'],
]

describe('validateGraph refuses', () => {
  test.each(invalid)('%s', (_, graph, param, message) => {
    const err = failure(() => validateGraph(graph))
    expect(err.code).toBe('validation_error')
    expect(err.status).toBe(400)
    expect(err.extra.param).toBe(param)
    expect(err.message).toContain(message)
    expect(err.extra.details?.[0]).toEqual({ path: param, message: err.message })
  })

  test('several problems of one phase are all listed, the first as param', () => {
    const g = mutate(base(), (g) => {
      g.nodes[1].config.temperature = 9
      g.nodes[2].config.outputs.n = 1
    })
    const err = failure(() => validateGraph(g))
    expect(err.extra.details?.map((d) => d.path)).toEqual(['graph.nodes.1.config.temperature', 'graph.nodes.2.config.outputs.n'])
  })

  test('at most 20 problems are listed', () => {
    const g = base()
    for (let i = 0; i < 30; i++) g.nodes.push({ id: `bad ${i}`, type: 'template', config: { template: '' } })
    expect(failure(() => validateGraph(g)).extra.details).toHaveLength(20)
  })
})

describe('validateGraph accepts', () => {
  test('the smallest graph: start → end', () => {
    const g = { nodes: [{ id: 'start', type: 'start', config: {} }, { id: 'end', type: 'end', config: { outputs: {} } }], edges: [{ source: 'start', target: 'end' }] }
    expect(validateGraph(g)).toEqual(g as Graph)
  })

  test('parallel branches joining, a condition with two cases to one node, several ends', () => {
    const g = branching()
    g.nodes.push({ id: 'p', type: 'template', config: { template: '{{inputs.score}}' } }, { id: 'end2', type: 'end', config: { outputs: { p: '{{nodes.p.output.text}}' } } })
    g.edges.push({ source: 'start', target: 'p' }, { source: 'p', target: 'end2' }, { source: 'p', target: 'x' })
    g.nodes[2].config.template = '{{nodes.p.output.text}} {{nodes.cond1.output.matched}}'
    const out = validateGraph(g)
    expect(out.nodes.map((n) => n.id)).toEqual(['start', 'cond1', 'x', 'end', 'p', 'end2'])
    expect(outgoing(out, 'cond1').map((e) => e.source_handle)).toEqual(['a', 'b', 'default'])
    expect(incoming(out, 'x').map((e) => e.source)).toEqual(['cond1', 'cond1', 'p'])
    expect(incoming(out, 'start')).toEqual([])
    expect(outgoing(out, 'end')).toEqual([])
    expect(startNode(out).id).toBe('start')
    expect(inputSpec(out)).toEqual([{ name: 'score', type: 'number', required: true }])
  })

  test('every node type with every optional field', () => {
    const g: G = {
      nodes: [
        { id: 'start', type: 'start', name: 'Start', config: { inputs: [{ name: 'q', type: 'string', required: true }, { name: 'o', type: 'object', default: { a: 1 } }, { name: 'l', type: 'array', default: [] }, { name: 'b', type: 'boolean', required: false }] } },
        { id: 'llm-1', type: 'llm', config: { model: 'm', messages: [{ role: 'system', content: 's' }, { role: 'user', content: '{{inputs.q}}' }, { role: 'assistant', content: '' }], temperature: 0, max_tokens: 1 } },
        { id: 'tpl', type: 'template', config: { template: '{{nodes.llm-1.output.text}}' } },
        { id: 'code', type: 'code', config: { source: 'function main(vars) { return { n: 1 } }' } },
        { id: 'http', type: 'http_request', config: { method: 'HEAD', url: 'https://example.com/{{inputs.q}}', headers: { a: '{{nodes.code.output.n}}' }, body: null, timeout_ms: 60_000 } },
        { id: 'kb', type: 'knowledge_retrieval', config: { knowledge_base_ids: ['kb_1'], query: '{{inputs.q}}', top_k: 100, filters: { lang: 'en' } } },
        { id: 'wait', type: 'wait', config: { seconds: 0.5 } },
        { id: 'cond', type: 'condition', config: { cases: [{ id: 'yes', when: '$count(nodes.kb.output.results) > 0 and inputs.b' }] } },
        { id: 'end', type: 'end', config: { outputs: { text: '{{nodes.tpl.output.text}}', status: '{{nodes.http.output.status}}' } } },
      ],
      edges: [
        { source: 'start', target: 'llm-1' }, { source: 'llm-1', target: 'tpl' }, { source: 'tpl', target: 'code' }, { source: 'code', target: 'http' },
        { source: 'http', target: 'kb' }, { source: 'kb', target: 'wait' }, { source: 'wait', target: 'cond' },
        { source: 'cond', target: 'end', source_handle: 'yes' }, { source: 'cond', target: 'end', source_handle: 'default' },
      ],
    }
    expect(validateGraph(g)).toEqual(g as Graph)
  })

  test('500 nodes in a chain', () => {
    const nodes = [{ id: 'n0', type: 'start', config: {} }, ...Array.from({ length: 498 }, (_, i) => ({ id: `n${i + 1}`, type: 'template', config: { template: `{{nodes.n${i}.output}}` } })), { id: 'n499', type: 'end', config: { outputs: {} } }]
    const edges = nodes.slice(1).map((n, i) => ({ source: `n${i}`, target: n.id }))
    expect(validateGraph({ nodes, edges }).nodes).toHaveLength(500)
  })

  test('every example of docs/workflows.md', () => {
    const doc = readFileSync(join(import.meta.dir, '../../docs/workflows.md'), 'utf8')
    const blocks = [...doc.matchAll(/```json\n([\s\S]*?)```/g)].map((m) => JSON.parse(m[1]!))
    const nodes = blocks.filter((b) => b.type && b.config)
    // Every type shown at least once (llm twice: its structured output has an example of its own).
    expect([...new Set(nodes.map((n) => n.type))].sort()).toEqual([...NODE_TYPES].sort())
    for (const n of nodes) {
      const problems: [Path, string][] = []
      checkConfig(n.type as NodeType, n.config, (p, m) => problems.push([p, m]))
      expect({ id: n.id, problems }).toEqual({ id: n.id, problems: [] })
    }
    // Whole graphs: a workflow's body ({ graph }) or a graph itself ({ nodes, edges }).
    const full = blocks.flatMap((b) => (b.graph ? [b.graph] : b.nodes && b.edges ? [b] : []))
    expect(full.length).toBeGreaterThan(1)
    for (const g of full) expect(validateGraph(g).nodes.length).toBe(g.nodes.length)
  })
})

describe('validateInputs', () => {
  const graph = validateGraph({
    nodes: [
      { id: 'start', type: 'start', config: { inputs: [
        { name: 's', type: 'string', required: true },
        { name: 'n', type: 'number', default: 1 },
        { name: 'b', type: 'boolean' },
        { name: 'o', type: 'object', default: { deep: [1] } },
        { name: 'a', type: 'array', required: false },
      ] } },
      { id: 'end', type: 'end', config: { outputs: {} } },
    ],
    edges: [{ source: 'start', target: 'end' }],
  })

  test('applies defaults, leaves absent optional inputs out, copies default objects', () => {
    const out = validateInputs(graph, { s: 'x' })
    expect(out).toEqual({ s: 'x', n: 1, o: { deep: [1] } })
    ;(out.o as { deep: number[] }).deep.push(2)
    expect(validateInputs(graph, { s: 'y' }).o).toEqual({ deep: [1] })
  })

  test('keeps given values', () => {
    expect(validateInputs(graph, { s: '', n: 0, b: false, o: {}, a: [1, 'x'] })).toEqual({ s: '', n: 0, b: false, o: {}, a: [1, 'x'] })
  })

  test('a workflow without inputs takes none, and undefined or null inputs are empty', () => {
    const bare = validateGraph({ nodes: [{ id: 's', type: 'start', config: {} }, { id: 'e', type: 'end', config: { outputs: {} } }], edges: [{ source: 's', target: 'e' }] })
    expect(validateInputs(bare, undefined)).toEqual({})
    expect(validateInputs(bare, null)).toEqual({})
    expect(failure(() => validateInputs(bare, { x: 1 })).message).toBe('inputs.x: unknown input; this workflow declares no inputs')
  })

  test.each([
    ['not an object', 'text', 'inputs', 'must be an object of input values, not a string'],
    ['an array', [], 'inputs', 'not an array'],
    ['unknown input', { s: 'x', extra: 1 }, 'inputs.extra', 'inputs.extra: unknown input; this workflow declares s, n, b, o, a'],
    ['missing required', { n: 2 }, 'inputs.s', 'inputs.s: is required (string)'],
    ['string given a number', { s: 1 }, 'inputs.s', 'inputs.s: must be a string, not a number'],
    ['number given a string', { s: 'x', n: '1' }, 'inputs.n', 'must be a number, not a string'],
    ['number given null', { s: 'x', n: null }, 'inputs.n', 'must be a number, not null'],
    ['boolean given "true"', { s: 'x', b: 'true' }, 'inputs.b', 'must be a boolean, not a string'],
    ['object given an array', { s: 'x', o: [] }, 'inputs.o', 'must be an object, not an array'],
    ['array given an object', { s: 'x', a: {} }, 'inputs.a', 'must be an array, not an object'],
    ['an inherited name', { s: 'x', constructor: 1 }, 'inputs.constructor', 'unknown input'],
  ])('refuses %s', (_, inputs, param, message) => {
    const err = failure(() => validateInputs(graph, inputs))
    expect(err.code).toBe('validation_error')
    expect(err.extra.param).toBe(param)
    expect(err.message).toContain(message)
  })

  test('a required input absent from an object with that prototype name is still missing', () => {
    const g = validateGraph({ nodes: [{ id: 's', type: 'start', config: { inputs: [{ name: 'constructor', type: 'string', required: true }] } }, { id: 'e', type: 'end', config: { outputs: {} } }], edges: [{ source: 's', target: 'e' }] })
    expect(failure(() => validateInputs(g, {})).extra.param).toBe('inputs.constructor')
    expect(validateInputs(g, { constructor: 'ok' })).toEqual({ constructor: 'ok' })
  })
})
