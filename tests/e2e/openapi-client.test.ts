import { afterAll, beforeAll, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import openapiTS, { astToString } from 'openapi-typescript'
import { keyFor, startHarness, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * A client generated from the service's own OpenAPI document, as a team would make one: types by
 * `openapi-typescript`, calls by `openapi-fetch`. The program must type-check (a wrong one must not), then
 * run against the service over HTTP on loopback.
 */
const ROOT = join(import.meta.dir, '..', '..')
let h: Harness
let server: ReturnType<typeof Bun.serve>
let dir: string
let key: string

beforeAll(async () => {
  h = await startHarness()
  server = Bun.serve({ hostname: '127.0.0.1', port: 0, fetch: (req) => h.app.handle(req) })
  key = await keyFor(h, 'generated-client')
  dir = mkdtempSync(join(tmpdir(), 'ap-openapi-client-'))
  symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'))
  const doc = await (await fetch(`http://127.0.0.1:${server.port}/docs/json`)).json()
  writeFileSync(join(dir, 'schema.d.ts'), astToString(await openapiTS(doc as never)))
}, 60_000)

afterAll(async () => {
  server?.stop(true)
  await h?.close()
  rmSync(dir, { recursive: true, force: true })
})

const PROGRAM = `
import createClient from 'openapi-fetch'
import type { components, paths } from './schema'

const client = createClient<paths>({ baseUrl: process.env.BASE_URL!, headers: { Authorization: \`Bearer \${process.env.API_KEY}\` } })

const created = await client.POST('/v1/workspaces', { body: { name: 'Generated client' } })
if (!created.data) throw new Error('create failed: ' + JSON.stringify(created.error))
const id: string = created.data.data.id

const page = await client.GET('/v1/workspaces', { params: { query: { limit: 5 } } })
if (!page.data) throw new Error('list failed')
const count: number = page.data.data[0]!.member_count

const missing = await client.GET('/v1/workspaces/{id}', { params: { path: { id: 'ws_missing' } } })
const error: components['schemas']['Error'] | undefined = missing.error
const runs = await client.GET('/v1/runs', { params: { query: { limit: 1 } } })

console.log(JSON.stringify({ id, count, listed: page.data.data.length, status: missing.response.status, code: error?.error.code, runs: runs.data?.data.length }))
`

function tsc(file: string) {
  return Bun.spawnSync([join(ROOT, 'node_modules', '.bin', 'tsc'), '--noEmit', '--strict', '--target', 'es2022', '--module', 'esnext', '--moduleResolution', 'bundler', '--skipLibCheck', '--types', 'bun', file], { cwd: dir })
}

test('the generated types type-check a real program, and refuse a wrong one', () => {
  writeFileSync(join(dir, 'client.ts'), PROGRAM)
  const ok = tsc('client.ts')
  expect(ok.stdout.toString() + ok.stderr.toString()).toBe('')
  expect(ok.exitCode).toBe(0)
  // limit is an integer; a string must not type-check, nor an unknown body field.
  writeFileSync(join(dir, 'wrong.ts'), PROGRAM.replace('limit: 5 }', "limit: 'five' }").replace("name: 'Generated client'", "title: 'Generated client'"))
  const wrong = tsc('wrong.ts')
  expect(wrong.exitCode).not.toBe(0)
  expect(wrong.stdout.toString()).toContain("Type 'string' is not assignable to type 'number'")
  expect(wrong.stdout.toString()).toContain('title')
}, 120_000)

test('the program runs against the service: create, list with limit 5, a typed error', async () => {
  writeFileSync(join(dir, 'client.ts'), PROGRAM)
  // Not spawnSync: the service answering it runs in this very process.
  const run = Bun.spawn(['bun', 'run', 'client.ts'], { cwd: dir, env: { ...process.env, BASE_URL: `http://127.0.0.1:${server.port}`, API_KEY: key }, stdout: 'pipe', stderr: 'pipe' })
  const [stdout, stderr] = await Promise.all([new Response(run.stdout).text(), new Response(run.stderr).text(), run.exited])
  expect(stderr).toBe('')
  const out = JSON.parse(stdout)
  expect(out).toMatchObject({ count: 1, listed: 1, status: 404, code: 'not_found', runs: 0 })
  expect(out.id).toStartWith('ws_')
}, 60_000)
