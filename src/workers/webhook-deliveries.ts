import type { Logger } from 'pino'
import { Counter, Histogram } from 'prom-client'
import type { Config } from '../config'
import { advanceDelivery, DELIVERY_TIMER } from '../domain/deliveries'
import { urlPolicy } from '../lib/net-guard'
import type { Metrics } from '../lib/metrics'
import type { SecretBox } from '../lib/secret-box'
import type { Pool } from '../store/db'
import * as store from '../store/deliveries'
import { clearFailureStreaks, recordFailures } from '../store/webhooks'
import type { TimerHandler, Timers } from '../store/redis/timers'
import { sendDelivery, type SendResult } from './webhook-sender'
import { redactUrls } from '../lib/redact-url'
import { contextFrom, markError, SpanKind, tracingOn, withSpan, type TraceCarrier } from '../lib/tracing'


interface Sending {
  id: string
  webhookId: string
  attempt: number
  url: string
  event: string
  data: Record<string, unknown>
  secrets: string[]
  trace: TraceCarrier | null
}

interface Finished {
  job: Sending
  result: SendResult
}

/**
 * Runs the delivery machine: a fired timer claims a batch of deliveries (moves them to `sending` in
 * one transaction), the POSTs go out concurrently after commit, and their results are settled in
 * batches (one transaction per batch, not per delivery: on PGlite's single connection a transaction
 * per delivery capped the rate; see bench/README.md). Every save is the machine's own transition from
 * the locked row, so a stale timer or a late result changes nothing.
 *
 * The same steps as the lease loop of runs and documents (claim, hold, stop then release, take-over
 * after expiry), with the hold in the machine's `sending` deadline instead of a heartbeat: why, in
 * docs/architecture.md, "Workers and leases".
 */
export class DeliveryWorker implements TimerHandler {
  private inFlight = 0
  private starting = 0
  private results: Finished[] = []
  private flushing: Promise<void> | null = null
  private flushTimer: ReturnType<typeof setTimeout> | null = null
  private readonly secretCache = new Map<string, string>()
  private readonly attempts: Counter
  private readonly duration: Histogram

  constructor(
    private readonly d: { sql: Pool; config: Config; secretBox: SecretBox; timers: Timers; log: Logger; metrics: Metrics },
    private readonly concurrency = 256,
  ) {
    this.attempts = new Counter({ name: 'webhook_attempts_total', help: 'Webhook delivery attempts by outcome', labelNames: ['outcome'], registers: [d.metrics.registry] })
    this.duration = new Histogram({
      name: 'webhook_attempt_duration_seconds',
      help: 'Time from sending a delivery to the receiver answering',
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers: [d.metrics.registry],
    })
  }

  capacity(): number {
    return this.concurrency - this.inFlight - this.starting
  }

  async fire(ids: string[]): Promise<void> {
    this.starting += ids.length
    let jobs: Sending[]
    try {
      jobs = await this.claim(ids)
    } finally {
      this.starting -= ids.length
    }
    for (const job of jobs) {
      this.inFlight++
      void this.send(job)
    }
  }

  /** Resolves when no attempt is in flight and every result is settled (a graceful stop: nothing is left held). */
  async drain(): Promise<void> {
    while (this.inFlight > 0 || this.results.length > 0 || this.flushing) {
      this.flush()
      await (this.flushing ?? Bun.sleep(20))
    }
  }

