/**
 * `bun run bench`: every benchmark of the service, one after another (never two at once: this
 * machine has two shared cores), then one table of every figure beside its ceiling and target.
 *
 * Each suite is its own script (`bun run bench:<suite>`), run here as a subprocess with this
 * process's environment; each writes bench/results/<suite>-latest.json with its table `rows`
 * (bench/lib.ts `Row`). The table goes to stdout, to bench/results/summary-latest.json and, when
 * every suite ran, into bench/README.md between the `bench:summary` markers, so that a regression
 * shows at a glance against the previous table in git.
 *
 * Environment: BENCH_ONLY (comma-separated suite names: run only these), BENCH_SKIP (run all but
 * these), BENCH_README (1: write the README even when suites were left out; 0: never). Each suite's
 * own knobs pass through (bench/README.md). With DATABASE_URL and REDIS_URL set, the suites that
 * have a server mode measure it (webhooks and runs beside embedded; knowledge instead of embedded).
 *
 * Exit code 1 when a suite failed to write its results (a crash, an invalid run); a missed target
 * is a row of the table, not a failure of the run.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { log, machine, sourceVersion, writeResults, type Row } from './lib'

interface Suite {
  name: string
  script: string
  /** What it measures, for the table's suite column. */
  about: string
}

const SERVER = Boolean(process.env.DATABASE_URL && process.env.REDIS_URL)

const SUITES: Suite[] = [
  { name: 'http', script: 'bench/run.ts', about: 'HTTP stack (Foundation)' },
  { name: 'webhooks', script: 'bench/webhooks.ts', about: 'Webhook delivery' },
  { name: 'models', script: 'bench/models.ts', about: 'Models' },
  { name: 'runs', script: 'bench/runs.ts', about: 'Workflow runs' },
  { name: SERVER ? 'engine-server' : 'engine', script: 'bench/engine.ts', about: 'Workflow engine, second level (iteration, parked runs)' },
  // Two worker processes on one PostgreSQL: server mode only.
  ...(SERVER ? [{ name: 'schedules', script: 'bench/schedules.ts', about: 'Schedules (1 000 ticks, 2 workers)' }] : []),
  { name: SERVER ? 'knowledge-scale-server' : 'knowledge-scale', script: 'bench/knowledge-scale.ts', about: 'Knowledge at scale (ingestion, trickle, search, recall)' },
  { name: 'agents', script: 'bench/agents.ts', about: 'Agents' },
  { name: 'mcp', script: 'bench/mcp.ts', about: 'MCP tools (an agent turn calling one)' },
  { name: 'tracing', script: 'bench/tracing.ts', about: 'Tracing on vs off (OTLP to a loopback collector)' },
  { name: 'console', script: 'bench/console.ts', about: 'Console' },
  { name: 'hostile-documents', script: 'bench/hostile-documents.ts', about: 'Hostile documents (embedded)' },
  { name: 'soak', script: 'bench/soak.ts', about: 'Soak (3 min mixed)' },
]

const root = join(import.meta.dir, '..')
const README = join(import.meta.dir, 'README.md')
const START = '<!-- bench:summary:start (written by `bun run bench`; edit bench/all.ts, not this table) -->'
const END = '<!-- bench:summary:end -->'

function selected(): Suite[] {
  const list = (v: string | undefined) => new Set((v ?? '').split(',').map((s) => s.trim()).filter(Boolean))
  const only = list(process.env.BENCH_ONLY)
  const skip = list(process.env.BENCH_SKIP)
  const known = new Set(SUITES.flatMap((s) => [s.name, s.name.replace(/-server$/, '')]))
  for (const name of [...only, ...skip]) {
    if (!known.has(name)) throw new Error(`unknown suite "${name}"; suites: ${SUITES.map((s) => s.name).join(', ')}`)
  }
  const matches = (set: Set<string>, s: Suite) => set.has(s.name) || set.has(s.name.replace(/-server$/, ''))
  return SUITES.filter((s) => (only.size === 0 || matches(only, s)) && !matches(skip, s))
}

interface Outcome {
  suite: Suite
  exit_code: number
  seconds: number
  rows: Row[]
  /** Why there are no rows. */
  failure?: string
}

