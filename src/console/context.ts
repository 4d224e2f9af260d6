/** What a page gets: where to draw, its route parameters, the chosen workspace and an abort signal. */
export interface PageContext {
  main: HTMLElement
  params: string[]
  query: URLSearchParams
  /** Aborted when the user leaves the page: streams and polling stop. */
  signal: AbortSignal
  workspaceId: string | null
}

export type PageRenderer = (ctx: PageContext) => Promise<void>

/** Calls `fn` every `ms` until it returns false or the page is left. */
export function every(ms: number, signal: AbortSignal, fn: () => Promise<boolean>): void {
  const tick = async () => {
    if (signal.aborted) return
    let again = true
    try {
      again = await fn()
    } catch {
      // A failed refresh is retried at the next tick; the page shows its last state.
    }
    if (again && !signal.aborted) setTimeout(tick, ms)
  }
  setTimeout(tick, ms)
}

