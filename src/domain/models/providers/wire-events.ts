import type { WireRun } from '../types'
import { DataSplitter, MAX_EVENT } from './upstream'

/**
 * An SSE answer split into events at the byte level, for a relay: the events that have the exact
 * form of a known template (`data: <prefix><text><suffix>` and a blank line, the text plain: no quote,
 * backslash or control character, valid UTF-8) are turned into their relayed form by copying bytes
 * (the template's output prefix, the same text, its output suffix), consecutive ones together, with
 * no decoding, parsing or encoding per event; every other event is decoded and its `data` handed back
 * as text, as `DataSplitter` reads it. A body with a CR anywhere (CRLF or CR line ends) or that starts
 * with a byte order mark is read by `DataSplitter` from there on, event by event.
 */

/** What an event is around its text, and what it becomes (the `\n\n` that ends it included). */
export interface WireTemplate {
  inPrefix: string
  inSuffix: string
  outPrefix: string
  outSuffix: string
}

const LF = 10
const CR = 13
const encoder = new TextEncoder()
const EMPTY = Buffer.alloc(0)
const BLANK = Buffer.from('\n\n')

export class WireEvents {
  private buf: Buffer = EMPTY
  private at = 0
  /** The rest of a read, once `buf` (an event begun in the read before, ended in it) is read. */
  private after: Buffer | null = null
  private started = false
  /** After a CR or a byte order mark: the text parser, its decoder and the events it read. */
  private slow: DataSplitter | null = null
  private slowDecoder: TextDecoder | null = null
  private queue: string[] = []
  private head = 0
  /** One event's lines at a time (never the stream's start: a byte order mark there is text). */
  private readonly eventDecoder = new TextDecoder('utf-8', { ignoreBOM: true })
  private readonly lines: DataSplitter
  private lineData: string | null = null
  private readonly textDecoder = new TextDecoder('utf-8', { ignoreBOM: true })
  private inPrefix: Buffer | null = null
  private inSuffix: Buffer = EMPTY
  private outPrefix: Uint8Array = EMPTY
  private outSuffix: Uint8Array = EMPTY
  /** An event grew beyond MAX_EVENT without ending. */
  overflow = false

  constructor() {
    this.lines = new DataSplitter(MAX_EVENT, (e) => (this.lineData = e.data), () => {}, false)
  }

  /** The events of this form are relayed as bytes from now on (null: none is). */
  learn(t: WireTemplate | null): void {
    if (t === null) {
      this.inPrefix = null
      return
    }
    this.inPrefix = Buffer.from(t.inPrefix)
    this.inSuffix = Buffer.from(t.inSuffix)
    this.outPrefix = encoder.encode(t.outPrefix)
    this.outSuffix = encoder.encode(t.outSuffix)
  }

  /** The next read of the body. */
  push(value: Uint8Array): void {
    if (this.slow === null && !this.started) {
      this.started = true
      // 0xEF: the first byte of a byte order mark; such a body is read as text.
      if (value[0] === 0xef) return this.toSlow(value, true)
    }
    if (this.slow !== null) return this.feedSlow(value)
    const rest = this.buf.length - this.at
    if (value.indexOf(CR) >= 0) return this.toSlow(rest > 0 ? Buffer.concat([this.buf.subarray(this.at), value]) : value, false)
    const v = Buffer.from(value.buffer, value.byteOffset, value.byteLength)
    this.at = 0
    if (rest === 0) {
      this.buf = v
      return
    }
    // An event begun in the read before: only it is copied, with the bytes that end it; the rest of
    // this read is read where it is.
    const tail = this.buf.subarray(this.buf.length - rest)
    // Where its blank line ends in this read: the LF that completes it, or after a `\n\n`.
    const blank = v.indexOf(BLANK)
    const cut = tail[rest - 1] === LF && v[0] === LF ? 1 : blank < 0 ? -1 : blank + 2
    if (cut < 0) {
      this.buf = Buffer.concat([tail, v])
      return
    }
    this.buf = Buffer.concat([tail, v.subarray(0, cut)])
    this.after = cut < v.length ? v.subarray(cut) : null
  }

  /** The body ended: a last event without its blank line is dropped, as `DataSplitter` does. */
  finish(): void {
    if (this.slow !== null) {
      const rest = this.slowDecoder!.decode()
      if (rest) this.slow.feed(rest)
    }
    this.buf = EMPTY
    this.after = null
    this.at = 0
  }

