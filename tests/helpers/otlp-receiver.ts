import type { Server } from 'bun'
import protobuf from 'protobufjs'
import { waitFor } from './harness'

/**
 * A loopback OTLP/HTTP trace receiver (POST /v1/traces), as a collector is one: it decodes the real
 * protobuf wire format (application/x-protobuf, the service's exporter) with the messages of
 * opentelemetry-proto's trace service below, and takes OTLP/JSON too. Spans are kept flattened,
 * their ids in hex and their attributes as plain values, for tests to walk as a tree.
 */
const PROTO = `
syntax = "proto3";
package opentelemetry.proto;

message AnyValue {
  oneof value {
    string string_value = 1;
    bool bool_value = 2;
    int64 int_value = 3;
    double double_value = 4;
    ArrayValue array_value = 5;
    KeyValueList kvlist_value = 6;
    bytes bytes_value = 7;
  }
}
message ArrayValue { repeated AnyValue values = 1; }
message KeyValueList { repeated KeyValue values = 1; }
message KeyValue { string key = 1; AnyValue value = 2; }
message InstrumentationScope { string name = 1; string version = 2; repeated KeyValue attributes = 3; uint32 dropped_attributes_count = 4; }
message Resource { repeated KeyValue attributes = 1; uint32 dropped_attributes_count = 2; }

message ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1; }
message ResourceSpans { Resource resource = 1; repeated ScopeSpans scope_spans = 2; string schema_url = 3; }
message ScopeSpans { InstrumentationScope scope = 1; repeated Span spans = 2; string schema_url = 3; }
message Span {
  bytes trace_id = 1;
  bytes span_id = 2;
  string trace_state = 3;
  bytes parent_span_id = 4;
  fixed32 flags = 16;
  string name = 5;
  enum SpanKind { SPAN_KIND_UNSPECIFIED = 0; SPAN_KIND_INTERNAL = 1; SPAN_KIND_SERVER = 2; SPAN_KIND_CLIENT = 3; SPAN_KIND_PRODUCER = 4; SPAN_KIND_CONSUMER = 5; }
  SpanKind kind = 6;
  fixed64 start_time_unix_nano = 7;
  fixed64 end_time_unix_nano = 8;
  repeated KeyValue attributes = 9;
  uint32 dropped_attributes_count = 10;
  message Event { fixed64 time_unix_nano = 1; string name = 2; repeated KeyValue attributes = 3; uint32 dropped_attributes_count = 4; }
  repeated Event events = 11;
  uint32 dropped_events_count = 12;
  message Link { bytes trace_id = 1; bytes span_id = 2; string trace_state = 3; repeated KeyValue attributes = 4; uint32 dropped_attributes_count = 5; fixed32 flags = 6; }
  repeated Link links = 13;
  uint32 dropped_links_count = 14;
  Status status = 15;
}
message Status {
  reserved 1;
  string message = 2;
  enum StatusCode { STATUS_CODE_UNSET = 0; STATUS_CODE_OK = 1; STATUS_CODE_ERROR = 2; }
  StatusCode code = 3;
}
`

const root = protobuf.parse(PROTO, { keepCase: true }).root
const ExportTraceServiceRequest = root.lookupType('opentelemetry.proto.ExportTraceServiceRequest')

export type AttrValue = string | number | boolean | AttrValue[] | { [k: string]: AttrValue } | null

export interface ReceivedSpan {
  traceId: string
  spanId: string
  /** '' for a root span. */
  parentSpanId: string
  name: string
  /** 1 internal, 2 server, 3 client... */
  kind: number
  attributes: Record<string, AttrValue>
  events: { name: string; attributes: Record<string, AttrValue> }[]
  /** 0 unset, 1 ok, 2 error. */
  status: { code: number; message: string }
  resource: Record<string, AttrValue>
  scope: string
}

export interface OtlpReceiver {
  url: string
  spans: ReceivedSpan[]
  /** Content types of the exports received (the exporter's is application/x-protobuf). */
  contentTypes: string[]
  /** Polls until `pick` answers something truthy from the spans received so far. */
  waitFor<T>(pick: (spans: ReceivedSpan[]) => T | null | undefined | false, what: string, timeoutMs?: number): Promise<T>
  close(): Promise<void>
}

