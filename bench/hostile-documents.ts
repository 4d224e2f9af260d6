/**
 * "One upload blocks the service" (docs/hardening.md): the real service (`bun run src/main.ts`, the
 * embedded default, local-embed, default chunking) is sent the probe's documents through the HTTP
 * API (multipart POST /v1/knowledge-bases/{id}/documents), one after another:
 *
 *   - texts of 1 MB, 5 MB and 45 MB with no line or sentence break ('word ' repeated),
 *   - a DOCX whose XML inflates to 196 MB (~300 KB zipped, made here with fflate),
 *
 * and for each, until the document is `ready` or `failed`:
 *   (a) time to ready/failed                                                         target: bounded
 *   (b) the event loop as other requests see it: GET /healthz sent back to back by one client, p99
 *       of their latency while the document is processed, beside the same requests with no
 *       document work (the ceiling)                                                 target p99 < 100 ms
 *   (c) peak resident memory of the service plus its children (the document process), sampled
 *       from /proc/<pid>/status VmRSS every 50 ms, and the service's own VmHWM        target < 1 GB
 *
 * Environment: SIZES_MB (1,5,45), DOCX_MB (196), PROBE_MS (baseline milliseconds of /healthz: 5000),
 * KEEP (keep the service's log and data directory).
 * Writes bench/results/hostile-documents-latest.json. Linux only (/proc).
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { inflatingDocx, longLineText } from '../tests/helpers/hostile-documents'
import { EMBEDDED_ENV, freePort, killAll, log, percentile, randomBase62, removeDir, startServer, tempDir, verdict, whenInterrupted, writeResults, type Row } from './lib'

const SIZES_MB = (process.env.SIZES_MB ?? '1,5,45').split(',').map(Number)
const DOCX_MB = Number(process.env.DOCX_MB ?? 196)
const PROBE_MS = Number(process.env.PROBE_MS ?? 5000)
const TIMEOUT_MS = 10 * 60_000
const P99_TARGET_MS = 100
const RSS_TARGET = 1024 * 1024 * 1024

const work = tempDir('bench-hostile-')
whenInterrupted(() => removeDir(work))
const ROOT_KEY = `ap_bench${randomBase62(36)}`
const auth = { authorization: `Bearer ${ROOT_KEY}` }
const MB = 1024 * 1024

function status(pid: number): string | null {
  try {
    return readFileSync(`/proc/${pid}/status`, 'utf8')
  } catch {
    return null
  }
}
const field = (text: string | null, name: string) => Number(new RegExp(`${name}:\\s+(\\d+)`).exec(text ?? '')?.[1] ?? 0) * 1024

/** The pids of a process' children (every thread's), from /proc. */
function children(pid: number): number[] {
  try {
    const tasks = require('node:fs').readdirSync(`/proc/${pid}/task`) as string[]
    return tasks.flatMap((t) => readFileSync(`/proc/${pid}/task/${t}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number))
  } catch {
    return []
  }
}

/** Samples the service's and its children's VmRSS every 50 ms until stopped: the peak of their sum. */
function sampleMemory(pid: number) {
  let peak = 0
  let peakChild = 0
  const timer = setInterval(() => {
    const kids = children(pid).map((c) => field(status(c), 'VmRSS'))
    const child = kids.reduce((a, b) => a + b, 0)
    peakChild = Math.max(peakChild, child)
    peak = Math.max(peak, field(status(pid), 'VmRSS') + child)
  }, 50)
  return {
    stop: () => {
      clearInterval(timer)
      return { peak, peakChild, serviceHwm: field(status(pid), 'VmHWM') }
    },
  }
}

/** GET /healthz back to back until stopped: each answer's latency (ms). */
function probe(url: string) {
  const latencies: number[] = []
  let running = true
  const done = (async () => {
    while (running) {
      const t = performance.now()
      const res = await fetch(`${url}/healthz`)
      await res.arrayBuffer()
      latencies.push(performance.now() - t)
      await Bun.sleep(10)
    }
  })()
  return {
    async stop() {
      running = false
      await done
      const sorted = Float64Array.from(latencies).sort()
      return { n: sorted.length, p50: percentile(sorted, 50), p99: percentile(sorted, 99), max: sorted.at(-1) ?? 0 }
    },
  }
}

async function api(url: string, method: string, path: string, body?: unknown) {
  const res = await fetch(url + path, { method, headers: { ...auth, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) })
  const json = (await res.json()) as any
  if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(json)}`)
  return json
}

interface Case {
  name: string
  file: string
  make: () => Uint8Array
}

const cases: Case[] = [
  ...SIZES_MB.map((mb) => ({ name: `text, ${mb} MB on one line`, file: `line-${mb}mb.txt`, make: () => longLineText(mb * MB) })),
  { name: `DOCX inflating to ${DOCX_MB} MB`, file: `inflating-${DOCX_MB}mb.docx`, make: () => inflatingDocx(DOCX_MB * MB) },
]

async function main() {
  const port = freePort()
  const server = await startServer({
    cmd: ['bun', 'run', 'src/main.ts'],
    env: {
      PORT: String(port), HOST: '127.0.0.1', DATA_DIR: join(work, 'data'), BOOTSTRAP_API_KEY: ROOT_KEY, ...EMBEDDED_ENV,
      RATE_LIMIT_PER_SECOND: '1000000000', RATE_LIMIT_BURST: '1000000000', LOG_LEVEL: 'warn',
    },
    port,
    logFile: join(work, 'service.log'),
    readyPath: '/healthz',
  })
  const ws = (await api(server.url, 'POST', '/v1/workspaces', { name: 'Hostile documents' })).data.id
  const kb = (await api(server.url, 'POST', '/v1/knowledge-bases', { workspace_id: ws, name: 'Hostile' })).data.id

  const idle = probe(server.url)
  await Bun.sleep(PROBE_MS)
  const ceiling = await idle.stop()
  log(`healthz with no document work: p50 ${ceiling.p50.toFixed(1)} ms, p99 ${ceiling.p99.toFixed(1)} ms (${ceiling.n} requests)`)
  const booted = { rss: field(status(server.pid), 'VmRSS'), hwm: field(status(server.pid), 'VmHWM') }
  log(`service before any document: VmRSS ${(booted.rss / MB).toFixed(0)} MB, VmHWM ${(booted.hwm / MB).toFixed(0)} MB`)

  const results = []
  const rows: Row[] = []
  for (const c of cases) {
    const bytes = c.make()
    const memory = sampleMemory(server.pid)
    const p = probe(server.url)
    const started = performance.now()
    const form = new FormData()
    form.append('file', new Blob([bytes]), c.file)
    const res = await fetch(`${server.url}/v1/knowledge-bases/${kb}/documents`, { method: 'POST', headers: auth, body: form })
    const up = (await res.json()) as any
    if (res.status !== 201) throw new Error(`upload of ${c.file}: ${res.status} ${JSON.stringify(up)}`)
    let doc: any
    for (;;) {
      doc = await api(server.url, 'GET', `/v1/documents/${up.document_id}`)
      if (doc.status === 'ready' || doc.status === 'failed') break
      if (performance.now() - started > TIMEOUT_MS) throw new Error(`${c.file} still ${doc.status} after ${TIMEOUT_MS} ms`)
      await Bun.sleep(200)
    }
    const seconds = (performance.now() - started) / 1000
    const latency = await p.stop()
    const mem = memory.stop()
    const listed = (await api(server.url, 'GET', `/v1/knowledge-bases/${kb}/documents?limit=100`)).data.find((d: any) => d.id === up.document_id)
    const outcome = doc.status === 'ready' ? `ready, ${doc.chunks_count} chunks` : `failed: ${listed?.error?.code}`
    const r = { case: c.name, upload_bytes: bytes.byteLength, outcome, error: listed?.error ?? null, seconds, healthz: latency, peak_rss: mem.peak, peak_child_rss: mem.peakChild, service_hwm: mem.serviceHwm }
    results.push(r)
    log(`${c.name} (${(bytes.byteLength / 1024).toFixed(0)} KB uploaded): ${outcome} in ${seconds.toFixed(1)} s; healthz p99 ${latency.p99.toFixed(1)} ms (max ${latency.max.toFixed(0)}, ${latency.n} requests); peak RSS service + children ${(mem.peak / MB).toFixed(0)} MB (document process ${(mem.peakChild / MB).toFixed(0)} MB), service VmHWM ${(mem.serviceHwm / MB).toFixed(0)} MB`)
    rows.push(
      { figure: `${c.name}: time to ready/failed`, measured: `${seconds.toFixed(1)} s (${outcome})`, ceiling: '', share: '', target: 'bounded', result: 'info' },
      { figure: `${c.name}: GET /healthz p99 meanwhile`, measured: `p99 ${latency.p99.toFixed(1)} ms`, ceiling: `p99 ${ceiling.p99.toFixed(1)} ms`, share: `+${(latency.p99 - ceiling.p99).toFixed(1)} ms`, target: `< ${P99_TARGET_MS} ms`, result: verdict(latency.p99 < P99_TARGET_MS) },
      { figure: `${c.name}: peak RSS, service + document process`, measured: `${(mem.peak / MB).toFixed(0)} MB`, ceiling: '', share: '', target: '< 1 GB', result: verdict(mem.peak < RSS_TARGET) },
    )
  }
  await server.stop()
  const file = writeResults('hostile-documents', { ceiling, booted, results }, rows)
  log(`results: ${file}`)
}

try {
  await main()
} finally {
  killAll()
  // KEEP=1 keeps the service's log (and data) for a look: its path is printed.
  if (process.env.KEEP) log(`kept ${work}`)
  else removeDir(work)
}
