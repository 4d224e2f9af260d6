import type { MachineDefinition } from './definition'
import { documentDefinition } from './document.machine'
import { deliveryDefinition } from './webhook-delivery.machine'
import { runDefinition } from './workflow-run.machine'

/**
 * Every state machine of the service, for `GET /v1/machines` and `bun run diagrams`
 * (docs/machines/<name>.md), with what the I/O half needs of each (src/machines/definition.ts).
 */
export type MachineEntry = Pick<MachineDefinition, 'name' | 'machine' | 'version'>

export const machines: readonly MachineEntry[] = [deliveryDefinition, runDefinition, documentDefinition]
