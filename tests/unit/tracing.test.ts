import { expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { join } from 'node:path'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Tracing off costs nothing to load (docs/observability.md, "What it costs"): the whole service's
 * module graph imports no part of the OpenTelemetry SDK until `startTracing` is given an endpoint.
 * A subprocess of its own, so that the module registry is a fresh one.
 */
const root = join(import.meta.dir, '..', '..')
const script = `
const sdk = () => Object.keys(require.cache).filter((k) => /@opentelemetry\\/(sdk-trace|exporter-trace-otlp-proto|context-async-hooks|resources)\\//.test(k)).length
await import('./src/app.ts'); await import('./src/boot.ts'); await import('./src/workers/index.ts')
const t = await import('./src/lib/tracing.ts')
await t.startTracing(null, 'test')
const off = sdk()
await t.startTracing({ url: 'http://127.0.0.1:9/v1/traces', headers: {}, serviceName: 's', resourceAttributes: {}, sampler: 'always_on', samplerArg: 1, scheduleDelayMs: 60000, captureContent: false }, 'test')
console.log(JSON.stringify({ off, on: sdk(), tracingOn: t.tracingOn }))
await t.stopTracing()
`

test('with no endpoint no SDK module is loaded; with one, the SDK is loaded and tracing is on', () => {
  const out = Bun.spawnSync(['bun', '-e', script], { cwd: root, stdout: 'pipe', stderr: 'pipe' })
  expect(out.exitCode).toBe(0)
  const r = JSON.parse(out.stdout.toString().trim().split('\n').at(-1)!)
  expect(r.off).toBe(0)
  expect(r.on).toBeGreaterThan(0)
  expect(r.tracingOn).toBe(true)
}, 30_000)