  private async claim(ids: string[]): Promise<Sending[]> {
    const now = Date.now()
    const timers: { id: string; at: Date | null }[] = []
    const jobs: Sending[] = []
    const failed: string[] = []
    await this.d.sql.begin(async (tx) => {
      const rows = await store.lockDeliveriesForWork(tx, ids)
      if (rows.length < ids.length) {
        // Not returned: locked by another worker right now (its timer comes back after the claim
        // lease) or gone with its webhook (its timer is cancelled here, or it would come back forever).
        const found = new Set(rows.map((r) => r.id))
        const gone = await store.missingDeliveries(tx, ids.filter((id) => !found.has(id)))
        for (const id of gone) timers.push({ id, at: null })
      }
      const updates: store.DeliveryUpdate[] = []
      for (const row of rows) {
        const state = row.snapshot.value
        const due = row.next_attempt_at ? row.next_attempt_at.getTime() : null
        if (state === 'succeeded' || state === 'failed' || due === null) {
          timers.push({ id: row.id, at: null })
          continue
        }
        if (due > now + 20) {
          // Early (a stale copy of a timer that was since moved): arm it again for the right time.
          timers.push({ id: row.id, at: row.next_attempt_at })
          continue
        }
        if (state === 'sending') {
          // The lease passed with no result: the worker that sent it died mid-attempt.
          const next = advanceDelivery(row, { type: 'attempt.abandoned' }, now)
          if (!next) {
            timers.push({ id: row.id, at: row.next_attempt_at })
            continue
          }
          next.update.attempt = record(row.attempts_count, now, 'abandoned: no result within the lease (the worker stopped mid-attempt)')
          this.failedAttempt(row, next.update.attempt, next.step.state === 'failed' ? 'failed' : 'retryable')
          updates.push(next.update)
          timers.push({ id: row.id, at: next.update.next_attempt_at })
          if (next.step.state === 'failed') failed.push(row.webhook_id)
          continue
        }
        const started = advanceDelivery(row, { type: 'timer.fired' }, now)
        if (!started) {
          timers.push({ id: row.id, at: row.next_attempt_at })
          continue
        }
        if (!row.enabled && !started.step.persisted.context.manual) {
          const stopped = advanceDelivery({ ...row, ...started.update }, { type: 'attempt.failed', retryable: false }, now)!
          stopped.update.attempt = record(started.update.attempts_count, now, 'not sent: the webhook is disabled')
          this.failedAttempt(row, stopped.update.attempt, 'failed')
          updates.push(stopped.update)
          timers.push({ id: row.id, at: null })
          continue
        }
        updates.push(started.update)
        timers.push({ id: row.id, at: started.update.next_attempt_at })
        jobs.push({
          id: row.id,
          webhookId: row.webhook_id,
          attempt: started.update.attempts_count,
          url: row.url,
          event: row.event_type,
          data: row.data,
          secrets: this.secretsOf(row, now),
          trace: row.trace_context,
        })
      }
      await store.saveDeliveries(tx, updates)
      if (failed.length > 0) await recordFailures(tx, failed, this.d.config.webhookDisableAfterMs)
    })
    await this.d.timers.schedule(DELIVERY_TIMER, timers)
    return jobs
  }

  private secretsOf(row: store.DeliveryWork, now: number): string[] {
    const secrets = [this.open(row.secret_encrypted)]
    if (row.previous_secret_encrypted && row.previous_secret_expires_at && row.previous_secret_expires_at.getTime() > now) {
      secrets.push(this.open(row.previous_secret_encrypted))
    }
    return secrets
  }

  private open(sealed: string): string {
    let plain = this.secretCache.get(sealed)
    if (plain === undefined) {
      if (this.secretCache.size >= 10_000) this.secretCache.clear()
      plain = this.d.secretBox.open(sealed)
      this.secretCache.set(sealed, plain)
    }
    return plain
  }

  /**
   * One attempt, in a span of the trace of the request whose event caused the delivery (its
   * retries too: each attempt is a child of that request's span, docs/observability.md).
   */
  private async send(job: Sending) {
    if (!tracingOn) return this.attempt(job)
    return withSpan(`webhook ${job.event}`, () => ({
      delivery_id: job.id,
      webhook_id: job.webhookId,
      'webhook.event': job.event,
      'webhook.attempt': job.attempt,
      'http.request.method': 'POST',
    }), async (span) => {
      const result = await this.attempt(job)
      if (result.record.status_code !== null) span.setAttribute('http.response.status_code', result.record.status_code)
      span.setAttribute('webhook.outcome', result.ok ? 'succeeded' : result.retryable ? 'retryable' : 'failed')
      if (!result.ok) markError(span, result.record.error ?? 'the attempt failed')
      return result
    }, { parent: contextFrom(job.trace), kind: SpanKind.CLIENT })
  }

