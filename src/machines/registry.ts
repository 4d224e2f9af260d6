import type { AnyStateMachine } from 'xstate'
import { DOCUMENT_MACHINE_VERSION, documentMachine } from './document.machine'
import { DELIVERY_MACHINE_VERSION, deliveryMachine } from './webhook-delivery.machine'
import { RUN_MACHINE_VERSION, runMachine } from './workflow-run.machine'

/**
 * Every state machine of the service, for `GET /v1/machines` and `bun run diagrams`
 * (docs/machines/<name>.md).
 */
export interface MachineEntry {
  /** URL and file name: kebab-case, the machine's own id. */
  name: string
  machine: AnyStateMachine
  /** Stored beside every persisted snapshot; bumped when a change would misread old snapshots. */
  version: number
}

export const machines: readonly MachineEntry[] = [
  { name: 'webhook-delivery', machine: deliveryMachine, version: DELIVERY_MACHINE_VERSION },
  { name: 'workflow-run', machine: runMachine, version: RUN_MACHINE_VERSION },
  { name: 'document', machine: documentMachine, version: DOCUMENT_MACHINE_VERSION },
]
