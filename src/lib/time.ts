/** ISO 8601 UTC with milliseconds and `Z`, the one output format of CONTRACT section 1. */
export function iso(value: Date | string | null | undefined): string | null {
  if (value === null || value === undefined) return null
  const d = value instanceof Date ? value : new Date(value)
  return d.toISOString()
}

/** Parses a client time (any ISO 8601 form with an offset); returns null when it is not a time. */
export function parseTime(value: string): Date | null {
  // Date.parse accepts things like "1" or "March 7"; insist on an ISO 8601 date first.
  if (!/^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}(:?\d{2})?)?)?$/i.test(value)) return null
  const ms = Date.parse(value)
  return Number.isNaN(ms) ? null : new Date(ms)
}
