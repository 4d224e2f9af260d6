/**
 * Per-route circuit breaker (in-process): after `threshold` consecutive failures a route is skipped
 * for `coolDownMs`; the first call after the cool-down is a trial, and one success closes it again.
 * Three failures and 30 s: a route that failed three calls in a row is down for the next few dozen
 * calls, and 30 s is short enough that a recovered provider gets traffic back quickly.
 */
export class CircuitBreaker {
  private readonly state = new Map<string, { failures: number; openUntil: number }>()

  constructor(
    private readonly threshold = 3,
    private readonly coolDownMs = 30_000,
    private readonly now: () => number = Date.now,
  ) {}

  allows(route: string): boolean {
    const s = this.state.get(route)
    return !s || s.failures < this.threshold || s.openUntil <= this.now()
  }

  failed(route: string) {
    const s = this.state.get(route) ?? { failures: 0, openUntil: 0 }
    s.failures++
    if (s.failures >= this.threshold) s.openUntil = this.now() + this.coolDownMs
    this.state.set(route, s)
  }

  succeeded(route: string) {
    this.state.delete(route)
  }

  /** Routes currently skipped, for /metrics and tests. */
  openRoutes(): string[] {
    const now = this.now()
    return [...this.state].filter(([, s]) => s.failures >= this.threshold && s.openUntil > now).map(([r]) => r)
  }
}
