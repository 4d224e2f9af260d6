import { assign, setup } from 'xstate'
import type { MachineDefinition } from './definition'

/**
 * A workflow run (docs/workflows.md, "Runs"): `running` → `completed` | `failed` | `cancelled`, with the
 * progress of every node in its context. Pure: which nodes are ready is decided by the engine from
 * the graph and this progress; the machine records what happened, and refuses what cannot happen
 * (a node result after the run ended, a second end).
 */
export const RUN_MACHINE_VERSION = 2

/** `cancelled`: the node was running, waiting or retrying when the run was cancelled (the run's end, never a node's own). */
export type NodeStatus = 'running' | 'waiting' | 'retrying' | 'completed' | 'skipped' | 'failed' | 'cancelled'

export interface NodeProgress {
  status: NodeStatus
  started_at?: string
  duration_ms?: number
  output?: unknown
  handle?: string
  /** A `wait` node: when it is done waiting; a retrying node: when its next attempt starts; a human_input node: when it times out (ISO). */
  until?: string
  /** The attempt in flight (or the next one, while retrying): 1 for the first. */
  attempt?: number
  /** The last attempt's failure, while the node is retrying. */
  error?: { code: string; message: string }
  /** A human_input node waiting for its data: the prompt as rendered and the schema the data must match. */
  input?: { prompt: string; schema: Record<string, unknown> | null }
}

export interface RunContext {
  progress: Record<string, NodeProgress>
  outputs: Record<string, unknown> | null
  error: { code: string; message: string; node: string | null } | null
}

export type RunEvent =
  | { type: 'node.started'; node: string; at: string; attempt?: number }
  | { type: 'node.waiting'; node: string; until?: string; input?: NodeProgress['input'] }
  | { type: 'node.retrying'; node: string; attempt: number; until: string; code: string; message: string }
  | { type: 'node.completed'; node: string; output: unknown; handle?: string; durationMs: number; end: boolean }
  | { type: 'node.skipped'; node: string }
  | { type: 'node.failed'; node: string; code: string; message: string; durationMs: number }
  | { type: 'cancel.requested' }

