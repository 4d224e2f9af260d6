import { assign, setup } from 'xstate'
import type { MachineDefinition } from './definition'

/**
 * A workflow run (docs/workflows.md, "Runs"): `running` → `completed` | `failed` | `cancelled`, with the
 * progress of every node in its context. Pure: which nodes are ready is decided by the engine from
 * the graph and this progress; the machine records what happened, and refuses what cannot happen
 * (a node result after the run ended, a second end).
 */
export const RUN_MACHINE_VERSION = 1

export type NodeStatus = 'running' | 'waiting' | 'completed' | 'skipped' | 'failed'

export interface NodeProgress {
  status: NodeStatus
  started_at?: string
  duration_ms?: number
  output?: unknown
  handle?: string
  /** A `wait` node: when it is done waiting (ISO). */
  until?: string
}

export interface RunContext {
  progress: Record<string, NodeProgress>
  outputs: Record<string, unknown> | null
  error: { code: string; message: string; node: string | null } | null
}

export type RunEvent =
  | { type: 'node.started'; node: string; at: string }
  | { type: 'node.waiting'; node: string; until: string }
  | { type: 'node.completed'; node: string; output: unknown; handle?: string; durationMs: number; end: boolean }
  | { type: 'node.skipped'; node: string }
  | { type: 'node.failed'; node: string; code: string; message: string; durationMs: number }
  | { type: 'cancel.requested' }

export const runMachine = setup({
  types: {} as { context: RunContext; events: RunEvent },
  guards: {
    isEnd: ({ event }) => event.type === 'node.completed' && event.end,
  },
  actions: {
    markStarted: assign({
      progress: ({ context, event }) =>
        event.type === 'node.started' ? { ...context.progress, [event.node]: { status: 'running' as const, started_at: event.at } } : context.progress,
    }),
    markWaiting: assign({
      progress: ({ context, event }) =>
        event.type === 'node.waiting' ? { ...context.progress, [event.node]: { ...context.progress[event.node], status: 'waiting' as const, until: event.until } } : context.progress,
    }),
    markCompleted: assign({
      progress: ({ context, event }) => {
        if (event.type !== 'node.completed') return context.progress
        const done: NodeProgress = { ...context.progress[event.node], status: 'completed', duration_ms: event.durationMs, output: event.output }
        if (event.handle !== undefined) done.handle = event.handle
        delete done.until
        return { ...context.progress, [event.node]: done }
      },
    }),
    markSkipped: assign({
      progress: ({ context, event }) => (event.type === 'node.skipped' ? { ...context.progress, [event.node]: { status: 'skipped' as const } } : context.progress),
    }),
    recordOutputs: assign({ outputs: ({ event }) => (event.type === 'node.completed' ? (event.output as Record<string, unknown>) : null) }),
    recordFailure: assign({
      progress: ({ context, event }) =>
        event.type === 'node.failed' ? { ...context.progress, [event.node]: { ...context.progress[event.node], status: 'failed' as const, duration_ms: event.durationMs } } : context.progress,
      error: ({ event }) => (event.type === 'node.failed' ? { code: event.code, message: event.message, node: event.node } : null),
    }),
  },
}).createMachine({
  id: 'workflow-run',
  description: 'A workflow run: nodes start, wait, complete, are skipped or fail; the first end node to complete completes the run.',
  context: { progress: {}, outputs: null, error: null },
  initial: 'running',
  states: {
    running: {
      description: 'Nodes execute as soon as every incoming edge is settled; independent branches in parallel.',
      on: {
        'node.started': { actions: 'markStarted', description: 'persisted before the node executes' },
        'node.waiting': { actions: 'markWaiting', description: 'a wait node, held by a Redis timer' },
        'node.completed': [
          { guard: 'isEnd', target: 'completed', actions: ['markCompleted', 'recordOutputs'], description: 'an end node: its outputs are the run\'s' },
          { actions: 'markCompleted' },
        ],
        'node.skipped': { actions: 'markSkipped', description: 'on a branch a condition did not take' },
        'node.failed': { target: 'failed', actions: 'recordFailure' },
        'cancel.requested': { target: 'cancelled', description: 'POST /v1/runs/{id}/cancel; the node in flight is aborted' },
      },
    },
    completed: { type: 'final', description: 'workflow.run.completed' },
    failed: { type: 'final', description: 'workflow.run.failed, with error { code, message, node }' },
    cancelled: { type: 'final', description: 'workflow.run.cancelled' },
  },
})

/** The run machine as the service runs it: snapshots of version 1 (the first), and its announcements. */
export const runDefinition: MachineDefinition<RunContext> = {
  name: 'workflow-run',
  machine: runMachine,
  version: RUN_MACHINE_VERSION,
  upgrades: {},
  announces: { completed: 'workflow.run.completed', failed: 'workflow.run.failed', cancelled: 'workflow.run.cancelled' },
  memo: false,
}
