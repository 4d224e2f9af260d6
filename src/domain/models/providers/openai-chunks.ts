import type { ChatChunk } from '../types'

/**
 * The chunk that makes up nearly all of an OpenAI stream, in the exact form OpenAI's servers (and the
 * compatible ones that copy them) write it: one choice whose delta is text, no finish reason, no
 * usage. Recognised by one pattern instead of parsing the whole JSON text; anything else (a tool call,
 * the finish, the usage, other fields, other spacing) is parsed as usual.
 */
const CONTENT_CHUNK = /^\{"id":"([^"\\]*)","object":"chat\.completion\.chunk","created":(\d{1,15}),"model":"([^"\\]*)",(?:"service_tier":"[^"\\]*",)?(?:"system_fingerprint":(?:"[^"\\]*"|null),)?"choices":\[\{"index":0,"delta":\{("role":"assistant",)?"content":"((?:[^"\\]|\\.)*)"(?:,"refusal":null)?\},"logprobs":null,"finish_reason":null\}\](,"usage":null)?(?:,"obfuscation":"[^"\\]*")?\}$/

export function contentChunk(data: string): ChatChunk | null {
  return new ContentChunks().read(data)
}

/**
 * `contentChunk` for the events of one stream. Its chunks differ only in their text: once an event
 * has matched the pattern, the next one that starts and ends with the same characters around a text
 * without quote or backslash is the same chunk with that text, known by two comparisons instead of
 * the pattern (a fifth of the relay's CPU per chunk, bench/README.md).
 */
export class ContentChunks {
  private prefix = ''
  private suffix = ''
  private last: { id: string; created: number; model: string; role: boolean; usage: boolean } | null = null
  /** How many times the pattern matched (the text around the content may have changed each time). */
  learned = 0

  /** The text around the content of the chunks known since the last match, and a chunk of them with `content`. */
  template(content: string): { prefix: string; suffix: string; chunk: ChatChunk } | null {
    const l = this.last
    return l === null ? null : { prefix: this.prefix, suffix: this.suffix, chunk: chunkOf(l.id, l.created, l.model, l.role, l.usage, content) }
  }

  read(data: string): ChatChunk | null {
    const l = this.last
    if (l !== null && data.length >= this.prefix.length + this.suffix.length && data.startsWith(this.prefix) && data.endsWith(this.suffix)) {
      const content = data.slice(this.prefix.length, data.length - this.suffix.length)
      if (content.indexOf('"') < 0 && content.indexOf('\\') < 0) return chunkOf(l.id, l.created, l.model, l.role, l.usage, content)
    }
    const m = CONTENT_CHUNK.exec(data)
    if (!m) return null
    // The text as JSON wrote it: decoded only when it has an escape.
    const raw = m[5]!
    const content = raw.indexOf('\\') < 0 ? raw : (JSON.parse(`"${raw}"`) as string)
    const last = { id: m[1]!, created: Number(m[2]), model: m[3]!, role: m[4] !== undefined, usage: m[6] !== undefined }
    // id, model and fingerprint hold no quote, so the first `"content":"` after the delta's opening is the text's.
    const start = data.indexOf('"content":"', data.indexOf('"choices":[{"index":0,"delta":{')) + 11
    this.prefix = data.slice(0, start)
    this.suffix = data.slice(start + raw.length)
    this.last = last
    this.learned++
    return chunkOf(last.id, last.created, last.model, last.role, last.usage, content)
  }
}

function chunkOf(id: string, created: number, model: string, role: boolean, usage: boolean, content: string): ChatChunk {
  const delta: ChatChunk['choices'][number]['delta'] = role ? { role: 'assistant', content } : { content }
  const chunk: ChatChunk = { id, object: 'chat.completion.chunk', created, model, choices: [{ index: 0, delta, finish_reason: null }] }
  if (usage) chunk.usage = null
  return chunk
}
