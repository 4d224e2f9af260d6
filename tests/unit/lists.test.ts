import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { AppError } from '../../src/lib/errors'
import { encodeCursor, parseListQuery, toPage, type ListSpec } from '../../src/lib/lists'

setDefaultTimeout(TEST_TIMEOUT_MS)

const spec: ListSpec = {
  sortable: { created_at: 'time', name: 'text', size: 'int' },
  filters: {
    status: { type: 'text', values: ['active', 'archived'] },
    owner_id: { type: 'text' },
    size: { type: 'int' },
    created_at: { type: 'time' },
  },
  extra: ['workspace_id'],
}

/** The AppError a parse throws, so each case can check its code and param. */
function failure(query: Record<string, unknown>): AppError {
  try {
    parseListQuery(query, spec)
  } catch (err) {
    if (err instanceof AppError) return err
    throw err
  }
  throw new Error(`parseListQuery(${JSON.stringify(query)}) did not fail`)
}

const nextCursor = (sort: string, row: Record<string, unknown> & { id: string }) =>
  encodeCursor(parseListQuery({ sort }, spec).sort, row)

describe('limit', () => {
  test('defaults to 20', () => {
    expect(parseListQuery({}, spec).limit).toBe(20)
  })

  test.each(['1', '7', '100'])('accepts %p', (limit) => {
    expect(parseListQuery({ limit }, spec).limit).toBe(Number(limit))
  })

  test.each(['0', '101', '1000', '-1', 'abc', '1.5', '', ' 5', '5 ', '1e2', '0x10', '99999'])('refuses %p with validation_error on limit', (limit) => {
    const err = failure({ limit })
    expect(err.code).toBe('validation_error')
    expect(err.status).toBe(400)
    expect(err.extra.param).toBe('limit')
    expect(err.extra.details?.[0]?.path).toBe('limit')
  })
})

describe('sort', () => {
  test('defaults to -created_at', () => {
    expect(parseListQuery({}, spec).sort).toEqual([{ field: 'created_at', type: 'time', desc: true }])
  })

  test.each([
    ['name', [{ field: 'name', type: 'text', desc: false }]],
    ['-name', [{ field: 'name', type: 'text', desc: true }]],
    ['-name,created_at', [{ field: 'name', type: 'text', desc: true }, { field: 'created_at', type: 'time', desc: false }]],
    ['size,-created_at', [{ field: 'size', type: 'int', desc: false }, { field: 'created_at', type: 'time', desc: true }]],
  ])('parses %p', (sort, expected) => {
    expect(parseListQuery({ sort }, spec).sort).toEqual(expected as never)
  })

  test.each(['owner_id', 'nope', '', '-', 'name,', ',name', 'name,name', 'name,-name', '--name', '+name', 'NAME', 'constructor', '__proto__', 'toString', 'name desc'])(
    'refuses %p with invalid_sort',
    (sort) => {
      const err = failure({ sort })
      expect(err.code).toBe('invalid_sort')
      expect(err.status).toBe(400)
      expect(err.extra.param).toBe('sort')
    },
  )
})

