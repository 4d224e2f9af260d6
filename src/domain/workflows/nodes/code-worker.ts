import { getQuickJS } from 'quickjs-emscripten'
import { runInSandbox, type SandboxJob, type SandboxResult } from './code-sandbox'

/**
 * A code-node worker thread (see code-pool.ts). Loads the QuickJS WebAssembly module once and runs one
 * job at a time. The main thread stops a running job by setting the shared flag, which QuickJS' interrupt
 * handler reads: this thread is busy inside WebAssembly and would never see a message in time.
 */
declare const self: Worker

export type ToWorker = { type: 'init'; flag: SharedArrayBuffer } | { type: 'job'; id: number; job: SandboxJob }
/** `dead`: the module is unusable after this job; the pool replaces the worker. */
export type FromWorker = { id: number; result: SandboxResult; dead?: boolean }

const quickjs = getQuickJS()
let flag = new Int32Array(new SharedArrayBuffer(4))

// Set synchronously: a message that arrived while the module loads must find a listener.
self.onmessage = async (event: MessageEvent<ToWorker>) => {
  const msg = event.data
  if (msg.type === 'init') {
    flag = new Int32Array(msg.flag)
    return
  }
  const qjs = await quickjs
  let reply: FromWorker
  try {
    reply = { id: msg.id, result: runInSandbox(qjs, msg.job, () => Atomics.load(flag, 0) !== 0) }
  } catch (err) {
    // Some nesting (the parser, JSON) recurses deeper in the engine's own stack than QuickJS' stack
    // limit accounts for, and the thread's stack overflows inside WebAssembly: caught here, but the
    // module's state is then lost, so this worker is replaced.
    const overflow = err instanceof RangeError && /call stack/i.test(err.message)
    reply = {
      id: msg.id,
      dead: true,
      result: overflow
        ? { ok: false, kind: 'memory', message: 'the code exceeded the stack limit (too deep a nesting or recursion)' }
        : { ok: false, kind: 'internal', message: `the sandbox failed: ${(err as Error).message}`.slice(0, 500) },
    }
  }
  postMessage(reply)
}
