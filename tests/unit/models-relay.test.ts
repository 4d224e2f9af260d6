import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { relayText } from '../../src/domain/models/gateway'
import { contentChunk, ContentChunks } from '../../src/domain/models/providers/openai-chunks'
import { DataSplitter } from '../../src/domain/models/providers/upstream'
import { plain, WireEvents } from '../../src/domain/models/providers/wire-events'

setDefaultTimeout(TEST_TIMEOUT_MS)

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

describe('WireEvents (the relay split at the byte level)', () => {
  const base = { id: 'chatcmpl-w', object: 'chat.completion.chunk', created: 5, model: 'up', system_fingerprint: 'fp' }
  const chunk = (content: string) => JSON.stringify({ ...base, choices: [{ index: 0, delta: { content }, logprobs: null, finish_reason: null }], usage: null })
  const template = chunk('\u0000')
  const at = template.indexOf('\\u0000')
  const t = { inPrefix: `data: ${template.slice(0, at)}`, inSuffix: template.slice(at + 6), outPrefix: `data: ${template.slice(0, at)}`, outSuffix: `${template.slice(at + 6)}\n\n` }
  // Content chunks (one with an escape, which is not relayed as bytes), a comment, a two-line event, other fields.
  const body = [
    ...['Hi', ' wörld', ' 🎉é', ' "q"', ' x'].map((c) => `data: ${chunk(c)}\n\n`),
    ': a comment\n\n',
    'data: {"a":\ndata: 1}\n\n',
    'event: x\nid: 3\ndata: other\n\n',
    `data: ${chunk(' last')}\n\n`,
    '\n',
    'data: [DONE]\n\n',
  ].join('')
  const bytes = new TextEncoder().encode(body)
  /** What `DataSplitter` reads of the whole body: every event's data. */
  const want: string[] = []
  new DataSplitter(1e9, (e) => want.push(e.data), () => {}).feed(body)

  function read(pieces: Uint8Array[]): { data: string[]; runs: number } {
    const w = new WireEvents()
    w.learn(t)
    const data: string[] = []
    let runs = 0
    for (const p of pieces) {
      w.push(p)
      for (let item = w.next(); item !== null; item = w.next()) {
        if (typeof item === 'string') data.push(item)
        else {
          runs += item.count
          const events = new TextDecoder().decode(item.wire).split('\n\n').slice(0, -1)
          expect(events.length).toBe(item.count)
          data.push(...events.map((e) => e.slice(6)))
          expect(item.text).toBe(events.map((e) => JSON.parse(e.slice(6)).choices[0].delta.content).join(''))
        }
      }
    }
    w.finish()
    return { data, runs }
  }

  test('every event as DataSplitter reads it, wherever the reads are cut (once, twice)', async () => {
    expect(read([bytes])).toEqual({ data: want, runs: 5 })
    for (let i = 1; i < bytes.length; i++) {
      expect(read([bytes.subarray(0, i), bytes.subarray(i)]).data).toEqual(want)
      if (i % 3 === 0) for (let j = i + 1; j < bytes.length; j += 11) expect(read([bytes.subarray(0, i), bytes.subarray(i, j), bytes.subarray(j)]).data).toEqual(want)
      // A turn of the loop now and then: the suite's process (one for every file) collects its
      // garbage on a timer, which a loop that never yields would keep from running (2 GB resident).
      if (i % 64 === 0) await Bun.sleep(0)
    }
    // One byte at a time.
    expect(read([...bytes].map((b) => Uint8Array.of(b))).data).toEqual(want)
    // Every cut, and after every third a second cut at every 11th byte beyond it: ~1 s alone on a 2-core machine, more beside other work.
  }, 60_000)

  test('CR line ends and a leading byte order mark are read as text, the same events', () => {
    const crlf = new TextEncoder().encode(body.replace(/\n/g, '\r\n'))
    for (const i of [1, 10, 200, 201, crlf.length - 3]) expect(read([crlf.subarray(0, i), crlf.subarray(i)])).toEqual({ data: want, runs: 0 })
    // A CR only in a later read: what came before is relayed as usual, the rest read as text.
    const late = new TextEncoder().encode(body.slice(0, 400) + body.slice(400).replace(/\n/g, '\r\n'))
    expect(read([late.subarray(0, 400), late.subarray(400)]).data).toEqual(want)
    expect(read([new TextEncoder().encode(`\uFEFF${body}`)])).toEqual({ data: want, runs: 0 })
  })

  test('an event that never ends is an overflow past the limit, not a buffer without end', () => {
    const w = new WireEvents()
    w.push(new TextEncoder().encode('data: '))
    const big = new Uint8Array(1024 * 1024).fill(0x61)
    for (let i = 0; i < 9 && !w.overflow; i++) {
      w.push(big)
      expect(w.next()).toBeNull()
    }
    expect(w.overflow).toBe(true)
  })
})
