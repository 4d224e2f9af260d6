import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { keyFor, startHarness, workspaceOf, type Answer, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

interface Ws {
  id: string
  name: string
  status: string
  created_at: string
}

let h: Harness

beforeAll(async () => {
  h = await startHarness({ RATE_LIMIT_PER_SECOND: '100000', RATE_LIMIT_BURST: '100000' })
}, 30_000)
afterAll(() => h.close())

/**
 * Each workspace made here gets a created_at of its own, a millisecond after the one made before it:
 * two made in the same millisecond are ordered by id, and ids made within one millisecond are in no
 * particular order (docs/api.md, "Ids"), so "newest first" is the reverse of creation only when no
 * two share one. Ties have a test of their own below.
 */
let made = 0
async function madeWorkspace(key: string, name: string): Promise<string> {
  const id = await workspaceOf(h, key, name)
  await h.deps.db.sql`update workspaces set created_at = ${new Date(Date.UTC(2026, 0, 1) + made++)} where id = ${id}`
  return id
}

/** A user of its own with `n` workspaces named by `name(i)`; a list with its key sees only those. */
async function userWith(user: string, n: number, name = (i: number) => `${user} ${String(i).padStart(2, '0')}`) {
  const key = await keyFor(h, user)
  const ids: string[] = []
  for (let i = 0; i < n; i++) ids.push(await madeWorkspace(key, name(i)))
  return { key, ids }
}

/** Follows next_cursor from the first page to the last; `between` runs after each page. */
async function walk(key: string, query: string, between: (page: number) => Promise<void> = async () => {}) {
  const pages: Ws[][] = []
  let cursor: string | null = null
  do {
    const res: Answer = await h.call('GET', `/v1/workspaces?${query}${cursor ? `&cursor=${cursor}` : ''}`, { key })
    expect(res.status).toBe(200)
    expect(Object.keys(res.body).sort()).toEqual(['data', 'has_more', 'next_cursor', 'request_id'])
    expect(res.body.has_more).toBe(res.body.next_cursor !== null)
    pages.push(res.body.data)
    cursor = res.body.next_cursor
    expect(pages.length).toBeLessThan(100)
    await between(pages.length)
  } while (cursor)
  return pages
}

const ids = (rows: Ws[]) => rows.map((r) => r.id)
const cmp = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0)

