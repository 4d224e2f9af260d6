import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { closeMcpClients } from '../../src/domain/agents/mcp-client'
import { startMcpServer, type McpTestServer } from '../helpers/mcp-server'
import { chain, end, ends, start, startRunsEnv, type Node, type RunsEnv } from '../helpers/runs'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The `agent` node (docs/workflows.md, "agent"): a turn of an agent of the run's workspace, with its
 * tools, inside a run, and through it a chatflow reaching an agent's tools. The real app and workers;
 * the model is the loopback provider's `scripted` model, the tool a loopback HTTP target.
 */
let env: RunsEnv
let targetUrl: string
let mcp: McpTestServer

beforeAll(async () => {
  env = await startRunsEnv()
  targetUrl = `http://127.0.0.1:${env.target.port}`
  mcp = await startMcpServer()
}, 60_000)
afterAll(async () => {
  await closeMcpClients()
  await mcp?.close()
  await env?.close()
})

let seq = 0
async function agent(body: Record<string, unknown> = {}, key = env.owner, ws = env.ws): Promise<string> {
  const res = await env.h.call('POST', '/v1/agents', {
    key,
    body: {
      workspace_id: ws, name: `Desk ${++seq}`, type: 'agent', model: 'scripted', instructions: 'You are the ferry desk.',
      tools: [{ type: 'http', name: 'timetable', description: 'The timetable', method: 'GET', url: `${targetUrl}/timetable`, parameters: { type: 'object', properties: { q: { type: 'string' } } } }],
      ...body,
    },
  })
  if (res.status !== 201) throw new Error(`could not create an agent: ${res.status} ${res.text}`)
  return res.body.data.id
}
const agentNode = (agentId: string, config: Record<string, unknown> = {}): Node => ({ id: 'desk', type: 'agent', config: { agent_id: agentId, message: 'Which ferry for {{inputs.who}}?', ...config } })
const graphWith = (node: Node) => chain(start([{ name: 'who', type: 'string', required: true }]), node, end({ answer: '{{nodes.desk.output.text}}', conversation: '{{nodes.desk.output.conversation_id}}' }))
const save = (graph: unknown) => env.h.call('POST', '/v1/workflows', { key: env.owner, body: { workspace_id: env.ws, name: `Agent flow ${++seq}`, graph } })

