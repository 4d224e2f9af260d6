import { initialTransition, transition, type AnyStateMachine, type EventFromLogic, type InputFrom, type SnapshotFrom } from 'xstate'

/**
 * The pure half of every machine runner: load a persisted snapshot, check that its state accepts the
 * event, transition, and hand back the new persisted snapshot with the effects to run after commit.
 * The I/O half (lock the row, save, commit, run effects) belongs to each machine's worker.
 */
export interface Persisted<TContext> {
  value: string
  context: TContext
}

export interface Step<TContext, TEffect> {
  state: string
  persisted: Persisted<TContext>
  effects: TEffect[]
}

function toStep<TContext, TEffect>(snapshot: { value: unknown; context: unknown }, actions: readonly unknown[]): Step<TContext, TEffect> {
  const effects: TEffect[] = []
  for (const a of actions as { type: string; params?: { event?: TEffect } }[]) {
    if (a.type === 'xstate.emit' && a.params?.event) effects.push(a.params.event)
  }
  const state = snapshot.value as string
  return { state, persisted: { value: state, context: snapshot.context as TContext }, effects }
}

export function start<M extends AnyStateMachine, TEffect>(machine: M, input: InputFrom<M>): Step<SnapshotFrom<M>['context'], TEffect> {
  const [snapshot, actions] = initialTransition(machine, input)
  return toStep(snapshot, actions)
}

/**
 * Applies `event` to the persisted snapshot, or returns null when its state does not accept it (a
 * stale timer, a result that arrives after the attempt was abandoned): such events are harmless.
 */
export function advance<M extends AnyStateMachine, TEffect>(
  machine: M,
  persisted: Persisted<SnapshotFrom<M>['context']>,
  event: EventFromLogic<M>,
): Step<SnapshotFrom<M>['context'], TEffect> | null {
  const snapshot = machine.resolveState({ value: persisted.value, context: persisted.context })
  if (!snapshot.can(event)) return null
  const [next, actions] = transition(machine, snapshot as SnapshotFrom<M>, event)
  return toStep(next, actions)
}
