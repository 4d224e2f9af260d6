import { type SandboxJob, type SandboxResult, WALL_FACTOR } from './code-sandbox'
import type { FromWorker, ToWorker } from './code-worker'

/**
 * Code nodes run in worker threads, not on the main thread: QuickJS executes synchronously, so a
 * script allowed 10 s would otherwise hold the event loop (HTTP, streams, lease heartbeats) for 10 s,
 * and a cancel could not reach it before its time limit. Here the main thread stays free and a cancel
 * lands within the interrupt handler's next poll (a shared flag, read with Atomics).
 *
 * A few workers, started on first use and kept; each loads the WebAssembly module once and runs one
 * job at a time (a fresh QuickJS runtime per job); more jobs wait in a queue (the time limit counts
 * from when a job starts). Idle workers do not keep the process alive. A worker whose module broke (a
 * stack overflow inside WebAssembly) or that stops answering is terminated and replaced.
 */

/** 2 to 4: code nodes are short; more threads would only compete with the rest of the process. */
const POOL_SIZE = Math.max(2, Math.min(4, navigator.hardwareConcurrency || 2))
/**
 * Beyond the job's own longest run (its CPU limit may take WALL_FACTOR times as long on the wall
 * clock), enforced inside the worker: covers loading the module on first use.
 */
const WATCHDOG_GRACE_MS = 5_000

interface Slot {
  worker: Worker
  flag: Int32Array
  job: Pending | null
}

interface Pending {
  id: number
  job: SandboxJob
  signal: AbortSignal
  resolve: (r: SandboxResult) => void
  onAbort: () => void
  watchdog?: ReturnType<typeof setTimeout>
}

export class CodePool {
  private readonly slots: Slot[] = []
  private readonly queue: Pending[] = []
  private nextId = 1
  private closed = false

  constructor(private readonly size = POOL_SIZE) {}

  /** Never rejects: every outcome, an abort included, is a SandboxResult. */
  run(job: SandboxJob, signal: AbortSignal): Promise<SandboxResult> {
    if (this.closed) return Promise.resolve({ ok: false, kind: 'internal', message: 'the code sandbox is shut down' })
    if (signal.aborted) return Promise.resolve(ABORTED)
    return new Promise((resolve) => {
      const p: Pending = {
        id: this.nextId++,
        job,
        signal,
        resolve,
        onAbort: () => {
          const queued = this.queue.indexOf(p)
          if (queued >= 0) {
            this.queue.splice(queued, 1)
            this.finish(p, ABORTED)
            return
          }
          // Running: the worker's interrupt handler sees the flag and answers `aborted`.
          const slot = this.slots.find((s) => s.job === p)
          if (slot) Atomics.store(slot.flag, 0, 1)
        },
      }
      signal.addEventListener('abort', p.onAbort, { once: true })
      this.queue.push(p)
      this.pump()
    })
  }

  /** Workers busy or idle (for tests and metrics). */
  get workers(): number {
    return this.slots.length
  }

  close(): void {
    this.closed = true
    for (const p of this.queue.splice(0)) this.finish(p, { ok: false, kind: 'internal', message: 'the code sandbox is shut down' })
    for (const slot of [...this.slots]) this.retire(slot, { ok: false, kind: 'internal', message: 'the code sandbox is shut down' })
  }

  private pump(): void {
    while (this.queue.length > 0) {
      let slot = this.slots.find((s) => s.job === null)
      if (!slot) {
        if (this.slots.length >= this.size) return
        slot = this.spawn()
      }
      const p = this.queue.shift()!
      slot.job = p
      Atomics.store(slot.flag, 0, 0)
      slot.worker.ref()
      const target = slot
      p.watchdog = setTimeout(
        () => this.retire(target, { ok: false, kind: 'timeout', message: `the code did not stop within ${p.job.timeoutMs * WALL_FACTOR} ms of wall-clock time (its limit: ${p.job.timeoutMs} ms of CPU time)` }),
        p.job.timeoutMs * WALL_FACTOR + WATCHDOG_GRACE_MS,
      )
      slot.worker.postMessage({ type: 'job', id: p.id, job: p.job } satisfies ToWorker)
    }
  }

  private spawn(): Slot {
    const worker = new Worker(new URL('./code-worker.ts', import.meta.url).href)
    const shared = new SharedArrayBuffer(4)
    const slot: Slot = { worker, flag: new Int32Array(shared), job: null }
    worker.postMessage({ type: 'init', flag: shared } satisfies ToWorker)
    worker.onmessage = (event: MessageEvent<FromWorker>) => {
      const p = slot.job
      if (!p || p.id !== event.data.id) return
      slot.job = null
      this.finish(p, event.data.result)
      if (event.data.dead) this.retire(slot)
      else worker.unref()
      this.pump()
    }
    const lost = (why: string) => this.retire(slot, { ok: false, kind: 'internal', message: `the code sandbox worker ${why}` })
    worker.addEventListener('error', (e) => lost(`failed: ${(e as ErrorEvent).message}`))
    worker.addEventListener('close', () => lost('exited'))
    worker.unref()
    this.slots.push(slot)
    return slot
  }

  /** Terminates a worker, answering its job (if any) with `result`, and lets the queue move on. */
  private retire(slot: Slot, result?: SandboxResult): void {
    const i = this.slots.indexOf(slot)
    if (i < 0) return
    this.slots.splice(i, 1)
    const p = slot.job
    slot.job = null
    slot.worker.terminate()
    if (p) this.finish(p, result ?? { ok: false, kind: 'internal', message: 'the code sandbox worker was replaced' })
    if (!this.closed) this.pump()
  }

  private finish(p: Pending, result: SandboxResult): void {
    clearTimeout(p.watchdog)
    p.signal.removeEventListener('abort', p.onAbort)
    p.resolve(result)
  }
}

const ABORTED: SandboxResult = { ok: false, kind: 'aborted', message: 'the code was stopped: the node was aborted' }

let shared: CodePool | null = null

/** The process' pool, started on first use. */
export function codePool(): CodePool {
  shared ??= new CodePool()
  return shared
}

/** Stops the workers (graceful shutdown); a later code node starts a new pool. */
export function closeCodePool(): void {
  shared?.close()
  shared = null
}