describe('agent node', () => {
  test('runs a turn with a tool call: the answer is the node\'s text, the tool call its output, the conversation the run user\'s', async () => {
    const id = await agent()
    env.fake.script('scripted-up', [{ toolCalls: [{ name: 'timetable', arguments: { q: 'lumora' } }] }, { chunks: ['Take ', 'the noon ', 'ferry.'] }])
    const wf = await env.workflow(graphWith(agentNode(id)))
    const res = await env.trigger(wf, { who: 'Ana' }, { async: true })
    expect(res.status).toBe(202)
    const run = await env.finished(res.body.run_id)
    expect(run.status).toBe('completed')
    expect(run.outputs.answer).toBe('Take the noon ferry.')
    expect(run.usage.tokens_in).toBeGreaterThan(0)

    const events = await env.eventsOf(res.body.run_id)
    const output = ends(events, 'desk')[0]!.data.output
    expect(output.tool_calls).toHaveLength(1)
    expect(output.tool_calls[0]).toMatchObject({ tool: 'timetable', input: { q: 'lumora' }, output: { status: 200, body: { path: '/timetable', q: 'lumora' } } })
    expect(output.finish_reason).toBe('stop')
    // The answer streamed as the run's message events, from the agent node.
    const deltas = events.filter((e) => e.event === 'message' && e.data.node_id === 'desk').map((e) => e.data.delta).join('')
    expect(deltas).toBe('Take the noon ferry.')
    // The model saw the agent's instructions and the rendered message.
    const upstream = env.fake.requests.filter((r) => r.model === 'scripted-up').at(-2)!.json.messages
    expect(upstream[0]).toEqual({ role: 'system', content: 'You are the ferry desk.' })
    expect(upstream.at(-1)).toEqual({ role: 'user', content: 'Which ferry for Ana?' })

    const conv = await env.h.call('GET', `/v1/conversations/${run.outputs.conversation}?sort=created_at`, { key: env.owner })
    expect(conv.status).toBe(200)
    expect(conv.body.data.user_id).toBe(run.user_id)
    expect(conv.body.data.messages.map((m: any) => m.content)).toEqual(['Which ferry for Ana?', 'Take the noon ferry.'])
  })

  test('a chatflow reaches the agent\'s tools through its workflow\'s agent node', async () => {
    const id = await agent()
    env.fake.script('scripted-up', [{ toolCalls: [{ name: 'timetable', arguments: { q: 'evening' } }] }, { text: 'The 18:00 ferry.' }])
    const flow = await env.workflow(chain(start([{ name: 'message', type: 'string', required: true }]), { id: 'desk', type: 'agent', config: { agent_id: id, message: '{{inputs.message}}' } }, end({ answer: '{{nodes.desk.output.text}}' })))
    const chatflow = await env.h.call('POST', '/v1/agents', { key: env.owner, body: { workspace_id: env.ws, name: 'Front desk', type: 'chatflow', model: 'scripted', workflow_id: flow } })
    expect(chatflow.status).toBe(201)
    const answer = await env.h.call('POST', `/v1/agents/${chatflow.body.data.id}/chat`, { key: env.owner, body: { message: 'Is there an evening ferry?', user_id: 'traveller' } })
    expect(answer.status).toBe(200)
    expect(answer.body.message.content).toBe('The 18:00 ferry.')
    const toolRound = env.fake.requests.filter((r) => r.model === 'scripted-up').at(-1)!.json.messages.find((m: any) => m.role === 'tool')
    expect(JSON.parse(toolRound.content).body).toMatchObject({ path: '/timetable', q: 'evening' })
  })

  test('a chatflow reaches an MCP server\'s tools through the agent node', async () => {
    const id = await agent({ tools: [{ type: 'mcp', name: 'crm', server_url: mcp.url, allowed_tools: ['lookup'] }] })
    env.fake.script('scripted-up', [{ toolCalls: [{ name: 'crm__lookup', arguments: { id: 'T-7' } }] }, { text: 'Ticket T-7 is open.' }])
    const flow = await env.workflow(chain(start([{ name: 'message', type: 'string', required: true }]), { id: 'desk', type: 'agent', config: { agent_id: id, message: '{{inputs.message}}' } }, end({ answer: '{{nodes.desk.output.text}}' })))
    const chatflow = await env.h.call('POST', '/v1/agents', { key: env.owner, body: { workspace_id: env.ws, name: 'CRM desk', type: 'chatflow', model: 'scripted', workflow_id: flow } })
    const before = mcp.requests.filter((r) => r.tool === 'lookup').length
    const answer = await env.h.call('POST', `/v1/agents/${chatflow.body.data.id}/chat`, { key: env.owner, body: { message: 'Status of T-7?', user_id: 'agent-7' } })
    expect(answer.status).toBe(200)
    expect(answer.body.message.content).toBe('Ticket T-7 is open.')
    expect(mcp.requests.filter((r) => r.tool === 'lookup').length).toBe(before + 1)
    const offered = env.fake.requests.filter((r) => r.model === 'scripted-up').at(-2)!.json.tools.map((t: any) => t.function.name)
    expect(offered).toEqual(['crm__lookup'])
    const toolRound = env.fake.requests.filter((r) => r.model === 'scripted-up').at(-1)!.json.messages.find((m: any) => m.role === 'tool')
    expect(JSON.parse(toolRound.content)).toEqual({ text: 'record T-7: status open' })
  })

  test('conversation_id continues a conversation; user_id names its user', async () => {
    const id = await agent({ tools: [] })
    env.fake.script('scripted-up', [{ text: 'First.' }, { text: 'Second.' }])
    const first = await env.finished((await env.trigger(await env.workflow(graphWith(agentNode(id, { user_id: 'u-{{inputs.who}}' }))), { who: 'bo' }, { async: true })).body.run_id)
    expect(first.status).toBe(completedOr(first))
    const wf = await env.workflow(graphWith(agentNode(id, { user_id: 'u-bo', conversation_id: first.outputs.conversation })))
    const second = await env.finished((await env.trigger(wf, { who: 'bo' }, { async: true })).body.run_id)
    expect(second.status).toBe(completedOr(second))
    expect(second.outputs.conversation).toBe(first.outputs.conversation)
    const conv = await env.h.call('GET', `/v1/conversations/${first.outputs.conversation}?sort=created_at`, { key: env.owner })
    expect(conv.body.data.user_id).toBe('u-bo')
    expect(conv.body.data.messages.map((m: any) => m.content)).toEqual(['Which ferry for bo?', 'First.', 'Which ferry for bo?', 'Second.'])
  })

  test('checked at save: another workspace\'s agent, a chatflow, an agent with workflow tools, a missing message', async () => {
    const otherWs = (await env.h.call('POST', '/v1/workspaces', { key: env.outsider, body: { name: 'Other desk' } })).body.data.id
    const foreign = await agent({}, env.outsider, otherWs)
    const helper = await env.workflow(chain(start([{ name: 'message', type: 'string', required: true }]), end({ answer: '{{inputs.message}}' })))
    const chatflow = (await env.h.call('POST', '/v1/agents', { key: env.owner, body: { workspace_id: env.ws, name: 'CF', type: 'chatflow', model: 'scripted', workflow_id: helper } })).body.data.id
    const withWorkflow = await agent({ tools: [{ type: 'workflow', workflow_id: helper }] })
    for (const [agentId, words] of [[foreign, 'not found'], [chatflow, 'chatflow'], [withWorkflow, 'workflow tools']] as const) {
      const res = await save(graphWith(agentNode(agentId)))
      expect(res.status).toBe(400)
      expect(res.body.error.param).toBe('graph.nodes.1.config.agent_id')
      expect(res.body.error.message).toContain(words)
    }
    const noMessage = await save(graphWith({ id: 'desk', type: 'agent', config: { agent_id: await agent() } }))
    expect(noMessage.status).toBe(400)
    expect(noMessage.body.error.param).toBe('graph.nodes.1.config.message')
  })

  test('checked again when it runs: a disabled agent fails the node with agent_unavailable, a deleted one with agent_not_found', async () => {
    const disabled = await agent({ tools: [] })
    const wf1 = await env.workflow(graphWith(agentNode(disabled)))
    expect((await env.h.call('PATCH', `/v1/agents/${disabled}`, { key: env.owner, body: { status: 'disabled' } })).status).toBe(200)
    const r1 = await env.finished((await env.trigger(wf1, { who: 'x' }, { async: true })).body.run_id)
    expect(r1.status).toBe('failed')
    expect(r1.error).toMatchObject({ code: 'agent_unavailable', node: 'desk' })

    const deleted = await agent({ tools: [] })
    const wf2 = await env.workflow(graphWith(agentNode(deleted, { }), ))
    expect((await env.h.call('DELETE', `/v1/agents/${deleted}`, { key: env.owner })).status).toBe(200)
    const r2 = await env.finished((await env.trigger(wf2, { who: 'x' }, { async: true })).body.run_id)
    expect(r2.error).toMatchObject({ code: 'agent_not_found', node: 'desk' })
  })
})

/** `completed`, or the run as it is when it is not (so a failure shows its error). */
function completedOr(run: any): unknown {
  return run.status === 'completed' ? 'completed' : run
}