export const runMachine = setup({
  types: {} as { context: RunContext; events: RunEvent },
  guards: {
    isEnd: ({ event }) => event.type === 'node.completed' && event.end,
    isRunning: ({ context, event }) => 'node' in event && context.progress[event.node]?.status === 'running',
  },
  actions: {
    markStarted: assign({
      progress: ({ context, event }) => {
        if (event.type !== 'node.started') return context.progress
        const started: NodeProgress = { status: 'running', started_at: event.at }
        if (event.attempt !== undefined && event.attempt > 1) started.attempt = event.attempt
        return { ...context.progress, [event.node]: started }
      },
    }),
    markWaiting: assign({
      progress: ({ context, event }) => {
        if (event.type !== 'node.waiting') return context.progress
        const waiting: NodeProgress = { ...context.progress[event.node]!, status: 'waiting' }
        if (event.until !== undefined) waiting.until = event.until
        if (event.input !== undefined) waiting.input = event.input
        return { ...context.progress, [event.node]: waiting }
      },
    }),
    markRetrying: assign({
      progress: ({ context, event }) =>
        event.type === 'node.retrying'
          ? { ...context.progress, [event.node]: { ...context.progress[event.node], status: 'retrying' as const, attempt: event.attempt, until: event.until, error: { code: event.code, message: event.message } } }
          : context.progress,
    }),
    markCompleted: assign({
      progress: ({ context, event }) => {
        if (event.type !== 'node.completed') return context.progress
        const done: NodeProgress = { ...context.progress[event.node], status: 'completed', duration_ms: event.durationMs, output: event.output }
        if (event.handle !== undefined) done.handle = event.handle
        delete done.until
        delete done.error
        delete done.input
        return { ...context.progress, [event.node]: done }
      },
    }),
    markSkipped: assign({
      progress: ({ context, event }) => (event.type === 'node.skipped' ? { ...context.progress, [event.node]: { status: 'skipped' as const } } : context.progress),
    }),
    /** Nothing in flight outlives the run: a wait's or a back-off's `until` and an input's prompt go with it. */
    markCancelled: assign({
      progress: ({ context }) => {
        const progress: Record<string, NodeProgress> = {}
        for (const [id, p] of Object.entries(context.progress)) {
          if (p.status !== 'running' && p.status !== 'waiting' && p.status !== 'retrying') {
            progress[id] = p
            continue
          }
          const cancelled: NodeProgress = { ...p, status: 'cancelled' }
          delete cancelled.until
          delete cancelled.input
          progress[id] = cancelled
        }
        return progress
      },
    }),
    recordOutputs: assign({ outputs: ({ event }) => (event.type === 'node.completed' ? (event.output as Record<string, unknown>) : null) }),
    recordFailure: assign({
      progress: ({ context, event }) =>
        event.type === 'node.failed' ? { ...context.progress, [event.node]: { ...context.progress[event.node], status: 'failed' as const, duration_ms: event.durationMs, error: { code: event.code, message: event.message } } } : context.progress,
      error: ({ event }) => (event.type === 'node.failed' ? { code: event.code, message: event.message, node: event.node } : null),
    }),
  },
}).createMachine({
  id: 'workflow-run',
  description: 'A workflow run: nodes start, wait (a timer, a person\'s input), retry, complete, are skipped or fail; the first end node to complete completes the run.',
  context: { progress: {}, outputs: null, error: null },
  initial: 'running',
  states: {
    running: {
      description:
        'Nodes execute as soon as every incoming edge is settled; independent branches in parallel. Each node: pending → running → completed | failed | skipped; running → retrying → running (another attempt after its back-off); running → waiting → completed | failed (a wait node, or a human_input node until its data or its time-out).',
      on: {
        'node.started': { actions: 'markStarted', description: 'persisted before the node executes (again, after a retry\'s back-off)' },
        'node.waiting': { guard: 'isRunning', actions: 'markWaiting', description: 'a wait node (a durable timer) or a human_input node (its data, or its time-out); the run is parked, holding no lease' },
        'node.retrying': { guard: 'isRunning', actions: 'markRetrying', description: 'an attempt failed and the node\'s retry allows another, after its back-off' },
        'node.completed': [
          { guard: 'isEnd', target: 'completed', actions: ['markCompleted', 'recordOutputs'], description: 'an end node: its outputs are the run\'s' },
          { actions: 'markCompleted', description: 'its output (with on_error continue or branch, the error as output)' },
        ],
        'node.skipped': { actions: 'markSkipped', description: 'on a branch a condition did not take' },
        'node.failed': { target: 'failed', actions: 'recordFailure', description: 'its last attempt failed and on_error is fail' },
        'cancel.requested': {
          target: 'cancelled',
          actions: 'markCancelled',
          description: 'POST /v1/runs/{id}/cancel, or an ancestor run cancelled or ended without completing; the node in flight is aborted, and every node running, waiting or retrying is cancelled',
        },
      },
    },
    completed: { type: 'final', description: 'workflow.run.completed' },
    failed: { type: 'final', description: 'workflow.run.failed, with error { code, message, node }' },
    cancelled: { type: 'final', description: 'workflow.run.cancelled' },
  },
})

/**
 * The run machine as the service runs it, and its announcements. Version 2 added retrying nodes,
 * attempts, waiting for input and node errors to the progress; every version 1 snapshot is a valid
 * version 2 one as it is, but a version 1 process would not know what a retrying or input-waiting
 * node is, so the bump keeps it away from the runs version 2 writes. A `cancelled` node needed no
 * bump: it is only ever in the snapshot of a cancelled run, which no worker of any version executes.
 */
export const runDefinition: MachineDefinition<RunContext> = {
  name: 'workflow-run',
  machine: runMachine,
  version: RUN_MACHINE_VERSION,
  upgrades: { 1: (snapshot) => snapshot },
  announces: { completed: 'workflow.run.completed', failed: 'workflow.run.failed', cancelled: 'workflow.run.cancelled' },
  memo: false,
}
