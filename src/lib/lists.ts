import { AppError } from './errors'
import { parseTime } from './time'

/** What a list endpoint allows: its sortable fields and its filters (docs/decisions.md, "HTTP conventions"). */
export type FieldType = 'time' | 'text' | 'int'
export interface ListSpec {
  sortable: Record<string, FieldType>
  filters: Record<string, { type: FieldType; values?: readonly string[] }>
  /** Query parameters the route reads itself, besides limit/cursor/sort and the filters. */
  extra?: readonly string[]
  /**
   * Sortable time fields that may be null (a running run's finished_at): a null sorts as the latest
   * time, where Postgres puts nulls anyway, and a cursor may carry it.
   */
  nullable?: readonly string[]
}

export interface SortKey {
  field: string
  type: FieldType
  desc: boolean
  nullable?: boolean
}

export type Filter =
  | { field: string; op: 'eq'; value: string | number }
  | { field: string; op: 'in'; values: (string | number)[] }
  | { field: string; op: 'after' | 'before'; value: Date }

export interface ListQuery {
  limit: number
  sort: SortKey[]
  /** The sort values of the last row seen, then its id. */
  after: unknown[] | null
  filters: Filter[]
}

export interface Page<T> {
  data: T[]
  next_cursor: string | null
  has_more: boolean
}

const DEFAULT_LIMIT = 20
const MAX_LIMIT = 100

export function parseListQuery(raw: Record<string, unknown>, spec: ListSpec): ListQuery {
  const query: Record<string, string | undefined> = {}
  for (const [name, value] of Object.entries(raw)) {
    if (value !== undefined && typeof value !== 'string') {
      throw new AppError('invalid_filter', `query parameter "${name}" is given more than once`, { param: name })
    }
    query[name] = value
  }
  const limit = parseLimit(query.limit)
  const sort = parseSort(query.sort ?? '-created_at', spec)
  const filters: Filter[] = []
  for (const [name, raw] of Object.entries(query)) {
    if (raw === undefined || name === 'limit' || name === 'cursor' || name === 'sort' || spec.extra?.includes(name)) continue
    filters.push(parseFilter(name, raw, spec))
  }
  const after = query.cursor === undefined ? null : decodeCursor(query.cursor, sort)
  return { limit, sort, after, filters }
}

function parseLimit(raw: string | undefined): number {
  if (raw === undefined) return DEFAULT_LIMIT
  const n = /^\d{1,4}$/.test(raw) ? Number(raw) : NaN
  if (!(n >= 1 && n <= MAX_LIMIT)) {
    throw new AppError('validation_error', `limit must be an integer from 1 to ${MAX_LIMIT}`, {
      param: 'limit',
      details: [{ path: 'limit', message: `must be an integer from 1 to ${MAX_LIMIT}` }],
    })
  }
  return n
}

function parseSort(raw: string, spec: ListSpec): SortKey[] {
  const keys: SortKey[] = []
  for (const part of raw.split(',')) {
    const desc = part.startsWith('-')
    const field = desc ? part.slice(1) : part
    const type = Object.hasOwn(spec.sortable, field) ? spec.sortable[field] : undefined
    if (!type || keys.some((k) => k.field === field)) {
      throw new AppError('invalid_sort', `cannot sort by "${part}"; sortable fields: ${Object.keys(spec.sortable).join(', ')}`, {
        param: 'sort',
      })
    }
    keys.push(spec.nullable?.includes(field) ? { field, type, desc, nullable: true } : { field, type, desc })
  }
  return keys
}