describe('pagination', () => {
  test('limit 7 over 25 workspaces: every row once, in order, no gaps', async () => {
    const { key, ids: created } = await userWith('pager', 25)
    const pages = await walk(key, 'limit=7')
    expect(pages.map((p) => p.length)).toEqual([7, 7, 7, 4])
    const seen = ids(pages.flat())
    expect(new Set(seen).size).toBe(25)
    // Default sort -created_at: newest first, exactly the reverse of creation.
    expect(seen).toEqual([...created].reverse())
    const all = await h.call('GET', '/v1/workspaces?limit=100', { key })
    expect(ids(all.body.data)).toEqual(seen)
    expect(all.body).toMatchObject({ has_more: false, next_cursor: null })
  })

  test('rows inserted between pages neither repeat nor shift the pages (default -created_at)', async () => {
    const { key, ids: created } = await userWith('inserter', 25)
    const added: string[] = []
    const pages = await walk(key, 'limit=7', async () => {
      for (let i = 0; i < 3; i++) added.push(await madeWorkspace(key, `inserted ${added.length}`))
    })
    const seen = ids(pages.flat())
    // The new rows are newer than the cursor, so they belong before it and never show up.
    expect(seen).toEqual([...created].reverse())
    expect(pages.map((p) => p.length)).toEqual([7, 7, 7, 4])
    const first = await h.call('GET', '/v1/workspaces?limit=100', { key })
    expect(ids(first.body.data)).toEqual([...added].reverse().concat([...created].reverse()))
  })

  test('ascending created_at while inserting: the old rows once each, in order, then the new ones', async () => {
    const { key, ids: created } = await userWith('ascender', 15)
    const added: string[] = []
    const pages = await walk(key, 'limit=4&sort=created_at', async (n) => {
      if (n <= 3) added.push(await madeWorkspace(key, `late ${n}`))
    })
    const seen = ids(pages.flat())
    expect(new Set(seen).size).toBe(seen.length)
    expect(seen).toEqual([...created, ...added])
  })

  test('rows with the same created_at break ties on id: pages of 2 still see each once', async () => {
    const { key, ids: created } = await userWith('twins', 9)
    await h.deps.db.sql`update workspaces set created_at = '2026-01-01T00:00:00.000Z' where id in ${h.deps.db.sql(created)}`
    const down = ids((await walk(key, 'limit=2')).flat())
    expect(down).toEqual([...created].sort(cmp).reverse())
    const up = ids((await walk(key, 'limit=2&sort=created_at')).flat())
    expect(up).toEqual([...created].sort(cmp))
  })

  test('a cursor stays valid after the row it points at is deleted', async () => {
    const { key, ids: created } = await userWith('deleter', 6)
    const first = await h.call('GET', '/v1/workspaces?limit=3', { key })
    const last = first.body.data[2].id
    expect((await h.call('DELETE', `/v1/workspaces/${last}`, { key })).status).toBe(200)
    const second = await h.call('GET', `/v1/workspaces?limit=3&cursor=${first.body.next_cursor}`, { key })
    expect(second.status).toBe(200)
    expect(ids(second.body.data)).toEqual([...created].reverse().slice(3))
    expect(second.body.has_more).toBe(false)
  })

  test('the default limit is 20 and limit=100 is allowed', async () => {
    const { key } = await userWith('defaults', 21)
    const page = await h.call('GET', '/v1/workspaces', { key })
    expect(page.body.data).toHaveLength(20)
    expect(page.body.has_more).toBe(true)
    expect(typeof page.body.next_cursor).toBe('string')
    const all = await h.call('GET', '/v1/workspaces?limit=100', { key })
    expect(all.body.data).toHaveLength(21)
    expect(all.body).toMatchObject({ has_more: false, next_cursor: null })
  })

  test('an exact multiple of the limit ends with has_more false, not an empty page', async () => {
    const { key } = await userWith('exact', 6)
    const pages = await walk(key, 'limit=3')
    expect(pages.map((p) => p.length)).toEqual([3, 3])
  })

  test('members paginate the same way', async () => {
    const { key, ids: [wsId] } = await userWith('host', 1)
    const users = Array.from({ length: 11 }, (_, i) => `member-${String(i).padStart(2, '0')}`)
    for (const user_id of users) expect((await h.call('POST', `/v1/workspaces/${wsId}/members`, { key, body: { user_id, role: 'user' } })).status).toBe(201)
    const seen: string[] = []
    let cursor: string | null = null
    do {
      const res: Answer = await h.call('GET', `/v1/workspaces/${wsId}/members?limit=4&sort=user_id${cursor ? `&cursor=${cursor}` : ''}`, { key })
      expect(res.status).toBe(200)
      seen.push(...res.body.data.map((m: { user_id: string }) => m.user_id))
      cursor = res.body.next_cursor
    } while (cursor)
    expect(seen).toEqual(['host', ...users].sort(cmp))
  })
})

describe('sort', () => {
  // Pairs share a name, so the id must break the tie; names of one case and fixed width sort alike everywhere.
  const nameOf = (i: number) => `n${String(Math.floor(i / 2)).padStart(2, '0')}`
  let key: string
  let rows: Ws[]
  beforeAll(async () => {
    ;({ key } = await userWith('sorter', 14, nameOf))
    rows = (await h.call('GET', '/v1/workspaces?limit=100', { key })).body.data
    expect(rows).toHaveLength(14)
  })

  test.each([
    ['name', (a: Ws, b: Ws) => cmp(a.name, b.name) || cmp(a.id, b.id)],
    ['-name', (a: Ws, b: Ws) => cmp(b.name, a.name) || cmp(b.id, a.id)],
    ['name,-created_at', (a: Ws, b: Ws) => cmp(a.name, b.name) || cmp(b.created_at, a.created_at) || cmp(b.id, a.id)],
    ['-name,created_at', (a: Ws, b: Ws) => cmp(b.name, a.name) || cmp(a.created_at, b.created_at) || cmp(a.id, b.id)],
    ['created_at', (a: Ws, b: Ws) => cmp(a.created_at, b.created_at) || cmp(a.id, b.id)],
  ])('sort=%s, over pages of 3', async (sort, order) => {
    const expected = ids([...rows].sort(order))
    expect(ids((await walk(key, `limit=3&sort=${sort}`)).flat())).toEqual(expected)
    expect(ids((await h.call('GET', `/v1/workspaces?limit=100&sort=${sort}`, { key })).body.data)).toEqual(expected)
  })

  test.each([
    ['name', ''],
    ['name', 'sort=-name'],
    ['name', 'sort=created_at'],
    ['-name,created_at', 'sort=-name'],
    ['', 'sort=name'],
  ])('a cursor of sort=%p used with %p is 400 invalid_cursor', async (from, to) => {
    const page = await h.call('GET', `/v1/workspaces?limit=2${from ? `&sort=${from}` : ''}`, { key })
    expect(page.body.next_cursor).toBeString()
    const res = await h.call('GET', `/v1/workspaces?limit=2${to ? `&${to}` : ''}&cursor=${page.body.next_cursor}`, { key })
    expect(res.status).toBe(400)
    expect(res.body.error).toMatchObject({ code: 'invalid_cursor', param: 'cursor' })
  })
})

