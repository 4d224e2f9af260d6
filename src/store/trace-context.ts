import { traceContext, type TraceCarrier } from '../lib/tracing'
import type { Sql, Tx } from './db'
import { jsonb } from './db'

/**
 * The `trace_context` value of a row inserted now: the active span's W3C context (the request
 * that creates the work, docs/observability.md), or SQL null with tracing off.
 */
export function traceJson(sql: Sql | Tx, carrier: TraceCarrier | null = traceContext()) {
  return carrier ? jsonb(sql, carrier) : null
}

export type { TraceCarrier }
