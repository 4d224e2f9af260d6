import type { FairGate } from '../../../lib/fair-gate'
import type { Context, Span } from '../../../lib/tracing'
import type { RunEvent } from '../../../machines/workflow-run.machine'
import type { RunRow, RunUsage } from '../../../store/runs'
import type { LogEvent } from '../transitions'
import type { ChildPort, Graph, GraphNode } from '../types'

/** What the engine needs of the worker holding a run (src/workers/runs.ts, a lease loop). */
export interface RunHolder {
  /** The lease owner that guards every write of the run. */
  owner: string
  /** The steps of the holder's runs (a transition written, a child started or read), workspaces taking turns. */
  steps: FairGate
  /** Waits for `wait` without taking a place among the runs worked on: the runs it waits for can be claimed meanwhile. */
  idling<T>(wait: Promise<T>): Promise<T>
  /** Graphs by workflow version (`<workflow id>@<version>`), kept while the holder lives: a version never changes. */
  graphs: Map<string, Graph>
}

/** What a transition begins with; `logOnly`: it appends to the log (LLM deltas) without looking for nodes to start. */
export interface Head {
  events: RunEvent[]
  log: LogEvent[]
  usage?: RunUsage
  logOnly?: boolean
}

/** One transition of the run (src/domain/workflows/engine/transit.ts): what happened (`head`), then the nodes it settles skipped and those it makes ready started. */
export type Transit = (head: () => Head) => Promise<void>

/** A transition that adds nothing: it only writes what follows from the run as it is. */
export const NOTHING = (): Head => ({ events: [], log: [] })

/** A claimed run being driven (src/domain/workflows/engine/drive.ts): the row as its last transition returned it, and what its nodes share. */
export interface Drive {
  run: RunRow
  readonly graph: Graph
  readonly byId: Map<string, GraphNode>
  /** Aborted when the run ends, is cancelled or taken over, or the holder stops: the nodes in flight stop. */
  readonly ac: AbortController
  /** The run's span (non-recording with tracing off), and the context its nodes' spans start in. */
  readonly span: Span
  readonly ctx: Context
  readonly children: ChildPort
  readonly transit: Transit
  /** The next attempt of node `id` after its back-off: started (persisted), then executed. */
  retry(id: string, attempt: number, until: number): void
}
