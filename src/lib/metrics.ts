import { Registry, collectDefaultMetrics } from 'prom-client'

// Clients choose the method; anything unusual is one series, so no client can grow the label set.
const METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'])
const BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120]

interface Series {
  labels: string
  count: number
  sum: number
  /** Per bucket (not cumulative); the last slot is +Inf. */
  buckets: number[]
}

/**
 * Request counts and latency histograms by method, route and status, in Prometheus text. The two
 * HTTP families are plain numbers per series, rendered at scrape time: prom-client hashes the label
 * object on every inc/observe, even through `labels()` children. Process metrics stay prom-client's.
 */
export function createMetrics(opts: { defaults?: boolean } = {}) {
  const registry = new Registry()
  if (opts.defaults) collectDefaultMetrics({ register: registry })
  const series = new Map<string, Series>()
  const escape = (v: string) => v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n')

  function render(): string {
    const lines = ['# HELP http_requests_total HTTP requests answered', '# TYPE http_requests_total counter']
    for (const s of series.values()) lines.push(`http_requests_total{${s.labels}} ${s.count}`)
    lines.push('# HELP http_request_duration_seconds Time from request to response body ready', '# TYPE http_request_duration_seconds histogram')
    for (const s of series.values()) {
      let cumulative = 0
      for (let i = 0; i <= BUCKETS.length; i++) {
        cumulative += s.buckets[i]!
        lines.push(`http_request_duration_seconds_bucket{le="${i < BUCKETS.length ? BUCKETS[i] : '+Inf'}",${s.labels}} ${cumulative}`)
      }
      lines.push(`http_request_duration_seconds_sum{${s.labels}} ${s.sum}`, `http_request_duration_seconds_count{${s.labels}} ${s.count}`)
    }
    return `${lines.join('\n')}\n`
  }

  return {
    registry,
    observe(rawMethod: string, route: string, status: number, seconds: number) {
      const method = METHODS.has(rawMethod) ? rawMethod : 'OTHER'
      const key = `${method} ${route} ${status}`
      let s = series.get(key)
      if (!s) {
        s = { labels: `method="${escape(method)}",route="${escape(route)}",status="${status}"`, count: 0, sum: 0, buckets: new Array(BUCKETS.length + 1).fill(0) }
        series.set(key, s)
      }
      s.count++
      s.sum += seconds
      let i = 0
      while (i < BUCKETS.length && seconds > BUCKETS[i]!) i++
      s.buckets[i]!++
    },
    text: async () => render() + (await registry.metrics()),
    contentType: registry.contentType,
  }
}
export type Metrics = ReturnType<typeof createMetrics>
