import type { EventSourceMessage } from 'eventsource-parser'
import type { ResolvedProvider } from '../catalog'
import type { ChatChunk, ChatRequest, RawChunk, WireRun } from '../types'
import { ContentChunks } from './openai-chunks'
import { isObject, malformed, MAX_EVENT, postSseData, postSseReads, type Upstream } from './upstream'
import { usageOf } from './usage'
import { WireEvents } from './wire-events'

/**
 * An OpenAI chat stream, a read's worth of chunks at a time, each with the upstream's JSON text.
 * `stream_options.include_usage` asks for a last chunk with `choices: []` and the usage; servers that
 * ignore it get one synthesised in the same shape, after their last chunk, so a consumer never waits
 * on a held-back chunk to learn the usage.
 */

/** A content that no chunk's text holds (private-use characters), to cut a relayed chunk around. */
const MARK = '\uE000\uE001\uE000'

/**
 * The events of each read of the body: their data, or, read at the byte level for a relay, runs of
 * content chunks already in the relay's form.
 */
interface EventReads {
  /** Waits for the next read of the body; false once the body has ended. */
  read(): Promise<boolean>
  /** The read's next event, or a run of at most `max` content chunks (0: no limit); null once the read is used up. */
  next(max: number): string | WireRun | null
  /** Throws when the read broke the protocol (an event too large). */
  check(): void
  /** Stops reading: the request is aborted when its body had not ended. */
  close(): Promise<unknown>
}

/** Events split by `DataSplitter` (upstream.ts). */
class DataReads implements EventReads {
  private events: EventSourceMessage[] = []
  private at = 0
  constructor(private readonly reads: AsyncGenerator<EventSourceMessage[]>) {}

  async read(): Promise<boolean> {
    const r = await this.reads.next()
    if (r.done) return false
    this.events = r.value
    this.at = 0
    return true
  }

  next(): string | null {
    return this.at < this.events.length ? this.events[this.at++]!.data : null
  }

  check(): void {}

  close(): Promise<unknown> {
    return this.reads.return(undefined)
  }
}

/** Events split at the byte level by `WireEvents`; the end of the body is one last read (what `finish` flushes). */
class WireReads implements EventReads {
  private ended = false
  constructor(private readonly reads: AsyncGenerator<Uint8Array>, private readonly wire: WireEvents, private readonly p: ResolvedProvider) {}

  async read(): Promise<boolean> {
    if (this.ended) return false
    const r = await this.reads.next()
    if (r.done) {
      this.ended = true
      this.wire.finish()
    } else this.wire.push(r.value)
    return true
  }

  next(max: number): string | WireRun | null {
    return this.wire.next(max)
  }

  check(): void {
    if (this.wire.overflow) throw malformed(this.p, `an event larger than ${MAX_EVENT} bytes`)
  }

  close(): Promise<unknown> {
    return this.reads.return(undefined)
  }
}

/**
 * The chunks read so far: the batch being filled, and what the stream's end needs (was there a
 * finish, a usage, what text to count).
 */
class ChunkBatches {
  usageSeen = false
  finished = false
  done = false
  started = false
  last: ChatChunk | undefined
  readonly parts: string[] = []
  out: RawChunk[] = []
  // A bad event fails the stream after the good ones read with it have been passed on.
  failure: unknown = null
  private readonly contents = new ContentChunks()
  private learned = 0
  private runChunk: ChatChunk | null = null

  constructor(private readonly p: ResolvedProvider, private readonly wire: WireEvents | null, private readonly relay?: (r: RawChunk) => string) {}

  /** One event: 'stop' at [DONE] or a bad event, 'first' at the first chunk that carries something. */
  take(data: string): 'stop' | 'first' | undefined {
    if (data === '[DONE]') {
      this.done = true
      return 'stop'
    }
    let c: ChatChunk
    try {
      c = this.checked(data)
    } catch (err) {
      this.failure = err
      return 'stop'
    }
    this.last = c
    if (c.usage) this.usageSeen = true
    let something = false
    for (const choice of c.choices) {
      if (choice.finish_reason) this.finished = something = true
      if (choice.delta?.content) {
        this.parts.push(choice.delta.content)
        something = true
      }
      const calls = choice.delta?.tool_calls
      if (calls) {
        something = true
        for (const t of calls) this.parts.push(t.function?.name ?? '', t.function?.arguments ?? '')
      }
    }
    this.out.push({ chunk: c, data })
    if (this.wire && this.contents.learned !== this.learned) {
      this.learned = this.contents.learned
      this.runChunk = this.learnWire(this.wire, this.relay!)
    }
    return something ? this.start() : undefined
  }

