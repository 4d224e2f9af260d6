import type { Subprocess } from 'bun'
import { readFileSync } from 'node:fs'
import type { Chunk, ChunkSettings } from './chunk'
import type { DocType } from './parse'

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
 * documents; it is stopped after IDLE_MS without work, when a limit is hit, and by close(). It does
 * not outlive the service: its watchdog thread (sandbox-watchdog.ts) ends it within WATCHDOG_POLL_MS
 * of the service's death, a SIGKILL included, and enforces the same limits from inside.
 */

/** What one document may cost to parse and chunk; docs/knowledge.md "Limits" says the same. */
export interface SandboxLimits {
  /** Wall-clock time of one document in the child, from the moment it is handed over. */
  timeoutMs: number
  /** Resident memory of the child (VmRSS), polled every RSS_POLL_MS while it works. */
  maxRssBytes: number
  /** Chunks of one document: past this, chunking stops and the document fails (too_many_chunks). */
  maxChunks: number
}

export const DEFAULT_SANDBOX_LIMITS: SandboxLimits = {
  // Measured (bench/hostile-documents.ts): 5 MB on one line is read and chunked in ~1.5 s, 45 MB
  // reaches maxChunks in ~5 s; 60 s was pdf.js' own limit before it moved here.
  timeoutMs: 60_000,
  // ~130 MB at rest, ~300 MB for the largest Word XML allowed (parse/docx.ts), 486 MB for 45 MB on
  // one line cut off at maxChunks; the embedded service itself sits at ~380 MB, so service and
  // child together stay under 1 GB (934 MB at worst, measured).
  maxRssBytes: 640 * 1024 * 1024,
  // 256-token chunks: ~5 M tokens, ~20 MB of prose, a dozen long books in one file. Each chunk is
  // embedded and stored (a row, a vector, its index entries): past this a file is better split.
  maxChunks: 20_000,
}

const RSS_POLL_MS = 25
/**
 * How often the document process' watchdog thread looks for its parent and at its limits
 * (sandbox-watchdog.ts): an orphan is gone within this, far under the second it is allowed.
 */
export const WATCHDOG_POLL_MS = 100
/**
 * The signals the document process' watchdog ends it with at a limit (sandbox-watchdog.ts), so that
 * the service tells a limit from a crash: both end a process without a core file, and nothing else
 * here sends or handles them.
 */
export const LIMIT_SIGNALS = { timeout: 'SIGALRM', memory: 'SIGVTALRM' } as const satisfies Record<string, NodeJS.Signals>
const IDLE_MS = 10_000
/** Chunks per message from the child: each message is decoded on the service's loop. */
export const CHUNKS_PER_MESSAGE = 500

/** A failure the document records as `failed` with this code. */
export class SandboxFailure extends Error {
  override name = 'SandboxFailure'
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message)
  }
}

/** The child ended by itself mid-document (crashed): the document is tried again, and counted. */
export class SandboxCrashed extends Error {
  override name = 'SandboxCrashed'
}

/** The caller's signal fired (the lease was lost, the worker is stopping). */
export class SandboxAborted extends Error {
  override name = 'SandboxAborted'
}

export interface SandboxJob {
  id: number
  type: DocType
  bytes: Uint8Array
  settings: ChunkSettings
  maxChunks: number
  /** The limits its watchdog holds it to (SandboxLimits), as the service does. */
  timeoutMs: number
  maxRssBytes: number
  /**
   * Embed each chunk with local-embed too, beside the chunker (its token count is the chunk's): its
   * vector as pgvector's text (`text`, for the insert statement) or as float4 values (`float4`, for
   * server mode's binary COPY); false: no vector.
   */
  embed: VectorForm | false
}

/** How the document process hands back a local-embed vector (SandboxJob.embed). */
export type VectorForm = 'text' | 'float4'

/** A chunk from the document process; `vector`: its local-embed vector, in the form asked for. */
export interface SandboxChunk extends Chunk {
  vector?: string | Float32Array
}

/** To the watchdog thread: a document's limits when its reading starts, null when it ends. */
export type WatchdogMessage = { timeoutMs: number; maxRssBytes: number } | null

export type SandboxMessage = { ready: true } | { id: number; chunks: SandboxChunk[] } | { id: number; done: number } | { id: number; error: { code: string; message: string } }

/** The process' resident memory now, from /proc; null where there is no /proc (not Linux) or it is gone. */
export function residentBytes(pid: number): number | null {
  try {
    const kb = /VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]
    return kb === undefined ? null : Number(kb) * 1024
  } catch {
    return null
  }
}

interface Waiting {
  workspace: string
  start: (p: SandboxProcess) => Promise<void>
  abort: () => void
}

interface Pending {
  id: number
  chunks: SandboxChunk[]
  resolve: (chunks: SandboxChunk[]) => void
  reject: (err: Error) => void
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

class SandboxProcess {
  /** Documents handed to this process and not settled yet (the one being read included). */
  waiting = 0
  private child: Subprocess | null = null
  /** Settles when the child has loaded its parsers: its start-up is not the document's time. */
  private started: Promise<void> = Promise.resolve()
  private onStarted: (() => void) | null = null
  private pending: Pending | null = null
  /** Documents wait here for the child, one at a time: its memory is one document's. */
  private queue: Promise<unknown> = Promise.resolve()
  private idle: ReturnType<typeof setTimeout> | null = null
  private nextId = 1

  constructor(readonly limits: SandboxLimits = DEFAULT_SANDBOX_LIMITS) {}

