import type { QuickJSContext, QuickJSHandle, QuickJSRuntime, QuickJSWASMModule } from 'quickjs-emscripten'

/**
 * One execution of a code node's source in QuickJS (compiled to WebAssembly): a fresh runtime and
 * context each time, so nothing survives from one run to the next. The context has the language and
 * its built-ins only: no `require`, `process`, `fetch`, timers, files or modules (a dynamic `import()`
 * rejects: no module loader is installed). The only way in is the variables as a JSON string; the only
 * way out is the JSON text of what `main` returns.
 *
 * Runs inside a worker thread (code-worker.ts); kept free of worker plumbing so it can be read alone.
 */

export interface SandboxJob {
  source: string
  /** `{ inputs, nodes }` as JSON. */
  vars: string
  /** CPU time of the thread running it (WALL_FACTOR times this in wall-clock time at most). */
  timeoutMs: number
  memoryBytes: number
  stackBytes: number
  /** Largest JSON text `main` may return. */
  outputBytes: number
}

export type SandboxFailure = 'error' | 'timeout' | 'memory' | 'aborted' | 'internal'

export type SandboxResult = { ok: true; json: string } | { ok: false; kind: SandboxFailure; message: string }

/**
 * Evaluated before the user's source, so it holds the original JSON and Promise even if the source
 * replaces them. `main` is looked up when called: a `function main`, `const main = ...` or `var main`
 * declared by the source's script all resolve.
 */
const WRAPPER = `(() => {
  const parse = JSON.parse, stringify = JSON.stringify, isArray = Array.isArray, P = Promise, then = P.prototype.then
  const check = (v) => {
    if (v === null || typeof v !== 'object' || isArray(v)) {
      throw new TypeError('main must return an object, not ' + (v === null ? 'null' : isArray(v) ? 'an array' : typeof v))
    }
    const json = stringify(v)
    if (typeof json !== 'string') throw new TypeError('main must return a JSON-serialisable object')
    return json
  }
  return (vars) => {
    if (typeof main !== 'function') throw new TypeError('the source must define function main(vars)')
    const r = main(parse(vars))
    return r instanceof P ? then.call(r, check) : check(r)
  }
})()`

/**
 * The time limit is CPU time, this thread's (getrusage RUSAGE_THREAD, through
 * `process.threadCpuUsage()`): on a busy machine the thread gets a share of a core (~40 % beside four
 * busy loops on two cores, under 10 % at a load of 30 there), and a wall-clock limit failed scripts
 * for the machine's load, not their own work. A script starved of CPU still ends: after WALL_FACTOR
 * times its limit in wall-clock time, saying so.
 */
export const WALL_FACTOR = 30
/** How often the interrupt handler reads the thread's CPU time once the wall clock passed the limit (~4 µs a read). */
const CPU_CHECK_MS = 5

/** CPU time this thread has used, in milliseconds. */
const threadCpuMs = () => {
  const { user, system } = process.threadCpuUsage()
  return (user + system) / 1000
}

/** `aborted` is polled by QuickJS' interrupt handler, the only code that runs while the script does. */
export function runInSandbox(qjs: QuickJSWASMModule, job: SandboxJob, aborted: () => boolean): SandboxResult {
  const started = performance.now()
  const cpuStart = threadCpuMs()
  // CPU time cannot run ahead of wall-clock time: before the limit has passed on the wall clock, no read.
  let nextCheck = started + job.timeoutMs
  const wallLimit = started + job.timeoutMs * WALL_FACTOR
  let stop: 'timeout' | 'starved' | 'aborted' | null = null
  let broken = false
  const rt = qjs.newRuntime()
  try {
    rt.setMemoryLimit(job.memoryBytes)
    rt.setMaxStackSize(job.stackBytes)
    // Once true it stays true: QuickJS' interrupt exception is uncatchable, and anything evaluated
    // after it (pending jobs) is interrupted at once.
    rt.setInterruptHandler(() => {
      if (stop) return true
      if (aborted()) return (stop = 'aborted') !== null
      const now = performance.now()
      if (now < nextCheck) return false
      nextCheck = now + CPU_CHECK_MS
      if (threadCpuMs() - cpuStart > job.timeoutMs) stop = 'timeout'
      else if (now > wallLimit) stop = 'starved'
      return stop !== null
    })
    const vm = rt.newContext()
    try {
      return execute(vm, rt, job, () => stop)
    } catch (err) {
      broken = true
      throw err
    } finally {
      if (!broken) vm.dispose()
    }
  } finally {
    // After an exception from inside WebAssembly (the thread's stack overflowed) the module's state
    // is lost and freeing would abort: the caller discards the whole module (the worker) instead.
    if (!broken) rt.dispose()
  }
}

