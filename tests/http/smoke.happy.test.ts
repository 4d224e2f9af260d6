import { afterAll, beforeAll, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { keyFor, startHarness, workspaceOf, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

let h: Harness
beforeAll(async () => {
  h = await startHarness()
})
afterAll(() => h.close())

test('a workspace round trip through the real app', async () => {
  const alice = await keyFor(h, 'alice')
  const id = await workspaceOf(h, alice, 'Acme')
  const got = await h.call('GET', `/v1/workspaces/${id}`, { key: alice })
  expect(got.status).toBe(200)
  expect(got.body.data).toMatchObject({ id, name: 'Acme', owner_id: 'alice', member_count: 1, status: 'active' })
  expect(got.body.meta).toEqual({ version: 'v1', deprecated_warnings: [] })
  expect(got.body.request_id).toBe(got.headers.get('x-request-id'))
})
