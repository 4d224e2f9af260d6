/**
 * Start-up time of `bun start` on the embedded default: spawn to the first 200 on /healthz, with a fresh
 * DATA_DIR (from the migrated template that `bun install` makes) and with an existing one, beside two
 * ceilings measured in the same run: a bare Bun.serve process, and a bare PGlite+vector open of an
 * existing data directory. `bun run bench:startup`; figures in bench/README.md ("Start-up").
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { EMBEDDED_ENV } from './lib'

const ROUNDS = Number(process.env.ROUNDS ?? 5)
const ROOT = join(import.meta.dir, '..')

async function until(url: string, started: number): Promise<number> {
  for (;;) {
    try {
      if ((await fetch(url)).ok) return performance.now() - started
    } catch {}
    await Bun.sleep(10)
  }
}

async function timed(cmd: string[], env: Record<string, string>, url: string): Promise<number> {
  const started = performance.now()
  const proc = Bun.spawn(cmd, { cwd: ROOT, env: { ...process.env, ...env }, stdout: 'ignore', stderr: 'ignore' })
  const ms = await until(url, started)
  proc.kill('SIGTERM')
  await proc.exited
  return ms
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
const row = (name: string, xs: number[]) => console.log(`| ${name} | ${Math.round(median(xs))} | ${Math.round(Math.max(...xs))} |`)

const fresh: number[] = []
const restart: number[] = []
const bare: number[] = []
const pglite: number[] = []
for (let i = 0; i < ROUNDS; i++) {
  const dir = mkdtempSync(join(tmpdir(), 'ap-bench-start-'))
  const port = String(21000 + i)
  const env = { DATA_DIR: dir, PORT: port, LOG_LEVEL: 'warn', ...EMBEDDED_ENV }
  fresh.push(await timed(['bun', 'run', 'src/main.ts'], env, `http://127.0.0.1:${port}/healthz`))
  restart.push(await timed(['bun', 'run', 'src/main.ts'], env, `http://127.0.0.1:${port}/healthz`))
  bare.push(await timed(['bun', '-e', `Bun.serve({ port: ${port}, fetch: () => new Response('ok') })`], {}, `http://127.0.0.1:${port}/`))
  const started = performance.now()
  const open = Bun.spawnSync(['bun', '-e', `const { PGlite } = await import('@electric-sql/pglite'); const { vector } = await import('@electric-sql/pglite-pgvector'); const db = await PGlite.create({ dataDir: '${join(dir, 'pglite')}', extensions: { vector } }); await db.query('select 1'); await db.close()`], { cwd: ROOT })
  if (open.exitCode === 0) pglite.push(performance.now() - started)
  rmSync(dir, { recursive: true, force: true })
}
console.log(`| spawn → first 200 (ms, ${ROUNDS} rounds) | median | max |\n|---|---|---|`)
row('`bun start`, fresh DATA_DIR (template)', fresh)
row('`bun start`, existing DATA_DIR', restart)
row('ceiling: bare `Bun.serve` process', bare)
row('ceiling: bare PGlite+vector open of the same data dir (to exit)', pglite)
