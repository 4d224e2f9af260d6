import { DIMENSIONS } from './embed'
import type { FromEmbedWorker, ToEmbedWorker } from './embed-worker'

/**
 * One worker thread for local-embed batches, started at the first batch. Ingestion embeds 64 chunks
 * a call, ~0.3 ms each with their token count: on the service's own thread that was most of its
 * CPU per chunk, beside the HTTP, the machine and the writes it has to do anyway. On a thread of its
 * own it runs on the other core (bench/README.md, "Knowledge at scale"). Batches take turns in the
 * thread, in order; the thread does not keep the process alive.
 */
class EmbedThread {
  private worker: Worker | null = null
  private nextId = 1
  private readonly pending = new Map<number, { resolve: (r: { vectors: number[][]; tokens: number }) => void; reject: (err: Error) => void }>()

  embed(inputs: string[], signal: AbortSignal): Promise<{ vectors: number[][]; tokens: number }> {
    signal.throwIfAborted()
    const worker = this.worker ?? this.spawn()
    const id = this.nextId++
    return new Promise((resolve, reject) => {
      // An abort answers at once; the thread's late answer finds no one waiting and is dropped.
      const onAbort = () => {
        if (this.pending.delete(id) && this.pending.size === 0) worker.unref()
        reject(signal.reason)
      }
      signal.addEventListener('abort', onAbort, { once: true })
      const done = () => signal.removeEventListener('abort', onAbort)
      this.pending.set(id, { resolve: (r) => (done(), resolve(r)), reject: (err) => (done(), reject(err)) })
      if (this.pending.size === 1) worker.ref()
      worker.postMessage({ id, inputs } satisfies ToEmbedWorker)
    })
  }

  private spawn(): Worker {
    const worker = new Worker(new URL('./embed-worker.ts', import.meta.url).href)
    worker.onmessage = (event: MessageEvent<FromEmbedWorker>) => {
      const msg = event.data
      const p = this.pending.get(msg.id)
      if (!p) return
      this.pending.delete(msg.id)
      if (this.pending.size === 0) worker.unref()
      if ('error' in msg) return p.reject(new Error(msg.error))
      const vectors: number[][] = []
      for (let i = 0; i < msg.vectors.length; i += DIMENSIONS) vectors.push(Array.from(msg.vectors.subarray(i, i + DIMENSIONS)))
      p.resolve({ vectors, tokens: msg.tokens })
    }
    const lost = (why: string) => {
      if (this.worker !== worker) return
      this.worker = null
      worker.terminate()
      for (const p of this.pending.values()) p.reject(new Error(`the local-embed thread ${why}`))
      this.pending.clear()
    }
    worker.addEventListener('error', (e) => lost(`failed: ${(e as ErrorEvent).message}`))
    worker.addEventListener('close', () => lost('exited'))
    worker.unref()
    this.worker = worker
    return worker
  }
}

export const embedThread = new EmbedThread()