export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = []
  const contentTypes: string[] = []
  const server: Server<undefined> = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    async fetch(req) {
      if (new URL(req.url).pathname !== '/v1/traces' || req.method !== 'POST') return new Response('not found', { status: 404 })
      const type = req.headers.get('content-type') ?? ''
      contentTypes.push(type)
      const bytes = new Uint8Array(await req.arrayBuffer())
      let message: any
      if (type.startsWith('application/json')) message = JSON.parse(new TextDecoder().decode(bytes))
      else if (type.startsWith('application/x-protobuf')) {
        message = ExportTraceServiceRequest.toObject(ExportTraceServiceRequest.decode(bytes), { longs: String, enums: Number, bytes: Array, defaults: true, oneofs: true })
      } else return new Response('unsupported content type', { status: 415 })
      spans.push(...flatten(message))
      // An empty ExportTraceServiceResponse.
      return new Response(type.startsWith('application/json') ? '{}' : new Uint8Array(0), { headers: { 'content-type': type } })
    },
  })
  return {
    url: `http://127.0.0.1:${server.port}`,
    spans,
    contentTypes,
    async waitFor(pick, what, timeoutMs = 20_000) {
      let found: any = null
      try {
        await waitFor(() => Boolean((found = pick(spans))), { timeoutMs, what })
      } catch (err) {
        throw new Error(`${(err as Error).message}\n--- spans received ---\n${spans.map(describe).join('\n')}`)
      }
      return found
    },
    close: async () => {
      await server.stop(true)
    },
  }
}

/** One line per span, for a failure's message. */
export function describe(s: ReceivedSpan): string {
  return `${s.traceId.slice(0, 8)} ${s.spanId.slice(0, 8)} <- ${s.parentSpanId.slice(0, 8) || 'root    '} ${s.name} ${JSON.stringify(s.attributes)}`
}

const hex = (v: unknown): string => {
  if (typeof v === 'string') return /^[0-9a-f]*$/i.test(v) ? v.toLowerCase() : Buffer.from(v, 'base64').toString('hex')
  if (Array.isArray(v) || v instanceof Uint8Array) return Buffer.from(v as number[]).toString('hex')
  return ''
}

function value(v: any): AttrValue {
  if (!v) return null
  const key = (name: string, camel: string) => (v[name] !== undefined ? v[name] : v[camel])
  const str = key('string_value', 'stringValue')
  if (str !== undefined && str !== null) return str
  if (key('bool_value', 'boolValue') !== undefined) return key('bool_value', 'boolValue')
  if (key('int_value', 'intValue') !== undefined) return Number(key('int_value', 'intValue'))
  if (key('double_value', 'doubleValue') !== undefined) return Number(key('double_value', 'doubleValue'))
  const arr = key('array_value', 'arrayValue')
  if (arr) return (arr.values ?? []).map(value)
  const kv = key('kvlist_value', 'kvlistValue')
  if (kv) return attributes(kv.values)
  return null
}

function attributes(list: any[] | undefined): Record<string, AttrValue> {
  const out: Record<string, AttrValue> = {}
  for (const kv of list ?? []) out[kv.key] = value(kv.value)
  return out
}

/**
 * protobufjs with `defaults: true` fills every field of a oneof's members; the value actually set is
 * the one named by the oneof (`value`), so it is read from there first.
 */
function pickOneof(list: any[] | undefined): any[] {
  return (list ?? []).map((kv: any) => {
    const v = kv.value
    if (v && typeof v.value === 'string' && v[v.value] !== undefined) {
      const set = v[v.value]
      return { key: kv.key, value: { [v.value]: v.value === 'array_value' ? { values: (set.values ?? []).map((x: any) => pickValue(x)) } : v.value === 'kvlist_value' ? { values: pickOneof(set.values) } : set } }
    }
    return kv
  })
}

const pickValue = (v: any) => (v && typeof v.value === 'string' ? { [v.value]: v[v.value] } : v)

function flatten(message: any): ReceivedSpan[] {
  const out: ReceivedSpan[] = []
  for (const rs of message.resource_spans ?? message.resourceSpans ?? []) {
    const resource = attributes(pickOneof(rs.resource?.attributes))
    for (const ss of rs.scope_spans ?? rs.scopeSpans ?? []) {
      for (const s of ss.spans ?? []) {
        out.push({
          traceId: hex(s.trace_id ?? s.traceId),
          spanId: hex(s.span_id ?? s.spanId),
          parentSpanId: hex(s.parent_span_id ?? s.parentSpanId),
          name: s.name,
          kind: Number(s.kind),
          attributes: attributes(pickOneof(s.attributes)),
          events: (s.events ?? []).map((e: any) => ({ name: e.name, attributes: attributes(pickOneof(e.attributes)) })),
          status: { code: Number(s.status?.code ?? 0), message: s.status?.message ?? '' },
          resource,
          scope: ss.scope?.name ?? '',
        })
      }
    }
  }
  return out
}
