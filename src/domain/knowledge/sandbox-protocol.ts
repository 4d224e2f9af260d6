import { readFileSync } from 'node:fs'
import type { Chunk, ChunkSettings } from './chunk'
import type { DocType } from './parse'

/**
 * What the service (sandbox.ts, sandbox-process.ts), its document processes (sandbox-child.ts) and
 * their watchdog threads (sandbox-watchdog.ts) share: the limits a document is held to, the signals
 * a limit ends a process with, the messages between them and the failures a document ends with.
 */

/** What one document may cost to parse and chunk; docs/knowledge.md "Limits" says the same. */
export interface SandboxLimits {
  /** Wall-clock time of one document in the child, from the moment it is handed over. */
  timeoutMs: number
  /** Resident memory of the child (VmRSS), polled every RSS_POLL_MS (sandbox-process.ts) while it works. */
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
