/**
 * The ceiling of bench/webhooks.ts: the same HTTP client (sendDelivery: resolve, pin, sign, POST,
 * read the excerpt) posting the same bodies to the same receiver at the same concurrency, with no
 * store, no Redis and no machine. Prints one JSON line.
 */
import { sendDelivery } from '../src/workers/webhook-sender'

const total = Number(process.env.DELIVERIES ?? 50_000)
const concurrency = Number(process.env.CONCURRENCY ?? 256)
const receiver = process.env.RECEIVER!
let next = 0
let failed = 0
const t0 = performance.now()
await Promise.all(
  Array.from({ length: concurrency }, async () => {
    while (next < total) {
      const i = next++
      const r = await sendDelivery({
        deliveryId: `dlv_ceiling_${i}`,
        url: `${receiver}/hook/${i % 5}`,
        event: 'workflow.run.completed',
        data: { workflow_id: 'wf_bench', run_id: `run_${i}`, status: 'completed', duration_ms: 1234, outputs: { answer: 'forty-two', n: i } },
        secrets: [`bench-secret-${i % 5}`],
        timeoutMs: 10_000,
        policy: { allowHttp: false, allowPrivate: true },
      })
      if (!r.ok) failed++
    }
  }),
)
const seconds = (performance.now() - t0) / 1000
console.log(JSON.stringify({ deliveries: total, failed, seconds: +seconds.toFixed(2), per_second: Math.round(total / seconds) }))