function parseFilter(name: string, raw: string, spec: ListSpec): Filter {
  const bad = (message: string) => new AppError('invalid_filter', message, { param: name })
  const known = (field: string) => (Object.hasOwn(spec.filters, field) ? spec.filters[field] : undefined)
  const typed = (field: string, v: string): string | number => {
    const f = known(field)!
    if (f.values && !f.values.includes(v)) throw bad(`${name} must be one of: ${f.values.join(', ')}`)
    // Postgres text cannot hold U+0000; no stored value contains it, so the filter is simply malformed.
    if (v.includes('\u0000')) throw bad(`${name} must not contain the NUL character`)
    if (f.type === 'int') {
      if (!/^-?\d{1,15}$/.test(v)) throw bad(`${name} must be an integer`)
      return Number(v)
    }
    return v
  }
  const exact = known(name)
  if (exact && exact.type !== 'time') return { field: name, op: 'eq', value: typed(name, raw) }
  const m = /^(.+)_(in|after|before)$/.exec(name)
  const field = m?.[1]
  const base = field ? known(field) : undefined
  if (m && field && base) {
    if (m[2] === 'in') {
      if (base.type === 'time') throw bad(`${field} takes ${field}_after and ${field}_before`)
      const values = raw.split(',').filter((v) => v !== '')
      if (values.length === 0 || values.length > 100) throw bad(`${name} takes 1 to 100 comma-separated values`)
      return { field, op: 'in', values: values.map((v) => typed(field, v)) }
    }
    if (base.type !== 'time') throw bad(`${field} is not a time field`)
    const value = parseTime(raw)
    if (!value) throw bad(`${name} must be an ISO 8601 time, e.g. 2026-01-02T03:04:05Z`)
    return { field, op: m[2] as 'after' | 'before', value }
  }
  const names = Object.entries(spec.filters).flatMap(([f, s]) => (s.type === 'time' ? [`${f}_after`, `${f}_before`] : [f, `${f}_in`]))
  throw bad(`unknown query parameter "${name}"; filters here: ${names.join(', ') || 'none'}`)
}

function sortSignature(sort: SortKey[]): string {
  return sort.map((k) => (k.desc ? '-' : '') + k.field).join(',')
}

/** Opaque to clients: the sort it belongs to, the last row's sort values, and its id. */
export function encodeCursor(sort: SortKey[], row: { id: string }): string {
  const values = sort.map((k) => {
    const v = (row as unknown as Record<string, unknown>)[k.field]
    return v instanceof Date ? v.toISOString() : v
  })
  return Buffer.from(JSON.stringify({ s: sortSignature(sort), v: [...values, row.id] })).toString('base64url')
}

function decodeCursor(raw: string, sort: SortKey[]): unknown[] {
  const bad = () => new AppError('invalid_cursor', 'cursor is not a next_cursor of this list with this sort', { param: 'cursor' })
  let parsed: unknown
  try {
    if (!/^[A-Za-z0-9_-]{1,2048}$/.test(raw)) throw bad()
    parsed = JSON.parse(Buffer.from(raw, 'base64url').toString('utf8'))
  } catch {
    throw bad()
  }
  const c = parsed as { s?: unknown; v?: unknown }
  if (!c || typeof c !== 'object' || c.s !== sortSignature(sort) || !Array.isArray(c.v) || c.v.length !== sort.length + 1) {
    throw bad()
  }
  const values = c.v.map((v, i) => {
    const type: FieldType = i < sort.length ? sort[i]!.type : 'text'
    if (type === 'time') {
      if (v === null && i < sort.length && sort[i]!.nullable) return null
      const d = typeof v === 'string' ? parseTime(v) : null
      if (!d) throw bad()
      return d
    }
    if (type === 'int' ? typeof v !== 'number' || !Number.isSafeInteger(v) : typeof v !== 'string' || v.includes('\u0000')) throw bad()
    return v
  })
  return values
}

/** Cuts the `limit + 1` rows a store query fetched into a page. */
export function toPage<R extends { id: string }, T>(rows: R[], q: ListQuery, view: (row: R) => T): Page<T> {
  const has_more = rows.length > q.limit
  const page = has_more ? rows.slice(0, q.limit) : rows
  const last = page[page.length - 1]
  return { data: page.map(view), next_cursor: has_more && last ? encodeCursor(q.sort, last) : null, has_more }
}
