/**
 * `bun run bench:mcp`: what an agent's `mcp` tool adds to a turn, beside its ceiling (the same tool
 * called directly with the SDK's client), in the same run. Three processes: this client, the real
 * service (`bun run src/main.ts`, embedded default, LOG_LEVEL=warn, WEBHOOK_ALLOW_HTTP and
 * WEBHOOK_ALLOW_PRIVATE_NETWORKS for the loopback) and the upstreams (bench/mcp-upstreams.ts: the
 * tests' loopback MCP server and the fake provider, answering at once).
 *
 *   (1) direct: `tools/call lookup` with the SDK's `Client` + `StreamableHTTPClientTransport`,
 *       sequentially, on one initialized session (the ceiling)
 *   (2) a synchronous turn whose model calls `crm__lookup` once (two model rounds), against the same
 *       turn of an agent whose model answers at once (one round; the same mcp tool is offered);
 *       one at a time, alternating
 *   overhead = turn with the call − turn without − direct call, at p50       target < 5 ms
 *
 * Every turn opens a conversation of its own. Environment: MCP_TURNS (300 per path), MCP_WARMUP
 * (100 per path), MCP_CALLS (1 000 direct calls).
 */
import { join } from 'node:path'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { EMBEDDED_ENV, freePort, log, machine, percentile, randomBase62, removeDir, sourceVersion, spawnListening, startServer, tempDir, verdict, whenInterrupted, writeResults, type Row } from './lib'

const TURNS = Number(process.env.MCP_TURNS ?? 300)
const WARMUP = Number(process.env.MCP_WARMUP ?? 100)
const CALLS = Number(process.env.MCP_CALLS ?? 1_000)
const work = tempDir('bench-mcp-')
whenInterrupted(() => removeDir(work))
const ROOT_KEY = `ap_bench${randomBase62(36)}`

const round3 = (n: number) => Math.round(n * 1000) / 1000
const summary = (xs: number[]) => {
  const v = [...xs].sort((a, b) => a - b)
  return { n: v.length, p50: round3(percentile(v, 50)), p99: round3(percentile(v, 99)) }
}

async function startUpstreams(): Promise<{ provider: string; mcp: string; stop(): void }> {
  const child = await spawnListening('bench/mcp-upstreams.ts', { MCP_BENCH_TURNS: String(TURNS + WARMUP + 10) }, 'the upstreams')
  const [provider, mcp] = child.words as [string, string]
  return { provider, mcp, stop: child.stop }
}

