import { createLogger } from '../src/boot'
import { parseCatalog } from '../src/domain/models/catalog'
import { createGateway } from '../src/domain/models'
import { DEFAULT_MAX_CONCURRENCY } from '../src/domain/models/providers/openai'
import type { Charge } from '../src/store/credits'
import { startFakeProvider } from '../tests/helpers/fake-provider'

/**
 * `bun run bench/embed-concurrency.ts`: one embeddings call of EMBED_INPUTS (default 10 000) inputs
 * through the gateway, against a loopback OpenAI-compatible provider that answers each request of 64
 * inputs (max_batch) after EMBED_LATENCY_MS (default 150), with max_concurrency 1 (the batches one
 * after another, as before the limiter) and with the default (4). Beside each, its ceiling measured
 * in the same run: the same requests sent straight with fetch, as many at a time, no gateway. The
 * arithmetic bound (concurrency × 64 / latency) is printed too. The provider runs in this process:
 * with 150 ms of waiting per request, its CPU is not what is measured. One JSON object on stdout.
 */
const INPUTS = Number(process.env.EMBED_INPUTS ?? 10_000)
const LATENCY_MS = Number(process.env.EMBED_LATENCY_MS ?? 150)
const DIMS = Number(process.env.EMBED_DIMS ?? 384)
const BATCH = 64
const ROUNDS = 3

const fake = await startFakeProvider({ latencyMs: LATENCY_MS })
fake.script('*', [{ dimensions: DIMS }])
// The helper records every request for the tests; a bench lets them go between rounds.
const forget = () => fake.requests.splice(0)

const concurrencies = [1, DEFAULT_MAX_CONCURRENCY]
const catalog = parseCatalog({
  providers: concurrencies.map((c) => ({ id: `c${c}`, kind: 'openai', base_url: fake.baseUrl, api_key: 'sk-bench', max_batch: BATCH, max_concurrency: c })),
  models: concurrencies.map((c) => ({ id: `embed-c${c}`, type: 'embedding', vendor: 'bench', dimensions: DIMS, routes: [{ provider: `c${c}`, model: 'bench-embed' }] })),
}, {})
// No database: the budget is said to be checked and the charges are collected, not written.
const gateway = createGateway({ sql: undefined as never, log: createLogger('silent'), catalog, nudgeEvents: () => {}, charges: undefined as never, access: undefined as never })

const inputs = Array.from({ length: INPUTS }, (_, i) => `chunk ${i}: the keeper logs the weather at the lighthouse every hour, and the log is read at noon.`)

async function viaGateway(c: number): Promise<number> {
  const charges: Charge[] = []
  const started = performance.now()
  const res = await gateway.embed({ workspaceId: 'ws_bench', requestId: 'req_bench', budgetChecked: true, deferredCharges: charges }, gateway.model(`embed-c${c}`, 'embedding'), inputs, new AbortController().signal)
  const ms = performance.now() - started
  if (res.vectors.length !== INPUTS || charges.length !== 1) throw new Error('the call did not answer every input with one charge')
  return ms
}

/** The ceiling: the same requests, `c` at a time, straight at the provider. */
async function direct(c: number): Promise<number> {
  const batches = Array.from({ length: Math.ceil(INPUTS / BATCH) }, (_, b) => inputs.slice(b * BATCH, (b + 1) * BATCH))
  let next = 0
  const started = performance.now()
  await Promise.all(
    Array.from({ length: c }, async () => {
      while (next < batches.length) {
        const input = batches[next++]
        const res = await fetch(`${fake.baseUrl}/embeddings`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'bench-embed', input }) })
        await res.json()
      }
    }),
  )
  return performance.now() - started
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
const perSecond = (ms: number) => Math.round(INPUTS / (ms / 1000))

const results: Record<string, unknown>[] = []
for (const c of concurrencies) {
  await viaGateway(c) // warm-up: connections, JIT
  forget()
  const gatewayMs: number[] = []
  const directMs: number[] = []
  for (let r = 0; r < ROUNDS; r++) {
    gatewayMs.push(await viaGateway(c))
    forget()
    directMs.push(await direct(c))
    forget()
  }
  const g = median(gatewayMs)
  const d = median(directMs)
  results.push({
    max_concurrency: c,
    gateway_ms: Math.round(g),
    gateway_inputs_per_s: perSecond(g),
    ceiling_direct_ms: Math.round(d),
    ceiling_direct_inputs_per_s: perSecond(d),
    bound_inputs_per_s: Math.round((c * BATCH) / (LATENCY_MS / 1000)),
    of_ceiling_percent: Math.round((d / g) * 1000) / 10,
    in_flight_max: fake.maxInFlight,
  })
  fake.maxInFlight = 0
}
await fake.close()
console.log(JSON.stringify({ inputs: INPUTS, batch: BATCH, latency_ms: LATENCY_MS, dimensions: DIMS, rounds: ROUNDS, results }, null, 2))
