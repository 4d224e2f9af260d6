/**
 * `bun run bench:fairness`: what one workspace's load does to another's latency, on the real service
 * (`bun run src/main.ts`, embedded by default; server mode on a fresh database with DATABASE_URL and
 * REDIS_URL set). Two workspaces, A (the load) and B (the one measured):
 *
 *   (a) B's trivial synchronous run (start → template → end), RUNS one after another, p50 as the
 *       client sees it: unloaded (before the fan-out and again after it, both sets together), and
 *       while A's 100 × 100 iteration fan-out runs (an iteration over
 *       100 items, concurrency 16, of a workflow that iterates over 100 items, concurrency 16, of a
 *       one-template workflow: 10 000 leaf runs)           target: loaded p50 ≤ 2 × unloaded p50
 *   (b) B's 66-byte Markdown document, from its upload to `ready`, DOCS one after another, median:
 *       unloaded, then while A's two 400 KB Markdown documents are being read (a shape that keeps
 *       a document process busy for its whole 60 s limit)   target: loaded ≤ 2 × unloaded
 *
 * Environment: RUNS (60), DOCS (3), FANOUT (100: items at each level), PARTS (`runs,documents`: the
 * parts measured), SPLIT (server mode only: `1` runs the API and the workers as two processes,
 * `bun run api` beside `bun run worker`, as docs/deployment.md lays a deployment out), BENCH_SERVICE_MAIN (another src/main.ts, e.g. an older commit's checkout, to
 * measure it the same way).
 */
import { join } from 'node:path'
import { createDatabase, dropDatabase, freePort, jsonApi, killAll, log, machine, median, percentile, randomBase62, removeDir, sourceVersion, startServer, tempDir, verdict, whenInterrupted, writeResults, type Row, type Server } from './lib'

const RUNS = Number(process.env.RUNS ?? 60)
const DOCS = Number(process.env.DOCS ?? 3)
const FANOUT = Number(process.env.FANOUT ?? 100)
const SERVICE_MAIN = process.env.BENCH_SERVICE_MAIN ?? 'src/main.ts'
const PARTS = new Set((process.env.PARTS ?? 'runs,documents').split(',').map((p) => p.trim()))

const work = tempDir('bench-fairness-')
whenInterrupted(() => removeDir(work))
const ROOT_KEY = `ap_bench${randomBase62(36)}`
const headers = { authorization: `Bearer ${ROOT_KEY}` }
const api = jsonApi(headers)
const serverMode = process.env.DATABASE_URL && process.env.REDIS_URL ? { db: process.env.DATABASE_URL, redis: process.env.REDIS_URL } : null
const SPLIT = process.env.SPLIT === '1'
if (SPLIT && !serverMode) throw new Error('SPLIT=1 needs server mode (DATABASE_URL and REDIS_URL): the API and the workers share them')

/** 66 bytes of Markdown: B's document. */
const SMALL = '# Note\n\nA short note about the weather in the valley this morning.\n'
/**
 * 400 KB of one-letter lines with a setext underline at the end: marked's setext rule reads the
 * whole paragraph ahead at every line, so reading it takes minutes, cut at the 60 s time limit.
 */
const HEAVY = `${'a\n'.repeat(200_000)}=\n`

async function upload(base: string, kbId: string, name: string, text: string): Promise<string> {
  const form = new FormData()
  form.append('file', new Blob([text]), name)
  const res = await fetch(`${base}/v1/knowledge-bases/${kbId}/documents`, { method: 'POST', headers, body: form })
  const body = (await res.json()) as any
  if (res.status !== 201) throw new Error(`upload ${name}: ${res.status} ${JSON.stringify(body)}`)
  return body.document_id
}

const p50 = (xs: number[]) => percentile(Float64Array.from(xs).sort(), 50)
const p90 = (xs: number[]) => percentile(Float64Array.from(xs).sort(), 90)