  /** A run of relayed content chunks: 'first' when its text starts the answer. */
  takeRun(run: WireRun): 'first' | undefined {
    // Chunks of the template's id, model... with these texts: one chunk for them all.
    const c: ChatChunk = { ...this.runChunk!, choices: [{ index: 0, delta: { content: run.text }, finish_reason: null }] }
    this.last = c
    this.parts.push(run.text)
    this.out.push({ chunk: c, data: null, run })
    return run.text ? this.start() : undefined
  }

  /** The batch so far; the next one starts empty. */
  flush(): RawChunk[] {
    const out = this.out
    this.out = []
    return out
  }

  /** The usage chunk synthesised after the last one, when the upstream reported none. */
  usageChunk(req: ChatRequest): RawChunk | null {
    if (this.usageSeen) return null
    const l = this.last
    const chunk: ChatChunk = {
      id: l?.id ?? 'chatcmpl-usage',
      object: 'chat.completion.chunk',
      created: l?.created ?? Math.floor(Date.now() / 1000),
      model: l?.model ?? req.model,
      choices: [],
      usage: usageOf(undefined, req, () => this.parts.join('')),
    }
    return { chunk, data: null }
  }

  private start(): 'first' | undefined {
    if (this.started) return undefined
    this.started = true
    return 'first'
  }

  /**
   * The chunks `contents` knows by their text around the content, for `wire` to relay as bytes: what
   * `relay` makes of one of them, cut around its content (none when the content is not kept as is).
   * Answers the chunk those runs stand for (its content aside).
   */
  private learnWire(wire: WireEvents, relay: (r: RawChunk) => string): ChatChunk | null {
    const t = this.contents.template(MARK)
    const relayed = t ? relay({ chunk: t.chunk, data: `${t.prefix}${MARK}${t.suffix}` }) : ''
    const at = relayed.indexOf(MARK)
    if (!t || at < 0 || relayed.indexOf(MARK, at + 1) >= 0) {
      wire.learn(null)
      return null
    }
    wire.learn({ inPrefix: `data: ${t.prefix}`, inSuffix: t.suffix, outPrefix: `data: ${relayed.slice(0, at)}`, outSuffix: `${relayed.slice(at + MARK.length)}\n\n` })
    return t.chunk
  }

  /** One event's chunk, or why it is not one. */
  private checked(data: string): ChatChunk {
    const fast = this.contents.read(data)
    if (fast) return fast
    let chunk: unknown
    try {
      chunk = JSON.parse(data)
    } catch {
      throw malformed(this.p, `an SSE event that is not JSON: ${data.slice(0, 80)}`)
    }
    // OpenAI reports a failure after the 200 as `data: {"error": {...}}`.
    if (isObject(chunk) && isObject(chunk.error)) throw malformed(this.p, `error mid-stream: ${String(chunk.error.message ?? 'unknown')}`)
    if (!isObject(chunk) || !Array.isArray(chunk.choices)) throw malformed(this.p, 'a chunk without choices')
    // Checked as far as the relay reads it; the rest is passed on as the upstream wrote it.
    return chunk as unknown as ChatChunk
  }
}

/**
 * The first batch ends at the first chunk that carries something (text, a tool call, a finish): a
 * relay sends the start of the answer before the rest of that read is parsed (a fast upstream's first
 * read can hold the whole answer). With `relay`, the body is split at the byte level and the usual
 * content chunks come as runs of bytes in the relay's form.
 */
export async function* openAIChatStream(p: ResolvedProvider, req: ChatRequest, upstream: Upstream, relay?: (r: RawChunk) => string): AsyncGenerator<RawChunk[]> {
  const wire = relay ? new WireEvents() : null
  const batches = new ChunkBatches(p, wire, relay)
  const reads: EventReads = wire ? new WireReads(postSseReads(upstream), wire, p) : new DataReads(postSseData(upstream))
  try {
    while (await reads.read()) {
      // Before the first chunk that carries something, a run is one event: the first batch ends there.
      for (let item = reads.next(batches.started ? 0 : 1); item !== null; item = reads.next(batches.started ? 0 : 1)) {
        const step = typeof item === 'string' ? batches.take(item) : batches.takeRun(item)
        if (step === 'stop') break
        if (step === 'first') yield batches.flush()
      }
      if (batches.out.length > 0) yield batches.flush()
      if (batches.failure) throw batches.failure
      reads.check()
      if (batches.done) break
    }
  } finally {
    await reads.close()
  }
  // A clean end without [DONE] or a finish_reason is a cut answer, not a complete one.
  if (!batches.done && !batches.finished) throw malformed(p, 'the stream ended before [DONE]')
  const usage = batches.usageChunk(req)
  if (usage) yield [usage]
}
