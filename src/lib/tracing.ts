import {
  context,
  propagation,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Span,
  type Tracer,
} from '@opentelemetry/api'
import { redactUrls } from './redact-url'

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

/**
 * True once `startTracing` has registered the SDK. Hot paths test it before building a span's
 * attributes, so that with no endpoint configured tracing costs a boolean test and nothing else.
 */
export let tracingOn = false
/** Prompts and completions go on GenAI spans only when OTEL_GENAI_CAPTURE_CONTENT=true. */
export let captureContent = false

const NAME = 'agent-platform-api'
let tracer: Tracer = trace.getTracer(NAME)
let provider: { forceFlush(): Promise<void>; shutdown(): Promise<void> } | null = null

/**
 * Registers the SDK (a tracer provider with a batching OTLP/HTTP protobuf exporter, the
 * AsyncLocalStorage context manager, the W3C trace-context propagator) when an endpoint is
 * configured. Imported dynamically: with tracing off the SDK is never even loaded.
 */
export async function startTracing(cfg: TracingConfig | null, version: string): Promise<void> {
  if (!cfg || provider) return
  const [sdk, { OTLPTraceExporter }, { resourceFromAttributes }, { AsyncLocalStorageContextManager }, { W3CTraceContextPropagator }] = await Promise.all([
    import('@opentelemetry/sdk-trace'),
    import('@opentelemetry/exporter-trace-otlp-proto'),
    import('@opentelemetry/resources'),
    import('@opentelemetry/context-async-hooks'),
    import('@opentelemetry/core'),
  ])
  const ratio = new sdk.TraceIdRatioBasedSampler(cfg.samplerArg)
  const sampler = {
    always_on: new sdk.AlwaysOnSampler(),
    always_off: new sdk.AlwaysOffSampler(),
    traceidratio: ratio,
    parentbased_always_on: new sdk.ParentBasedSampler({ root: new sdk.AlwaysOnSampler() }),
    parentbased_always_off: new sdk.ParentBasedSampler({ root: new sdk.AlwaysOffSampler() }),
    parentbased_traceidratio: new sdk.ParentBasedSampler({ root: ratio }),
  }[cfg.sampler] ?? new sdk.ParentBasedSampler({ root: new sdk.AlwaysOnSampler() })
  const exporter = new OTLPTraceExporter({ url: cfg.url, headers: cfg.headers })
  const p = new sdk.TracerProvider({
    resource: resourceFromAttributes({ ...cfg.resourceAttributes, 'service.name': cfg.serviceName, 'service.version': version }),
    sampler,
    // A captured prompt or a long error message stays readable and bounded.
    spanLimits: { attributeValueLengthLimit: CONTENT_CAP, attributeCountLimit: 128, eventCountLimit: 128 },
    spanProcessors: [new sdk.BatchSpanProcessor({ exporter, scheduledDelayMillis: cfg.scheduleDelayMs })],
  })
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable())
  propagation.setGlobalPropagator(new W3CTraceContextPropagator())
  trace.setGlobalTracerProvider(p)
  tracer = p.getTracer(NAME, version)
  provider = p
  tracingOn = true
  captureContent = cfg.captureContent
}

/** Sends the spans still queued and stops the exporter (graceful shutdown: none is lost at SIGTERM). */
export async function stopTracing(): Promise<void> {
  const p = provider
  if (!p) return
  provider = null
  try {
    await p.forceFlush()
  } finally {
    await p.shutdown()
  }
}

/** A span started now (not made active): its parent is `parent`, else the active span. */
export function startSpan(name: string, attributes: Attributes, opts: { parent?: Context; kind?: SpanKind } = {}): Span {
  return tracer.startSpan(name, { kind: opts.kind ?? SpanKind.INTERNAL, attributes }, opts.parent ?? context.active())
}

/** The context in which `span` is the active one. */
export function contextWith(span: Span, parent: Context = context.active()): Context {
  return trace.setSpan(parent, span)
}

/** The active context (a span's parent captured now, used later). */
export const activeContext = (): Context => context.active()

/** The active span (a non-recording one when there is none). */
export const activeSpan = (): Span => trace.getActiveSpan() ?? NOOP_SPAN

export const runIn = <T>(ctx: Context, fn: () => T): T => context.with(ctx, fn)

/**
 * Runs `fn` in a span named `name` (a child of the active span): its status is an error, with an
 * exception event, when `fn` throws. `attributes` is a function so nothing is built with tracing
 * off, when `fn` runs alone (given a non-recording span).
 */
