import { LIMIT_SIGNALS, residentBytes, WATCHDOG_POLL_MS, type WatchdogMessage } from './sandbox-protocol'

/**
 * A thread of the document process (sandbox-child.ts) that watches it from inside: the main thread
 * reads a document synchronously (a parser can hold it for seconds, a hostile file for minutes), so
 * it sees neither its channel closing nor a timer until the document is done. Every
 * WATCHDOG_POLL_MS this thread:
 * - ends the process when it has lost its parent. On Linux an orphan is adopted by init or the
 *   nearest subreaper, so `process.ppid` changes the moment the service dies, however it died
 *   (SIGKILL included): the process is gone within a poll. (`prctl(PR_SET_PDEATHSIG)` would say the
 *   same, but Bun.spawn cannot set it.)
 * - holds the document being read to the limits the service holds it to (sandbox-process.ts), so that they
 *   hold even while the service cannot enforce them (its event loop stalled): past either it ends
 *   the process with the limit's signal (LIMIT_SIGNALS), which the service maps back to the
 *   document's `processing_timeout` or `processing_memory`.
 */
declare const self: Worker

const parent = process.ppid
let reading: { until: number; maxRssBytes: number } | null = null

self.onmessage = (event: MessageEvent<WatchdogMessage>) => {
  const job = event.data
  reading = job ? { until: performance.now() + job.timeoutMs, maxRssBytes: job.maxRssBytes } : null
}

setInterval(() => {
  if (process.ppid !== parent) process.kill(process.pid, 'SIGKILL')
  if (!reading) return
  if (performance.now() > reading.until) process.kill(process.pid, LIMIT_SIGNALS.timeout)
  const rss = residentBytes(process.pid)
  if (rss !== null && rss > reading.maxRssBytes) process.kill(process.pid, LIMIT_SIGNALS.memory)
}, WATCHDOG_POLL_MS)

// Watching: the document process says it is ready only now.
postMessage('watching')
