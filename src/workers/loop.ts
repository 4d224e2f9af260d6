import type { Logger } from 'pino'

/**
 * A background loop: runs `step` again at once while it reports more work, otherwise waits `idleMs`
 * or until `nudge()`. A failing step is logged and retried after the idle wait, never fatal.
 */
export abstract class PollingLoop {
  private running = false
  private wake: (() => void) | null = null
  private loop: Promise<void> | null = null

  constructor(
    private readonly what: string,
    private readonly idleMs: number,
    protected readonly log: Logger,
  ) {}

  /** One round of work; true when more is waiting. */
  protected abstract step(): Promise<boolean>

  start() {
    this.running = true
    this.loop = this.run()
  }

  /** Work is waiting now: tick at once instead of after the idle wait. */
  nudge() {
    this.wake?.()
  }

  /** Resolves once the tick in progress (if any) has finished. */
  async stop() {
    this.running = false
    this.wake?.()
    await this.loop
  }

  private async run() {
    while (this.running) {
      let more = false
      try {
        more = await this.step()
      } catch (err) {
        this.log.error({ err }, `${this.what} failed`)
      }
      if (!more && this.running) {
        await new Promise<void>((resolve) => {
          const t = setTimeout(resolve, this.idleMs)
          this.wake = () => {
            clearTimeout(t)
            resolve()
          }
        })
        this.wake = null
      }
    }
  }
}
