import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import type { Server } from 'bun'
import postgres from 'postgres'
import { startCluster, type Cluster } from '../helpers/cluster'
import { waitFor } from '../helpers/harness'
import { apiCall, killAll, type ServiceProcess } from '../helpers/process'
import { chain, parseSse, type Ev } from '../helpers/runs'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * A run executed by one process, watched and steered through another (docs/workflows.md, "Runs"): an API-only
 * process (`src/main.ts api`, no workers) and one worker-only process on one Postgres and one Redis.
 * Everything the API process shows of a run (SSE trigger, Last-Event-ID resume, a sync answer) and
 * the cancel it accepts reach it, or leave it, through the shared database and Redis pub/sub.
 */

if (!process.env.DATABASE_URL || !process.env.REDIS_URL) {
  describe('server mode: a run streamed by an API-only process, executed by a worker process', () => {
    test.skip('skipped: DATABASE_URL and REDIS_URL are unset (CI sets both)', () => {})
  })
} else {
  describe('server mode: a run streamed by an API-only process, executed by a worker process', () => {
    let cluster: Cluster
    let api: ServiceProcess
    let worker: ServiceProcess
    let db: postgres.Sql
    let rootKey: string
    let ws: string
    let target: Server<undefined>
    /** Requests the http_request node made, and whether the caller went away before the answer. */
    const held: { aborted: boolean }[] = []

    beforeAll(async () => {
      target = Bun.serve({
        hostname: '127.0.0.1',
        port: 0,
        idleTimeout: 0,
        async fetch(req) {
          const entry = { aborted: false }
          held.push(entry)
          req.signal.addEventListener('abort', () => (entry.aborted = true))
          // A receiver that does not answer in the test's time (the fake's pace): the subject is that the call is aborted.
          await Bun.sleep(20_000)
          return Response.json({ late: true })
        },
      })
      cluster = await startCluster({ name: 'stream', workers: 1, apiOnly: true, env: { WEBHOOK_ALLOW_HTTP: 'true', WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' } })
      ;({ api, db, rootKey } = cluster)
      worker = cluster.workers[0]!
      const res = await apiCall(api, rootKey, 'POST', '/v1/workspaces', { name: 'Streams' })
      expect(res.status).toBe(201)
      ws = res.body.data.id
    }, 90_000)

    afterAll(async () => {
      await killAll()
      await cluster?.close()
      await target?.stop(true)
    })

    async function workflow(name: string, graph: unknown): Promise<string> {
      const res = await apiCall(api, rootKey, 'POST', '/v1/workflows', { workspace_id: ws, name, graph })
      expect(res.status).toBe(201)
      return res.body.data.id
    }

    /** start → wait 1 s → llm (local-chat, streamed) → end: live for a second, with message deltas. */
    const waitThenAnswer = () =>
      workflow(
        `Wait then answer ${Math.random()}`,
        chain(
          { id: 'start', type: 'start', config: {} },
          { id: 'pause', type: 'wait', config: { seconds: 1 } },
          { id: 'answer', type: 'llm', config: { model: 'local-chat', messages: [{ role: 'user', content: 'What does a worker do?' }] } },
          { id: 'end', type: 'end', config: { outputs: { text: '{{nodes.answer.output.text}}' } } },
        ),
      )

    /** Which processes held the run's lease, sampled until `until` settles (the owner is `<pid>:<random>`). */
    function sampleOwners(runId: () => string | null, until: Promise<unknown>): Promise<Set<string>> {
      const pids = new Set<string>()
      let done = false
      until.finally(() => (done = true))
      return (async () => {
        while (!done) {
          const id = runId()
          if (id) {
            const [row] = await db<{ lease_owner: string | null }[]>`select lease_owner from runs where id = ${id}`
            if (row?.lease_owner) pids.add(row.lease_owner.split(':')[0]!)
          }
          // The sampling period, not a wait for anything.
          await Bun.sleep(5)
        }
        return pids
      })()
    }

    test('the API process was started without workers', () => {
      expect(api.output()).toContain('API only (no workers)')
    })

    test('an SSE trigger on the API process shows every event of the run the worker executes, in order, live', async () => {
      const wf = await waitThenAnswer()
      let runId: string | null = null
      const stream = (async () => {
        const res = await fetch(`${api.url}/v1/workflows/${wf}/runs`, {
          method: 'POST',
          headers: { authorization: `Bearer ${rootKey}`, 'content-type': 'application/json', accept: 'text/event-stream' },
          body: JSON.stringify({ inputs: {} }),
        })
        expect(res.status).toBe(200)
        expect(res.headers.get('content-type')).toContain('text/event-stream')
        runId = res.headers.get('x-run-id')
        expect(runId).toStartWith('run_')
        const reader = res.body!.getReader()
        const decoder = new TextDecoder()
        let text = ''
        for (;;) {
          const { done, value } = await reader.read()
          if (done) break
          text += decoder.decode(value, { stream: true })
        }
        return text
      })()
      const owners = sampleOwners(() => runId, stream)
      const events = parseSse(await stream)
      expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1))
      const kinds = events.filter((e) => e.event !== 'message').map((e) => `${e.event}${e.data.node_id ? ` ${e.data.node_id}` : ''}`)
      expect(kinds).toEqual([
        'node_start start', 'node_end start', 'node_start pause', 'node_end pause',
        'node_start answer', 'node_end answer', 'node_start end', 'node_end end', 'usage', 'done',
      ])
      const messages = events.filter((e) => e.event === 'message')
      expect(messages.length).toBeGreaterThan(0)
      const answer = events.find((e) => e.event === 'node_end' && e.data.node_id === 'answer')!
      expect(messages.map((m) => m.data.delta).join('')).toBe(answer.data.output.text)
      expect(events.at(-1)!.data).toMatchObject({ status: 'completed', outputs: { text: answer.data.output.text } })
      expect(events.find((e) => e.event === 'node_end' && e.data.node_id === 'pause')!.data.duration_ms).toBeGreaterThanOrEqual(1000)
      // Only the worker process ever held the run.
      const pids = await owners
      expect([...pids]).toEqual([String(worker.proc.pid)])
    }, 30_000)

    test('Last-Event-ID on the API process resumes a run executing in the worker, from the next event to done', async () => {
      const wf = await waitThenAnswer()
      const trig = await apiCall(api, rootKey, 'POST', `/v1/workflows/${wf}/runs?async=true`, { inputs: {} })
      expect(trig.status).toBe(202)
      const runId = trig.body.run_id as string
      // Once the wait has started (event 3), resume after event 2 while the run is still waiting.
      await waitFor(async () => (await db<{ n: number }[]>`select count(*)::int as n from run_events where run_id = ${runId}`)[0]!.n >= 3, { timeoutMs: 10_000, what: 'the wait to start' })
      const [row] = await db<{ status: string }[]>`select status from runs where id = ${runId}`
      expect(row!.status).toBe('running')
      const res = await fetch(`${api.url}/v1/runs/${runId}/events`, { headers: { authorization: `Bearer ${rootKey}`, accept: 'text/event-stream', 'last-event-id': '2' } })
      expect(res.status).toBe(200)
      const events = parseSse(await res.text())
      expect(events[0]!).toMatchObject({ seq: 3, event: 'node_start', data: { node_id: 'pause' } })
      expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 3))
      expect(events.at(-1)).toMatchObject({ event: 'done', data: { status: 'completed' } })
      // The whole log, read back as JSON, is what the two halves showed.
      const all = await apiCall(api, rootKey, 'GET', `/v1/runs/${runId}/events`)
      expect(all.body.data.slice(2).map((e: Ev) => [e.seq, e.event])).toEqual(events.map((e) => [e.seq, e.event]))
    }, 30_000)

    test('a sync trigger on the API process answers 200 completed once the worker ends the run', async () => {
      const wf = await waitThenAnswer()
      const res = await apiCall(api, rootKey, 'POST', `/v1/workflows/${wf}/runs`, { inputs: {} })
      expect(res.status).toBe(200)
      expect(res.body).toMatchObject({ status: 'completed' })
      expect(res.body.outputs.text.length).toBeGreaterThan(0)
      expect(res.body.duration_ms).toBeGreaterThanOrEqual(1000)
    }, 30_000)

    test('a cancel on the API process aborts the http_request in flight in the worker process', async () => {
      const wf = await workflow(
        'Slow call',
        chain(
          { id: 'start', type: 'start', config: {} },
          { id: 'call', type: 'http_request', config: { method: 'GET', url: `http://127.0.0.1:${target.port}/slow`, timeout_ms: 30_000 } },
          { id: 'end', type: 'end', config: { outputs: {} } },
        ),
      )
      const before = held.length
      const trig = await apiCall(api, rootKey, 'POST', `/v1/workflows/${wf}/runs?async=true`, { inputs: {} })
      expect(trig.status).toBe(202)
      const runId = trig.body.run_id as string
      await waitFor(() => held.length > before, { timeoutMs: 10_000, what: 'the worker to call the target' })
      const [leased] = await db<{ lease_owner: string }[]>`select lease_owner from runs where id = ${runId}`
      expect(leased!.lease_owner.split(':')[0]).toBe(String(worker.proc.pid))
      const cancel = await apiCall(api, rootKey, 'POST', `/v1/runs/${runId}/cancel`)
      expect(cancel.status).toBe(200)
      expect(cancel.body.status).toBe('cancelled')
      // The worker got the cancel through pub/sub and closed its request long before the target answers.
      await waitFor(() => held[before]!.aborted, { timeoutMs: 5000, what: 'the worker to abort its request' })
      const events = await apiCall(api, rootKey, 'GET', `/v1/runs/${runId}/events`)
      const kinds = events.body.data.map((e: Ev) => e.event)
      expect(kinds.at(-1)).toBe('done')
      expect(kinds.filter((k: string) => k === 'done').length).toBe(1)
      expect(events.body.data.at(-1).data.status).toBe('cancelled')
      expect(events.body.data.some((e: Ev) => e.event === 'node_end' && e.data.node_id === 'call')).toBe(false)
      const [outbox] = await db<{ n: number }[]>`select count(*)::int as n from events where type = 'workflow.run.cancelled' and data->>'run_id' = ${runId}`
      expect(outbox!.n).toBe(1)
      expect(worker.proc.exitCode).toBeNull()
    }, 30_000)
  })
}
