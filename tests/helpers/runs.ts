import { expect } from 'bun:test'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Server } from 'bun'
import { startWorkers, type Workers } from '../../src/workers'
import { startFakeProvider, type FakeProvider } from './fake-provider'
import { keyFor, startHarness, waitFor, workspaceOf, type Answer, type Harness } from './harness'

/**
 * Runs end to end in-process (tests/integration/runs-*.test.ts): the real app and the real workers
 * (run engine, timers, outbox fan-out, webhook deliveries) on a fresh database and Redis. The only
 * stand-ins are loopback servers: an HTTP target for http_request nodes, a slow model provider (to
 * cancel an LLM node mid-stream) and a plain-HTTP webhook receiver.
 */

export type Node = {
  id: string
  type: string
  name?: string
  config: Record<string, unknown>
  retry?: { max_attempts: number; backoff_ms?: number }
  timeout_ms?: number
  on_error?: 'fail' | 'continue' | 'branch'
}
export type Edge = { source: string; target: string; source_handle?: string }
export interface Ev {
  seq: number
  event: string
  data: any
}

export const start = (inputs: unknown[] = []): Node => ({ id: 'start', type: 'start', config: { inputs } })
export const tpl = (id: string, template: string): Node => ({ id, type: 'template', config: { template } })
export const end = (outputs: Record<string, string>): Node => ({ id: 'end', type: 'end', config: { outputs } })
export const wait = (id: string, seconds: number): Node => ({ id, type: 'wait', config: { seconds } })
/** Nodes joined one after the other. */
export const chain = (...nodes: Node[]) => ({ nodes, edges: nodes.slice(1).map((n, i) => ({ source: nodes[i]!.id, target: n.id })) })

export const starts = (events: Ev[], node: string) => events.filter((e) => e.event === 'node_start' && e.data.node_id === node)
export const ends = (events: Ev[], node: string) => events.filter((e) => e.event === 'node_end' && e.data.node_id === node)

/** Strict SSE framing: `id:`, `event:`, `data:` lines, one blank line after each event. */
export function parseSse(text: string): Ev[] {
  expect(text.endsWith('\n\n')).toBe(true)
  return text
    .slice(0, -2)
    .split('\n\n')
    .map((block) => {
      const lines = block.split('\n')
      expect(lines.length).toBe(3)
      const [id, event, data] = lines as [string, string, string]
      expect(id).toMatch(/^id: \d+$/)
      expect(event).toMatch(/^event: [a-z_]+$/)
      expect(data.startsWith('data: ')).toBe(true)
      return { seq: Number(id.slice(4)), event: event.slice(7), data: JSON.parse(data.slice(6)) }
    })
}

export interface RunsEnv {
  h: Harness
  workers: Workers
  /** The model provider behind the `slow` model: a stream of 200 chunks 20 ms apart (~4 s). */
  fake: FakeProvider
  /** Answers every request with { path, q, method, tier: 'vip' } and an `x-trace: abc` header. */
  target: Server<undefined>
  /** The webhook receiver: answers 200, each request recorded in `hookRequests`. */
  hooks: Server<undefined>
  /** `body` is the raw body as received (what a delivery's signature covers), `json` that body parsed. */
  hookRequests: { path: string; headers: Record<string, string>; body: string; json: any }[]
  /** The owner of `ws`. */
  owner: string
  /** A readonly member of `ws`. */
  reader: string
  /** The owner of another workspace, not a member of `ws`. */
  outsider: string
  ws: string
  /** Creates a workflow in the test workspace; returns its id. */
  workflow(graph: { nodes: Node[]; edges: Edge[] }): Promise<string>
  /** Triggers a run (as the owner unless `opts.key`). */
  trigger(wf: string, inputs?: Record<string, unknown>, opts?: { async?: boolean; key?: string; headers?: Record<string, string> }): Promise<Answer>
  eventsOf(runId: string, key?: string): Promise<Ev[]>
  runOf(runId: string): Promise<any>
  /** The run once it is no longer running. */
  finished(runId: string, timeoutMs?: number): Promise<any>
  /** The outbox rows of a run. */
  outboxOf(runId: string): Promise<{ type: string; data: any }[]>
  close(): Promise<void>
}

/**
 * The harness (MODELS_FILE with the `slow` model, http and private webhook targets allowed, rate
 * limits out of the way) with its workers, the loopback servers, three API keys and a workspace
 * `Runs` whose owner is `owner`, with `reader` as a readonly member (`extraEnv`: more configuration).
 * Call `close()` after the tests.
 */
