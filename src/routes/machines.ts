import { Elysia, t } from 'elysia'
import type { Deps } from '../deps'
import { notFound } from '../lib/errors'
import { describeMachine } from '../machines/describe'
import { machines } from '../machines/registry'
import { Envelope, envelope, errors } from './common.model'
import { authenticated } from './plugins/auth'
import { Machine, MachineParams } from './machines.model'

const tags = ['machines']

/** The state machines of the service, described from their definitions: any authenticated caller may read. */
export function machineRoutes(deps: Deps) {
  // The definitions are fixed at start-up: describe them once.
  const described = machines.map(describeMachine)
  const byName = new Map(described.map((d) => [d.name, d]))
  return new Elysia({ name: 'routes.machines' })
    .use(authenticated(deps))
    .get('/machines', ({ requestId }) => envelope(requestId, described), {
      response: { 200: Envelope(t.Array(Machine), 'Every state machine'), ...errors() },
      detail: { operationId: 'listMachines', tags, summary: 'List the state machines with their states, transitions and Mermaid diagrams' },
    })
    .get('/machines/:name', ({ requestId, params }) => {
      const machine = byName.get(params.name)
      if (!machine) throw notFound('machine', params.name)
      return envelope(requestId, machine)
    }, {
      params: MachineParams,
      response: { 200: Envelope(Machine, 'The state machine'), ...errors(404) },
      detail: { operationId: 'getMachine', tags, summary: 'Get one state machine: states, transitions, events and its Mermaid diagram' },
    })
}
