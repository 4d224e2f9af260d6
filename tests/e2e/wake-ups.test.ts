import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import type { Server } from 'bun'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { startCluster, type Cluster } from '../helpers/cluster'
import { waitFor } from '../helpers/harness'
import { apiCall, killAll } from '../helpers/process'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * An API-only process (`src/main.ts api`) has no worker of its own to wake: a run it creates, a
 * document it stores and the events it commits are announced to the worker processes over Redis
 * (docs/architecture.md, "Process roles"). The worker here looks for work on its own only once a
 * minute (WORKER_POLL_MS), so each piece of work below is done within the test's waits only if the
 * announcement reached it. Server mode.
 */
const databaseUrl = process.env.DATABASE_URL
const redisUrl = process.env.REDIS_URL
/** Much longer than any wait below: work found by the worker's own look would come too late. */
const POLL_MS = 60_000
const WAIT_MS = 15_000

describe.skipIf(!databaseUrl || !redisUrl)('wake-ups from an API process to a worker process', () => {
  let cluster: Cluster
  let receiver: Server<undefined>
  const received: string[] = []
  let workflow: string
  let kb: string
  let agent: string
  const must = async (method: string, path: string, body?: unknown) => {
    const res = await apiCall(cluster.api, cluster.rootKey, method, path, body)
    if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(res.body)}`)
    return res.body
  }

  beforeAll(async () => {
    receiver = Bun.serve({
      hostname: '127.0.0.1',
      port: 0,
      async fetch(req) {
        received.push(JSON.parse(await req.text()).event)
        return Response.json({ ok: true })
      },
    })
    cluster = await startCluster({
      name: 'wake',
      workers: 1,
      apiOnly: true,
      env: { WORKER_POLL_MS: String(POLL_MS), WEBHOOK_ALLOW_HTTP: 'true', WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' },
    })
    const ws = (await must('POST', '/v1/workspaces', { name: 'Wake' })).data.id
    await must('POST', '/v1/webhooks', { workspace_id: ws, url: `http://127.0.0.1:${receiver.port}/hook`, events: ['agent.message.received'], secret: 'whsec_wake-secret-0123456789' })
    workflow = (await must('POST', '/v1/workflows', {
      workspace_id: ws,
      name: 'Greet',
      graph: {
        nodes: [{ id: 'start', type: 'start', config: {} }, { id: 'end', type: 'end', config: { outputs: { ok: 'yes' } } }],
        edges: [{ source: 'start', target: 'end' }],
      },
    })).data.id
    kb = (await must('POST', '/v1/knowledge-bases', { workspace_id: ws, name: 'Notes' })).data.id
    agent = (await must('POST', '/v1/agents', { workspace_id: ws, name: 'Helper', type: 'agent', model: 'local-chat' })).data.id
  }, 90_000)

  afterAll(async () => {
    await cluster?.close()
    await killAll()
    receiver?.stop(true)
  })

  test('a run created by the API process is taken up by the worker at once', async () => {
    const run = await must('POST', `/v1/workflows/${workflow}/runs?async=true`, { inputs: {} })
    const done = await waitFor(async () => {
      const r = await must('GET', `/v1/runs/${run.run_id}`)
      return r.status === 'completed' ? r : null
    }, { timeoutMs: WAIT_MS, what: `run ${run.run_id} completed` })
    expect(done.outputs).toEqual({ ok: 'yes' })
  })

  test('a document stored by the API process is read by the worker at once', async () => {
    const doc = await must('POST', `/v1/knowledge-bases/${kb}/documents`, { type: 'text', name: 'note.txt', content: 'Parcels ship within two days.' })
    await waitFor(async () => (await must('GET', `/v1/documents/${doc.document_id}`)).status === 'ready', { timeoutMs: WAIT_MS, what: `document ${doc.document_id} ready` })
  })

  test('an event committed by the API process (a chat turn) is delivered by the worker at once', async () => {
    await must('POST', `/v1/agents/${agent}/chat`, { message: 'When does my parcel ship?', user_id: 'u1' })
    await waitFor(() => received.includes('agent.message.received'), { timeoutMs: WAIT_MS, what: 'agent.message.received delivered' })
  })
})
