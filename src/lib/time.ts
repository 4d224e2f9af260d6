/** ISO 8601 UTC with milliseconds and `Z`, the one format of times in answers. */
export function iso(value: Date | string | null | undefined): string | null {
  if (value === null || value === undefined) return null
  const d = value instanceof Date ? value : new Date(value)
  return d.toISOString()
}

/** Parses a client time (any ISO 8601 form with an offset); returns null when it is not a time. */
export function parseTime(value: string): Date | null {
  // Date.parse accepts things like "1" or "March 7"; insist on an ISO 8601 date first.
  if (!/^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}(:?\d{2})?)?)?$/i.test(value)) return null
  // ...and a real calendar day: Date.parse rolls 2026-02-30 over to March 2.
  const [y, m, d] = value.slice(0, 10).split('-').map(Number) as [number, number, number]
  if (new Date(Date.UTC(y, m - 1, d)).getUTCDate() !== d) return null
  const ms = Date.parse(value)
  if (Number.isNaN(ms)) return null
  // Postgres has no year 0 (and JS writes 1 BC as "0000"): keep times to years 1-9999 after conversion.
  const year = new Date(ms).getUTCFullYear()
  return year >= 1 && year <= 9999 ? new Date(ms) : null
}
