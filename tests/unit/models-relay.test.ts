import { describe, expect, test } from 'bun:test'
import { relayText } from '../../src/domain/models/gateway'
import { contentChunk, ContentChunks } from '../../src/domain/models/providers/openai'
import { DataSplitter } from '../../src/domain/models/providers/upstream'
import { plain } from '../../src/domain/models/providers/wire-events'

/**
 * The streamed relay's shortcuts (docs/models.md, "Streaming"): each must answer exactly what parsing
 * and serialising every chunk would, or step aside.
 */
const base = { id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 17, model: 'up-model', system_fingerprint: 'fp' }

describe('contentChunk', () => {
  test('the usual content chunk is read without parsing, escapes included', () => {
    for (const content of ['', ' t1', 'a "quote" \\ back\nline é 🎉', '\u2028']) {
      for (const delta of [{ content }, { role: 'assistant', content }, { role: 'assistant', content, refusal: null }]) {
        for (const usage of [{}, { usage: null }]) {
          const text = JSON.stringify({ ...base, choices: [{ index: 0, delta, logprobs: null, finish_reason: null }], ...usage })
          const parsed = JSON.parse(text)
          const c = contentChunk(text)!
          expect(c.choices[0]!.delta.content).toBe(parsed.choices[0].delta.content)
          expect(c.choices[0]!.delta.role).toBe(parsed.choices[0].delta.role)
          expect([c.id, c.created, c.model]).toEqual(['chatcmpl-1', 17, 'up-model'])
          expect('usage' in c).toBe('usage' in parsed)
        }
      }
    }
  })

  test('anything else is left to JSON.parse', () => {
    const choice = (over: object) => [{ index: 0, delta: { content: 'x' }, logprobs: null, finish_reason: null, ...over }]
    for (const chunk of [
      { ...base, choices: choice({ finish_reason: 'stop' }) },
      { ...base, choices: [], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } },
      { ...base, choices: choice({}), usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } },
      { ...base, choices: choice({ delta: { tool_calls: [{ index: 0, function: { arguments: '{' } }] } }) },
      { ...base, choices: [...choice({}), ...choice({ index: 1 })] },
      { ...base, choices: choice({}), x_vendor: { usage: null } },
    ]) expect(contentChunk(JSON.stringify(chunk))).toBeNull()
    expect(contentChunk(JSON.stringify({ ...base, choices: choice({}) }, null, 1))).toBeNull()
  })
})

describe('ContentChunks', () => {
  test('the events of one stream read as parsing reads them, whatever changes from one to the next', () => {
    const event = (content: string, over: object = {}, delta: object = {}) =>
      JSON.stringify({ ...base, choices: [{ index: 0, delta: { ...delta, content }, logprobs: null, finish_reason: null }], usage: null, ...over })
    const texts = [
      event('', {}, { role: 'assistant' }),
      event(' t1'),
      event(' t2'),
      event(' a "quote"'),
      event(' back \\ slash'),
      event('"},"logprobs":null,"finish_reason":null}],"usage":null}'),
      event(' t3'),
      event(''),
      event(' other id', { id: 'chatcmpl-2' }),
      event(' other model', { model: 'other' }),
      event(' no usage', { usage: undefined }),
      event(' é 🎉'),
      event(' role again', {}, { role: 'assistant' }),
      event(' t4', { created: 18 }),
      JSON.stringify({ ...base, choices: [{ index: 0, delta: { content: 'x' }, logprobs: null, finish_reason: 'stop' }], usage: null }),
      event(' t5'),
      `${event(' t6')} `,
      event(' t7'),
    ]
    const reader = new ContentChunks()
    for (const text of texts) {
      const c = reader.read(text)
      const alone = contentChunk(text)
      expect(c).toEqual(alone)
      if (c) {
        const parsed = JSON.parse(text)
        expect([c.id, c.created, c.model, c.choices[0]!.delta.content, c.choices[0]!.delta.role]).toEqual([parsed.id, parsed.created, parsed.model, parsed.choices[0].delta.content, parsed.choices[0].delta.role])
        expect('usage' in c).toBe('usage' in parsed)
      }
    }
    // The finish and the trailing space are not content chunks; everything else is.
    expect(texts.filter((t) => reader.read(t) === null)).toHaveLength(2)
  })
})