  /** The next event's data, or a run of templated events (at most `max`, 0: no limit), or null until the next `push`. */
  next(max = 0): string | WireRun | null {
    if (this.slow !== null) {
      if (this.head < this.queue.length) return this.queue[this.head++]!
      this.queue.length = this.head = 0
      return null
    }
    for (;;) {
      if (this.at >= this.buf.length && this.after !== null) {
        this.buf = this.after
        this.after = null
        this.at = 0
      }
      const buf = this.buf
      const len = buf.length
      if (this.inPrefix !== null) {
        const run = this.run(max)
        if (run !== null) return run
      }
      const p = this.at
      if (p >= len) return null
      // One whole event: its lines up to the first empty one.
      let end = -1
      for (let s = p; ; ) {
        const nl = buf.indexOf(LF, s)
        if (nl < 0) break
        if (nl === s) {
          end = nl
          break
        }
        s = nl + 1
      }
      if (end < 0) {
        if (len - p > MAX_EVENT) this.overflow = true
        return null
      }
      this.at = end + 1
      if (end === p) continue
      this.lineData = null
      this.lines.feed(this.eventDecoder.decode(buf.subarray(p, end)))
      this.lines.feed('\n')
      if (this.lineData !== null) return this.lineData
    }
  }

  private toSlow(bytes: Uint8Array, atStart: boolean): void {
    this.slow = new DataSplitter(MAX_EVENT, (e) => this.queue.push(e.data), () => (this.overflow = true), atStart)
    this.slowDecoder = new TextDecoder('utf-8', { ignoreBOM: !atStart })
    this.buf = EMPTY
    this.after = null
    this.at = 0
    this.feedSlow(bytes)
  }

  private feedSlow(value: Uint8Array): void {
    this.slow!.feed(this.slowDecoder!.decode(value, { stream: true }))
  }

  /** The templated events from `at` on, as many as follow one another whole. */
  private run(max: number): WireRun | null {
    const buf = this.buf
    const len = buf.length
    const pre = this.inPrefix!
    const suf = this.inSuffix
    const pl = pre.length
    const sl = suf.length
    const op = this.outPrefix
    const os = this.outSuffix
    let p = this.at
    let out: Uint8Array | null = null
    let text: Uint8Array | null = null
    let o = 0
    let t = 0
    let count = 0
    while (len - p > pl + sl + 1 && (max === 0 || count < max)) {
      if (pre.compare(buf, p, p + pl) !== 0) break
      const nl = buf.indexOf(LF, p + pl)
      if (nl < 0 || nl + 1 >= len || buf[nl + 1] !== LF) break
      const cs = p + pl
      const ce = nl - sl
      if (ce < cs || suf.compare(buf, ce, nl) !== 0 || !plain(buf, cs, ce)) break
      if (out === null) {
        // At most one event per (pl + sl + 2) bytes, each at most this much longer relayed.
        const growth = Math.max(0, op.length + os.length - pl - sl - 2)
        out = new Uint8Array(len - p + Math.ceil((len - p) / (pl + sl + 2)) * growth)
        text = new Uint8Array(len - p)
      }
      out.set(op, o)
      o += op.length
      for (let i = cs; i < ce; i++) {
        const b = buf[i]!
        out[o++] = b
        text![t++] = b
      }
      out.set(os, o)
      o += os.length
      count++
      p = nl + 2
    }
    if (count === 0) return null
    this.at = p
    return { wire: out!.subarray(0, o), text: this.textDecoder.decode(text!.subarray(0, t)), count }
  }
}

/** JSON string text that needs no unescaping: no quote, backslash or control character, valid UTF-8. */
export function plain(b: Uint8Array, start: number, end: number): boolean {
  for (let i = start; i < end; ) {
    const c = b[i]!
    if (c < 0x80) {
      if (c < 0x20 || c === 0x22 || c === 0x5c) return false
      i++
      continue
    }
    let n: number
    let lo = 0x80
    let hi = 0xbf
    if (c >= 0xc2 && c <= 0xdf) n = 1
    else if (c >= 0xe0 && c <= 0xef) {
      n = 2
      if (c === 0xe0) lo = 0xa0
      else if (c === 0xed) hi = 0x9f
    } else if (c >= 0xf0 && c <= 0xf4) {
      n = 3
      if (c === 0xf0) lo = 0x90
      else if (c === 0xf4) hi = 0x8f
    } else return false
    // The sequence is bytes i to i + n, all before `end`.
    if (i + n >= end) return false
    const c1 = b[i + 1]!
    if (c1 < lo || c1 > hi) return false
    for (let k = 2; k <= n; k++) {
      const ck = b[i + k]!
      if (ck < 0x80 || ck > 0xbf) return false
    }
    i += n + 1
  }
  return true
}
