import { afterAll, beforeAll, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { EventSource } from 'eventsource'
import { chain, end, start, startRunsEnv, tpl, wait, type RunsEnv } from '../helpers/runs'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The `eventsource` package (the WHATWG EventSource for Node and Bun) following a run's events at
 * GET /v1/runs/{run_id}/events: its first connection is cut after two events, it reconnects by itself
 * with Last-Event-ID, and it receives every event of the stored log exactly once, in order, to `done`.
 */
let env: RunsEnv
let server: ReturnType<typeof Bun.serve>

beforeAll(async () => {
  env = await startRunsEnv()
  server = Bun.serve({ hostname: '127.0.0.1', port: 0, fetch: (req) => env.h.app.handle(req) })
}, 60_000)

afterAll(async () => {
  server?.stop(true)
  await env?.close()
})

/** The response body of `res`, ended after its `events`-th complete event (a dropped connection). */
function cutAfter(res: Response, events: number): Response {
  const reader = res.body!.getReader()
  let seen = 0
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      const { done, value } = await reader.read()
      if (done) return controller.close()
      const text = new TextDecoder().decode(value)
      seen += text.split('\n\n').length - 1
      controller.enqueue(value)
      if (seen >= events) {
        await reader.cancel()
        controller.close()
      }
    },
  })
  return new Response(body, { status: res.status, headers: res.headers })
}

test('a dropped stream resumes with Last-Event-ID: every event once, in order, through done', async () => {
  const wf = await env.workflow(chain(start([{ name: 'who', type: 'string' }]), tpl('a', 'hi {{inputs.who}}'), wait('pause', 1), tpl('b', '{{nodes.a.output.text}}!'), end({ text: '{{nodes.b.output.text}}' })))
  const started = await env.trigger(wf, { who: 'Ada' }, { async: true })
  const runId = started.body.run_id as string
  const lastEventIds: (string | null)[] = []
  /** The id of the last event the client had when it connected, per connection. */
  const hadAt: (string | null)[] = []
  let connections = 0
  const got: { id: string; type: string; data: unknown }[] = []
  await new Promise<void>((resolve, reject) => {
    const source = new EventSource(`http://127.0.0.1:${server.port}/v1/runs/${runId}/events`, {
      fetch: async (input, init) => {
        const headers: Record<string, string> = { ...(init?.headers as Record<string, string>), authorization: `Bearer ${env.owner}` }
        lastEventIds.push(headers['last-event-id'] ?? headers['Last-Event-ID'] ?? null)
        hadAt.push(got.at(-1)?.id ?? null)
        const res = await fetch(input, { ...init, headers })
        return ++connections === 1 ? cutAfter(res, 2) : res
      },
    })
    const timer = setTimeout(() => (source.close(), reject(new Error(`no done event; got ${got.map((e) => e.type)}`))), 30_000)
    for (const type of ['node_start', 'node_end', 'usage', 'message', 'done']) {
      source.addEventListener(type, (e) => {
        got.push({ id: e.lastEventId, type, data: JSON.parse(e.data) })
        if (type === 'done') {
          clearTimeout(timer)
          source.close()
          resolve()
        }
      })
    }
  })
  expect(connections).toBeGreaterThanOrEqual(2)
  // The reconnection named the last event the client had.
  expect(lastEventIds[0]).toBeNull()
  expect(hadAt[1]).not.toBeNull()
  expect(lastEventIds[1]).toBe(hadAt[1]!)
  expect(Number(hadAt[1])).toBeLessThan(got.length)
  const stored = (await env.h.call('GET', `/v1/runs/${runId}/events`, { key: env.owner })).body.data as { seq: number; event: string; data: unknown }[]
  expect(got.map((e) => [Number(e.id), e.type])).toEqual(stored.map((e) => [e.seq, e.event]))
  expect(got.map((e) => e.data)).toEqual(stored.map((e) => e.data))
}, 60_000)

test('a finished run: every stored event once, the stream ends, and the reconnection is a 204 that stops EventSource', async () => {
  const wf = await env.workflow(chain(start(), tpl('a', 'x'), tpl('b', '{{nodes.a.output.text}}y'), end({ text: '{{nodes.b.output.text}}' })))
  const done = await env.trigger(wf)
  expect(done.body.status).toBe('completed')
  const runId = done.body.run_id as string
  const stored = (await env.h.call('GET', `/v1/runs/${runId}/events`, { key: env.owner })).body.data as { seq: number; event: string; data: unknown }[]
  expect(stored.at(-1)!.event).toBe('done')
  /** Each connection the client made: the Last-Event-ID it sent and the status it got. */
  const connections: { lastEventId: string | null; status: number }[] = []
  const got: { id: string; type: string; data: unknown }[] = []
  const source = await new Promise<EventSource>((resolve, reject) => {
    const es: EventSource = new EventSource(`http://127.0.0.1:${server.port}/v1/runs/${runId}/events`, {
      fetch: async (input, init) => {
        const headers: Record<string, string> = { ...(init?.headers as Record<string, string>), authorization: `Bearer ${env.owner}` }
        const res = await fetch(input, { ...init, headers })
        connections.push({ lastEventId: headers['last-event-id'] ?? headers['Last-Event-ID'] ?? null, status: res.status })
        return res
      },
    })
    // Without the 204 the client reconnects every few seconds for ever: 30 s of it is a failure.
    const timer = setTimeout(() => (es.close(), reject(new Error(`EventSource still open after ${connections.length} connections: ${JSON.stringify(connections)}`))), 30_000)
    for (const type of ['node_start', 'node_end', 'usage', 'message', 'done']) {
      es.addEventListener(type, (e) => got.push({ id: e.lastEventId, type, data: JSON.parse(e.data) }))
    }
    es.addEventListener('error', () => {
      if (es.readyState !== EventSource.CLOSED) return
      clearTimeout(timer)
      resolve(es)
    })
  })
  expect(source.readyState).toBe(EventSource.CLOSED)
  // The first connection replayed the whole log and ended; the client came back once, after done, and was told 204.
  expect(connections).toEqual([
    { lastEventId: null, status: 200 },
    { lastEventId: String(stored.at(-1)!.seq), status: 204 },
  ])
  expect(got.map((e) => [Number(e.id), e.type])).toEqual(stored.map((e) => [e.seq, e.event]))
  expect(got.map((e) => e.data)).toEqual(stored.map((e) => e.data))
}, 60_000)
