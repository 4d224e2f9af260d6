import type { Deps } from '../deps'
import { ChunkIndexer } from './chunk-indexer'
import { DocumentWorker } from './documents'
import { FanOut } from './fanout'
import { rebuildDeliveryTimers, startMaintenance } from './maintenance'
import { TimerLoop } from './timers'
import { RUN_TIMER, RunWorker } from './runs'
import { ScheduleWorker } from './schedules'
import { DeliveryWorker } from './webhook-deliveries'
import { DELIVERY_TIMER } from '../domain/deliveries'
import { subscribeWakeUps } from './wake'

/**
 * The job catalog: every background worker of the service, started together by src/main.ts, in the
 * process that also serves the API (`bun start`) or in a process of workers only (`bun run worker`,
 * `src/main.ts worker`). Several processes may run them at once (docs/architecture.md, "Process roles").
 */
export interface Workers {
  fanOut: FanOut
  deliveries: DeliveryWorker
  runs: RunWorker
  documents: DocumentWorker
  indexer: ChunkIndexer
  schedules: ScheduleWorker
  stop(): Promise<void>
}

export async function startWorkers(deps: Deps): Promise<Workers> {
  const d = { sql: deps.db.sql, config: deps.config, secretBox: deps.secretBox, timers: deps.timers, log: deps.log, metrics: deps.metrics, redis: deps.redis }
  const deliveries = new DeliveryWorker(d)
  const runs = new RunWorker(deps)
  const documents = new DocumentWorker(deps)
  const schedules = new ScheduleWorker(deps)
  const indexer = new ChunkIndexer(deps, () => documents.busy > 0)
  const loop = new TimerLoop(deps.redis, deps.log, deps.metrics, { [DELIVERY_TIMER]: deliveries, [RUN_TIMER]: runs })
  const fanOut = new FanOut(d)
  const rebuilt = await rebuildDeliveryTimers(d.sql, d.timers)
  if (rebuilt > 0) deps.log.info({ count: rebuilt }, 'webhook deliveries in progress: timers re-armed')
  const offs = [
    deps.wake.on('timers', () => loop.nudge()),
    deps.wake.on('events', () => fanOut.nudge()),
    deps.wake.on('runs', () => runs.nudge()),
    deps.wake.on('documents', () => documents.nudge()),
    deps.wake.on('indexer', () => indexer.nudge()),
  ]
  // API-only processes announce new runs, documents and events here (server mode).
  const unsubscribeWakeUps = await subscribeWakeUps(deps.redis, { runs, documents, events: fanOut }, deps.log)
  loop.start()
  fanOut.start()
  runs.start()
  documents.start()
  schedules.start()
  indexer.start()
  const stopMaintenance = startMaintenance(d)
  return {
    fanOut,
    deliveries,
    runs,
    documents,
    schedules,
    indexer,
    async stop() {
      stopMaintenance()
      await unsubscribeWakeUps().catch(() => {})
      for (const off of offs) off()
      await Promise.all([loop.stop(), fanOut.stop(), runs.stop(), documents.stop(), schedules.stop(), indexer.stop()])
      await deliveries.drain()
    },
  }
}
