import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import type { Server } from 'bun'
import { startCluster, type Cluster } from '../helpers/cluster'
import { waitFor } from '../helpers/harness'
import { ALL_CHUNKS } from '../helpers/knowledge'
import { apiCall, killAll, type ServiceProcess } from '../helpers/process'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * A cluster (docs/deployment.md) on the real PostgreSQL and Redis (server mode, as CI runs): two API processes
 * (`src/main.ts api`) and two workers (`src/main.ts worker`). Mixed traffic (async runs through a
 * wait node, document uploads, webhook pings, chat turns) goes to both APIs while one worker and one
 * API are killed with SIGKILL and started again. Afterwards every accepted run, document and delivery
 * reached its final state, once: one completion event per run, one delivery per event, every chunk
 * once, every chat turn stored whole.
 */
const databaseUrl = process.env.DATABASE_URL
const redisUrl = process.env.REDIS_URL

describe.skipIf(!databaseUrl || !redisUrl)('cluster: 2 API and 2 worker processes, SIGKILLs under mixed traffic', () => {
  let cluster: Cluster
  let api2: ServiceProcess
  let receiver: Server<undefined>
  /** Deliveries the receiver saw, by delivery id (webhook-id), with how many times. */
  const received = new Map<string, number>()
  let ws: string
  let workflow: string
  let webhook: string
  let kb: string
  let agent: string
  const accepted = { runs: [] as string[], documents: [] as string[], pings: [] as string[], turns: [] as string[] }
  let refused = 0

  beforeAll(async () => {
    receiver = Bun.serve({
      hostname: '127.0.0.1',
      port: 0,
      async fetch(req) {
        await req.text()
        const id = req.headers.get('webhook-id') ?? '?'
        received.set(id, (received.get(id) ?? 0) + 1)
        return Response.json({ ok: true })
      },
    })
    cluster = await startCluster({
      name: 'chaos',
      workers: 2,
      apiOnly: true,
      env: { WEBHOOK_ALLOW_HTTP: 'true', WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true', WEBHOOK_RETRY_DELAYS_MS: '500,500,500,500,500' },
    })
    api2 = await cluster.spawn('api')
    const must = async (method: string, path: string, body?: unknown) => {
      const res = await apiCall(cluster.api, cluster.rootKey, method, path, body)
      if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(res.body)}`)
      return res.body
    }
    ws = (await must('POST', '/v1/workspaces', { name: 'Chaos' })).data.id
    webhook = (await must('POST', '/v1/webhooks', {
      workspace_id: ws,
      url: `http://127.0.0.1:${receiver.port}/hook`,
      events: ['workflow.run.completed', 'knowledge.document.ready', 'webhook.test'],
      secret: 'whsec_chaos-secret-0123456789',
    })).data.id
    workflow = (await must('POST', '/v1/workflows', {
      workspace_id: ws,
      name: 'Pause then finish',
      graph: {
        nodes: [{ id: 'start', type: 'start', config: {} }, { id: 'pause', type: 'wait', config: { seconds: 1 } }, { id: 'end', type: 'end', config: { outputs: { ok: 'yes' } } }],
        edges: [{ source: 'start', target: 'pause' }, { source: 'pause', target: 'end' }],
      },
    })).data.id
    kb = (await must('POST', '/v1/knowledge-bases', { workspace_id: ws, name: 'Chaos base' })).data.id
    agent = (await must('POST', '/v1/agents', { workspace_id: ws, name: 'Chaos agent', type: 'agent', model: 'local-chat' })).data.id
  }, 90_000)

  afterAll(async () => {
    await cluster?.close()
    await killAll()
    receiver?.stop(true)
  })

  /** One request to one API process; a process being killed refuses it (not accepted, not counted). */
  const send = async (api: ServiceProcess, method: string, path: string, body: unknown) => {
    try {
      return await apiCall(api, cluster.rootKey, method, path, body)
    } catch {
      refused++
      return null
    }
  }

  test('mixed traffic to both APIs while a worker and an API are killed and restarted', async () => {
    let stop = false
    let n = 0
    const apis = () => [cluster.api, api2]
    const traffic = (async () => {
      while (!stop) {
        const api = apis()[n % 2]!
        n++
        const [run, doc, ping, turn] = await Promise.all([
          send(api, 'POST', `/v1/workflows/${workflow}/runs?async=true`, { inputs: {} }),
          send(api, 'POST', `/v1/knowledge-bases/${kb}/documents`, { type: 'text', name: `note-${n}.txt`, content: `Note ${n}: parcels ship within ${n} days.` }),
          send(api, 'POST', `/v1/webhooks/${webhook}/ping`, undefined),
          send(api, 'POST', `/v1/agents/${agent}/chat`, { message: `How long for parcel ${n}?`, user_id: `user-${n}` }),
        ])
        if (run?.status === 202) accepted.runs.push(run.body.run_id)
        if (doc?.status === 201) accepted.documents.push(doc.body.document_id)
        if (ping?.status === 202) accepted.pings.push(ping.body.data.id)
        if (turn?.status === 200) accepted.turns.push(turn.body.conversation_id)
        // Pacing of the load, not a wait for anything: a round of four requests every ~50 ms.
        await Bun.sleep(50)
      }
    })()
    /** Traffic has gone on: `rounds` more rounds of requests accepted than when called. */
    const more = (rounds: number) => {
      const from = accepted.runs.length
      return waitFor(() => accepted.runs.length >= from + rounds, { timeoutMs: 30_000, what: `${rounds} more rounds of traffic accepted` })
    }
    await more(10)
    // A worker dies mid-work (its leases and claimed timers are taken over), and is replaced.
    await cluster.workers[0]!.stop('SIGKILL')
    await cluster.spawn('worker')
    await more(10)
    // An API process dies with requests in flight, and is replaced on a new port.
    await api2.stop('SIGKILL')
    api2 = await cluster.spawn('api')
    await more(10)
    stop = true
    await traffic
    console.log(`cluster traffic: ${accepted.runs.length} runs, ${accepted.documents.length} documents, ${accepted.pings.length} pings, ${accepted.turns.length} chat turns accepted; ${refused} requests refused by a dying API`)
    expect(accepted.runs.length).toBeGreaterThan(5)
    expect(accepted.documents.length).toBeGreaterThan(5)
    expect(accepted.pings.length).toBeGreaterThan(5)
    expect(accepted.turns.length).toBeGreaterThan(5)
  }, 90_000)

  test('afterwards every accepted run, document and delivery reached its final state, once', async () => {
    const db = cluster.db
    // What the database holds may be more than what was acknowledged: a request whose API process was
    // killed after its commit, before its answer, created its run or document all the same. Every one
    // of them, acknowledged or not, must finish; the acknowledged ones must all be among them.
    // Runs whose worker died wait for their lease (15 s) to run out before another takes them.
    await waitFor(async () => {
      const [row] = await db<{ n: number }[]>`select count(*)::int as n from runs where status <> 'completed'`
      return row!.n === 0
    }, { timeoutMs: 60_000, intervalMs: 250, what: 'every run to complete' })
    await waitFor(async () => {
      const [row] = await db<{ n: number }[]>`select count(*)::int as n from documents where status <> 'ready'`
      return row!.n === 0
    }, { timeoutMs: 60_000, intervalMs: 250, what: 'every document to be ready' })
    await waitFor(async () => {
      const [row] = await db<{ n: number }[]>`select count(*)::int as n from webhook_deliveries where status <> 'succeeded'`
      const [undelivered] = await db<{ n: number }[]>`select count(*)::int as n from events where dispatched_at is null`
      return row!.n === 0 && undelivered!.n === 0
    }, { timeoutMs: 60_000, intervalMs: 250, what: 'every delivery to succeed' })
    const runs = (await db<{ id: string }[]>`select id from runs`).map((r) => r.id)
    const documents = (await db<{ id: string }[]>`select id from documents`).map((d) => d.id)
    expect(accepted.runs.filter((id) => !runs.includes(id))).toEqual([])
    expect(accepted.documents.filter((id) => !documents.includes(id))).toEqual([])
    expect(runs.length - accepted.runs.length).toBeLessThanOrEqual(refused)

    // One completion event per run, one ready event per document: no double finish after a takeover.
    const completions = await db<{ run_id: string; n: number }[]>`
      select data->>'run_id' as run_id, count(*)::int as n from events where type = 'workflow.run.completed' group by 1`
    expect(completions.filter((c) => c.n !== 1)).toEqual([])
    expect(completions.map((c) => c.run_id).sort()).toEqual([...runs].sort())
    const readies = await db<{ document_id: string; n: number }[]>`
      select data->>'document_id' as document_id, count(*)::int as n from events where type = 'knowledge.document.ready' group by 1`
    expect(readies.filter((r) => r.n !== 1)).toEqual([])
    expect(readies.map((r) => r.document_id).sort()).toEqual([...documents].sort())

    // Every chunk once, as many as the document says, in whichever part it is (moved into the vector
    // index yet or not: docs/knowledge.md, "Indexing").
    const chunks = await db<{ id: string; chunks_count: number; n: number }[]>`
      select d.id, d.chunks_count, count(c.id)::int as n from documents d
      left join ${db.unsafe(ALL_CHUNKS)} c on c.document_id = d.id and c.generation = d.live_generation
      group by d.id, d.chunks_count`
    expect(chunks.filter((c) => c.n !== c.chunks_count || c.n === 0)).toEqual([])

    // One delivery per event and webhook, each succeeded and seen by the receiver (a retry of an
    // attempt cut off by the kill may arrive twice, with the same delivery id: at-least-once).
    const [dupes] = await db<{ n: number }[]>`select count(*)::int as n from (select event_id from webhook_deliveries group by event_id, webhook_id having count(*) > 1) d`
    expect(dupes!.n).toBe(0)
    const deliveries = await db<{ id: string }[]>`select id from webhook_deliveries`
    const [events] = await db<{ n: number }[]>`select count(*)::int as n from events where type in ('workflow.run.completed', 'knowledge.document.ready', 'webhook.test')`
    expect(deliveries.length).toBe(events!.n)
    expect(deliveries.length).toBeGreaterThanOrEqual(accepted.runs.length + accepted.documents.length + accepted.pings.length)
    expect(deliveries.filter((d) => !received.has(d.id))).toEqual([])
    for (const ping of accepted.pings) expect(deliveries.some((d) => d.id === ping)).toBe(true)

    // Every accepted chat turn is stored whole: the user's message and the answer.
    const turns = await db<{ id: string; n: number }[]>`
      select conversation_id as id, count(*)::int as n from messages where conversation_id in ${db(accepted.turns)} group by 1`
    expect(turns.length).toBe(accepted.turns.length)
    expect(turns.filter((t) => t.n !== 2)).toEqual([])
  }, 120_000)
})
