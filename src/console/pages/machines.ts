import type { PageContext } from '../context'
import { drawMachine, loadMachines, type Machine } from '../diagram'
import { h, link, put, table } from '../dom'

export async function machinesPage(ctx: PageContext) {
  const machines = await loadMachines()
  const figures = machines.map((m) => [m, h('figure')] as const)
  put(ctx.main,
    h('h1', null, 'State machines'),
    h('p', null, 'Every machine of GET /v1/machines, drawn from its XState definition. A run, document or delivery page shows its own machine with its current state highlighted.'),
    figures.map(([m, figure]) => h('section', { class: 'machine', 'aria-labelledby': `m-${m.name}` },
      h('h2', { id: `m-${m.name}` }, link(`#/machines/${encodeURIComponent(m.name)}`, m.name)),
      h('p', null, m.description ?? ''),
      figure,
    )),
  )
  for (const [m, figure] of figures) await drawMachine(figure, m)
}

export async function machinePage(ctx: PageContext) {
  const machines = await loadMachines()
  const m = machines.find((x) => x.name === ctx.params[0])
  if (!m) {
    put(ctx.main, h('h1', null, 'No such machine'), h('p', null, link('#/machines', 'All machines')))
    return
  }
  const figure = h('figure')
  put(ctx.main,
    h('p', { class: 'crumbs' }, link('#/machines', 'Machines'), ' / ', m.name),
    h('h1', null, m.name),
    h('p', null, m.description ?? ''),
    figure,
    details(m),
  )
  await drawMachine(figure, m)
}

function details(m: Machine): HTMLElement {
  return h('div', null,
    table('States', ['State', 'Type', 'Description'], m.states.map((s) => [h('code', null, s.name), s.final ? `${s.type} (final)` : s.type, s.description ?? ''])),
    table('Transitions', ['From', 'Event', 'Guard', 'To'], m.transitions.map((t) => [h('code', null, t.source), t.event, t.guard ?? '', t.target ?? '(stays)'])),
  )
}
