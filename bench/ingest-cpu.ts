/**
 * Where (1)'s CPU goes, per process (`bun run bench/ingest-cpu.ts`, server mode: DATABASE_URL and
 * REDIS_URL set): the real service on a fresh database, one warm-up document (the document
 * processes' start-up is not counted), then DOCS documents of 100 chunks (bench:knowledge's (1)
 * texts) uploaded 16 in flight; CPU read from /proc for the service, its document processes, this
 * database's PostgreSQL backends (and the server's other processes), and the client. PROFILE=1
 * writes the service's `--cpu-prof` profile into bench/results/.
 */
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import postgres from 'postgres'
import { sizedDocument } from './corpus'
import { freePort, killAll, processCpuMs, randomBase62, removeDir, startServer, tempDir } from './lib'

const DOCS = Number(process.env.DOCS ?? 100)
const CONCURRENCY = 16
const db = process.env.DATABASE_URL!
const redis = process.env.REDIS_URL!
const work = tempDir('bench-ingest-cpu-')
const key = `ap_bench${randomBase62(36)}`
const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' }

const stat = (pid: number) => {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'utf8')
    const f = s.slice(s.lastIndexOf(')') + 2).split(' ')
    return { ppid: Number(f[1]), ms: (Number(f[11]) + Number(f[12])) * 10, comm: s.slice(s.indexOf('(') + 1, s.lastIndexOf(')')) }
  } catch {
    return null
  }
}
const all = () => {
  const out = new Map<number, { ppid: number; ms: number; comm: string }>()
  for (const d of readdirSync('/proc')) if (/^\d+$/.test(d)) { const s = stat(Number(d)); if (s) out.set(Number(d), s) }
  return out
}

async function main() {
  const name = `bench_ingest_cpu_${process.pid}`
  const admin = postgres(db, { max: 1, onnotice: () => {} })
  await admin.unsafe(`drop database if exists ${name}`)
  await admin.unsafe(`create database ${name}`)
  const u = new URL(db); u.pathname = `/${name}`
  const r = new URL(redis); r.pathname = '/15'
  const port = freePort()
  const cmd = process.env.PROFILE ? ['bun', '--cpu-prof', `--cpu-prof-dir=${join(import.meta.dir, 'results')}`, 'src/main.ts'] : ['bun', 'run', 'src/main.ts']
  const service = await startServer({ cmd, env: { PORT: String(port), HOST: '127.0.0.1', DATA_DIR: join(work, 'data'), BOOTSTRAP_API_KEY: key, DATABASE_URL: u.toString(), REDIS_URL: r.toString(), RATE_LIMIT_PER_SECOND: '1000000000', RATE_LIMIT_BURST: '1000000000', LOG_LEVEL: 'warn' }, port, logFile: join(work, 'service.log'), readyPath: '/healthz', timeoutMs: 120_000 })
  const api = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${service.url}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) })
    return { status: res.status, body: (await res.json()) as any }
  }
  const ws = await api('POST', '/v1/workspaces', { name: 'ingest cpu' })
  const kb = (await api('POST', '/v1/knowledge-bases', { workspace_id: ws.body.data.id, name: 'ingest' })).body.data.id as string
  const docs = await Promise.all(Array.from({ length: DOCS + 1 }, (_, i) => sizedDocument(i, 100)))
  const waitReady = async () => {
    for (;;) {
      const p = await api('GET', `/v1/knowledge-bases/${kb}/documents?status_in=uploading,parsing,chunking,embedding&limit=1`)
      if (p.body.data.length === 0) return
      await Bun.sleep(20)
    }
  }
  if (process.env.WARM !== '0') {
    await api('POST', `/v1/knowledge-bases/${kb}/documents`, { type: 'text', name: 'warm.md', content: docs[DOCS]!.text })
    await waitReady()
  }
  await Bun.sleep(1500)
  const backends = async () => (await admin`select pid from pg_stat_activity where datname = ${name}`).map((x) => x.pid as number)
  const before = all()
  const self0 = processCpuMs(process.pid)
  const t0 = performance.now()
  let next = 0
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
    while (next < DOCS) {
      const i = next++
      const res = await api('POST', `/v1/knowledge-bases/${kb}/documents`, { type: 'text', name: `doc-${i}.md`, content: docs[i]!.text, metadata: { i } })
      if (res.status !== 201) throw new Error(String(res.status))
    }
  }))
  await waitReady()
  const seconds = (performance.now() - t0) / 1000
  const after = all()
  const self = processCpuMs(process.pid) - self0
  const mine = new Set(await backends())
  const delta = (pid: number) => (after.get(pid)?.ms ?? 0) - (before.get(pid)?.ms ?? 0)
  const sum = (pred: (pid: number, s: { ppid: number; comm: string }) => boolean) => {
    let t = 0
    for (const [pid, s] of after) if (pred(pid, s)) t += delta(pid)
    return t
  }
  const chunks = DOCS * 100
  const svc = service.pid
  const descendants = new Set<number>()
  for (let grew = true; grew; ) { grew = false; for (const [pid, s] of after) if ((s.ppid === svc || descendants.has(s.ppid)) && !descendants.has(pid)) { descendants.add(pid); grew = true } }
  const us = (ms: number) => Math.round((ms * 1000) / chunks)
  const out = {
    chunks_per_s: Math.round(chunks / seconds),
    service_us: us(delta(svc)),
    document_processes_us: us(sum((pid) => descendants.has(pid))),
    postgres_this_db_us: us(sum((pid) => mine.has(pid))),
    postgres_other_us: us(sum((pid, s) => s.comm === 'postgres' && !mine.has(pid))),
    client_us: us(self),
  }
  console.log(JSON.stringify(out))
  await service.stop()
  await admin.unsafe(`drop database if exists ${name} with (force)`)
  await admin.end()
}

main().catch((e) => { console.error(e); process.exitCode = 1 }).finally(() => { killAll(); removeDir(work) })