export async function startRunsEnv(extraEnv: Record<string, string> = {}): Promise<RunsEnv> {
  let harness: Harness | undefined
  let workers: Workers | undefined
  let fake: FakeProvider | undefined
  let target: Server<undefined> | undefined
  let hooks: Server<undefined> | undefined
  let dir: string | undefined
  const hookRequests: RunsEnv['hookRequests'] = []

  const close = async () => {
    await workers?.stop()
    await harness?.close()
    await fake?.close()
    await target?.stop(true)
    await hooks?.stop(true)
    if (dir) rmSync(dir, { recursive: true, force: true })
  }

  try {
    fake = await startFakeProvider()
    // 200 chunks 20 ms apart: a stream of ~4 s, long enough to cancel in the middle.
    fake.script('slow-up', [{ chunks: Array.from({ length: 200 }, (_, i) => `t${i} `), delayMs: 20 }])
    dir = mkdtempSync(join(tmpdir(), 'ap-runs-'))
    const modelsFile = join(dir, 'models.json')
    writeFileSync(
      modelsFile,
      JSON.stringify({
        providers: [{ id: 'fake', kind: 'openai', base_url: fake.baseUrl, api_key: 'sk-fake', timeout_ms: 30_000 }],
        models: [
          { id: 'slow', type: 'llm', vendor: 'test', routes: [{ provider: 'fake', model: 'slow-up' }], pricing: { input_per_1k: 0, output_per_1k: 0 } },
          // Answers what a test scripts with fake.script('scripted-up', ...) (echoes the last user message otherwise).
          { id: 'scripted', type: 'llm', vendor: 'test', routes: [{ provider: 'fake', model: 'scripted-up' }], pricing: { input_per_1k: 0, output_per_1k: 0 } },
        ],
      }),
    )
    target = Bun.serve({
      hostname: '127.0.0.1',
      port: 0,
      async fetch(req) {
        const url = new URL(req.url)
        return Response.json({ path: url.pathname, q: url.searchParams.get('q'), method: req.method, tier: 'vip' }, { headers: { 'x-trace': 'abc' } })
      },
    })
    hooks = Bun.serve({
      hostname: '127.0.0.1',
      port: 0,
      async fetch(req) {
        const body = await req.text()
        let json: any = null
        try {
          json = JSON.parse(body)
        } catch {}
        hookRequests.push({ path: new URL(req.url).pathname, headers: Object.fromEntries(req.headers), body, json })
        return Response.json({ ok: true })
      },
    })
    const h = await startHarness({
      MODELS_FILE: modelsFile,
      WEBHOOK_ALLOW_HTTP: 'true',
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
      RATE_LIMIT_BURST: '100000',
      RATE_LIMIT_PER_SECOND: '100000',
      ...extraEnv,
    })
    harness = h
    workers = await startWorkers(h.deps)
    const [owner, reader, outsider] = (await Promise.all(['runs-owner', 'runs-reader', 'runs-outsider'].map((u) => keyFor(h, u)))) as [string, string, string]
    const ws = await workspaceOf(h, owner, 'Runs')
    await workspaceOf(h, outsider, 'Elsewhere')
    const member = await h.call('POST', `/v1/workspaces/${ws}/members`, { key: owner, body: { user_id: 'runs-reader', role: 'readonly' } })
    expect(member.status).toBe(201)

    let wfSeq = 0
    const runOf = async (runId: string): Promise<any> => {
      const res = await h.call('GET', `/v1/runs/${runId}`, { key: owner })
      expect(res.status).toBe(200)
      return res.body
    }
    return {
      h,
      workers,
      fake,
      target,
      hooks,
      hookRequests,
      owner,
      reader,
      outsider,
      ws,
      async workflow(graph) {
        const res = await h.call('POST', '/v1/workflows', { key: owner, body: { workspace_id: ws, name: `Runs ${++wfSeq}`, graph } })
        if (res.status !== 201) throw new Error(`could not create a workflow: ${res.status} ${res.text}`)
        return res.body.data.id
      },
      trigger: (wf, inputs = {}, opts = {}) =>
        h.call('POST', `/v1/workflows/${wf}/runs${opts.async ? '?async=true' : ''}`, { key: opts.key ?? owner, body: { inputs }, headers: opts.headers }),
      async eventsOf(runId, key = owner) {
        const res = await h.call('GET', `/v1/runs/${runId}/events`, { key })
        expect(res.status).toBe(200)
        return res.body.data.map((e: Ev) => ({ seq: e.seq, event: e.event, data: e.data }))
      },
      runOf,
      finished: (runId, timeoutMs = 10_000) =>
        waitFor(async () => {
          const run = await runOf(runId)
          return run.status !== 'running' ? run : null
        }, { timeoutMs, what: `run ${runId} to finish` }),
      outboxOf: (runId) => h.deps.db.sql<{ type: string; data: any }[]>`select type, data from events where data->>'run_id' = ${runId}`,
      close,
    }
  } catch (err) {
    await close()
    throw err
  }
}