  private async attempt(job: Sending): Promise<SendResult> {
    let result: SendResult
    try {
      result = await sendDelivery({
        deliveryId: job.id,
        url: job.url,
        event: job.event,
        data: job.data,
        secrets: job.secrets,
        timeoutMs: this.d.config.webhookTimeoutMs,
        policy: urlPolicy(this.d.config),
      })
    } catch (err) {
      result = { ok: false, retryable: true, record: { at: new Date().toISOString(), status_code: null, duration_ms: 0, error: redactUrls(`internal: ${(err as Error).message}`), response_excerpt: null } }
    }
    const outcome = result.ok ? 'succeeded' : result.retryable ? 'retryable' : 'failed'
    this.attempts.inc({ outcome })
    if (!result.ok) this.failedAttempt({ id: job.id, webhook_id: job.webhookId, event_type: job.event }, { attempt: job.attempt, ...result.record }, result.retryable ? 'retryable' : 'failed')
    this.duration.observe(result.record.duration_ms / 1000)
    this.results.push({ job, result })
    this.inFlight--
    // Results are saved in batches: at once when many are waiting, else after 2 ms of gathering.
    if (this.results.length >= 100) this.flush()
    else this.flushTimer ??= setTimeout(() => this.flush(), 2)
    return result
  }

  /**
   * One line per failed attempt, what an operator greps for: which delivery, and why (the URL's path
   * and query are never in the reason: src/workers/webhook-sender.ts).
   */
  private failedAttempt(row: { id: string; webhook_id: string; event_type: string }, attempt: store.AttemptRecord, outcome: 'retryable' | 'failed') {
    this.d.log.warn({
      delivery_id: row.id,
      webhook_id: row.webhook_id,
      event: row.event_type,
      attempt: attempt.attempt,
      status: attempt.status_code,
      reason: attempt.error,
      outcome,
    }, 'webhook delivery attempt failed')
  }

  private flush() {
    if (this.flushTimer) {
      clearTimeout(this.flushTimer)
      this.flushTimer = null
    }
    if (this.flushing || this.results.length === 0) return
    const batch = this.results.splice(0, 500)
    this.flushing = this.settle(batch)
      .catch((err) => this.d.log.error({ err, count: batch.length }, 'saving webhook attempt results failed; their leases will retry them'))
      .finally(() => {
        this.flushing = null
        if (this.results.length > 0) this.flush()
      })
  }

  private async settle(batch: Finished[]) {
    const now = Date.now()
    const timers: { id: string; at: Date | null }[] = []
    let disabled: string[] = []
    await this.d.sql.begin(async (tx) => {
      const rows = new Map((await store.lockDeliveries(tx, batch.map((b) => b.job.id))).map((r) => [r.id, r]))
      const updates: store.DeliveryUpdate[] = []
      const succeeded = new Set<string>()
      const failed = new Set<string>()
      for (const { job, result } of batch) {
        const row = rows.get(job.id)
        // Gone (webhook deleted), or the attempt was abandoned and another one started: too late.
        if (!row || row.snapshot.value !== 'sending' || row.attempts_count !== job.attempt) continue
        const event = result.ok
          ? { type: 'attempt.succeeded' as const, statusCode: result.record.status_code ?? 200 }
          : { type: 'attempt.failed' as const, retryable: result.retryable, retryAfterMs: result.retryAfterMs }
        const next = advanceDelivery(row, event, now)
        if (!next) continue
        next.update.attempt = { attempt: job.attempt, ...result.record }
        updates.push(next.update)
        timers.push({ id: job.id, at: next.update.next_attempt_at })
        if (next.step.state === 'succeeded') succeeded.add(row.webhook_id)
        if (next.step.state === 'failed') failed.add(row.webhook_id)
      }
      await store.saveDeliveries(tx, updates)
      await clearFailureStreaks(tx, [...succeeded])
      disabled = await recordFailures(tx, [...failed].filter((id) => !succeeded.has(id)), this.d.config.webhookDisableAfterMs)
    })
    for (const id of disabled) this.d.log.warn({ webhook_id: id }, 'webhook disabled: every delivery failed for the configured period')
    await this.d.timers.schedule(DELIVERY_TIMER, timers)
  }
}

function record(attempt: number, now: number, error: string): store.AttemptRecord {
  return { attempt, at: new Date(now).toISOString(), status_code: null, duration_ms: 0, error, response_excerpt: null }
}
