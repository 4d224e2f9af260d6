import { afterAll, beforeAll, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { startWorkers, type Workers } from '../../src/workers'
import { keyFor, startHarness, workspaceOf, type Harness } from '../helpers/harness'
import { chain, parseSse, wait } from '../helpers/runs'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * A quiet event stream gets a comment every SSE_HEARTBEAT_MS (15 s by default): Bun closes a
 * connection that sent nothing for 30 s, so a run waiting in a `wait` node had its stream cut at
 * 30 s (seen with `bun start` and curl before this). Here the interval is 100 ms and the wait 1 s.
 */
let h: Harness
let workers: Workers
let key: string
let ws: string

beforeAll(async () => {
  h = await startHarness({ SSE_HEARTBEAT_MS: '100' })
  workers = await startWorkers(h.deps)
  key = await keyFor(h, 'heartbeat-owner')
  ws = await workspaceOf(h, key, 'Heartbeat')
})

afterAll(async () => {
  await workers?.stop()
  await h?.close()
})

test('a run quiet in a wait node: keep-alive comments between its events, the events intact', async () => {
  const graph = chain({ id: 'start', type: 'start', config: {} }, wait('pause', 1), { id: 'end', type: 'end', config: { outputs: { done: 'yes' } } })
  const wf = await h.call('POST', '/v1/workflows', { key, body: { workspace_id: ws, name: 'Pause', graph } })
  expect(wf.status).toBe(201)
  const started = await h.call('POST', `/v1/workflows/${wf.body.data.id}/runs?async=true`, { key, body: { inputs: {} } })
  expect(started.status).toBe(202)
  const stream = await h.call('GET', `/v1/runs/${started.body.run_id}/events`, { key, headers: { accept: 'text/event-stream' } })
  expect(stream.status).toBe(200)
  const comments = stream.text.match(/^: keep-alive\n\n/gm) ?? []
  // ~10 intervals in the 1 s wait; at least a few even on a busy machine.
  expect(comments.length).toBeGreaterThanOrEqual(3)
  // Only between events, each comment a block of its own.
  const events = parseSse(stream.text.replaceAll(': keep-alive\n\n', ''))
  expect(events.map((e) => e.event)).toEqual(['node_start', 'node_end', 'node_start', 'node_end', 'node_start', 'node_end', 'usage', 'done'])
  // During the wait (between the pause node's start and its end) the stream stays alive. Comments may
  // come before it too: the run is claimed after the stream opened, later than 100 ms on a busy machine.
  const waitStart = stream.text.indexOf('"node_id":"pause"')
  const waitEnd = stream.text.indexOf('"node_id":"pause"', waitStart + 1)
  expect(waitStart).toBeGreaterThan(0)
  expect(waitEnd).toBeGreaterThan(waitStart)
  expect((stream.text.slice(waitStart, waitEnd).match(/^: keep-alive\n\n/gm) ?? []).length).toBeGreaterThanOrEqual(2)
})
