import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { rmSync } from 'node:fs'
import type { Server } from 'bun'
import OpenAI from 'openai'
import { writeModelsFile } from '../helpers/fake-provider'
import { keyFor, startHarness, waitFor, workspaceOf, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The streamed relay of POST /v1/chat/completions (docs/models.md, "Streaming") against an upstream
 * that writes exactly the bytes each test scripts, cut where the test says: the usual content chunks
 * are relayed as bytes, and whatever way the upstream's writes cut them, the client receives what
 * parsing and serialising every chunk would give, and the call is charged once.
 */

let h: Harness
let app: Server<undefined>
let upstream: Server<undefined>
let dir: string
let key: string
let ws: string

/** What the upstream answers for a model: its body's pieces, each its own write (then, `hang`: no end until the client leaves). */
const scripts = new Map<string, { pieces: Uint8Array[]; hang?: boolean }>()
let upstreamClosed = 0

const enc = new TextEncoder()
const CREATED = 1_790_000_000
const base = { id: 'chatcmpl-relay1', object: 'chat.completion.chunk', created: CREATED, model: 'up-model', system_fingerprint: 'fp_r' }
const contentChunk = (content: string, role = false) => ({ ...base, choices: [{ index: 0, delta: role ? { role: 'assistant', content } : { content }, logprobs: null, finish_reason: null }], usage: null })
const TEXTS = ['Hello', ' wörld', ' é🎉', ' ok', '', ' the end']
/** An OpenAI stream as OpenAI writes it with include_usage: `usage: null` in every chunk, the usage last. */
function answer(texts = TEXTS, usage: object | null = { prompt_tokens: 9, completion_tokens: 7, total_tokens: 16 }): object[] {
  return [
    contentChunk('', true),
    ...texts.map((t) => contentChunk(t)),
    { ...base, choices: [{ index: 0, delta: {}, logprobs: null, finish_reason: 'stop' }], usage: null },
    ...(usage ? [{ ...base, choices: [], usage }] : []),
  ]
}
const sse = (chunks: object[], done = true, eol = '\n') => chunks.map((c) => `data: ${JSON.stringify(c)}${eol}${eol}`).join('') + (done ? `data: [DONE]${eol}${eol}` : '')

/** The body cut at these byte offsets. */
function cut(body: string, ...at: number[]): Uint8Array[] {
  const bytes = enc.encode(body)
  const pieces: Uint8Array[] = []
  let from = 0
  for (const a of [...at, bytes.length]) {
    if (a > from) pieces.push(bytes.subarray(from, a))
    from = Math.max(from, a)
  }
  return pieces
}

/** What the client must receive for an upstream chunk: its JSON with the catalogue's model and no `usage: null`. */
function relayed(chunk: any): string {
  const { usage, ...rest } = chunk
  return JSON.stringify(usage === null ? { ...rest, model: 'relay' } : { ...rest, model: 'relay', usage })
}

beforeAll(async () => {
  upstream = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    async fetch(req) {
      const json = (await req.json()) as { model: string }
      const script = scripts.get(json.model)
      if (!script) return new Response('no script', { status: 500 })
      let i = 0
      return new Response(
        new ReadableStream({
          async pull(c) {
            // Each piece its own write: a turn of the upstream's loop between two (its own pace).
            if (i > 0) await Bun.sleep(1)
            if (i < script.pieces.length) return c.enqueue(script.pieces[i++]!)
            if (!script.hang) return c.close()
            await new Promise((resolve) => req.signal.addEventListener('abort', resolve, { once: true }))
            upstreamClosed++
            c.close()
          },
        }),
        { headers: { 'content-type': 'text/event-stream' } },
      )
    },
  })
  let file: string
  ;({ dir, file } = writeModelsFile('ap-openai-relay-', {
    providers: [{ id: 'u', kind: 'openai', base_url: `http://127.0.0.1:${upstream.port}/v1`, api_key: 'sk-u', timeout_ms: 5_000 }],
    models: [{ id: 'relay', type: 'llm', vendor: 'test', routes: [{ provider: 'u', model: 'up-model' }], pricing: { input_per_1k: 1, output_per_1k: 2 } }],
  }))
  h = await startHarness({ MODELS_FILE: file, RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000' })
  app = Bun.serve({ hostname: '127.0.0.1', port: 0, fetch: (req) => h.app.handle(req) })
  key = await keyFor(h, 'relay-owner')
  ws = await workspaceOf(h, key, 'Relay')
}, 60_000)

afterAll(async () => {
  app?.stop(true)
  upstream?.stop(true)
  await h?.close()
  if (dir) rmSync(dir, { recursive: true, force: true })
})

const client = () => new OpenAI({ apiKey: key, baseURL: `http://127.0.0.1:${app.port}/v1`, maxRetries: 0, defaultHeaders: { 'X-Workspace-Id': ws } })

/** The upstream's answer for this call: the catalogue model `relay` is routed to `up-model`. */
function script(pieces: Uint8Array[], hang = false) {
  scripts.set('up-model', { pieces, hang })
}

async function raw(includeUsage = true): Promise<string> {
  const res = await fetch(`http://127.0.0.1:${app.port}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-workspace-id': ws },
    body: JSON.stringify({ model: 'relay', messages: [{ role: 'user', content: 'hi' }], stream: true, ...(includeUsage ? { stream_options: { include_usage: true } } : {}) }),
  })
  expect(res.status).toBe(200)
  return res.text()
}

async function calls(): Promise<{ calls: number; credits: number }> {
  const res = await h.call('GET', `/v1/workspaces/${ws}/usage`, { key })
  expect(res.status).toBe(200)
  return { calls: res.body.data.total.calls, credits: res.body.data.total.credits }
}

/** The events of a relayed answer: each `data:` payload (and `event:` names). */
const events = (text: string) => text.split('\n\n').filter(Boolean)

describe('streamed relay', () => {
  test('the SDK reads the answer: texts, the catalogue model, the usage chunk with credits, charged once', async () => {
    script(cut(sse(answer())))
    const before = await calls()
    const stream = await client().chat.completions.create({ model: 'relay', messages: [{ role: 'user', content: 'hi' }], stream: true, stream_options: { include_usage: true } })
    const chunks: OpenAI.Chat.ChatCompletionChunk[] = []
    for await (const c of stream) chunks.push(c)
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe(TEXTS.join(''))
    for (const c of chunks) expect([c.model, c.id, c.created]).toEqual(['relay', 'chatcmpl-relay1', CREATED])
    expect(chunks.every((c) => !('usage' in c) || c === chunks.at(-1))).toBe(true)
    const last = chunks.at(-1)!
    expect(last.choices).toEqual([])
    const usage = last.usage as OpenAI.CompletionUsage & { credits: number }
    expect(usage).toMatchObject({ prompt_tokens: 9, completion_tokens: 7, total_tokens: 16 })
    expect(usage.credits).toBeGreaterThan(0)
    expect(chunks.at(-2)!.choices[0]!.finish_reason).toBe('stop')
    const after = await calls()
    expect(after.calls).toBe(before.calls + 1)
    expect(after.credits - before.credits).toBeCloseTo(usage.credits, 9)
  })

  test('every chunk is the JSON it would be parsed and serialised again; without include_usage no usage chunk', async () => {
    const chunks = answer()
    script(cut(sse(chunks)))
    const got = events(await raw())
    const want = chunks.slice(0, -1).map((c) => `data: ${relayed(c)}`)
    expect(got.slice(0, want.length)).toEqual(want)
    expect(JSON.parse(got[want.length]!.slice(6))).toMatchObject({ id: 'chatcmpl-relay1', model: 'relay', choices: [], usage: { prompt_tokens: 9, completion_tokens: 7, total_tokens: 16 } })
    expect(got.slice(want.length + 1)).toEqual(['data: [DONE]'])
    script(cut(sse(chunks)))
    expect(events(await raw(false))).toEqual([...want, 'data: [DONE]'])
  })

  test('the same bytes whatever way the upstream cuts them: at every byte offset of the first events and every seventh after, in three pieces, CRLF lines', async () => {
    const body = sse(answer())
    script(cut(body))
    const whole = await raw()
    const encoded = enc.encode(body)
    const bytes = encoded.length
    // One cut: at every offset of the first three events (inside a field name, the JSON, a multi-byte
    // character, the blank line: every kind of place an event has), then at every seventh (the other
    // events are alike, each its own request here; the relay's reader is cut at every offset of a
    // whole stream in tests/unit/models-relay.test.ts).
    const third = [0, 1, 2].reduce((from) => Buffer.from(encoded).indexOf(Buffer.from('\n\n'), from) + 2, 0)
    for (let at = 1; at < bytes; at += at < third ? 1 : 7) {
      script(cut(body, at))
      const got = await raw()
      if (got !== whole) throw new Error(`cut at byte ${at}: ${JSON.stringify(got)}`)
    }
    // Three pieces, each cut a few bytes into a chunk, and CR or CRLF line ends (read as text).
    for (const at of [[160, 170], [200, 203, 420], [333, 334, 335]]) {
      script(cut(body, ...at))
      expect(await raw()).toBe(whole)
    }
    for (const eol of ['\r\n', '\r']) {
      script(cut(sse(answer(), true, eol), 150, 390))
      expect(await raw()).toBe(whole)
    }
  }, 60_000)

  test('a multi-byte character split across reads keeps its bytes; invalid UTF-8 is read as the decoder reads it', async () => {
    const texts = ['€', '🎉🎉', 'ü']
    const body = sse(answer(texts))
    const bytes = enc.encode(body)
    // The cut inside the 4-byte 🎉 of the second content chunk, at each of its bytes.
    const at = Buffer.from(bytes).indexOf(Buffer.from('🎉'))
    for (let k = 1; k < 4; k++) {
      script(cut(body, at + k))
      const got = events(await raw()).map((e) => (e.startsWith('data: {') ? JSON.parse(e.slice(6)) : e))
      expect(got.map((c) => c.choices?.[0]?.delta?.content ?? '').join('')).toBe(texts.join(''))
    }
    // A lone continuation byte in a chunk's text: U+FFFD, as decoding the whole read would give.
    const bad = enc.encode(sse(answer(['ok', 'X', 'fine'])))
    const x = Buffer.from(bad).indexOf(Buffer.from('"X"')) + 1
    bad[x] = 0x80
    script([bad])
    const got = events(await raw()).map((e) => (e.startsWith('data: {') ? JSON.parse(e.slice(6)) : e))
    expect(got.map((c) => c.choices?.[0]?.delta?.content ?? '').join('')).toBe('ok\uFFFDfine')
  })

  test('an upstream that ends mid-event: the chunks before it, an error event, the produced text charged once', async () => {
    // Cut inside the chunk of " ok", before any finish: the rest never comes.
    const body = sse(answer())
    const end = Buffer.from(enc.encode(body)).indexOf(Buffer.from('" ok"')) + 2
    script(cut(body.slice(0, end), 300))
    const before = await calls()
    const got = events(await raw())
    const error = got.at(-1)!
    expect(error.startsWith('event: error\n')).toBe(true)
    expect(error).toContain('"code":"upstream_error"')
    const texts = got.slice(0, -1).map((e) => JSON.parse(e.slice(6)).choices[0].delta.content ?? '').join('')
    expect(texts).toBe('Hello wörld é🎉')
    expect((await calls()).calls).toBe(before.calls + 1)
  })

  test('a client that leaves mid-stream: the upstream request ends, the call is charged once', async () => {
    const before = await calls()
    const closed = upstreamClosed
    script(cut(sse(answer().slice(0, 4), false)), true)
    const stream = await client().chat.completions.create({ model: 'relay', messages: [{ role: 'user', content: 'hi' }], stream: true })
    let text = ''
    for await (const c of stream) {
      text += c.choices[0]?.delta.content ?? ''
      if (text === 'Hello wörld') break
    }
    await waitFor(() => upstreamClosed > closed, { what: 'the upstream request to end' })
    await waitFor(async () => (await calls()).calls === before.calls + 1, { what: 'the interrupted call to be charged' })
    // Charged once: a complete call after it is the only other one.
    script(cut(sse(answer())))
    await raw()
    expect((await calls()).calls).toBe(before.calls + 2)
  }, 30_000)
})
