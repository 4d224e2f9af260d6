import { context, propagation } from '@opentelemetry/api'

/**
 * The seam between the service and OpenTelemetry (docs/observability.md). Every outgoing call
 * (providers, http nodes and tools, webhooks, MCP servers) passes its headers through `injectTrace`,
 * which adds W3C `traceparent` (and `tracestate`) of the active span. With no propagator registered
 * (tracing off, the default) the API's no-op propagator writes nothing and costs a function call.
 */
export function injectTrace(headers: Headers): Headers {
  propagation.inject(context.active(), headers, HEADERS_SETTER)
  return headers
}

const HEADERS_SETTER = { set: (carrier: Headers, key: string, value: string) => carrier.set(key, value) }