describe('filters', () => {
  test('equality on a text field', () => {
    expect(parseListQuery({ owner_id: 'alice' }, spec).filters).toEqual([{ field: 'owner_id', op: 'eq', value: 'alice' }])
  })

  test('equality on an enumerated field', () => {
    expect(parseListQuery({ status: 'archived' }, spec).filters).toEqual([{ field: 'status', op: 'eq', value: 'archived' }])
  })

  test('equality on an integer field is a number', () => {
    expect(parseListQuery({ size: '42' }, spec).filters).toEqual([{ field: 'size', op: 'eq', value: 42 }])
  })

  test('_in splits on commas and drops empty values', () => {
    expect(parseListQuery({ status_in: 'active,,archived' }, spec).filters).toEqual([{ field: 'status', op: 'in', values: ['active', 'archived'] }])
    expect(parseListQuery({ size_in: '1,2' }, spec).filters).toEqual([{ field: 'size', op: 'in', values: [1, 2] }])
  })

  test('_after and _before parse ISO times, converting offsets to UTC', () => {
    const q = parseListQuery({ created_at_after: '2026-01-02T03:04:05+02:00', created_at_before: '2026-01-03' }, spec)
    expect(q.filters).toEqual([
      { field: 'created_at', op: 'after', value: new Date('2026-01-02T01:04:05.000Z') },
      { field: 'created_at', op: 'before', value: new Date('2026-01-03T00:00:00.000Z') },
    ])
  })

  test('limit, cursor, sort and the extra parameters are not filters', () => {
    expect(parseListQuery({ limit: '5', sort: 'name', workspace_id: 'ws_1' }, spec).filters).toEqual([])
  })

  test('undefined values are ignored', () => {
    expect(parseListQuery({ status: undefined, limit: undefined }, spec)).toMatchObject({ limit: 20, filters: [] })
  })

  test.each([
    ['an unknown parameter', { colour: 'red' }, 'colour'],
    ['a field that is not filterable', { name: 'x' }, 'name'],
    ['a value outside the enumeration', { status: 'deleted' }, 'status'],
    ['an _in value outside the enumeration', { status_in: 'active,deleted' }, 'status_in'],
    ['an empty _in list', { status_in: ',' }, 'status_in'],
    ['more than 100 _in values', { owner_id_in: Array.from({ length: 101 }, (_, i) => `u${i}`).join(',') }, 'owner_id_in'],
    ['a non-integer on an integer field', { size: 'ten' }, 'size'],
    ['a non-integer in an integer _in', { size_in: '1,x' }, 'size_in'],
    ['equality on a time field', { created_at: '2026-01-01' }, 'created_at'],
    ['_in on a time field', { created_at_in: '2026-01-01' }, 'created_at_in'],
    ['_after on a text field', { owner_id_after: '2026-01-01' }, 'owner_id_after'],
    ['an unparseable time', { created_at_after: 'yesterday' }, 'created_at_after'],
    ['a number as a time', { created_at_before: '1' }, 'created_at_before'],
    ['an impossible date', { created_at_after: '2026-13-45' }, 'created_at_after'],
    ['a day that does not exist', { created_at_after: '2026-02-30T00:00:00Z' }, 'created_at_after'],
    ['year 0 (Postgres has none)', { created_at_before: '0000-06-01T00:00:00Z' }, 'created_at_before'],
    ['a time that becomes year 0 in UTC', { created_at_before: '0001-01-01T00:30:00+01:00' }, 'created_at_before'],
    ['NUL in a text value', { owner_id: 'a\u0000' }, 'owner_id'],
    ['NUL in an _in value', { owner_id_in: 'a,\u0000' }, 'owner_id_in'],
    ['a prototype name', { constructor: 'x' }, 'constructor'],
    ['a prototype name with a suffix', { __proto___in: 'x' }, '__proto___in'],
  ])('refuses %s with invalid_filter', (_what, query, param) => {
    const err = failure(query)
    expect(err.code).toBe('invalid_filter')
    expect(err.status).toBe(400)
    expect(err.extra.param).toBe(param)
  })

  test('a repeated query parameter (an array) is invalid_filter naming it', () => {
    const err = failure({ status: ['active', 'archived'] })
    expect(err.code).toBe('invalid_filter')
    expect(err.extra.param).toBe('status')
    expect(failure({ limit: ['5', '6'] }).extra.param).toBe('limit')
  })
})

