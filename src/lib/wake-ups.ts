/**
 * The one place work announces itself to the loop that does it: after committing a run, a document,
 * outbox events or a due timer, code calls `wake.nudge(kind)`; the process's worker of that kind (if
 * it runs one) registered with `on` looks for work at once instead of at its next idle look. With
 * nothing registered a nudge does nothing: the rows are committed, and some worker finds them.
 */
export type WakeKind = 'timers' | 'events' | 'runs' | 'documents' | 'indexer'

export class WakeUps {
  private readonly handlers = new Map<WakeKind, () => void>()

  nudge(kind: WakeKind): void {
    this.handlers.get(kind)?.()
  }

  /** Sends `kind`'s nudges to `handler` until the function returned is called. */
  on(kind: WakeKind, handler: () => void): () => void {
    this.handlers.set(kind, handler)
    return () => {
      if (this.handlers.get(kind) === handler) this.handlers.delete(kind)
    }
  }
}
