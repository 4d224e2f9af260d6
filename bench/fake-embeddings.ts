import { clusteredVector } from './corpus'

/**
 * A loopback OpenAI-compatible embeddings provider for bench/knowledge-scale.ts, in a process of its
 * own: `POST /v1/embeddings` answers each text with bench/corpus.ts's clustered vector (384
 * dimensions; a text lands in the cluster whose words it holds), after the delay its model is
 * given, as a remote provider's batch latency. Prints `listening <url>`, then runs until killed.
 *
 * FAKE_EMBEDDINGS (JSON): { "<model>": { "delayMs": 150, "maxBatch": 64 } }; a request over maxBatch
 * inputs is refused with 400, as a real provider's limit would.
 * GET /stats: requests and inputs answered, and the most requests it held at once (the
 * concurrency the service used); POST /stats/reset zeroes them.
 */
const models = JSON.parse(process.env.FAKE_EMBEDDINGS ?? '{}') as Record<string, { delayMs?: number; maxBatch?: number }>
const stats = { requests: 0, inputs: 0, in_flight: 0, max_in_flight: 0 }

const server = Bun.serve({
  hostname: '127.0.0.1',
  port: 0,
  idleTimeout: 0,
  async fetch(req) {
    const path = new URL(req.url).pathname
    if (path === '/stats') {
      if (req.method === 'POST') Object.assign(stats, { requests: 0, inputs: 0, max_in_flight: stats.in_flight })
      return Response.json(stats)
    }
    if (path !== '/v1/embeddings' || req.method !== 'POST') return Response.json({ error: { message: `no route ${path}` } }, { status: 404 })
    const json = (await req.json()) as { model: string; input: string | string[] }
    const inputs = typeof json.input === 'string' ? [json.input] : json.input
    const shape = models[json.model] ?? {}
    if (shape.maxBatch && inputs.length > shape.maxBatch) {
      return Response.json({ error: { message: `at most ${shape.maxBatch} inputs per request, got ${inputs.length}`, type: 'invalid_request_error' } }, { status: 400 })
    }
    stats.in_flight++
    stats.max_in_flight = Math.max(stats.max_in_flight, stats.in_flight)
    try {
      if (shape.delayMs) await Bun.sleep(shape.delayMs)
      stats.requests++
      stats.inputs += inputs.length
      // Usage reported (~4 characters a token), so the service never counts tokens itself.
      const tokens = inputs.reduce((n, s) => n + Math.ceil(s.length / 4), 0)
      return Response.json({
        object: 'list',
        model: json.model,
        data: inputs.map((text, index) => ({ object: 'embedding', index, embedding: Array.from(clusteredVector(text), (x) => Math.round(x * 1e6) / 1e6) })),
        usage: { prompt_tokens: tokens, total_tokens: tokens },
      })
    } finally {
      stats.in_flight--
    }
  },
})

console.log(`listening ${server.url.origin}`)
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => (server.stop(true), process.exit(0)))
