import type { Fragment } from 'postgres'
import type { ListQuery } from '../lib/lists'
import type { Sql } from './db'

/**
 * The SQL of a keyset page: filters, "after the cursor", order and limit. Column names come only
 * from a route's ListSpec (never from the client), and `id` breaks ties so pages never repeat or skip.
 */
export function listClauses(sql: Sql, q: ListQuery, opts: { alias?: string; idColumn?: string } = {}) {
  const col = (f: string) => {
    const name = f === 'id' && opts.idColumn ? opts.idColumn : f
    return sql(opts.alias ? `${opts.alias}.${name}` : name)
  }
  const conditions: Fragment[] = q.filters.map((f) => {
    switch (f.op) {
      case 'eq': return sql`${col(f.field)} = ${f.value}`
      case 'in': return sql`${col(f.field)} in ${sql(f.values)}`
      case 'after': return sql`${col(f.field)} > ${f.value}`
      case 'before': return sql`${col(f.field)} < ${f.value}`
    }
  })
  const keys: { field: string; desc: boolean; nullable?: boolean }[] = [...q.sort, { field: 'id', desc: q.sort[q.sort.length - 1]!.desc }]
  // A nullable time sorts as 'infinity' (where Postgres puts nulls: last ascending, first descending),
  // so the keyset comparisons below hold across nulls too.
  const key = (k: (typeof keys)[number]) => (k.nullable ? sql`coalesce(${col(k.field)}, 'infinity'::timestamptz)` : col(k.field))
  if (q.after) {
    const values = q.after
    const value = (k: (typeof keys)[number], v: unknown) => (k.nullable && v === null ? sql`'infinity'::timestamptz` : sql`${v as never}`)
    // (k1 > v1) or (k1 = v1 and k2 > v2) or ... with each key's own direction.
    const alternatives = keys.map((k, i) => {
      const cmp = k.desc ? sql`${key(k)} < ${value(k, values[i])}` : sql`${key(k)} > ${value(k, values[i])}`
      return keys.slice(0, i).reduce((acc, prev, j) => sql`${key(prev)} = ${value(prev, values[j])} and ${acc}`, cmp)
    })
    conditions.push(sql`(${alternatives.reduce((acc, a) => sql`${acc} or (${a})`)})`)
  }
  const order = keys.map((k) => (k.desc ? sql`${key(k)} desc` : sql`${key(k)} asc`))
  return {
    /** `and ...` conditions, to follow a where clause that already has one condition. */
    and: conditions.reduce((acc, c) => sql`${acc} and ${c}`, sql``),
    orderBy: order.reduce((acc, o) => sql`${acc}, ${o}`),
    limit: q.limit + 1,
  }
}

/** The workspaces a list covers: every one (root), or these (docs/api.md, "Lists"). */
export type WorkspaceScope = 'all' | string[]

/**
 * The condition `workspace_id = any(...)` of a list across workspaces: one array parameter whatever
 * the number of workspaces, so the statement stays the same and the (workspace_id, created_at, id)
 * indexes serve it.
 */
export function inWorkspaces(sql: Sql, scope: WorkspaceScope, column = 'workspace_id') {
  if (scope === 'all') return sql`true`
  if (scope.length === 0) return sql`false`
  return sql`${sql(column)} = any(${scope as never}::text[])`
}