function execute(vm: QuickJSContext, rt: QuickJSRuntime, job: SandboxJob, stopped: () => 'timeout' | 'starved' | 'aborted' | null): SandboxResult {
  const fail = (error: QuickJSHandle) => failure(vm, error, stopped(), job)
  const wrapped = vm.evalCode(WRAPPER, 'sandbox.js')
  if (wrapped.error) return fail(wrapped.error)
  const run = wrapped.value
  try {
    const script = vm.evalCode(job.source, 'code.js')
    if (script.error) return fail(script.error)
    script.value.dispose()
    const vars = vm.newString(job.vars)
    const called = vm.callFunction(run, vm.undefined, vars)
    vars.dispose()
    if (called.error) return fail(called.error)
    return settle(vm, rt, called.value, job, fail)
  } finally {
    run.dispose()
  }
}

/** The wrapper returned the JSON text, or a promise of it when `main` is async. */
function settle(vm: QuickJSContext, rt: QuickJSRuntime, result: QuickJSHandle, job: SandboxJob, fail: (e: QuickJSHandle) => SandboxResult): SandboxResult {
  let text: QuickJSHandle = result
  try {
    if (vm.typeof(result) !== 'string') {
      // No timers or I/O exist in here: once the job queue is empty, a pending promise never settles.
      const jobs = rt.executePendingJobs()
      if (jobs.error) return fail(jobs.error)
      const state = vm.getPromiseState(result)
      if (state.type === 'pending') return { ok: false, kind: 'error', message: 'main returned a promise that never settles (there are no timers or I/O in the sandbox)' }
      if (state.type === 'rejected') return fail(state.error)
      if (state.notAPromise) return { ok: false, kind: 'error', message: 'main must return an object' }
      text = state.value
    }
    const json = vm.getString(text)
    if (json.length > job.outputBytes) return { ok: false, kind: 'error', message: `main returned ${json.length} characters of JSON; at most ${job.outputBytes}` }
    return { ok: true, json }
  } finally {
    if (text !== result) text.dispose()
    result.dispose()
  }
}

function failure(vm: QuickJSContext, error: QuickJSHandle, stopped: 'timeout' | 'starved' | 'aborted' | null, job: SandboxJob): SandboxResult {
  let dumped: unknown
  try {
    dumped = vm.dump(error)
  } catch {
    // Reading the error needs a little memory of its own; failing to is itself the sign.
    dumped = { name: 'InternalError', message: 'out of memory' }
  } finally {
    error.dispose()
  }
  if (stopped === 'timeout') return { ok: false, kind: 'timeout', message: `the code used more than its ${job.timeoutMs} ms of CPU time` }
  if (stopped === 'starved') {
    return {
      ok: false,
      kind: 'timeout',
      message: `the code ran ${job.timeoutMs * WALL_FACTOR} ms of wall-clock time without using its ${job.timeoutMs} ms of CPU time: the machine is too busy`,
    }
  }
  if (stopped === 'aborted') return { ok: false, kind: 'aborted', message: 'the code was stopped: the node was aborted' }
  const e = (typeof dumped === 'object' && dumped !== null ? dumped : { message: String(dumped) }) as { name?: string; message?: string; stack?: string; lineNumber?: number }
  if (e.name === 'InternalError' && e.message === 'out of memory') {
    return { ok: false, kind: 'memory', message: `the code used more than its ${job.memoryBytes / 1024 / 1024} MB memory limit` }
  }
  if (e.name === 'InternalError' && e.message === 'stack overflow') {
    return { ok: false, kind: 'memory', message: `the code exceeded its ${job.stackBytes / 1024} KB stack limit (too deep a recursion)` }
  }
  const where = e.lineNumber ? ` (code.js line ${e.lineNumber})` : firstFrame(e.stack)
  const text = e.message ?? safeJson(dumped)
  return { ok: false, kind: 'error', message: `${e.name ? `${e.name}: ` : 'thrown: '}${text}${where}`.slice(0, 1000) }
}

/** The innermost frame of the user's code: `at main (code.js:3:9)`. */
function firstFrame(stack: string | undefined): string {
  const frame = stack?.split('\n').find((l) => l.includes('code.js'))
  return frame ? ` (${frame.trim()})` : ''
}

function safeJson(v: unknown): string {
  try {
    return JSON.stringify(v) ?? String(v)
  } catch {
    return String(v)
  }
}
