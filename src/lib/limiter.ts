/**
 * At most `max` tasks at once; the others wait in the order they came (FIFO), background tasks
 * behind every other waiting task. A waiting task whose signal aborts leaves the queue at once,
 * rejected with the signal's reason, and never runs. A finished task hands its slot straight to the
 * first waiter, so a task arriving meanwhile cannot overtake the queue.
 */
export class Limiter {
  private active = 0
  private readonly waiting: (() => void)[] = []
  private readonly background: (() => void)[] = []

  constructor(readonly max: number) {
    if (!Number.isInteger(max) || max < 1) throw new RangeError(`a limiter needs at least one slot (got ${max})`)
  }

  /** Tasks running now. */
  get running(): number {
    return this.active
  }

  /** Tasks waiting for a slot. */
  get queued(): number {
    return this.waiting.length + this.background.length
  }

  /** `background`: the task may wait behind any number of later ones that are not. */
  async run<T>(signal: AbortSignal, task: () => Promise<T>, background = false): Promise<T> {
    await this.acquire(signal, background ? this.background : this.waiting)
    try {
      return await task()
    } finally {
      this.release()
    }
  }

  private acquire(signal: AbortSignal, queue: (() => void)[]): Promise<void> {
    if (signal.aborted) return Promise.reject(signal.reason)
    if (this.active < this.max && this.queued === 0) {
      this.active++
      return Promise.resolve()
    }
    return new Promise<void>((resolve, reject) => {
      const grant = () => {
        signal.removeEventListener('abort', leave)
        resolve()
      }
      const leave = () => {
        const at = queue.indexOf(grant)
        if (at >= 0) queue.splice(at, 1)
        reject(signal.reason)
      }
      signal.addEventListener('abort', leave, { once: true })
      queue.push(grant)
    })
  }

  private release(): void {
    const next = this.waiting.shift() ?? this.background.shift()
    // The slot passes on as it is: `active` counts it still.
    if (next) next()
    else this.active--
  }
}
