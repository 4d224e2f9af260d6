/**
 * `bun run bench:console`: the console's first paint on loopback (target: < 1 s), beside its ceiling
 * measured in the same run, Debian's Chromium painting a bare page from a bare Bun.serve. Headless
 * Chromium (the browser test's flags) through Playwright; every visit in a fresh browser context, so
 * nothing is cached: the page, its stylesheet and its script come over the wire each time.
 *
 *   first paint          performance 'first-contentful-paint' of <service>/console (signed in: the key
 *                        is put in session storage before the page's scripts run)
 *   workspaces shown     navigation start → the workspaces table in the DOM (the script fetched,
 *                        parsed and run; GET /v1/workspaces answered; the table drawn)
 *   diagram drawn        navigation start → a run page's state diagram drawn (Mermaid, 3.5 MB, loaded)
 *   ceiling              first-contentful-paint of a bare HTML page (one heading) from a bare Bun.serve
 *
 * Environment: CONSOLE_VISITS (30 per subject).
 */
import { join } from 'node:path'
import { chromium, type Browser } from 'playwright-core'
import { EMBEDDED_ENV, freePort, log, machine, percentile, randomBase62, removeDir, sourceVersion, startServer, tempDir, verdict, whenInterrupted, writeResults, type Row } from './lib'

const VISITS = Number(process.env.CONSOLE_VISITS ?? 30)
const CHROMIUM = '/usr/bin/chromium'
const ARGS = ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run']
const work = tempDir('bench-console-')
whenInterrupted(() => removeDir(work))
const KEY = `ap_bench${randomBase62(36)}`

const bare = Bun.serve({
  hostname: '127.0.0.1',
  port: 0,
  fetch: () => new Response('<!doctype html><html lang="en"><head><meta charset="utf-8"><title>bare</title></head><body><h1>Bare page</h1></body></html>', { headers: { 'content-type': 'text/html; charset=utf-8' } }),
})
const port = freePort()
const service = await startServer({
  cmd: ['bun', 'run', 'src/main.ts'],
  env: { PORT: String(port), HOST: '127.0.0.1', DATA_DIR: join(work, 'data'), BOOTSTRAP_API_KEY: KEY, LOG_LEVEL: 'warn', ...EMBEDDED_ENV },
  port,
  logFile: join(work, 'service.log'),
  readyPath: '/healthz',
})
const call = async (method: string, path: string, body?: unknown) => {
  const res = await fetch(`${service.url}${path}`, { method, headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) })
  if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`)
  return res.json() as Promise<any>
}
const ws = (await call('POST', '/v1/workspaces', { name: 'Bench' })).data.id
const wf = (await call('POST', '/v1/workflows', {
  workspace_id: ws,
  name: 'Quick',
  graph: { nodes: [{ id: 'start', type: 'start', config: {} }, { id: 'end', type: 'end', config: { outputs: { ok: 'yes' } } }], edges: [{ source: 'start', target: 'end' }] },
})).data.id
const run = (await call('POST', `/v1/workflows/${wf}/runs`, { inputs: {} })).run_id

let browser: Browser | undefined
try {
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ARGS })
  const fcp = () => new Promise<number>((resolve) => {
    const seen = performance.getEntriesByName('first-contentful-paint')[0]
    if (seen) return resolve(seen.startTime)
    new PerformanceObserver((list) => {
      const e = list.getEntriesByName('first-contentful-paint')[0]
      if (e) resolve(e.startTime)
    }).observe({ type: 'paint' as never, buffered: true })
  })
  const visit = async (url: string, signedIn: boolean, ready?: string) => {
    const context = await browser!.newContext({ viewport: { width: 1366, height: 900 } })
    if (signedIn) await context.addInitScript((key) => sessionStorage.setItem('agent-platform.console.key', key), KEY)
    const page = await context.newPage()
    await page.goto(url)
    const paint = await page.evaluate(fcp)
    let shown = NaN
    if (ready) {
      await page.locator(ready).first().waitFor({ timeout: 20_000 })
      shown = await page.evaluate(() => performance.now())
    }
    await context.close()
    return { paint, shown }
  }
  const figures: Record<string, number[]> = { ceiling: [], paint: [], workspaces: [], diagram: [] }
  // Warm-up: Chromium's own first start, the service's first queries.
  for (let i = 0; i < 3; i++) {
    await visit(`http://127.0.0.1:${bare.port}/`, false)
    await visit(`${service.url}/console#/workspaces`, true, 'table')
  }
  for (let i = 0; i < VISITS; i++) {
    // Alternating subject and ceiling, so that the machine's noise falls on both.
    figures.ceiling!.push((await visit(`http://127.0.0.1:${bare.port}/`, false)).paint)
    const w = await visit(`${service.url}/console#/workspaces`, true, 'table')
    figures.paint!.push(w.paint)
    figures.workspaces!.push(w.shown)
    figures.diagram!.push((await visit(`${service.url}/console#/runs/${run}`, true, 'figure.diagram[data-current-state] svg')).shown)
  }
  const stats = Object.fromEntries(Object.entries(figures).map(([k, v]) => {
    const s = [...v].sort((a, b) => a - b)
    return [k, { p50: Math.round(percentile(s, 50)), p90: Math.round(percentile(s, 90)), max: Math.round(s.at(-1)!) }]
  }))
  const result = { when: new Date().toISOString(), ...sourceVersion(), machine: machine(), visits: VISITS, ms: stats, target: { first_paint_ms: 1000 } }
  const paint = stats.paint!
  const ceiling = stats.ceiling!
  const diff = (n: number) => `${n < 0 ? '-' : '+'}${Math.abs(n)}`
  const rows: Row[] = [{
    figure: `first contentful paint of /console, ${VISITS} cold visits`,
    measured: `p50 ${paint.p50} ms, p90 ${paint.p90} ms`,
    ceiling: `bare page p50 ${ceiling.p50} ms, p90 ${ceiling.p90} ms`,
    share: `${diff(paint.p50 - ceiling.p50)} / ${diff(paint.p90 - ceiling.p90)} ms`,
    target: 'p90 < 1 000 ms',
    result: verdict(paint.p90 < 1000),
  }]
  writeResults('console', result, rows)
  log(`console, ${VISITS} cold visits each (ms: p50 / p90 / max)`)
  for (const [k, s] of Object.entries(stats)) log(`  ${k.padEnd(11)} ${s.p50} / ${s.p90} / ${s.max}`)
  log(`  first paint p90 ${stats.paint!.p90} ms: ${stats.paint!.p90 < 1000 ? 'PASS' : 'MISS'} (< 1000 ms); ceiling p50 ${stats.ceiling!.p50} ms`)
} finally {
  await browser?.close()
  await service.stop()
  bare.stop(true)
  removeDir(work)
}
