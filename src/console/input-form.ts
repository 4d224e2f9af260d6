import { ApiError } from './api'
import { h, put, when } from './dom'
import type { Waiting } from './types'
export type { Waiting }

/** A run's `waiting` (GET /v1/runs/{run_id}): a human_input node asking for data. */

type Schema = Record<string, unknown>
const isObject = (v: unknown): v is Schema => typeof v === 'object' && v !== null && !Array.isArray(v)

/** One field of the form: its control, where its errors go, and how its value is read. */
interface Field {
  name: string
  element: HTMLElement
  error: HTMLElement
  /** The value to send, `undefined` to leave the property out; throws a message when unreadable. */
  read(): unknown
}

let seq = 0

function jsonField(name: string, label: string, required: boolean, initial: string): Field {
  const id = `input-${++seq}`
  const error = h('span', { class: 'field-error error', id: `${id}-error`, role: 'alert' })
  const area = h('textarea', { id, rows: '4', spellcheck: 'false', 'aria-describedby': `${id}-error`, required }, initial)
  return {
    name,
    error,
    element: h('div', { class: 'field' }, h('label', { for: id }, label, required ? h('span', { class: 'required' }, ' (required)') : null), area, error),
    read() {
      if (!area.value.trim()) {
        if (required) throw new Error('is required')
        return undefined
      }
      try {
        return JSON.parse(area.value)
      } catch (err) {
        throw new Error(`is not JSON: ${(err as Error).message}`)
      }
    },
  }
}

function propertyField(name: string, prop: Schema, required: boolean): Field {
  const id = `input-${++seq}`
  const label = typeof prop.title === 'string' ? prop.title : name
  const error = h('span', { class: 'field-error error', id: `${id}-error`, role: 'alert' })
  const mark = required ? h('span', { class: 'required' }, ' (required)') : null
  const hint = typeof prop.description === 'string' ? h('span', { class: 'hint' }, prop.description) : null
  const type = prop.type
  if (type === 'boolean') {
    const box = h('input', { id, type: 'checkbox', 'aria-describedby': `${id}-error`, checked: prop.default === true })
    return {
      name, error,
      element: h('div', { class: 'field inline' }, box, h('label', { for: id }, label, mark), hint, error),
      // A checkbox always has a value: unticked is false, which is what a person who left it means.
      read: () => box.checked,
    }
  }
  if (type === 'string' && Array.isArray(prop.enum)) {
    const select = h('select', { id, 'aria-describedby': `${id}-error`, required },
      required ? null : h('option', { value: '' }, '—'),
      prop.enum.map((v) => h('option', { value: String(v) }, String(v))))
    if (typeof prop.default === 'string') select.value = prop.default
    return {
      name, error,
      element: h('div', { class: 'field' }, h('label', { for: id }, label, mark), hint, select, error),
      read: () => (select.value === '' && !required ? undefined : select.value),
    }
  }
  if (type === 'number' || type === 'integer') {
    const input = h('input', { id, type: 'number', step: type === 'integer' ? '1' : 'any', 'aria-describedby': `${id}-error`, required, value: typeof prop.default === 'number' ? prop.default : null })
    return {
      name, error,
      element: h('div', { class: 'field' }, h('label', { for: id }, label, mark), hint, input, error),
      read() {
        if (input.value === '') {
          if (required) throw new Error('is required')
          return undefined
        }
        const n = Number(input.value)
        if (!Number.isFinite(n)) throw new Error('is not a number')
        return n
      },
    }
  }
  if (type === 'string') {
    const input = h('input', { id, type: 'text', 'aria-describedby': `${id}-error`, required, value: typeof prop.default === 'string' ? prop.default : null })
    return {
      name, error,
      element: h('div', { class: 'field' }, h('label', { for: id }, label, mark), hint, input, error),
      // An empty optional text is left out; an empty required one is sent, for the schema to judge.
      read: () => (input.value === '' && !required ? undefined : input.value),
    }
  }
  return jsonField(name, `${label} (JSON)`, required, prop.default === undefined ? '' : JSON.stringify(prop.default, null, 2))
}

/**
 * The form for a waiting human_input node, built from its JSON Schema: an object schema gets one
 * labelled field per property, anything else one JSON text area. `submit` posts the data; a 400 is
 * shown beside the field its `param` names (`data.approved` → approved).
 */
export function inputForm(waiting: Waiting, submit: (data: unknown) => Promise<unknown>): HTMLElement {
  const schema = waiting.schema
  const props = isObject(schema) && schema.type === 'object' && isObject(schema.properties) ? (schema.properties as Record<string, unknown>) : null
  const required = new Set(isObject(schema) && Array.isArray(schema.required) ? schema.required.map(String) : [])
  const fields: Field[] = props
    // Required ones first: the stored schema is JSONB, whose key order is not the order it was written in.
    ? Object.entries(props).sort(([a], [b]) => Number(required.has(b)) - Number(required.has(a))).map(([name, prop]) => propertyField(name, isObject(prop) ? prop : {}, required.has(name)))
    : [jsonField('', 'Data (JSON)', true, '')]
  const status = h('div', { class: 'status', role: 'status' })
  const button = h('button', { type: 'submit' }, 'Submit input')
  const form = h('form', { class: 'input-form', 'aria-label': `Input for node ${waiting.node}`, 'data-node': waiting.node, novalidate: true },
    fields.map((f) => f.element),
    button,
    status,
  )
  const fieldFor = (param: string | undefined) => {
    const name = param?.replace(/^data\.?/, '').split('.')[0] ?? ''
    return fields.find((f) => f.name === name) ?? (props ? undefined : fields[0])
  }
  form.addEventListener('submit', async (e) => {
    e.preventDefault()
    for (const f of fields) put(f.error)
    put(status)
    let data: unknown
    try {
      if (props) {
        const out: Record<string, unknown> = {}
        for (const f of fields) {
          try {
            const v = f.read()
            if (v !== undefined) out[f.name] = v
          } catch (err) {
            put(f.error, (err as Error).message)
            throw err
          }
        }
        data = out
      } else {
        data = fields[0]!.read()
      }
    } catch (err) {
      if (!props) put(fields[0]!.error, (err as Error).message)
      return
    }
    button.disabled = true
    try {
      await submit(data)
      put(status, 'Sent; the run goes on.')
    } catch (err) {
      const target = err instanceof ApiError && err.status === 400 ? fieldFor(err.param) : undefined
      if (target) put(target.error, (err as Error).message)
      else put(status, h('span', { class: 'error', role: 'alert' }, (err as Error).message))
    } finally {
      button.disabled = false
    }
  })
  return h('section', { class: 'waiting', 'aria-labelledby': 'waiting-title' },
    h('h2', { id: 'waiting-title' }, `Waiting for input: ${waiting.node}`),
    h('p', { class: 'prompt' }, waiting.prompt),
    h('p', { class: 'hint' }, `Waiting since ${when(waiting.since)}; ${waiting.expires_at ? `expires ${when(waiting.expires_at)}` : 'no time-out'}.`),
    form,
  )
}