export async function withSpan<T>(
  name: string,
  attributes: () => Attributes,
  fn: (span: Span) => Promise<T>,
  opts: { parent?: Context; kind?: SpanKind } = {},
): Promise<T> {
  if (!tracingOn) return fn(NOOP_SPAN)
  const span = startSpan(name, attributes(), opts)
  return endAfter(span, () => context.with(trace.setSpan(opts.parent ?? context.active(), span), () => fn(span)))
}

/**
 * The try/catch/finally of a span the caller started (and may have given attributes to first): the
 * span is failed when `fn` throws and ended however `fn` settles. `null` (tracing off) runs `fn` alone.
 */
export async function endAfter<T>(span: Span | null, fn: () => Promise<T>): Promise<T> {
  if (!span) return fn()
  try {
    return await fn()
  } catch (err) {
    failSpan(span, err)
    throw err
  } finally {
    span.end()
  }
}

/** `endAfter` for a stream: the span ends when the stream does (finished, failed, or left by its reader). */
export async function* endAfterStream<T>(span: Span, stream: AsyncGenerator<T>): AsyncGenerator<T> {
  try {
    yield* stream
  } catch (err) {
    failSpan(span, err)
    throw err
  } finally {
    span.end()
  }
}

/** Where and how spans are exported (read from the OTEL_* variables by src/config.ts). */
export interface TracingConfig {
  /** Where spans are POSTed: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as given, or OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces. */
  url: string
  /** OTEL_EXPORTER_OTLP_HEADERS, decoded (values are secrets: never logged). */
  headers: Record<string, string>
  serviceName: string
  resourceAttributes: Record<string, string>
  sampler: string
  samplerArg: number
  scheduleDelayMs: number
  /** Prompts and completions on GenAI spans (OTEL_GENAI_CAPTURE_CONTENT=true); off by default. */
  captureContent: boolean
}

/**
 * Error status and an exception event (the error's name and message; the stack stays in the logs).
 * A URL in the message keeps only its origin: an outgoing call's path and query never reach a span.
 */
export function failSpan(span: Span, err: unknown, message?: string) {
  const e = err as { name?: string; message?: string; code?: string }
  const text = e?.message === undefined ? undefined : redactUrls(String(e.message))
  span.recordException({ name: e?.code ?? e?.name ?? 'Error', message: text ?? redactUrls(String(err)) })
  span.setStatus({ code: SpanStatusCode.ERROR, message: message === undefined ? text : redactUrls(message) })
}

/** A failure that is an outcome, not an exception (a node failed with a code, a 500 answered). */
export function markError(span: Span, message: string) {
  span.setStatus({ code: SpanStatusCode.ERROR, message: redactUrls(message) })
}

/** W3C trace context as stored beside a row (runs, documents, events, deliveries): a JSON object. */
export interface TraceCarrier {
  traceparent: string
  tracestate?: string
}

/**
 * The active context as a carrier to store with work another process picks up, so that its spans
 * join this trace; null with tracing off or no sampled span active.
 */
export function traceContext(): TraceCarrier | null {
  if (!tracingOn) return null
  const carrier: Record<string, string> = {}
  propagation.inject(context.active(), carrier)
  return carrier.traceparent ? (carrier as unknown as TraceCarrier) : null
}

/** The context a stored carrier describes (the root context for none): the parent of the spans of work picked up. */
export function contextFrom(carrier: TraceCarrier | null | undefined): Context {
  if (!carrier || typeof carrier.traceparent !== 'string') return ROOT_CONTEXT
  return propagation.extract(ROOT_CONTEXT, carrier)
}

/** The remote parent an incoming request names in `traceparent` (the root context for none). */
export function contextOfRequest(headers: Headers): Context {
  return propagation.extract(ROOT_CONTEXT, headers, HEADERS_GETTER)
}

const HEADERS_GETTER = {
  get: (carrier: Headers, key: string) => carrier.get(key) ?? undefined,
  keys: (carrier: Headers) => [...carrier.keys()],
}

/** `injectTrace` for headers kept as a plain object (webhook attempts, provider calls). */
export function injectTraceRecord(headers: Record<string, string>): Record<string, string> {
  propagation.inject(context.active(), headers)
  return headers
}

/** Content captured on GenAI spans is cut at this many characters (also the SDK's attribute limit). */
export const CONTENT_CAP = 16_384

/** `value` as JSON, cut to CONTENT_CAP characters. */
export function capped(value: unknown): string {
  const text = typeof value === 'string' ? value : JSON.stringify(value)
  return text.length <= CONTENT_CAP ? text : `${text.slice(0, CONTENT_CAP - 1)}…`
}

const NOOP_SPAN = trace.wrapSpanContext({ traceId: '00000000000000000000000000000000', spanId: '0000000000000000', traceFlags: 0 })

export { SpanKind, SpanStatusCode, type Attributes, type Context, type Span }
