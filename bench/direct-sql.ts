import { openEmbedded } from '../src/store/db'
import { findWorkspaceAccess } from '../src/store/workspaces'
import { loadOf, machineCpuMs } from './lib'

/**
 * The ceiling of GET /v1/workspaces/{id}: the same query (findWorkspaceAccess, the one the route
 * runs) through postgres.js on the same embedded store, `concurrency` queries in flight, no HTTP.
 * Run as a subprocess by run.ts once the service has stopped (the data directory takes one process).
 *
 *   bun run bench/direct-sql.ts <data_dir> <workspace_id> <user_id> <warmup_s> <seconds> <concurrency>
 */
const [dataDir, workspaceId, userId, warmup, seconds, concurrency] = process.argv.slice(2)
if (!dataDir || !workspaceId || !userId) throw new Error('usage: direct-sql.ts <data_dir> <workspace_id> <user_id> [warmup_s] [seconds] [concurrency]')

const db = await openEmbedded({ dataDir })
try {
  const inFlight = Number(concurrency ?? 32)
  const loop = async (until: number, latencies: number[] | null) => {
    while (performance.now() < until) {
      const t0 = performance.now()
      const row = await findWorkspaceAccess(db.sql, workspaceId, userId)
      if (!row) throw new Error(`workspace ${workspaceId} not found in ${dataDir}`)
      latencies?.push(performance.now() - t0)
    }
  }
  const phase = async (s: number, latencies: number[] | null) => {
    const until = performance.now() + s * 1000
    await Promise.all(Array.from({ length: inFlight }, () => loop(until, latencies)))
  }
  await phase(Number(warmup ?? 3), null)
  const latencies: number[] = []
  const t0 = performance.now()
  const cpu0 = process.cpuUsage()
  const m0 = machineCpuMs()
  await phase(Number(seconds ?? 10), latencies)
  const m1 = machineCpuMs()
  const cpu1 = process.cpuUsage(cpu0)
  const wallMs = performance.now() - t0
  const result = {
    ...loadOf(latencies, wallMs / 1000),
    // This process is both the "server" (PGlite, postgres.js) and the load generator (32 loops).
    cpu: { wallMs, serverCpuMs: (cpu1.user + cpu1.system) / 1000, loadGenCpuMs: 0, machineBusyMs: m1.busy - m0.busy, stealMs: m1.steal - m0.steal },
  }
  process.stdout.write(`BENCH_JSON ${JSON.stringify(result)}\n`)
} finally {
  await db.close()
}
