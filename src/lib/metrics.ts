import { Counter, Histogram, Registry, collectDefaultMetrics } from 'prom-client'

/** Request counts and latency histograms by method, route and status, in Prometheus text. */
export function createMetrics(opts: { defaults?: boolean } = {}) {
  const registry = new Registry()
  if (opts.defaults) collectDefaultMetrics({ register: registry })
  const labelNames = ['method', 'route', 'status'] as const
  const requests = new Counter({ name: 'http_requests_total', help: 'HTTP requests answered', labelNames, registers: [registry] })
  const duration = new Histogram({
    name: 'http_request_duration_seconds',
    help: 'Time from request to response body ready',
    labelNames,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120],
    registers: [registry],
  })
  // prom-client hashes the label object on every call; the children for one label set are cached
  // instead (a few hundred route x status pairs at most).
  const children = new Map<string, { count: () => void; time: (s: number) => void }>()
  return {
    registry,
    observe(method: string, route: string, status: number, seconds: number) {
      const key = `${method} ${route} ${status}`
      let child = children.get(key)
      if (!child) {
        const labels = { method, route, status: String(status) }
        const counter = requests.labels(labels)
        const histogram = duration.labels(labels)
        child = { count: () => counter.inc(), time: (s) => histogram.observe(s) }
        children.set(key, child)
      }
      child.count()
      child.time(seconds)
    },
    text: () => registry.metrics(),
    contentType: registry.contentType,
  }
}

export type Metrics = ReturnType<typeof createMetrics>
