/**
 * `bun run bench:cancel`: cancelling a fan-out on the real service (`bun run src/main.ts`, embedded
 * by default; server mode with DATABASE_URL and REDIS_URL set, on a fresh database).
 *
 * A root run iterates over OUTER items (concurrency 16), each item a run iterating over INNER items
 * (concurrency 16) of a leaf workflow whose one http_request node calls a loopback server that
 * answers after HOLD_MS (or never, when its client goes first). Once the fan-out is in full swing
 * (the server has received LOADED requests, and holds some), the root is cancelled:
 *
 *   (a) the cancel's answer (POST to its 200)                                     target < 1 s
 *   (b) cancel sent → every request held at that moment aborted or answered, i.e. every
 *       descendant's node in flight ended                                         target < 2 s
 *   (c) runs of the tree still running right after the answer                     target 0
 *   (d) runs created after the answer, and requests the server received after it   target 0
 *
 * Environment: ROUNDS (3), OUTER (100), INNER (100), HOLD_MS (300), LOADED (300), MODES (embedded, and
 * server when DATABASE_URL and REDIS_URL are set).
 */
import { join } from 'node:path'
import { createDatabase, dropDatabase, freePort, jsonApi, killAll, log, machine, median, randomBase62, removeDir, sourceVersion, startServer, tempDir, verdict, whenInterrupted, writeResults, type Row } from './lib'

const ROUNDS = Number(process.env.ROUNDS ?? 3)
const OUTER = Number(process.env.OUTER ?? 100)
const INNER = Number(process.env.INNER ?? 100)
const HOLD_MS = Number(process.env.HOLD_MS ?? 300)
const LOADED = Number(process.env.LOADED ?? 300)

const work = tempDir('bench-cancel-')
whenInterrupted(() => removeDir(work))
const ROOT_KEY = `ap_bench${randomBase62(36)}`
const api = jsonApi({ authorization: `Bearer ${ROOT_KEY}` })
const serverMode = process.env.DATABASE_URL && process.env.REDIS_URL ? { db: process.env.DATABASE_URL, redis: process.env.REDIS_URL } : null

/** The loopback server the leaves call: answers after HOLD_MS; counts what it holds, answers and sees aborted. */
function holder() {
  const state = { held: 0, received: 0, answered: 0, aborted: 0 }
  const server = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    idleTimeout: 0,
    async fetch(req) {
      state.received++
      state.held++
      const aborted = await new Promise<boolean>((resolve) => {
        const t = setTimeout(() => resolve(false), HOLD_MS)
        req.signal.addEventListener('abort', () => (clearTimeout(t), resolve(true)), { once: true })
      })
      state.held--
      if (aborted) state.aborted++
      else state.answered++
      return new Response('ok')
    },
  })
  return { state, port: server.port!, stop: () => server.stop(true) }
}

/** Every run of the workspace with `status`, through the list endpoint (100 a page). */
async function countRuns(base: string, query: string): Promise<number> {
  let n = 0
  for (let cursor: string | null = ''; cursor !== null; ) {
    const page: { status: number; body: any } = await api(base, 'GET', `/v1/runs?limit=100&${query}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`)
    if (page.status !== 200) throw new Error(`listing runs: ${page.status} ${JSON.stringify(page.body)}`)
    n += page.body.data.length
    cursor = page.body.next_cursor
  }
  return n
}