  process(
    type: DocType,
    load: () => Promise<Uint8Array>,
    settings: ChunkSettings,
    signal: AbortSignal | undefined,
    embed: VectorForm | false,
    begin: (() => Promise<void>) | undefined,
  ): Promise<SandboxChunk[]> {
    this.waiting++
    const run = this.queue.then(async () => this.run(type, await load(), settings, signal, embed, begin))
    this.queue = run.catch(() => undefined)
    return run.finally(() => this.waiting--)
  }

  /** Whether the child runs (started or starting). */
  get alive(): boolean {
    return this.child !== null
  }

  /**
   * Starts the child before a document needs it; it stops after the idle time if none comes. A start
   * that fails here is left to the document's own start, which fails the document with the reason.
   */
  warm(): void {
    if (this.child) return
    try {
      this.spawn()
    } catch {
      return
    }
    this.stopWhenIdle()
  }

  /** Stops the child once it has had nothing to read for IDLE_MS. */
  private stopWhenIdle(): void {
    this.idle = setTimeout(() => void this.stopChild(null), IDLE_MS).unref()
  }

  /** Whether a document is being read now. */
  get busy(): boolean {
    return this.pending !== null
  }

  /** The child's pid while one runs. */
  get pid(): number | null {
    return this.child?.pid ?? null
  }

  /** Stops the child, failing the document at hand with SandboxAborted; a later document starts another. */
  async close(): Promise<void> {
    await this.stopChild(new SandboxAborted('the document sandbox was closed'))
  }

  private async run(
    type: DocType,
    bytes: Uint8Array,
    settings: ChunkSettings,
    signal: AbortSignal | undefined,
    embed: VectorForm | false,
    begin: (() => Promise<void>) | undefined,
  ): Promise<SandboxChunk[]> {
    if (signal?.aborted) throw new SandboxAborted('stopped')
    if (this.idle) clearTimeout(this.idle)
    const child = this.child ?? this.spawn()
    try {
      await this.started
    } catch (err) {
      if (signal?.aborted) throw new SandboxAborted('stopped')
      throw err
    }
    const { timeoutMs, maxRssBytes, maxChunks } = this.limits
    const id = this.nextId++
    let poll: ReturnType<typeof setInterval> | undefined
    let timer: ReturnType<typeof setTimeout> | undefined
    const onAbort = () => void this.stopChild(new SandboxAborted('stopped'))
    try {
      await begin?.()
      if (signal?.aborted) throw new SandboxAborted('stopped')
      if (this.child !== child) throw new SandboxCrashed('the document process exited before the document was handed over')
      return await new Promise<SandboxChunk[]>((resolve, reject) => {
        this.pending = { id, chunks: [], resolve, reject }
        timer = setTimeout(() => void this.stopChild(this.limitHit('timeout')), timeoutMs)
        poll = setInterval(() => {
          const rss = residentBytes(child.pid)
          if (rss !== null && rss > maxRssBytes) void this.stopChild(this.limitHit('memory'))
        }, RSS_POLL_MS)
        signal?.addEventListener('abort', onAbort, { once: true })
        const job: SandboxJob = { id, type, bytes, settings, maxChunks, timeoutMs, maxRssBytes, embed }
        child.send(job)
      })
    } finally {
      clearTimeout(timer)
      clearInterval(poll)
      signal?.removeEventListener('abort', onAbort)
      this.pending = null
      if (this.child) this.stopWhenIdle()
    }
  }

  private spawn(): Subprocess {
    const child = Bun.spawn([process.execPath, '--smol', new URL('./sandbox-child.ts', import.meta.url).pathname], {
      stdio: ['ignore', 'inherit', 'inherit'],
      serialization: 'advanced',
      ipc: (message: SandboxMessage) => this.receive(message),
    })
    this.child = child
    let failStart: (err: Error) => void = () => {}
    this.started = new Promise<void>((resolve, reject) => {
      this.onStarted = resolve
      failStart = reject
    })
    this.started.catch(() => undefined)
    void child.exited.then(() => {
      failStart(new SandboxCrashed(`the document process exited (${child.signalCode ?? `code ${child.exitCode}`}) before it was ready`))
      if (this.child !== child) return
      this.child = null
      // Its watchdog ended it at a limit (sandbox-watchdog.ts): the same failure as when this side does.
      const limit = child.signalCode === LIMIT_SIGNALS.timeout ? 'timeout' : child.signalCode === LIMIT_SIGNALS.memory ? 'memory' : null
      this.pending?.reject(limit ? this.limitHit(limit) : new SandboxCrashed(`the document process exited (${child.signalCode ?? `code ${child.exitCode}`}) while reading a document`))
    })
    return child
  }

  /** The failure of a document that hit a limit, whichever side saw it first. */
  private limitHit(limit: 'timeout' | 'memory'): SandboxFailure {
    const { timeoutMs, maxRssBytes } = this.limits
    return limit === 'timeout'
      ? new SandboxFailure('processing_timeout', `parsing and chunking the document took longer than ${timeoutMs / 1000} s`)
      : new SandboxFailure('processing_memory', `parsing and chunking the document took more than ${Math.round(maxRssBytes / 1024 / 1024)} MiB of memory`)
  }

  private receive(message: SandboxMessage): void {
    if ('ready' in message) return this.onStarted?.()
    const p = this.pending
    if (!p || message.id !== p.id) return
    if ('chunks' in message) for (const c of message.chunks) p.chunks.push(c)
    else if ('done' in message) p.resolve(p.chunks)
    else p.reject(new SandboxFailure(message.error.code, message.error.message))
  }

  /** Kills the child (a limit, an abort, idleness), failing the document at hand with `reason`. */
  private async stopChild(reason: Error | null): Promise<void> {
    const child = this.child
    if (this.idle) clearTimeout(this.idle)
    this.idle = null
    this.child = null
    if (reason) this.pending?.reject(reason)
    if (!child) return
    child.kill('SIGKILL')
    await child.exited
  }
}
