import { startFakeProvider, type Step } from '../tests/helpers/fake-provider'
import { startMcpServer } from '../tests/helpers/mcp-server'

/**
 * bench/mcp.ts's upstreams in a process of their own: the tests' loopback MCP server
 * (tests/helpers/mcp-server.ts) and the fake OpenAI-compatible provider, answering at once. Prints
 * `listening <provider url> <mcp url>` once both answer, then runs until killed.
 *
 * Models: `bench-plain` answers `done` (no tool call); `bench-tool` alternates a call of
 * `crm__lookup` and the answer `done`, for MCP_BENCH_TURNS turns (one turn at a time is sent, so
 * the alternation holds). Usage is reported, so the service counts no tokens itself.
 */
const turns = Number(process.env.MCP_BENCH_TURNS ?? 1000)
const usage = { prompt_tokens: 12, completion_tokens: 1 }
const answer: Step = { text: 'done', usage }
const fake = await startFakeProvider()
fake.script('bench-plain', [answer])
fake.script('bench-tool', Array.from({ length: turns }, (): Step[] => [{ toolCalls: [{ name: 'crm__lookup', arguments: { id: '42' } }], usage }, answer]).flat())
const mcp = await startMcpServer()

// Both record every request for the tests' assertions; a bench sends thousands: emptied now and then.
setInterval(() => {
  fake.requests.splice(0)
  mcp.requests.splice(0)
}, 5_000).unref()

console.log(`listening ${fake.url} ${mcp.url}`)