async function main() {
  const source = SERVICE_MAIN === 'src/main.ts' ? sourceVersion() : null
  const mode = serverMode ? (SPLIT ? 'server-split' : 'server') : 'embedded'
  log(`bench:fairness (${mode}): ${SERVICE_MAIN}${source ? ` at ${source.commit}${source.src_dirty ? ' (src/ modified)' : ''}` : ''}; ${RUNS} runs, ${DOCS} documents, fan-out ${FANOUT} × ${FANOUT}`)
  const port = freePort()
  const databaseUrl = serverMode ? await createDatabase(serverMode.db, `bench_fairness_${process.pid}`) : ''
  let service: Server | null = null
  let worker: Server | null = null
  const env = {
    PORT: String(port), HOST: '127.0.0.1', DATA_DIR: join(work, 'data'), BOOTSTRAP_API_KEY: ROOT_KEY,
    RATE_LIMIT_PER_SECOND: '1000000000', RATE_LIMIT_BURST: '1000000000', LOG_LEVEL: 'warn',
    DATABASE_URL: databaseUrl, REDIS_URL: serverMode ? serverMode.redis : '',
  }
  try {
    service = await startServer({
      cmd: SPLIT ? ['bun', 'run', SERVICE_MAIN, 'api'] : ['bun', 'run', SERVICE_MAIN],
      env,
      port,
      logFile: join(work, 'service.log'),
      readyPath: '/healthz',
      // The first start of a data directory migrates it: minutes on a busy machine.
      timeoutMs: 300_000,
    })
    if (SPLIT) {
      // After the API: the database is migrated once, by the first process.
      worker = await startServer({ cmd: ['bun', 'run', SERVICE_MAIN, 'worker'], env: { ...env, LOG_LEVEL: 'info' }, port, logFile: join(work, 'worker.log'), readyLine: /workers running/, timeoutMs: 300_000 })
    }
    const base = service.url
    const workspace = async (name: string) => {
      const r = await api(base, 'POST', '/v1/workspaces', { name })
      if (r.status !== 201) throw new Error(`workspace: ${r.status} ${JSON.stringify(r.body)}`)
      return r.body.data.id as string
    }
    const A = await workspace('A: the load')
    const B = await workspace('B: measured')
    const save = async (ws: string, name: string, graph: unknown) => {
      const r = await api(base, 'POST', '/v1/workflows', { workspace_id: ws, name, graph })
      if (r.status !== 201) throw new Error(`${name}: ${r.status} ${JSON.stringify(r.body)}`)
      return r.body.data.id as string
    }
    const trivial = await save(B, 'trivial', {
      nodes: [
        { id: 'start', type: 'start', config: { inputs: [{ name: 'name', type: 'string', required: true }] } },
        { id: 'greet', type: 'template', config: { template: 'Hello {{inputs.name}}' } },
        { id: 'end', type: 'end', config: { outputs: { text: '{{nodes.greet.output.text}}' } } },
      ],
      edges: [{ source: 'start', target: 'greet' }, { source: 'greet', target: 'end' }],
    })
    const leaf = await save(A, 'leaf', {
      nodes: [
        { id: 'start', type: 'start', config: { inputs: [{ name: 'j', type: 'number', required: true }] } },
        { id: 'greet', type: 'template', config: { template: 'item {{inputs.j}}' } },
        { id: 'end', type: 'end', config: { outputs: { text: '{{nodes.greet.output.text}}' } } },
      ],
      edges: [{ source: 'start', target: 'greet' }, { source: 'greet', target: 'end' }],
    })
    const middle = await save(A, 'middle', {
      nodes: [
        { id: 'start', type: 'start', config: { inputs: [{ name: 'i', type: 'number', required: true }, { name: 'ys', type: 'array', required: true }] } },
        { id: 'each', type: 'iteration', config: { workflow_id: leaf, items: '{{inputs.ys}}', item_input: 'j', concurrency: 16 } },
        { id: 'end', type: 'end', config: { outputs: { failed: '{{nodes.each.output.failed}}' } } },
      ],
      edges: [{ source: 'start', target: 'each' }, { source: 'each', target: 'end' }],
    })
    const top = await save(A, 'top', {
      nodes: [
        { id: 'start', type: 'start', config: { inputs: [{ name: 'xs', type: 'array', required: true }, { name: 'ys', type: 'array', required: true }] } },
        { id: 'each', type: 'iteration', config: { workflow_id: middle, items: '{{inputs.xs}}', item_input: 'i', inputs: { ys: '{{inputs.ys}}' }, concurrency: 16 } },
        { id: 'end', type: 'end', config: { outputs: { failed: '{{nodes.each.output.failed}}' } } },
      ],
      edges: [{ source: 'start', target: 'each' }, { source: 'each', target: 'end' }],
    })

    /** B's sync runs, one after another: each latency, POST to the end of the 200. */
    const syncRuns = async (n: number) => {
      const out: number[] = []
      for (let i = 0; i < n; i++) {
        const t0 = performance.now()
        const r = await api(base, 'POST', `/v1/workflows/${trivial}/runs`, { inputs: { name: 'b' } })
        out.push(performance.now() - t0)
        if (r.status !== 200 || r.body.status !== 'completed') throw new Error(`B's run: ${r.status} ${JSON.stringify(r.body)}`)
      }
      return out
    }
    const runOf = async (id: string) => (await api(base, 'GET', `/v1/runs/${id}`)).body

    const summary: Record<string, unknown> = { mode }
    const rows: Row[] = []
    if (PARTS.has('runs')) {
      // (a) unloaded
      await syncRuns(10)
      const before = await syncRuns(RUNS)
      log(`(a) unloaded: B's run p50 ${p50(before).toFixed(1)} ms, p90 ${p90(before).toFixed(1)} ms`)
      // (a) loaded: the fan-out, then B's runs once it is under way.
      const range = Array.from({ length: FANOUT }, (_, i) => i)
      const t0 = Date.now()
      const fan = await api(base, 'POST', `/v1/workflows/${top}/runs?async=true`, { inputs: { xs: range, ys: range } })
      if (fan.status !== 202) throw new Error(`fan-out: ${fan.status} ${JSON.stringify(fan.body)}`)
      const leavesDone = async () => {
        const r = await api(base, 'GET', `/v1/workflows/${leaf}/runs?status=completed&limit=1`)
        return r.body.data.length
      }
      while (!(await leavesDone())) await Bun.sleep(50)
      await Bun.sleep(2000)
      const loadedRuns = await syncRuns(RUNS)
      const stillRunning = (await runOf(fan.body.run_id)).status === 'running'
      log(`(a) loaded: B's run p50 ${p50(loadedRuns).toFixed(1)} ms, p90 ${p90(loadedRuns).toFixed(1)} ms; fan-out ${stillRunning ? 'still running at the end' : 'ENDED before the last run'}`)
      let fanEnd: any
      for (;;) {
        fanEnd = await runOf(fan.body.run_id)
        if (fanEnd.status !== 'running') break
        await Bun.sleep(200)
      }
      const fanSeconds = (Date.parse(fanEnd.finished_at) - t0) / 1000
      // Unloaded again once the fan-out is over: the figure to compare with is both sets together, not
      // one that happened to come out low (a quiet machine's p50 varies by half from start to start).
      const after = await syncRuns(RUNS)
      log(`(a) unloaded again: B's run p50 ${p50(after).toFixed(1)} ms, p90 ${p90(after).toFixed(1)} ms`)
      const unloadedRuns = [...before, ...after]
      log(`(a) the fan-out ${fanEnd.status} in ${fanSeconds.toFixed(1)} s (${Math.round((FANOUT * FANOUT) / fanSeconds)} leaf runs/s)`)

      summary.runs = { unloaded_p50_ms: round1(p50(unloadedRuns)), unloaded_before_p50_ms: round1(p50(before)), unloaded_after_p50_ms: round1(p50(after)), loaded_p50_ms: round1(p50(loadedRuns)), unloaded_p90_ms: round1(p90(unloadedRuns)), loaded_p90_ms: round1(p90(loadedRuns)), fanout_still_running: stillRunning, fanout_seconds: round1(fanSeconds), fanout_status: fanEnd.status }
      const ratio = p50(loadedRuns) / p50(unloadedRuns)
      rows.push({
        figure: `(a) B's trivial run p50 while A's ${FANOUT} × ${FANOUT} fan-out runs [${mode}]`,
        measured: `${round1(p50(loadedRuns))} ms (${ratio.toFixed(2)} ×)`,
        ceiling: `unloaded ${round1(p50(unloadedRuns))} ms`,
        share: '',
        target: '≤ 2 × unloaded',
        result: verdict(ratio <= 2 && stillRunning),
      })
    }
    if (PARTS.has('documents')) {
      // (b) documents
      const kb = async (ws: string) => {
        const r = await api(base, 'POST', '/v1/knowledge-bases', { workspace_id: ws, name: 'notes' })
        if (r.status !== 201) throw new Error(`knowledge base: ${r.status} ${JSON.stringify(r.body)}`)
        return r.body.data.id as string
      }
      const kbA = await kb(A)
      const kbB = await kb(B)
      const docOf = async (id: string) => (await api(base, 'GET', `/v1/documents/${id}`)).body
      const ready = async (n: number) => {
        const out: number[] = []
        for (let i = 0; i < n; i++) {
          const t = performance.now()
          const id = await upload(base, kbB, `note-${i}.md`, SMALL)
          for (;;) {
            const d = await docOf(id)
            if (d.status === 'ready') break
            if (d.status === 'failed') throw new Error(`B's document failed: ${JSON.stringify(d.error)}`)
            await Bun.sleep(20)
          }
          out.push(performance.now() - t)
        }
        return out
      }
      await ready(1)
      const unloadedDocs = await ready(DOCS)
      log(`(b) unloaded: B's document ready in ${median(unloadedDocs).toFixed(0)} ms (median of ${DOCS})`)
      const heavy = [await upload(base, kbA, 'heavy-1.md', HEAVY), await upload(base, kbA, 'heavy-2.md', HEAVY)]
      const heavyStart = Date.now()
      // Both claimed and handed over (parsing, held by the worker) before B's document comes.
      await Bun.sleep(1500)
      const loadedDocs = await ready(DOCS)
      const heavyStates = await Promise.all(heavy.map(async (id) => (await docOf(id)).status))
      log(`(b) loaded: B's document ready in ${median(loadedDocs).toFixed(0)} ms (median of ${DOCS}: ${loadedDocs.map((x) => x.toFixed(0)).join(', ')}); A's documents: ${heavyStates.join(', ')} after ${((Date.now() - heavyStart) / 1000).toFixed(1)} s`)
      for (const id of heavy) {
        for (;;) {
          const d = await docOf(id)
          if (d.status === 'ready' || d.status === 'failed') {
            log(`(b) A's ${id}: ${d.status}${d.error ? ` (${d.error.code})` : ''} after ${((Date.now() - heavyStart) / 1000).toFixed(1)} s`)
            break
          }
          await Bun.sleep(500)
        }
      }

      const stillReading = heavyStates.every((s) => s !== 'ready' && s !== 'failed')
      summary.documents = { unloaded_median_ms: Math.round(median(unloadedDocs)), loaded_median_ms: Math.round(median(loadedDocs)), loaded_ms: loadedDocs.map(Math.round), heavy_still_reading: stillReading }
      const ratio = median(loadedDocs) / median(unloadedDocs)
      rows.push({
        figure: `(b) B's 66-byte document to ready while A's two 400 KB documents are read [${mode}]`,
        measured: `${Math.round(median(loadedDocs))} ms (${ratio.toFixed(2)} ×)`,
        ceiling: `unloaded ${Math.round(median(unloadedDocs))} ms`,
        share: '',
        target: '≤ 2 × unloaded',
        result: verdict(ratio <= 2 && stillReading),
      })
    }
    writeResults(`fairness-${mode}`, { when: new Date().toISOString(), ...(source ?? { service_main: SERVICE_MAIN }), machine: machine(), config: { runs: RUNS, docs: DOCS, fanout: FANOUT, parts: [...PARTS] }, summary }, rows)
    console.log(JSON.stringify(summary, null, 2))
  } finally {
    await worker?.stop()
    await service?.stop()
    if (databaseUrl) await dropDatabase(serverMode!.db, databaseUrl).catch(() => {})
  }
}

const round1 = (n: number) => Math.round(n * 10) / 10

try {
  await main()
  removeDir(work)
  process.exit(0)
} catch (err) {
  log(`bench:fairness failed: ${(err as Error).stack ?? err}; logs kept in ${work}`)
  killAll()
  process.exit(1)
}
