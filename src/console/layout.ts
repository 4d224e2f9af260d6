/**
 * Where each node of a workflow graph goes: a column per depth (the longest path from a node with no
 * incoming edge), the nodes of one column stacked in the order the graph lists them. Pure (no DOM):
 * tests/unit/console-layout.test.ts runs it.
 */
export interface GraphEdge {
  source: string
  target: string
  source_handle?: string
}

export interface Placed {
  id: string
  column: number
  row: number
}

export function layers(ids: string[], edges: GraphEdge[]): { placed: Placed[]; columns: number; rows: number } {
  const known = new Set(ids)
  const inner = edges.filter((e) => known.has(e.source) && known.has(e.target) && e.source !== e.target)
  const depth = new Map(ids.map((id) => [id, 0]))
  // Longest path by relaxing every edge at most |nodes| times: a saved graph is acyclic, and should a
  // cycle slip through, the bound stops the loop instead of hanging the page.
  for (let round = 0; round < ids.length; round++) {
    let moved = false
    for (const e of inner) {
      const next = depth.get(e.source)! + 1
      if (next > depth.get(e.target)!) {
        depth.set(e.target, next)
        moved = true
      }
    }
    if (!moved) break
  }
  const perColumn = new Map<number, number>()
  const placed = ids.map((id) => {
    const column = depth.get(id)!
    const row = perColumn.get(column) ?? 0
    perColumn.set(column, row + 1)
    return { id, column, row }
  })
  return {
    placed,
    columns: Math.max(0, ...placed.map((p) => p.column + 1)),
    rows: Math.max(0, ...perColumn.values()),
  }
}

/** The words a node's state is shown with (completed reads as done). */
export const STATE_LABEL: Record<string, string> = {
  pending: 'pending',
  running: 'running',
  retrying: 'retrying',
  waiting: 'waiting',
  completed: 'done',
  failed: 'failed',
  skipped: 'skipped',
  cancelled: 'cancelled',
}

export function stateText(state: string, attempt: number | null | undefined): string {
  const label = STATE_LABEL[state] ?? state
  return attempt && attempt > 1 ? `${label} (attempt ${attempt})` : label
}
