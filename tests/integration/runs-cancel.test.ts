import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { waitFor } from '../helpers/harness'
import { chain, end, ends, parseSse, start, startRunsEnv, starts, tpl, wait, type RunsEnv } from '../helpers/runs'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Runs end to end in-process (tests/helpers/runs.ts): cancelling a run (during a wait, during an LLM
 * stream against the slow loopback provider, after it finished), Idempotency-Key replays and SSE
 * clients that go away.
 */

let env: RunsEnv

beforeAll(async () => {
  env = await startRunsEnv()
})

afterAll(async () => {
  await env?.close()
})

describe('cancel', () => {
  test('during a wait: 200 cancelled, done says cancelled, the node after the wait never starts', async () => {
    const wf = await env.workflow(chain(start(), wait('pause', 1), tpl('after', 'woke'), end({})))
    const res = await env.trigger(wf, {}, { async: true })
    const runId = res.body.run_id
    await waitFor(async () => starts(await env.eventsOf(runId), 'pause').length === 1, { what: 'the wait node to start' })
    const cancel = await env.h.call('POST', `/v1/runs/${runId}/cancel`, { key: env.owner })
    expect(cancel.status).toBe(200)
    expect(cancel.body).toMatchObject({ run_id: runId, status: 'cancelled' })
    // A run started after the cancelled one has a later wake-up: once it completed, the cancelled
    // run's timer has fired too, and must not have resumed it.
    const later = await env.trigger(wf, {}, { async: true })
    expect((await env.finished(later.body.run_id)).status).toBe('completed')
    const events = await env.eventsOf(runId)
    expect(events.at(-1)).toMatchObject({ event: 'done', data: { status: 'cancelled' } })
    expect(events.filter((e) => e.event === 'done').length).toBe(1)
    expect(starts(events, 'after').length).toBe(0)
    expect((await env.runOf(runId)).status).toBe('cancelled')
    const outbox = await env.outboxOf(runId)
    expect(outbox.map((e) => e.type)).toEqual(['workflow.run.cancelled'])
    expect(outbox[0]!.data).toEqual({ workflow_id: wf, run_id: runId, status: 'cancelled', duration_ms: expect.any(Number) })
  })

  test('during an llm stream: cancelled at once and the upstream connection is closed', async () => {
    const wf = await env.workflow(chain(start(), { id: 'talk', type: 'llm', config: { model: 'slow', messages: [{ role: 'user', content: 'go on' }] } }, end({ text: '{{nodes.talk.output.text}}' })))
    const requestsBefore = env.fake.requests.length
    const res = await env.trigger(wf, {}, { async: true })
    const runId = res.body.run_id
    // Mid-stream: some deltas are in the log.
    await waitFor(async () => (await env.eventsOf(runId)).some((e) => e.event === 'message'), { what: 'the first LLM delta' })
    const upstream = env.fake.requests[requestsBefore]!
    expect(upstream.model).toBe('slow-up')
    const t0 = performance.now()
    const cancel = await env.h.call('POST', `/v1/runs/${runId}/cancel`, { key: env.owner })
    expect(cancel.status).toBe(200)
    expect(cancel.body.status).toBe('cancelled')
    await waitFor(() => upstream.closed, { timeoutMs: 2000, what: 'the fake provider to see its connection closed' })
    const elapsed = performance.now() - t0
    expect(elapsed).toBeLessThan(2000)
    const events = await env.eventsOf(runId)
    expect(ends(events, 'talk').length).toBe(0)
    expect(events.at(-1)).toMatchObject({ event: 'done', data: { status: 'cancelled' } })
    // Far from the 200 chunks: the stream stopped.
    const text = events.filter((e) => e.event === 'message').map((e) => e.data.delta).join('')
    expect(text.split(' ').filter(Boolean).length).toBeLessThan(200)
  })

  test('a finished run: 409 run_not_running', async () => {
    const wf = await env.workflow(chain(start(), tpl('a', 'x'), end({})))
    const res = await env.trigger(wf)
    expect(res.body.status).toBe('completed')
    const cancel = await env.h.call('POST', `/v1/runs/${res.body.run_id}/cancel`, { key: env.owner })
    expect(cancel.status).toBe(409)
    expect(cancel.body.error.code).toBe('run_not_running')
    expect((await env.runOf(res.body.run_id)).status).toBe('completed')
  })
})

