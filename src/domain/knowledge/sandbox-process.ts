import type { Subprocess } from 'bun'
import type { ChunkSettings } from './chunk'
import type { DocType } from './parse'
import {
  DEFAULT_SANDBOX_LIMITS,
  LIMIT_SIGNALS,
  residentBytes,
  SandboxAborted,
  SandboxCrashed,
  SandboxFailure,
  type SandboxChunk,
  type SandboxJob,
  type SandboxLimits,
  type SandboxMessage,
  type VectorForm,
} from './sandbox-protocol'

const RSS_POLL_MS = 25
const IDLE_MS = 10_000

interface Pending {
  id: number
  chunks: SandboxChunk[]
  resolve: (chunks: SandboxChunk[]) => void
  reject: (err: Error) => void
}

/**
 * One document process: its child started ahead or on demand, one document at a time, held to the
 * limits from this side (a timer, RSS polled every RSS_POLL_MS) as its watchdog holds it from inside,
 * and stopped after IDLE_MS without work.
 */
export class SandboxProcess {
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
