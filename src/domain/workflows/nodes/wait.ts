import { NodeError, type Executor } from '../types'

/** A wait is a durable Redis timer the engine arms and fires itself; nothing here may sleep. */
export const wait: Executor = async () => {
  throw new NodeError('internal', 'wait is scheduled by the engine')
}

/** A human_input node waits for a person (POST /v1/runs/{run_id}/input) with no process held: the engine parks the run. */
export const humanInput: Executor = async () => {
  throw new NodeError('internal', 'human_input is held by the engine')
}