describe('cursor', () => {
  const row = { id: 'ws_01', name: 'Beta', created_at: new Date('2026-01-02T03:04:05.678Z'), size: 3 }

  test('round-trips the sort values and the id', () => {
    const cursor = nextCursor('-created_at', row)
    expect(cursor).toMatch(/^[A-Za-z0-9_-]+$/)
    expect(parseListQuery({ cursor }, spec).after).toEqual([new Date('2026-01-02T03:04:05.678Z'), 'ws_01'])
    expect(parseListQuery({ sort: 'name,size', cursor: nextCursor('name,size', row) }, spec).after).toEqual(['Beta', 3, 'ws_01'])
  })

  test('no cursor means from the start', () => {
    expect(parseListQuery({}, spec).after).toBeNull()
  })

  const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url')
  test.each([
    ['empty', ''],
    ['not base64url', 'abc$def'],
    ['padding characters', `${nextCursor('-created_at', row)}=`],
    ['base64 of garbage', Buffer.from('not json at all').toString('base64url')],
    ['JSON null', b64(null)],
    ['JSON array', b64([1, 2])],
    ['a missing sort signature', b64({ v: ['2026-01-02T03:04:05.678Z', 'ws_01'] })],
    ['values of the wrong length', b64({ s: '-created_at', v: ['2026-01-02T03:04:05.678Z'] })],
    ['a time that is not a time', b64({ s: '-created_at', v: ['later', 'ws_01'] })],
    ['a number as the time', b64({ s: '-created_at', v: [5, 'ws_01'] })],
    ['an id that is not a string', b64({ s: '-created_at', v: ['2026-01-02T03:04:05.678Z', 7] })],
    ['an object as the id', b64({ s: '-created_at', v: ['2026-01-02T03:04:05.678Z', { $ne: 1 }] })],
    ['an id with a NUL', b64({ s: '-created_at', v: ['2026-01-02T03:04:05.678Z', 'ws_\u0000'] })],
    ['a time in year 0', b64({ s: '-created_at', v: ['0000-01-01T00:00:00.000Z', 'ws_01'] })],
    ['too long', 'A'.repeat(3000)],
    ['a truncated real cursor', nextCursor('-created_at', row).slice(0, 20)],
  ])('refuses a cursor that is %s', (_what, cursor) => {
    const err = failure({ cursor })
    expect(err.code).toBe('invalid_cursor')
    expect(err.status).toBe(400)
    expect(err.extra.param).toBe('cursor')
  })

  test('a tampered cursor (one character changed) is refused or decodes to a different but typed position', () => {
    const cursor = nextCursor('-created_at', row)
    let refused = 0
    for (let i = 0; i < cursor.length; i++) {
      const c = cursor[i] === 'A' ? 'B' : 'A'
      const tampered = cursor.slice(0, i) + c + cursor.slice(i + 1)
      try {
        const after = parseListQuery({ cursor: tampered }, spec).after!
        // Whatever survives must still be well typed: a Date and a string id.
        expect(after[0]).toBeInstanceOf(Date)
        expect(typeof after[1]).toBe('string')
      } catch (err) {
        expect((err as AppError).code).toBe('invalid_cursor')
        refused++
      }
    }
    expect(refused).toBeGreaterThan(cursor.length / 2)
  })

  test.each([
    ['-created_at', 'created_at'],
    ['-created_at', 'name'],
    ['name', '-name'],
    ['name,created_at', 'name'],
    ['name', 'name,created_at'],
    ['size', 'name'],
  ])('a cursor of sort %p is invalid_cursor under sort %p', (from, to) => {
    const cursor = nextCursor(from, row)
    expect(() => parseListQuery({ sort: from, cursor }, spec)).not.toThrow()
    const err = failure({ sort: to, cursor })
    expect(err.code).toBe('invalid_cursor')
  })

  test('an int sort value must be a safe integer', () => {
    const cursor = Buffer.from(JSON.stringify({ s: 'size', v: [1.5, 'ws_01'] })).toString('base64url')
    expect(failure({ sort: 'size', cursor }).code).toBe('invalid_cursor')
    const big = Buffer.from(JSON.stringify({ s: 'size', v: [2 ** 60, 'ws_01'] })).toString('base64url')
    expect(failure({ sort: 'size', cursor: big }).code).toBe('invalid_cursor')
  })
})

describe('toPage', () => {
  const rows = Array.from({ length: 4 }, (_, i) => ({ id: `ws_${i}`, name: `n${i}`, created_at: new Date(Date.UTC(2026, 0, 1, 0, 0, i)) }))
  const view = (r: (typeof rows)[number]) => ({ id: r.id })

  test('limit + 1 rows: a full page, has_more, and a cursor after its last row', () => {
    const q = parseListQuery({ limit: '3' }, spec)
    const page = toPage(rows, q, view)
    expect(page.data).toEqual([{ id: 'ws_0' }, { id: 'ws_1' }, { id: 'ws_2' }])
    expect(page.has_more).toBe(true)
    expect(page.next_cursor).toBe(encodeCursor(q.sort, rows[2]!))
    expect(parseListQuery({ limit: '3', cursor: page.next_cursor! }, spec).after).toEqual([rows[2]!.created_at, 'ws_2'])
  })

  test.each([
    ['exactly limit rows', 4],
    ['fewer rows', 2],
    ['no rows', 0],
  ])('%s: the last page, no cursor', (_what, n) => {
    const page = toPage(rows.slice(0, n), parseListQuery({ limit: '4' }, spec), view)
    expect(page.data).toHaveLength(n)
    expect(page.has_more).toBe(false)
    expect(page.next_cursor).toBeNull()
  })
})
