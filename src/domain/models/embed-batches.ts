import { ProviderError, type EmbeddingResult, type Provider } from './types'

/**
 * One route's share of an embeddings call (docs/models.md, "Embeddings: batches, concurrency and
 * retries"): the inputs cut to the provider's `maxEmbedBatch`, the batches sent through the
 * provider's limiter (`max_concurrency` requests at once, shared by every call to that provider) and
 * put back in input order. A batch refused for a passing reason is retried on the same route before
 * the call gives the route up: the batches that did succeed would otherwise be sent again to the
 * next route, or the whole call lost.
 */

/** Tries of one batch, the first included: ~1.75 s of backoff in all, unless the upstream asks for more. */
export const MAX_BATCH_ATTEMPTS = 4
/** The first backoff; it doubles each try, jittered to half-to-full so retried batches spread out. */
export const RETRY_BASE_MS = 250
/**
 * The longest `Retry-After` waited for. An upstream asking for more is not coming back within any
 * caller's patience: the route fails at once (the next route is tried, a document waits for its
 * lease and is claimed again).
 */
export const MAX_RETRY_AFTER_MS = 30_000

export interface Retry {
  /** The try that failed (1 for the first). */
  attempt: number
  delayMs: number
  error: ProviderError
}

/** `background`: the call's batches wait behind those of calls someone is waiting for (Limiter). */
export async function embedBatches(provider: Provider, model: string, inputs: string[], signal: AbortSignal, background: boolean, onRetry: (r: Retry) => void): Promise<EmbeddingResult> {
  const size = provider.maxEmbedBatch
  const limit = provider.embedLimit
  const batches: string[][] = []
  for (let i = 0; i < inputs.length; i += size) batches.push(inputs.slice(i, i + size))
  const parts = new Array<EmbeddingResult>(batches.length)
  if (!limit) {
    // The in-process provider computes on one thread (this one, or its embedding thread): batches at once would only take turns.
    for (const [b, batch] of batches.entries()) parts[b] = await withRetries(provider, model, batch, signal, onRetry)
  } else {
    // The first failure stops the call's other batches (queued ones never leave) and is what the call answers.
    const stop = new AbortController()
    const inner = AbortSignal.any([signal, stop.signal])
    let failure: { err: unknown } | null = null
    await Promise.all(
      batches.map(async (batch, b) => {
        try {
          parts[b] = await limit.run(inner, () => withRetries(provider, model, batch, inner, onRetry), background)
        } catch (err) {
          if (failure) return
          failure = { err }
          stop.abort(err)
        }
      }),
    )
    if (failure) throw (failure as { err: unknown }).err
  }
  const vectors: number[][] = []
  let tokens = 0
  for (const part of parts) {
    for (const v of part.vectors) vectors.push(v)
    tokens += part.tokens
  }
  return { vectors, tokens }
}

/** One batch, tried again while the failure is a passing one and tries remain; the batch keeps its slot meanwhile. */
async function withRetries(provider: Provider, model: string, batch: string[], signal: AbortSignal, onRetry: (r: Retry) => void): Promise<EmbeddingResult> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await provider.embed(model, batch, signal)
    } catch (err) {
      const delayMs = retryDelay(err, attempt)
      if (delayMs === null || signal.aborted) throw err
      onRetry({ attempt, delayMs, error: err as ProviderError })
      await sleep(delayMs, signal)
    }
  }
}

/**
 * How long to wait before trying a failed batch again, or null not to. Retried: what fails over
 * (429, 408, 5xx, a malformed answer, a refused or reset connection), except our own time-out: the
 * upstream already had `timeout_ms` (default 60 s), and trying it again would make the caller wait
 * that long once per try. The wait holds the batch's slot: an upstream that pushes back gets fewer
 * requests until it recovers.
 */
export function retryDelay(err: unknown, attempt: number, random: () => number = Math.random): number | null {
  if (!(err instanceof ProviderError) || err.failover === null) return null
  if (err.failover === 'timeout' && err.status === null) return null
  if (attempt >= MAX_BATCH_ATTEMPTS) return null
  if (err.retryAfterMs !== undefined) return err.retryAfterMs <= MAX_RETRY_AFTER_MS ? err.retryAfterMs : null
  const ceiling = RETRY_BASE_MS * 2 ** (attempt - 1)
  return Math.round(ceiling / 2 + (random() * ceiling) / 2)
}

/** A wait that ends early, rejected with the signal's reason, when the signal aborts. */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.reject(signal.reason)
  return new Promise((resolve, reject) => {
    const done = () => {
      signal.removeEventListener('abort', stop)
      resolve()
    }
    const timer = setTimeout(done, ms)
    const stop = () => {
      clearTimeout(timer)
      reject(signal.reason)
    }
    signal.addEventListener('abort', stop, { once: true })
  })
}