async function round(i: number, mode: 'embedded' | 'server') {
  const hold = holder()
  const dataDir = join(work, `data-${mode}-${i}`)
  const databaseUrl = mode === 'server' ? await createDatabase(serverMode!.db, `bench_cancel_${process.pid}_${i}`) : ''
  const port = freePort()
  const service = await startServer({
    cmd: ['bun', 'run', 'src/main.ts'],
    env: {
      PORT: String(port), HOST: '127.0.0.1', DATA_DIR: dataDir, BOOTSTRAP_API_KEY: ROOT_KEY, LOG_LEVEL: 'warn',
      RATE_LIMIT_PER_SECOND: '1000000000', RATE_LIMIT_BURST: '1000000000',
      WEBHOOK_ALLOW_HTTP: 'true', WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
      DATABASE_URL: databaseUrl, REDIS_URL: databaseUrl ? serverMode!.redis : '',
    },
    port,
    logFile: join(work, `service-${mode}-${i}.log`),
    readyPath: '/healthz',
  })
  try {
    const base = service.url
    const ws = (await api(base, 'POST', '/v1/workspaces', { name: 'bench cancel' })).body.data.id as string
    const workflow = async (name: string, nodes: unknown[]) => {
      const edges = nodes.slice(1).map((n: any, k) => ({ source: (nodes[k] as any).id, target: n.id }))
      const r = await api(base, 'POST', '/v1/workflows', { workspace_id: ws, name, graph: { nodes, edges } })
      if (r.status !== 201) throw new Error(`workflow ${name}: ${r.status} ${JSON.stringify(r.body)}`)
      return r.body.data.id as string
    }
    const item = { name: 'item', type: 'number' }
    const leaf = await workflow('leaf', [
      { id: 'start', type: 'start', config: { inputs: [item] } },
      { id: 'call', type: 'http_request', config: { method: 'GET', url: `http://127.0.0.1:${hold.port}/?item={{inputs.item}}`, timeout_ms: 60_000 } },
      { id: 'end', type: 'end', config: { outputs: {} } },
    ])
    const mid = await workflow('mid', [
      { id: 'start', type: 'start', config: { inputs: [item, { name: 'xs', type: 'array' }] } },
      { id: 'each', type: 'iteration', config: { workflow_id: leaf, items: '{{inputs.xs}}', item_input: 'item', concurrency: 16, on_item_error: 'skip' } },
      { id: 'end', type: 'end', config: { outputs: {} } },
    ])
    // The root's inputs: ys (OUTER items) and xs (INNER items), passed down to each mid run.
    const root = await workflow('root', [
      { id: 'start', type: 'start', config: { inputs: [{ name: 'ys', type: 'array' }, { name: 'xs', type: 'array' }] } },
      { id: 'each', type: 'iteration', config: { workflow_id: mid, items: '{{inputs.ys}}', item_input: 'item', inputs: { xs: '{{inputs.xs}}' }, concurrency: 16, on_item_error: 'skip' } },
      { id: 'end', type: 'end', config: { outputs: {} } },
    ])
    const started = await api(base, 'POST', `/v1/workflows/${root}/runs?async=true`, {
      inputs: { ys: Array.from({ length: OUTER }, (_, k) => k), xs: Array.from({ length: INNER }, (_, k) => k) },
    })
    if (started.status !== 202) throw new Error(`trigger: ${started.status} ${JSON.stringify(started.body)}`)
    const rootId = started.body.run_id as string
    const deadline = Date.now() + 120_000
    while (hold.state.received < LOADED || hold.state.held === 0) {
      if (Date.now() > deadline) throw new Error(`the fan-out never reached ${LOADED} requests (${JSON.stringify(hold.state)})`)
      await Bun.sleep(1)
    }
    const inFlight = hold.state.held
    const t0 = performance.now()
    const cancel = await api(base, 'POST', `/v1/runs/${rootId}/cancel`)
    const answerMs = performance.now() - t0
    if (cancel.status !== 200 || cancel.body.status !== 'cancelled') throw new Error(`cancel: ${cancel.status} ${JSON.stringify(cancel.body)}`)
    const answeredAt = new Date().toISOString()
    const receivedAtAnswer = hold.state.received
    while (hold.state.held > 0 && performance.now() - t0 < 30_000) await Bun.sleep(1)
    const settledMs = performance.now() - t0
    const runningAfter = await countRuns(base, `workspace_id=${ws}&status=running`)
    const tree = await countRuns(base, `workspace_id=${ws}`)
    // Anything more would come within this: a node or a child started by a worker that missed the cancel.
    await Bun.sleep(2000)
    const createdAfter = await countRuns(base, `workspace_id=${ws}&created_at_after=${encodeURIComponent(answeredAt)}`)
    const out = {
      mode, runs_in_tree: tree, requests_in_flight: inFlight, answer_ms: Math.round(answerMs), all_nodes_ended_ms: Math.round(settledMs),
      running_after_answer: runningAfter, created_after_answer: createdAfter, requests_after_answer: hold.state.received - receivedAtAnswer,
      aborted: hold.state.aborted,
    }
    log(`round ${i + 1}, ${mode}: ${JSON.stringify(out)}`)
    return out
  } finally {
    await service.stop()
    hold.stop()
    removeDir(dataDir)
    if (databaseUrl) await dropDatabase(serverMode!.db, databaseUrl)
  }
}

