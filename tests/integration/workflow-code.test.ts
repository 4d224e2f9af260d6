import { afterAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { loadConfig } from '../../src/config'
import type { Gateway } from '../../src/domain/models/gateway'
import { executors } from '../../src/domain/workflows/nodes'
import { CODE_LIMITS } from '../../src/domain/workflows/nodes/code'
import { codePool } from '../../src/domain/workflows/nodes/code-pool'
import { runInSandbox, WALL_FACTOR } from '../../src/domain/workflows/nodes/code-sandbox'
import { getQuickJS } from 'quickjs-emscripten'
import { spawnProcess, type Spawned } from '../helpers/process'
import type { GraphNode, NodeContext, NodeResult, NodeType } from '../../src/domain/workflows/types'
import { waitFor } from '../helpers/harness'
import { failure, vars } from '../helpers/nodes'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The code node's executor called directly: the real QuickJS sandbox in its worker threads. A code
 * node reads only `vars` and the abort signal, so no harness stands behind its NodeContext (the
 * gateway and the knowledge port are stand-ins it never calls); the other executors are in
 * workflow-nodes.test.ts.
 */

/** The defaults: nothing in them concerns code nodes. */
const defaults = loadConfig({})

interface Run {
  ctx: NodeContext
  controller: AbortController
}

function context(): Run {
  const controller = new AbortController()
  const ctx: NodeContext = {
    vars,
    signal: controller.signal,
    config: defaults,
    gateway: {} as Gateway,
    call: { workspaceId: 'ws_code', requestId: `req_code_${Math.random().toString(36).slice(2)}` },
    delta: () => {},
    knowledge: { search: async () => Promise.reject(new Error('code nodes do not search knowledge bases')) },
  }
  return { ctx, controller }
}

const node = (type: NodeType, config: Record<string, unknown>, id = `n_${type}`): GraphNode => ({ id, type, config })

function exec(type: NodeType, config: Record<string, unknown>, run: Run = context()): Promise<NodeResult> {
  return executors[type](node(type, config), run.ctx)
}

describe('code', () => {
  const main = (body: string) => `function main(vars) { ${body} }`

  test('main receives { inputs, nodes } and its object is the output', async () => {
    const res = await exec('code', { source: main('return { n: vars.inputs.items.length, first: vars.nodes.search.output.results[0].content, upper: vars.inputs.name.toUpperCase() }') })
    expect(res.output).toEqual({ n: 3, first: 'first', upper: 'ADA' })
    expect((await exec('code', { source: 'const main = async (v) => ({ later: await Promise.resolve(v.inputs.score) })' })).output).toEqual({ later: 0.7 })
  })

  test('no host capabilities exist inside the sandbox', async () => {
    const probe = await exec('code', {
      source: main(`return {
        require: typeof require, process: typeof process, fetch: typeof fetch, bun: typeof globalThis.Bun,
        setTimeout: typeof setTimeout, XMLHttpRequest: typeof XMLHttpRequest, WebAssembly: typeof WebAssembly,
        std: typeof std, os: typeof os, fromFunction: typeof new Function('return typeof process')() === 'string' ? new Function('return typeof process')() : null,
      }`),
    })
    expect(probe.output).toEqual({
      require: 'undefined', process: 'undefined', fetch: 'undefined', bun: 'undefined', setTimeout: 'undefined',
      XMLHttpRequest: 'undefined', WebAssembly: 'undefined', std: 'undefined', os: 'undefined', fromFunction: 'undefined',
    })
    for (const escape of ['return require("fs")', 'return process.env', 'return fetch("http://127.0.0.1")', 'return globalThis.Bun.file("/etc/passwd")']) {
      const err = await failure(exec('code', { source: main(escape) }))
      expect(err.code).toBe('code_error')
      expect(err.message).toMatch(/ReferenceError|TypeError/)
    }
    const imported = await failure(exec('code', { source: 'async function main() { return await import("node:fs") }' }))
    expect(imported.code).toBe('code_error')
    expect(imported.message).toContain("could not load module 'node:fs'")
  })

  test.each([
    ['a syntax error', 'function main(vars) { return {', 'SyntaxError'],
    ['a thrown error', main('throw new Error("boom")'), 'Error: boom'],
    ['a thrown string', main('throw "plain"'), 'plain'],
    ['no main', 'const x = 1', 'must define function main'],
    ['a non-object', main('return 42'), 'must return an object, not number'],
    ['an array', main('return [1]'), 'not an array'],
    ['a cycle', main('const o = {}; o.o = o; return o'), 'circular'],
    ['a promise that never settles', main('return new Promise(() => {})'), 'never settles'],
  ])('%s is a code_error', async (_what, source, message) => {
    const err = await failure(exec('code', { source }))
    expect(err.code).toBe('code_error')
    expect(err.message).toContain(message)
  })

  test('an infinite loop is stopped by the time limit (default 1 s of CPU time, or timeout_ms)', async () => {
    let started = performance.now()
    const err = await failure(exec('code', { source: main('while (true) {}') }))
    expect(err).toMatchObject({ code: 'code_timeout', message: 'the code used more than its 1000 ms of CPU time' })
    // CPU time runs no faster than the wall clock, and slower on a busy machine (WALL_FACTOR times at most).
    expect(performance.now() - started).toBeGreaterThanOrEqual(CODE_LIMITS.defaultTimeoutMs - 50)
    expect(performance.now() - started).toBeLessThan(CODE_LIMITS.defaultTimeoutMs * WALL_FACTOR + 2_000)
    started = performance.now()
    expect((await failure(exec('code', { source: main('for (;;) {}'), timeout_ms: 200 }))).code).toBe('code_timeout')
    expect(performance.now() - started).toBeLessThan(200 * WALL_FACTOR + 2_000)
    expect((await failure(exec('code', { source: main('return {}'), timeout_ms: 20_000 }))).code).toBe('invalid_config')
  }, 90_000)

  test('the event loop keeps turning while a script spins', async () => {
    let ticks = 0
    const timer = setInterval(() => ticks++, 10)
    await failure(exec('code', { source: main('while (true) {}'), timeout_ms: 500 }))
    clearInterval(timer)
    expect(ticks).toBeGreaterThan(10)
  })

  // Each bomb gets the longest time-out a node may have, so that only memory can stop it: with the default
  // one, a loaded machine reached the deadline before the limit and the test saw code_timeout.
  test.each([
    ['an array that grows one item at a time', 'const a = []; while (true) a.push("item " + a.length); return {}'],
    ['an array that doubles (the limit in about 20 steps)', 'let a = [1]; while (true) a = a.concat(a); return {}'],
  ])('a memory bomb (%s) is stopped by the memory limit', async (_name, body) => {
    const err = await failure(exec('code', { source: main(body), timeout_ms: CODE_LIMITS.maxTimeoutMs }))
    expect(err.code).toBe('code_memory')
    expect(err.message).toContain('32 MB')
  })

  test('runaway recursion and nesting hit the stack limit; the sandbox keeps working after', async () => {
    expect((await failure(exec('code', { source: main('function f(n) { return f(n + 1) + 1 } return f(0)') }))).code).toBe('code_memory')
    // Deep enough to overflow the worker thread's own stack inside WebAssembly: that worker is replaced.
    expect((await failure(exec('code', { source: main('return JSON.parse("[".repeat(200000))') }))).code).toBe('code_memory')
    expect((await exec('code', { source: main('return { fine: true }') })).output).toEqual({ fine: true })
  })

  test('aborting the signal stops a long loop at once', async () => {
    const run = context()
    const started = performance.now()
    const pending = failure(exec('code', { source: main('while (true) {}'), timeout_ms: 10_000 }, run))
    // Abort once the loop has surely started; the bound below is 5 times under the node's own 10 s time-out, so
    // it tells an abort from a time-out, not a speed.
    setTimeout(() => run.controller.abort(), 100)
    const err = await pending
    expect(err.code).toBe('aborted')
    expect(performance.now() - started).toBeLessThan(2_000)
    expect((await exec('code', { source: main('return { after: 1 }') })).output).toEqual({ after: 1 })
  })

  test('concurrent executions are isolated from each other', async () => {
    const results = await Promise.all(
      Array.from({ length: 12 }, (_, i) => exec('code', { source: `globalThis.leak = (globalThis.leak ?? 0) + 1; function main() { return { i: ${i}, leak: globalThis.leak } }` })),
    )
    expect(results.map((r) => r.output)).toEqual(Array.from({ length: 12 }, (_, i) => ({ i, leak: 1 })))
    expect(codePool().workers).toBeLessThanOrEqual(4)
  })
})

/**
 * The code node's time limit is the CPU time of its thread, not the wall clock: beside busy loops
 * that take every core (twice as many as there are), a script gets a share of one, and a script that
 * needs half its limit of CPU took longer than its limit on the wall clock. Before, such a script
 * failed with code_timeout for the machine's load; now it completes, and an infinite loop still
 * fails, saying it used its CPU time.
 */
describe('code under CPU load', () => {
  let burners: Spawned[] = []

  afterAll(async () => {
    await Promise.all(burners.map((b) => b.stop('SIGKILL')))
  })

  /** Iterations of `loop` that take about `targetMs` of this thread's CPU time in QuickJS, measured here. */
  async function calibrate(targetMs: number): Promise<number> {
    const qjs = await getQuickJS()
    const cpu = (n: number) => {
      const before = process.threadCpuUsage()
      const r = runInSandbox(qjs, { source: loop(n), vars: '{}', timeoutMs: 60_000, memoryBytes: CODE_LIMITS.memoryBytes, stackBytes: CODE_LIMITS.stackBytes, outputBytes: CODE_LIMITS.outputBytes }, () => false)
      expect(r.ok).toBe(true)
      const used = process.threadCpuUsage(before)
      return (used.user + used.system) / 1000
    }
    let n = 100_000
    for (let ms = cpu(n); ms < targetMs / 2; ms = cpu(n)) n *= 2
    return Math.round((n * targetMs) / cpu(n))
  }
  const loop = (n: number) => `function main() { let x = 0; for (let i = 0; i < ${n}; i++) x = (x + i * 7) % 1000003; return { x } }`

  test('a script that needs half its CPU time completes beside busy loops; an infinite loop fails on CPU time', async () => {
    const n = await calibrate(400)
    burners = Array.from({ length: 2 * (navigator.hardwareConcurrency || 2) }, () => spawnProcess(['bun', '-e', 'for (;;) {}']))
    // The loops are spinning: a moment of this thread's wall clock gives it a fraction of its CPU time.
    await waitFor(() => {
      const before = process.threadCpuUsage()
      const t = performance.now()
      while (performance.now() - t < 100) {}
      const used = process.threadCpuUsage(before)
      return (used.user + used.system) / 1000 < 80
    }, { timeoutMs: 20_000, intervalMs: 50, what: 'the busy loops to take the cores' })
    const started = performance.now()
    const res = await exec('code', { source: loop(n), timeout_ms: 800 })
    const wallMs = Math.round(performance.now() - started)
    expect(res.output).toHaveProperty('x')
    console.log(`~400 ms of CPU with an 800 ms limit, beside ${burners.length} busy loops: completed in ${wallMs} ms of wall-clock time`)
    const err = await failure(exec('code', { source: 'function main() { while (true) {} }', timeout_ms: 200 }))
    expect(err).toMatchObject({ code: 'code_timeout', message: 'the code used more than its 200 ms of CPU time' })
  }, 60_000)
})