describe('idempotency and disconnects', () => {
  let wf: string
  let slow: string
  beforeAll(async () => {
    wf = await env.workflow(chain(start([{ name: 'n', type: 'number', default: 1 }]), tpl('a', '{{inputs.n}}'), end({ a: '{{nodes.a.output.text}}' })))
    slow = await env.workflow(chain(start(), wait('pause', 1), tpl('after', 'done'), end({ text: '{{nodes.after.output.text}}' })))
  })
  const count = async (workflowId: string) => (await env.h.deps.db.sql`select count(*)::int as n from runs where workflow_id = ${workflowId}`)[0]!.n as number

  test('the same Idempotency-Key twice (sync, then async): the same run, one row', async () => {
    const before = await count(wf)
    const headers = { 'idempotency-key': `sync-${crypto.randomUUID()}` }
    const a = await env.trigger(wf, { n: 7 }, { headers })
    const b = await env.trigger(wf, { n: 7 }, { headers })
    expect(a.status).toBe(200)
    expect(b.status).toBe(200)
    expect(b.body.run_id).toBe(a.body.run_id)
    expect(b.headers.get('idempotent-replayed')).toBe('true')
    const asyncHeaders = { 'idempotency-key': `async-${crypto.randomUUID()}` }
    const c = await env.trigger(wf, { n: 8 }, { async: true, headers: asyncHeaders })
    const d = await env.trigger(wf, { n: 8 }, { async: true, headers: asyncHeaders })
    expect(c.status).toBe(202)
    expect(d.status).toBe(202)
    expect(d.body.run_id).toBe(c.body.run_id)
    expect(await count(wf)).toBe(before + 2)
    await env.finished(c.body.run_id)
  })

  test('an SSE trigger with a key, then the same key while it streams: JSON 202 with the same run', async () => {
    const before = await count(slow)
    const key = `sse-${crypto.randomUUID()}`
    const first = await env.h.app.handle(
      new Request(`${env.h.base}/v1/workflows/${slow}/runs`, {
        method: 'POST',
        headers: { authorization: `Bearer ${env.owner}`, 'content-type': 'application/json', accept: 'text/event-stream', 'idempotency-key': key },
        body: JSON.stringify({ inputs: {} }),
      }),
    )
    expect(first.status).toBe(200)
    const reader = first.body!.getReader()
    const firstChunk = new TextDecoder().decode((await reader.read()).value)
    expect(firstChunk).toStartWith('id: 1\n')
    const replay = await env.trigger(slow, {}, { headers: { accept: 'text/event-stream', 'idempotency-key': key } })
    expect(replay.status).toBe(202)
    expect(replay.headers.get('content-type')).toStartWith('application/json')
    expect(replay.body.status).toBe('running')
    const runId = (await env.h.deps.db.sql`select id from runs where workflow_id = ${slow} order by created_at desc limit 1`)[0]!.id
    expect(replay.body.run_id).toBe(runId)
    // The first stream still runs to its end.
    let rest = firstChunk
    for (;;) {
      const { value, done } = await reader.read()
      if (done) break
      rest += new TextDecoder().decode(value)
    }
    expect(parseSse(rest).at(-1)).toMatchObject({ event: 'done', data: { status: 'completed' } })
    expect(await count(slow)).toBe(before + 1)
    // And after the stream ended, the key still replays the same run.
    const again = await env.trigger(slow, {}, { headers: { accept: 'text/event-stream', 'idempotency-key': key } })
    expect(again.status).toBe(202)
    expect(again.body.run_id).toBe(runId)
  })

  test('a client that disconnects from an SSE trigger does not stop the run', async () => {
    const server = Bun.serve({ hostname: '127.0.0.1', port: 0, fetch: (r) => env.h.app.handle(r) })
    try {
      const ac = new AbortController()
      const res = await fetch(`http://127.0.0.1:${server.port}/v1/workflows/${slow}/runs`, {
        method: 'POST',
        headers: { authorization: `Bearer ${env.owner}`, 'content-type': 'application/json', accept: 'text/event-stream' },
        body: JSON.stringify({ inputs: {} }),
        signal: ac.signal,
      })
      expect(res.status).toBe(200)
      const reader = res.body!.getReader()
      const chunk = new TextDecoder().decode((await reader.read()).value)
      expect(chunk).toStartWith('id: 1\n')
      ac.abort()
      await reader.cancel().catch(() => {})
      const runId = (await env.h.deps.db.sql`select id from runs where workflow_id = ${slow} order by created_at desc limit 1`)[0]!.id
      const run = await env.finished(runId)
      expect(run).toMatchObject({ status: 'completed', outputs: { text: 'done' } })
    } finally {
      await server.stop(true)
    }
  })
})