describe('relayText', () => {
  const same = (text: string, model: string) => {
    const chunk = contentChunk(text) ?? JSON.parse(text)
    const relayed = relayText({ chunk, data: text }, model)
    expect(JSON.parse(relayed)).toEqual(JSON.parse(JSON.stringify({ ...JSON.parse(text), model, usage: undefined })))
    return relayed
  }

  test('the model renamed and usage: null dropped, by substitution', () => {
    const text = JSON.stringify({ ...base, choices: [{ index: 0, delta: { content: 'hi "model":"up-model"' }, logprobs: null, finish_reason: null }], usage: null })
    expect(same(text, 'ours')).toBe(text.replace('"model":"up-model"', '"model":"ours"').replace(',"usage":null', ''))
    expect(same(text, 'up-model')).toBe(text.replace(',"usage":null', ''))
  })

  test('other shapes are serialised again, to the same JSON', () => {
    same(JSON.stringify({ ...base, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }], usage: { prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 } }), 'ours')
    same(JSON.stringify({ ...base, choices: [{ index: 0, delta: { content: 'x' }, finish_reason: null }], usage: null }, null, 1), 'ours')
    same(JSON.stringify({ usage: null, ...base, choices: [{ index: 0, delta: { content: 'x' }, finish_reason: null }] }), 'ours')
    const { model: _, ...noModel } = base
    same(JSON.stringify({ ...noModel, choices: [{ index: 0, delta: { content: 'x' }, finish_reason: null }] }), 'ours')
  })

  test('the final usage chunk is the gateway\'s own', () => {
    const chunk = { ...base, model: 'ours', choices: [], usage: { prompt_tokens: 1, completion_tokens: 2, total_tokens: 3, credits: 0.5 } }
    expect(JSON.parse(relayText({ chunk: chunk as never, data: null, final: true }, 'ours'))).toEqual(chunk)
  })
})

describe('DataSplitter', () => {
  test('events whole however the text is cut: CRLF, CR, LF, comments, fields, multi-line data, a BOM', () => {
    const whole = '\uFEFFdata: a\r\n\r\n: comment\n\ndata:b\ndata: c\n\nevent: x\nid: 1\nretry: 5\ndata: {"k":1}\r\rdata\n\ndata: unfinished'
    for (let cut = 0; cut <= whole.length; cut++) {
      const out: string[] = []
      const s = new DataSplitter(1000, (e) => out.push(e.data), () => { throw new Error('overflow') })
      s.feed(whole.slice(0, cut))
      s.feed(whole.slice(cut))
      expect(out).toEqual(['a', 'b\nc', '{"k":1}', ''])
    }
  })

  test('an event longer than the limit is an overflow', () => {
    let overflow = false
    const s = new DataSplitter(10, () => {}, () => (overflow = true))
    s.feed('data: 0123456789abc')
    expect(overflow).toBe(true)
  })
})

describe('plain (a content relayed as bytes)', () => {
  const fatal = new TextDecoder('utf-8', { fatal: true })
  const valid = (b: Uint8Array) => {
    try {
      fatal.decode(b)
      return true
    } catch {
      return false
    }
  }
  const expected = (b: Uint8Array) => valid(b) && !b.some((x) => x < 0x20 || x === 0x22 || x === 0x5c)

  test('is exactly valid UTF-8 without a quote, backslash or control character', () => {
    const samples = ['', 'abc', 'é', '€', '🎉', '\u2028', '\uFFFD', 'a"b', 'a\\b', 'a\nb', '\t'].map((s) => new TextEncoder().encode(s))
    // Every 1- and 2-byte sequence from the interesting lead and continuation bytes, and every
    // 3- and 4-byte one of those leads: overlongs, surrogates, beyond U+10FFFF, truncations.
    const bytes = [0x00, 0x1f, 0x20, 0x22, 0x41, 0x5c, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xc1, 0xc2, 0xdf, 0xe0, 0xed, 0xee, 0xef, 0xf0, 0xf4, 0xf5, 0xff]
    for (const a of bytes) {
      samples.push(Uint8Array.of(a))
      for (const b of bytes) {
        samples.push(Uint8Array.of(a, b))
        for (const c of [0x80, 0x9f, 0xa0, 0xbf, 0x41]) {
          samples.push(Uint8Array.of(a, b, c))
          for (const d of [0x80, 0xbf, 0x41]) samples.push(Uint8Array.of(a, b, c, d))
        }
      }
    }
    for (const s of samples) {
      // Inside a larger buffer: the bounds are `start` and `end`, not the array's.
      const padded = Uint8Array.of(0xe2, ...s, 0x82)
      if (plain(padded, 1, 1 + s.length) !== expected(s)) throw new Error(`plain(${[...s].map((x) => x.toString(16))}) should be ${expected(s)}`)
    }
  })
})