describe('filters', () => {
  let key: string
  let rows: Ws[]
  let archived: string[]
  beforeAll(async () => {
    const made = await userWith('filterer', 12)
    key = made.key
    archived = [made.ids[1]!, made.ids[4]!, made.ids[5]!, made.ids[9]!]
    for (const id of archived) expect((await h.call('POST', `/v1/workspaces/${id}/archive`, { key })).status).toBe(200)
    // Spread the creation times an hour apart, so time filters have clear edges.
    for (const [i, id] of made.ids.entries()) {
      await h.deps.db.sql`update workspaces set created_at = ${new Date(Date.UTC(2026, 0, 1, i))} where id = ${id}`
    }
    rows = (await h.call('GET', '/v1/workspaces?limit=100', { key })).body.data
  })

  test.each([
    ['status=archived', (w: Ws) => w.status === 'archived'],
    ['status=active', (w: Ws) => w.status === 'active'],
    ['status_in=active,archived', () => true],
    ['status_in=archived', (w: Ws) => w.status === 'archived'],
    ['created_at_after=2026-01-01T05:00:00Z', (w: Ws) => w.created_at > '2026-01-01T05:00:00.000Z'],
    ['created_at_before=2026-01-01T05:00:00Z', (w: Ws) => w.created_at < '2026-01-01T05:00:00.000Z'],
    ['created_at_after=2026-01-01T07:00:00%2B02:00', (w: Ws) => w.created_at > '2026-01-01T05:00:00.000Z'],
    ['created_at_after=2026-01-01T02:30:00Z&created_at_before=2026-01-01T08:00:00Z', (w: Ws) => w.created_at > '2026-01-01T02:30:00.000Z' && w.created_at < '2026-01-01T08:00:00.000Z'],
    ['status=active&created_at_before=2026-01-01T06:00:00Z', (w: Ws) => w.status === 'active' && w.created_at < '2026-01-01T06:00:00.000Z'],
    ['created_at_after=2027-01-01', () => false],
  ])('%s', async (query, keep) => {
    const expected = ids(rows.filter(keep))
    expect(ids((await walk(key, `limit=2&${query}`)).flat())).toEqual(expected)
  })

  test('the archived filter returns exactly the archived workspaces', async () => {
    const res = await h.call('GET', '/v1/workspaces?status=archived&limit=100', { key })
    expect(ids(res.body.data).sort()).toEqual([...archived].sort())
    expect(res.body.data.every((w: Ws) => w.status === 'archived')).toBe(true)
  })

  test('a cursor keeps its filter: the next page of a filtered list stays filtered', async () => {
    const first = await h.call('GET', '/v1/workspaces?status=archived&limit=2', { key })
    const second = await h.call('GET', `/v1/workspaces?status=archived&limit=2&cursor=${first.body.next_cursor}`, { key })
    expect([...ids(first.body.data), ...ids(second.body.data)].sort()).toEqual([...archived].sort())
  })
})

describe('bad list parameters', () => {
  test.each([
    ['limit=0', 'validation_error'],
    ['limit=101', 'validation_error'],
    ['limit=abc', 'validation_error'],
    ['limit=-5', 'validation_error'],
    ['limit=7.5', 'validation_error'],
    ['sort=owner_id', 'invalid_sort'],
    ['sort=name,,created_at', 'invalid_sort'],
    ['status=deleted', 'invalid_filter'],
    ['name=x', 'invalid_filter'],
    ['created_at_after=soon', 'invalid_filter'],
    ['cursor=%%%', 'invalid_cursor'],
  ])('%s is 400 %s', async (query, code) => {
    const res = await h.call('GET', `/v1/workspaces?${query}`)
    expect(res.status).toBe(400)
    expect(res.body.error.code).toBe(code)
  })
})
