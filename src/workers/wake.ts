import type { Logger } from 'pino'
import type { Deps } from '../deps'
import type { WakeKind } from '../lib/wake-ups'
import type { RedisPort, Unsubscribe } from '../store/redis/port'

/**
 * Wake-ups between processes (server mode, docs/architecture.md "Process roles"). Creating a run,
 * storing a document or committing outbox events nudges this process's worker of that kind; a
 * process that serves the API without workers (`src/main.ts api`) has none, so it publishes the
 * kind on WAKE_CHANNEL instead, and every worker process nudges its own. Without it a worker-only
 * process found the work at its next idle look (WORKER_POLL_MS later), which is also what it falls
 * back to when a message is lost.
 */
export const WAKE_CHANNEL = 'workers:wake'
export const WAKE_KINDS = ['runs', 'documents', 'events'] as const satisfies readonly WakeKind[]
type Published = (typeof WAKE_KINDS)[number]

/** API-only processes: each nudge becomes a message, one at a time per kind (nudges made meanwhile are one more message after it). */
export function publishWakeUps(deps: Pick<Deps, 'wake' | 'redis'>): void {
  for (const kind of WAKE_KINDS) deps.wake.on(kind, coalesced(() => deps.redis.publish(WAKE_CHANNEL, kind)))
}

/** Worker processes with a shared Redis: a message names the kind of worker to nudge. */
export async function subscribeWakeUps(redis: RedisPort, targets: Record<Published, { nudge(): void }>, log: Logger): Promise<Unsubscribe> {
  if (redis.kind !== 'redis') return async () => {}
  try {
    return await redis.subscribe(WAKE_CHANNEL, (kind) => {
      if ((WAKE_KINDS as readonly string[]).includes(kind)) targets[kind as Published].nudge()
    })
  } catch (err) {
    log.warn({ err }, `workers: wake-ups from API processes unavailable (pub/sub failed); new work is found at the next idle look`)
    return async () => {}
  }
}

function coalesced(send: () => Promise<void>): () => void {
  let sending = false
  let again = false
  const go = () => {
    sending = true
    again = false
    send()
      .catch(() => {})
      .finally(() => {
        sending = false
        if (again) go()
      })
  }
  return () => {
    if (sending) again = true
    else go()
  }
}
