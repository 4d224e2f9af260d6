import { NodeError, type Executor } from '../types'

/** A wait is a durable Redis timer the engine arms and fires itself; nothing here may sleep. */
export const wait: Executor = async () => {
  throw new NodeError('internal', 'wait is scheduled by the engine')
}