async function runSuite(suite: Suite): Promise<Outcome> {
  const started = Date.now()
  log(`bench: ${suite.name} (${suite.script})`)
  const child = Bun.spawn(['bun', 'run', suite.script], { cwd: root, stdin: 'ignore', stdout: 'inherit', stderr: 'inherit', env: process.env })
  const exit_code = await child.exited
  const seconds = Math.round((Date.now() - started) / 1000)
  const file = join(import.meta.dir, 'results', `${suite.name}-latest.json`)
  // A results file from an earlier run must not stand in for this one.
  const results = existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as { written_at?: string; rows?: Row[] }) : null
  const fresh = results?.written_at !== undefined && Date.parse(results.written_at) >= started
  if (!fresh || !Array.isArray(results?.rows)) {
    return { suite, exit_code, seconds, rows: [], failure: `no results written (exit code ${exit_code}; its output is above)` }
  }
  if (exit_code !== 0) return { suite, exit_code, seconds, rows: results.rows, failure: `exit code ${exit_code} (invalid figures; its output is above)` }
  return { suite, exit_code, seconds, rows: results.rows }
}

const cell = (v: string) => v.replaceAll('|', '\\|').replaceAll('\n', ' ')

function table(outcomes: Outcome[], header: string): string {
  const lines = [
    header,
    '',
    '| suite | figure | measured | ceiling (same run) | share | target | result |',
    '|---|---|---|---|---|---|---|',
  ]
  for (const o of outcomes) {
    if (o.failure && o.rows.length === 0) {
      lines.push(`| ${o.suite.about} | — | **suite failed**: ${cell(o.failure)} | | | | **failed** |`)
      continue
    }
    o.rows.forEach((r, i) => {
      const result = r.result === 'missed' ? '**missed**' : r.result
      lines.push(`| ${i === 0 ? o.suite.about : ''} | ${cell(r.figure)} | ${cell(r.measured)} | ${cell(r.ceiling)} | ${cell(r.share)} | ${cell(r.target)} | ${result} |`)
    })
    if (o.failure) lines.push(`| | | ${cell(o.failure)} | | | | **invalid** |`)
  }
  return lines.join('\n')
}

function writeReadme(text: string) {
  const readme = readFileSync(README, 'utf8')
  const from = readme.indexOf(START)
  const to = readme.indexOf(END)
  if (from < 0 || to < from) throw new Error(`bench/README.md has no ${START} … ${END} block`)
  writeFileSync(README, `${readme.slice(0, from + START.length)}\n${text}\n${readme.slice(to)}`)
}

async function main() {
  let suites: Suite[]
  try {
    suites = selected()
  } catch (err) {
    console.error((err as Error).message)
    process.exit(2)
  }
  const { commit, src_dirty } = sourceVersion()
  const began = new Date()
  const outcomes: Outcome[] = []
  for (const suite of suites) outcomes.push(await runSuite(suite))

  const m = machine()
  const minutes = Math.round((Date.now() - began.getTime()) / 6000) / 10
  const counts = (r: Row['result']) => outcomes.reduce((n, o) => n + o.rows.filter((row) => row.result === r).length, 0)
  const failed = outcomes.filter((o) => o.failure)
  const header = [
    `\`bun run bench\` at \`${commit}\`${src_dirty ? ' (src/ differs from it)' : ''}, ${began.toISOString().slice(0, 16).replace('T', ' ')} UTC, ${minutes} min;`,
    `${SERVER ? 'server mode where a suite has one (DATABASE_URL, REDIS_URL), embedded otherwise' : 'embedded default (PGlite, in-process Redis stand-in)'};`,
    `${m.nproc} cores (${m.cpu}), Bun ${m.bun}, ${m.wrk.split(' [')[0]}.`,
    `Suites: ${outcomes.map((o) => `${o.suite.name} ${o.seconds} s${o.failure ? ' (failed)' : ''}`).join(', ')}.`,
    `Targets: **${counts('pass')} pass, ${counts('missed')} missed**; ${counts('info')} rows for context.`,
  ].join('\n')
  const text = table(outcomes, header)
  console.log(`\n${text}\n`)

  const summary = {
    commit, src_dirty, began: began.toISOString(), minutes, machine: m, server_mode: SERVER,
    suites: outcomes.map((o) => ({ name: o.suite.name, script: o.suite.script, exit_code: o.exit_code, seconds: o.seconds, failure: o.failure ?? null, rows: o.rows })),
  }
  log(`written to ${writeResults('summary', summary, outcomes.flatMap((o) => o.rows))}`)
  const complete = suites.length === SUITES.length
  const wanted = process.env.BENCH_README === '1' || (process.env.BENCH_README !== '0' && complete)
  if (wanted) {
    writeReadme(text)
    log('table written to bench/README.md')
  } else {
    log(`bench/README.md left as it is (${complete ? 'BENCH_README=0' : 'not every suite ran; BENCH_README=1 writes it anyway'})`)
  }
  if (failed.length > 0) {
    log(`failed: ${failed.map((o) => `${o.suite.name} (${o.failure})`).join('; ')}`)
    process.exitCode = 1
  }
}

await main()
