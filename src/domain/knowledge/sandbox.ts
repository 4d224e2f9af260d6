import type { ChunkSettings } from './chunk'
import type { DocType } from './parse'
import { SandboxProcess } from './sandbox-process'
import { DEFAULT_SANDBOX_LIMITS, SandboxAborted, type SandboxChunk, type SandboxLimits, type VectorForm } from './sandbox-protocol'

/**
 * Parsing and chunking (and local-embed), out of the service's process: Bun subprocesses
 * (sandbox-child.ts), each reading one document at a time and answering its chunks; this side holds
 * each to a time limit and a memory limit and kills it at either. Why a process: the service's event loop (HTTP, lease heartbeats) must not
 * wait on a parser, and its memory must not grow with one. A worker thread would keep the loop free,
 * but Bun enforces no memory limit on threads (measured with Bun 1.4.5: `resourceLimits:
 * { maxOldGenerationSizeMb: 100 }` is accepted and ignored, a thread grew the process past 1.5 GB),
 * and an RSS is only measurable per process (/proc/<pid>/status).
 *
 * The child starts once (~0.3-1 s with its parsers loaded, ~130 MB RSS) and is kept for the next
 * documents; it is stopped after IDLE_MS without work (sandbox-process.ts), when a limit is hit, and by close(). It does
 * not outlive the service: its watchdog thread (sandbox-watchdog.ts) ends it within WATCHDOG_POLL_MS
 * of the service's death, a SIGKILL included, and enforces the same limits from inside.
 */

interface Waiting {
  workspace: string
  start: (p: SandboxProcess) => Promise<void>
  abort: () => void
}

/**
 * Document processes (each a SandboxProcess), each reading one document at a time. One by default;
 * more let documents be parsed, chunked and embedded side by side on more cores (DOCUMENT_PROCESSES,
 * docs/knowledge.md "Limits": each holds its own memory).
 *
 * Documents wait here, not in a process, and a process that comes free takes the next one fairly
 * (docs/knowledge.md, "Fair shares between workspaces"): from the workspace served longest ago among
 * those reading fewer than `perWorkspace` documents now, the oldest of its documents first. A
 * document cannot be interrupted (one may take its whole time limit), so the share is kept as it is
 * handed over: with `perWorkspace` below the number of processes, one workspace's long documents
 * never hold every process while another's wait.
 */
export class DocumentSandbox {
  private readonly processes: SandboxProcess[]
  private readonly queue: Waiting[] = []
  /** Documents of each workspace being read now. */
  private readonly reading = new Map<string, number>()
  /** When each workspace was last handed a process (a counter): the one served longest ago goes first. */
  private readonly served = new Map<string, number>()
  private turns = 0

  constructor(
    readonly limits: SandboxLimits = DEFAULT_SANDBOX_LIMITS,
    count = 1,
    /** Processes reading one workspace's documents at once, at most. */
    readonly perWorkspace = count,
  ) {
    this.processes = Array.from({ length: Math.max(1, count) }, () => new SandboxProcess(limits))
  }

  /**
   * The chunks of a document, parsed and chunked in a document process (with `embed`, each with its
   * local-embed vector); rejects with SandboxFailure, SandboxCrashed or SandboxAborted, or what
   * `load` or `begin` throws. `load` is called when a process is free for the document, so documents
   * waiting their turn hold no bytes. `workspace`: whose document it is, for the turns. `begin` once
   * the process is ready for it, right before it is handed over: its reading begins (a document
   * waiting behind others has not begun).
   */
  process(type: DocType, load: () => Promise<Uint8Array>, settings: ChunkSettings, signal?: AbortSignal, embed: VectorForm | false = false, workspace = '', begin?: () => Promise<void>): Promise<SandboxChunk[]> {
    if (signal?.aborted) return Promise.reject(new SandboxAborted('stopped'))
    return new Promise<SandboxChunk[]>((resolve, reject) => {
      const waiting: Waiting = {
        workspace,
        start: (p) => {
          signal?.removeEventListener('abort', waiting.abort)
          return p.process(type, load, settings, signal, embed, begin).then(resolve, reject)
        },
        // Stopped while waiting (its lease lost, the worker stopping): it leaves the queue at once.
        abort: () => {
          const i = this.queue.indexOf(waiting)
          if (i < 0) return
          this.queue.splice(i, 1)
          reject(new SandboxAborted('stopped'))
        },
      }
      signal?.addEventListener('abort', waiting.abort, { once: true })
      this.queue.push(waiting)
      this.dispatch()
    })
  }

  /** Hands waiting documents to the free processes, by turns. */
  private dispatch() {
    let handed = false
    for (const p of this.processes) {
      if (p.waiting > 0) continue
      const next = this.next()
      if (next < 0) break
      const [w] = this.queue.splice(next, 1)
      this.reading.set(w!.workspace, (this.reading.get(w!.workspace) ?? 0) + 1)
      if (this.served.size > 10_000) this.served.clear()
      this.served.set(w!.workspace, ++this.turns)
      // Its child starts while the document's bytes load.
      p.warm()
      handed = true
      void w!.start(p).finally(() => {
        const n = (this.reading.get(w!.workspace) ?? 1) - 1
        if (n > 0) this.reading.set(w!.workspace, n)
        else this.reading.delete(w!.workspace)
        this.dispatch()
      })
    }
    // Only when a document was handed over: a document ending (or the sandbox closing) starts nothing.
    if (handed) this.spare()
  }

  /**
   * When every started process is reading, the next one is started ahead (it stops again after the
   * idle time like any other): a document arriving then, another workspace's most of all, is not the
   * one that waits for a process to load its parsers.
   */
  private spare() {
    const free = this.processes.filter((p) => p.waiting === 0)
    if (!free.some((p) => p.alive)) free[0]?.warm()
  }

  /** The index in the queue of the document to read next, or -1 (none waits, or every waiting workspace has its share). */
  private next(): number {
    let best = -1
    let bestTurn = Infinity
    for (let i = 0; i < this.queue.length; i++) {
      const ws = this.queue[i]!.workspace
      if ((this.reading.get(ws) ?? 0) >= this.perWorkspace) continue
      const turn = this.served.get(ws) ?? 0
      if (turn < bestTurn) {
        best = i
        bestTurn = turn
      }
    }
    return best
  }

  /** The pid of a process reading a document (else of one started), while one runs (for measurements and tests). */
  get pid(): number | null {
    return (this.processes.find((p) => p.busy && p.pid !== null) ?? this.processes.find((p) => p.pid !== null))?.pid ?? null
  }

  /** Processes whose child runs now (reading, started ahead, or idle until its idle time ends). */
  get alive(): number {
    return this.processes.filter((p) => p.alive).length
  }

  /** Stops every process, failing the documents at hand with SandboxAborted; later documents start others. */
  async close(): Promise<void> {
    await Promise.all(this.processes.map((p) => p.close()))
  }
}
