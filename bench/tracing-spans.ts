/**
 * `bun run bench/tracing-spans.ts`: what one span costs the OpenTelemetry JS SDK itself on this
 * machine, outside the service: a server span with the attributes the request span carries, started
 * and ended 20 000 times (1 ms pause every 100, as requests arrive), (1) recorded by the SDK and
 * exported by its BatchSpanProcessor and OTLP/HTTP protobuf exporter to a loopback sink, (2)
 * recorded with no processor, alternating, after a pair of warm-up. CPU per span from process.cpuUsage. The floor under bench:tracing's
 * "on vs off" ratio: a request cannot cost less than the spans it records (bench/README.md, "Tracing").
 */
import { context, SpanKind, trace } from '@opentelemetry/api'
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks'
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto'
import { AlwaysOnSampler, BatchSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace'

const N = 20_000

async function measure(exporting: boolean): Promise<{ cpuUs: number; bytes: number }> {
  let bytes = 0
  const sink = Bun.serve({ port: 0, hostname: '127.0.0.1', async fetch(r) {
    bytes += (await r.arrayBuffer()).byteLength
    return new Response(null, { status: 200 })
  } })
  const exporter = new OTLPTraceExporter({ url: `http://127.0.0.1:${sink.port}/v1/traces` })
  const provider = new TracerProvider({ sampler: new AlwaysOnSampler(), spanProcessors: exporting ? [new BatchSpanProcessor({ exporter, scheduledDelayMillis: 1000 })] : [] })
  const tracer = provider.getTracer('bench')
  const cpu0 = process.cpuUsage()
  for (let i = 0; i < N; i++) {
    const span = tracer.startSpan('GET /v1/workspaces/:id', { kind: SpanKind.SERVER, attributes: { 'http.request.method': 'GET', request_id: 'req_01jbz3k9x8q7r6s5t4v3w2y1z0' } })
    span.setAttributes({ 'http.route': '/v1/workspaces/:id', 'http.response.status_code': 200, workspace_id: 'ws_01jbz3k9x8q7r6s5t4v3w2y1z0' })
    span.end()
    if (i % 100 === 0) await Bun.sleep(1)
  }
  await provider.forceFlush()
  const cpu = process.cpuUsage(cpu0)
  await provider.shutdown()
  sink.stop(true)
  return { cpuUs: (cpu.user + cpu.system) / N, bytes: bytes / N }
}

context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable())
// The first pair warms the JIT up and is not shown.
await measure(true)
await measure(false)
for (const exporting of [true, false, true, false, true, false]) {
  const r = await measure(exporting)
  console.log(`${exporting ? 'recorded + exported' : 'recorded only     '}: ${r.cpuUs.toFixed(1)} µs CPU per span${exporting ? `, ${r.bytes.toFixed(0)} B exported per span` : ''}`)
}