async function main() {
  const { commit, src_dirty } = sourceVersion()
  log(`bench:mcp at ${commit}${src_dirty ? ' (src dirty)' : ''}; ${CALLS} direct calls, ${TURNS} turns per path`)
  const up = await startUpstreams()

  // (1) The ceiling: the SDK's client calling the tool directly, one call at a time.
  const client = new Client({ name: 'bench', version: '0' })
  await client.connect(new StreamableHTTPClientTransport(new URL(up.mcp)))
  await client.listTools()
  const direct: number[] = []
  for (let i = 0; i < WARMUP + CALLS; i++) {
    const t0 = performance.now()
    const r = await client.callTool({ name: 'lookup', arguments: { id: '42' } })
    const ms = performance.now() - t0
    if ((r.content as { text: string }[])[0]?.text !== 'record 42: status open') throw new Error(`direct call answered ${JSON.stringify(r)}`)
    if (i >= WARMUP) direct.push(ms)
  }

  const modelsFile = join(work, 'models.json')
  await Bun.write(modelsFile, JSON.stringify({
    providers: [{ id: 'fake', kind: 'openai', base_url: `${up.provider}/v1`, api_key: 'sk-bench', timeout_ms: 60_000 }],
    models: ['bench-plain', 'bench-tool'].map((id) => ({ id, type: 'llm', vendor: 'bench', supports_function_call: true, routes: [{ provider: 'fake', model: id }], pricing: { input_per_1k: 0.5, output_per_1k: 1.5 } })),
  }))
  const port = freePort()
  const service = await startServer({
    cmd: ['bun', 'run', 'src/main.ts'],
    env: {
      PORT: String(port), HOST: '127.0.0.1', DATA_DIR: join(work, 'data'), BOOTSTRAP_API_KEY: ROOT_KEY, MODELS_FILE: modelsFile,
      RATE_LIMIT_PER_SECOND: '1000000000', RATE_LIMIT_BURST: '1000000000', LOG_LEVEL: 'warn', ...EMBEDDED_ENV,
      WEBHOOK_ALLOW_HTTP: 'true', WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
    },
    port, logFile: join(work, 'service.log'), readyPath: '/healthz',
  })
  const url = `http://127.0.0.1:${port}`
  const auth = { authorization: `Bearer ${ROOT_KEY}`, 'content-type': 'application/json' }
  const post = async (path: string, body: unknown) => {
    const res = await fetch(url + path, { method: 'POST', headers: auth, body: JSON.stringify(body) })
    const json = (await res.json()) as any
    if (res.status >= 300) throw new Error(`${path}: ${res.status} ${JSON.stringify(json)}`)
    return json
  }
  const ws = (await post('/v1/workspaces', { name: 'bench mcp' })).data.id
  const tools = [{ type: 'mcp', name: 'crm', server_url: up.mcp, headers: { Authorization: 'Bearer bench-token' } }]
  const withTool = (await post('/v1/agents', { workspace_id: ws, name: 'with a call', type: 'agent', model: 'bench-tool', tools })).data.id
  const without = (await post('/v1/agents', { workspace_id: ws, name: 'without', type: 'agent', model: 'bench-plain', tools })).data.id

  const turn = async (agent: string, calls: number) => {
    const t0 = performance.now()
    const res = await fetch(`${url}/v1/agents/${agent}/chat`, { method: 'POST', headers: auth, body: JSON.stringify({ message: 'Is record 42 open?', user_id: 'bench' }) })
    const body = (await res.json()) as any
    const ms = performance.now() - t0
    if (res.status !== 200 || body.message.content !== 'done' || body.tool_calls.length !== calls) throw new Error(`chat answered ${res.status}: ${JSON.stringify(body).slice(0, 300)}`)
    return ms
  }
  const a = { tool: [] as number[], plain: [] as number[] }
  for (let i = 0; i < WARMUP + TURNS; i++) {
    // Alternating order (A B, B A ...), so neither path always runs second.
    const order = i % 2 ? (['tool', 'plain'] as const) : (['plain', 'tool'] as const)
    for (const path of order) {
      const ms = path === 'tool' ? await turn(withTool, 1) : await turn(without, 0)
      if (i >= WARMUP) a[path].push(ms)
    }
  }
  // The stored call: what the service measured around the tool itself (the history's duration_ms).
  const history = await fetch(`${url}/v1/agents/${withTool}/conversations?limit=1`, { headers: auth }).then((r) => r.json() as Promise<any>)
  const conv = await fetch(`${url}/v1/conversations/${history.data[0].id}`, { headers: auth }).then((r) => r.json() as Promise<any>)
  const stored = conv.data.messages.find((m: any) => m.role === 'assistant').tool_calls[0]

  await service.stop()
  await client.close()
  up.stop()

  const d = summary(direct)
  const t = summary(a.tool)
  const p = summary(a.plain)
  const overheadP50 = round3(t.p50 - p.p50 - d.p50)
  const results = {
    commit, src_dirty, machine: machine(), at: new Date().toISOString(),
    direct_call: d, turn_with_call: t, turn_without: p,
    overhead_p50_ms: overheadP50,
    overhead_p99_ms: round3(t.p99 - p.p99 - d.p99),
    last_stored_call: { output: stored.output, duration_ms: stored.duration_ms },
    pass: { overhead: overheadP50 < 5 },
  }
  log(`(1) direct call: p50 ${d.p50} ms p99 ${d.p99}`)
  log(`(2) turn with the call p50 ${t.p50} ms p99 ${t.p99}; without p50 ${p.p50} p99 ${p.p99}; overhead p50 ${overheadP50} ms`)
  process.stdout.write(`${JSON.stringify(results, null, 2)}\n`)
  const ms = (n: number) => `${n.toFixed(2)} ms`
  const rows: Row[] = [
    { figure: '(2) turn calling one MCP tool, overhead p50', measured: `p50 ${ms(t.p50)} (without the call ${ms(p.p50)})`, ceiling: `SDK client direct p50 ${ms(d.p50)}`, share: `+${ms(overheadP50)}`, target: '< 5 ms', result: verdict(results.pass.overhead) },
    { figure: '(2) turn calling one MCP tool, p99', measured: `p99 ${ms(t.p99)} (without the call ${ms(p.p99)})`, ceiling: `SDK client direct p99 ${ms(d.p99)}`, share: `+${ms(results.overhead_p99_ms)}`, target: '', result: 'info' },
  ]
  writeResults('mcp', results, rows)
}

try {
  await main()
} finally {
  removeDir(work)
}