async function main() {
  const source = sourceVersion()
  log(`bench:cancel at ${source.commit}${source.src_dirty ? ' (src/ modified)' : ''}: ${OUTER}×${INNER} iteration (16 × 16 at once), leaves held ${HOLD_MS} ms; ${ROUNDS} rounds`)
  const asked = (process.env.MODES ?? '').split(',').map((m) => m.trim()).filter(Boolean)
  const modes = (serverMode ? ['embedded', 'server'] : ['embedded']).filter((m) => asked.length === 0 || asked.includes(m)) as ('embedded' | 'server')[]
  const rounds: Awaited<ReturnType<typeof round>>[] = []
  for (let i = 0; i < ROUNDS; i++) for (const mode of modes) rounds.push(await round(i, mode))
  const rows: Row[] = []
  const summary: Record<string, unknown> = {}
  for (const mode of modes) {
    const of = rounds.filter((r) => r.mode === mode)
    const s = {
      answer_ms: median(of.map((r) => r.answer_ms)),
      all_nodes_ended_ms: median(of.map((r) => r.all_nodes_ended_ms)),
      running_after_answer: Math.max(...of.map((r) => r.running_after_answer)),
      created_after_answer: Math.max(...of.map((r) => r.created_after_answer)),
      requests_after_answer: Math.max(...of.map((r) => r.requests_after_answer)),
      runs_in_tree: median(of.map((r) => r.runs_in_tree)),
      requests_in_flight: median(of.map((r) => r.requests_in_flight)),
    }
    summary[mode] = s
    const all = (f: (r: (typeof of)[number]) => number) => of.map(f).join(', ')
    rows.push(
      { figure: `(a) cancel of a ${OUTER}×${INNER} fan-out: answer [${mode}]`, measured: `${s.answer_ms} ms (rounds ${all((r) => r.answer_ms)})`, ceiling: '', share: '', target: '< 1 s', result: verdict(s.answer_ms < 1000) },
      { figure: `(b) cancel sent → every descendant's node in flight ended [${mode}]`, measured: `${s.all_nodes_ended_ms} ms (rounds ${all((r) => r.all_nodes_ended_ms)}; ${s.requests_in_flight} requests in flight)`, ceiling: '', share: '', target: '< 2 s', result: verdict(s.all_nodes_ended_ms < 2000) },
      { figure: `(c) runs of the tree running after the answer [${mode}]`, measured: `${s.running_after_answer} of ${s.runs_in_tree}`, ceiling: '', share: '', target: '0', result: verdict(s.running_after_answer === 0) },
      { figure: `(d) runs created / requests sent after the answer [${mode}]`, measured: `${s.created_after_answer} / ${s.requests_after_answer}`, ceiling: '', share: '', target: '0 / 0', result: verdict(s.created_after_answer === 0 && s.requests_after_answer === 0) },
    )
  }
  writeResults('cancel', { when: new Date().toISOString(), ...source, machine: machine(), config: { rounds: ROUNDS, outer: OUTER, inner: INNER, hold_ms: HOLD_MS, loaded: LOADED }, summary, rounds }, rows)
  console.log(JSON.stringify(summary, null, 2))
  console.log('written to bench/results/cancel-latest.json')
}

try {
  await main()
  removeDir(work)
} catch (err) {
  killAll()
  console.error(err)
  process.exitCode = 1
}
