import { initialTransition, transition, type AnyStateMachine, type EventFromLogic, type InputFrom, type SnapshotFrom } from 'xstate'

/**
 * The pure half of every machine runner: load a persisted snapshot, check that its state accepts the
 * event, transition, and hand back the new persisted snapshot with the effects to run after commit.
 * The I/O half (one guarded write of the snapshot with what the transition produced, then the
 * effects after commit) is `commitTransition` (src/domain/machines.ts), which each machine's
 * worker, and the workflow engine for runs, calls.
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
  // JSON round trip: what is saved is exactly what a later load sees, and nothing of XState's
  // internals (or a shared reference into them) leaks into the row.
  return deepFreeze(JSON.parse(JSON.stringify({ state, persisted: { value: state, context: snapshot.context }, effects })))
}

/**
 * Machines are pure, so a step depends only on (snapshot, event): results are memoised. XState's
 * resolveState + transition cost ~40 µs a call under load, two to three calls per webhook delivery,
 * a quarter of the delivery budget at 2 500/s (bench/README.md); a lookup costs ~2 µs. Contexts of
 * these machines are small and repeat (attempt counters, settings), so the cache stays small; it is
 * bounded anyway. Results are frozen so no caller can alter a shared one.
 */
const memo = new WeakMap<AnyStateMachine, Map<string, Step<unknown, unknown> | null>>()
const MEMO_MAX = 10_000

function cached<T extends Step<unknown, unknown> | null>(machine: AnyStateMachine, key: string, compute: () => T): T {
  let table = memo.get(machine)
  if (!table) memo.set(machine, (table = new Map()))
  if (table.has(key)) return table.get(key) as T
  const value = compute()
  if (table.size >= MEMO_MAX) table.clear()
  table.set(key, value)
  return value
}

export function start<M extends AnyStateMachine, TEffect>(machine: M, input: InputFrom<M>): Step<SnapshotFrom<M>['context'], TEffect> {
  return cached(machine, `start:${JSON.stringify(input)}`, () => {
    const [snapshot, actions] = initialTransition(machine, input)
    return toStep<SnapshotFrom<M>['context'], TEffect>(snapshot, actions)
  })
}

/**
 * Applies `event` to the persisted snapshot, or returns null when its state does not accept it (a
 * stale timer, a result that arrives after the attempt was abandoned): such events are harmless.
 */
export function advance<M extends AnyStateMachine, TEffect>(
  machine: M,
  persisted: Persisted<SnapshotFrom<M>['context']>,
  event: EventFromLogic<M>,
  opts: { memo?: boolean } = {},
): Step<SnapshotFrom<M>['context'], TEffect> | null {
  const compute = () => {
    const snapshot = machine.resolveState({ value: persisted.value, context: persisted.context })
    if (!snapshot.can(event)) return null
    const [next, actions] = transition(machine, snapshot as SnapshotFrom<M>, event)
    return toStep<SnapshotFrom<M>['context'], TEffect>(next, actions)
  }
  // Machines whose context grows with their data (a run's node outputs) never repeat a key: no memo.
  if (opts.memo === false) return compute()
  return cached(machine, JSON.stringify([persisted.value, persisted.context, event]), compute)
}

/**
 * Several events in a row, as one step: the snapshot is resolved once and saved once (`advance`
 * per event would do both for each). `more`, given the context once `events` are applied, may add
 * events that follow from it. Null when the state refuses one of them.
 */
export function advanceMany<M extends AnyStateMachine, TEffect>(
  machine: M,
  persisted: Persisted<SnapshotFrom<M>['context']>,
  events: EventFromLogic<M>[],
  more?: (context: SnapshotFrom<M>['context'], state: string) => EventFromLogic<M>[],
): Step<SnapshotFrom<M>['context'], TEffect> | null {
  let snapshot = machine.resolveState({ value: persisted.value, context: persisted.context })
  const actions: unknown[] = []
  const apply = (list: EventFromLogic<M>[]) => {
    for (const event of list) {
      if (!snapshot.can(event)) return false
      const [next, done] = transition(machine, snapshot as SnapshotFrom<M>, event)
      snapshot = next as typeof snapshot
      actions.push(...done)
    }
    return true
  }
  if (!apply(events)) return null
  if (more && !apply(more(snapshot.context, snapshot.value as string))) return null
  return toStep<SnapshotFrom<M>['context'], TEffect>(snapshot, actions)
}

function deepFreeze<T>(value: T): T {
  if (value && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value)
    for (const v of Object.values(value)) deepFreeze(v)
  }
  return value
}
