import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import type { ResolvedProvider } from '../../src/domain/models/catalog'
import { AnthropicProvider } from '../../src/domain/models/providers/anthropic'
import { OpenAIProvider } from '../../src/domain/models/providers/openai'
import { ProviderError, type ChatChunk, type ChatRequest } from '../../src/domain/models/types'
import { countChatTokens, countTokens } from '../../src/lib/tokens'
import { fakeVector, startFakeProvider, type FakeProvider } from '../helpers/fake-provider'
import { waitFor } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

/** The two remote adapters against a loopback provider speaking the vendors' wire formats. */

let fake: FakeProvider
let n = 0
/** A model name of its own per test, so scripts never leak between tests. */
const model = (label: string) => `${label}-${++n}`
const KEY = 'sk-fake-test-key'
const live = () => new AbortController().signal

beforeAll(async () => {
  fake = await startFakeProvider()
})
afterAll(async () => {
  await fake.close()
})

const openai = (over: Partial<ResolvedProvider> = {}) => new OpenAIProvider(fake.provider({ id: 'oa', kind: 'openai', ...over }))
const anthropic = (over: Partial<ResolvedProvider> = {}) => new AnthropicProvider(fake.provider({ id: 'an', kind: 'anthropic', ...over }))
const lastFor = (m: string) => fake.requests.filter((r) => r.model === m).at(-1)!

async function collect(stream: AsyncIterable<ChatChunk>): Promise<ChatChunk[]> {
  const out: ChatChunk[] = []
  for await (const c of stream) out.push(c)
  return out
}

/** What the promise rejected with (Bun's `expect(...).rejects` is slow). */
async function errorOf(p: Promise<unknown>): Promise<any> {
  try {
    await p
  } catch (err) {
    return err
  }
  throw new Error('expected a rejection')
}

function assembleTools(chunks: ChatChunk[]) {
  const calls: { id?: string; name?: string; arguments: string }[] = []
  for (const c of chunks)
    for (const t of c.choices[0]?.delta.tool_calls ?? []) {
      const call = (calls[t.index] ??= { arguments: '' })
      if (t.id) call.id = t.id
      if (t.function?.name) call.name = t.function.name
      call.arguments += t.function?.arguments ?? ''
    }
  return calls
}

const text = (chunks: ChatChunk[]) => chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')
const weather = { type: 'function' as const, function: { name: 'get_weather', description: 'Weather in a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }

describe('openai: chat', () => {
  test('sends the request as is, with the key, and returns the completion with the upstream usage', async () => {
    const m = model('chat')
    fake.script(m, [{ text: 'Hello there' }])
    const req: ChatRequest = { model: m, messages: [{ role: 'user', content: 'Say hello to me' }], temperature: 0.2, max_tokens: 50 }
    const res = await openai().chat(req, live())
    expect(res.choices[0]!.message.content).toBe('Hello there')
    expect(res.choices[0]!.finish_reason).toBe('stop')
    // The fake counts a token per word: 4 words in, 2 chunks out.
    expect(res.usage).toEqual({ prompt_tokens: 4, completion_tokens: 2, total_tokens: 6 })
    const sent = lastFor(m)
    expect(sent.path).toBe('/v1/chat/completions')
    expect(sent.headers.authorization).toBe(`Bearer ${KEY}`)
    expect(sent.json).toEqual({ model: m, messages: req.messages, temperature: 0.2, max_tokens: 50 })
  })

  test('no usage upstream → counted with o200k_base', async () => {
    const m = model('nousage')
    fake.script(m, [{ text: 'counted answer', usage: false }])
    const req: ChatRequest = { model: m, messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Count me' }] }
    const res = await openai().chat(req, live())
    const prompt = countChatTokens(req.messages)
    expect(res.usage).toEqual({ prompt_tokens: prompt, completion_tokens: countTokens('counted answer'), total_tokens: prompt + countTokens('counted answer') })
  })

  test('a tool call comes back with its arguments as a JSON string', async () => {
    const m = model('tool')
    fake.script(m, [{ toolCalls: [{ id: 'call_1', name: 'get_weather', arguments: { city: 'Paris' } }] }])
    const res = await openai().chat({ model: m, messages: [{ role: 'user', content: 'Weather?' }], tools: [weather], tool_choice: 'auto' }, live())
    expect(res.choices[0]!.finish_reason).toBe('tool_calls')
    expect(res.choices[0]!.message.content).toBeNull()
    expect(res.choices[0]!.message.tool_calls).toEqual([{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }])
    expect(lastFor(m).json.tools).toEqual([weather])
    expect(lastFor(m).json.tool_choice).toBe('auto')
  })

  test('a 200 that is not a chat completion is a server error', async () => {
    const m = model('malformed')
    fake.script(m, [{ status: 200, body: { hello: 'world' } }])
    const err = await errorOf(openai().chat({ model: m, messages: [{ role: 'user', content: 'x' }] }, live()))
    expect(err).toBeInstanceOf(ProviderError)
    expect(err.failover).toBe('server_error')
  })
})

describe('openai: streams', () => {
  test('chunks in order, stream_options asked, the upstream usage on the last chunk', async () => {
    const m = model('stream')
    fake.script(m, [{ text: 'one two three four' }])
    const chunks = await collect(openai().chatStream({ model: m, messages: [{ role: 'user', content: 'count to four' }] }, live()))
    expect(lastFor(m).json.stream).toBe(true)
    expect(lastFor(m).json.stream_options).toEqual({ include_usage: true })
    expect(chunks[0]!.choices[0]!.delta.role).toBe('assistant')
    expect(chunks.slice(1, 5).map((c) => c.choices[0]!.delta.content)).toEqual(['one ', 'two ', 'three ', 'four'])
    expect(chunks.at(-2)!.choices[0]!.finish_reason).toBe('stop')
    expect(chunks.at(-1)!.choices).toEqual([])
    expect(chunks.at(-1)!.usage).toEqual({ prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 })
    expect(chunks.filter((c) => c.usage)).toHaveLength(1)
  })

  test('no usage chunk upstream → one synthesised from counted tokens', async () => {
    const m = model('stream-nousage')
    fake.script(m, [{ text: 'alpha beta gamma', usage: false }])
    const req: ChatRequest = { model: m, messages: [{ role: 'user', content: 'Greek letters' }] }
    const chunks = await collect(openai().chatStream(req, live()))
    expect(text(chunks)).toBe('alpha beta gamma')
    const last = chunks.at(-1)!
    expect(last.choices).toEqual([])
    const out = countTokens('alpha beta gamma')
    expect(last.usage).toEqual({ prompt_tokens: countChatTokens(req.messages), completion_tokens: out, total_tokens: countChatTokens(req.messages) + out })
  })

  test('tool-call deltas pass through: id and name first, then argument fragments', async () => {
    const m = model('stream-tool')
    const args = { city: 'Paris', unit: 'celsius' }
    fake.script(m, [{ toolCalls: [{ id: 'call_a', name: 'get_weather', arguments: args }, { id: 'call_b', name: 'get_time', arguments: { tz: 'CET' } }] }])
    const chunks = await collect(openai().chatStream({ model: m, messages: [{ role: 'user', content: 'Weather and time?' }], tools: [weather] }, live()))
    const calls = assembleTools(chunks)
    expect(calls).toEqual([
      { id: 'call_a', name: 'get_weather', arguments: JSON.stringify(args) },
      { id: 'call_b', name: 'get_time', arguments: '{"tz":"CET"}' },
    ])
    // Arguments arrive in several fragments, as from the real API.
    expect(chunks.filter((c) => c.choices[0]?.delta.tool_calls?.[0]?.function?.arguments).length).toBeGreaterThan(2)
    expect(chunks.at(-2)!.choices[0]!.finish_reason).toBe('tool_calls')
  })

  test('the time-out is per gap, not per stream: a slow but steady stream completes', async () => {
    const m = model('steady')
    // 12 gaps of 40 ms (~480 ms in all) under a 200 ms time-out.
    fake.script(m, [{ text: 'a b c d e f g h i j', delayMs: 40 }])
    const chunks = await collect(openai({ timeout_ms: 200 }).chatStream({ model: m, messages: [{ role: 'user', content: 'x' }] }, live()))
    expect(text(chunks)).toBe('a b c d e f g h i j')
  })

  test('a stream that stalls mid-way ends in a time-out', async () => {
    const m = model('stall')
    fake.script(m, [{ text: 'a b c', delayMs: 1_000 }])
    const got: ChatChunk[] = []
    const started = performance.now()
    const err = await errorOf(
      (async () => {
        for await (const c of openai({ timeout_ms: 200 }).chatStream({ model: m, messages: [{ role: 'user', content: 'x' }] }, live())) got.push(c)
      })(),
    )
    expect(err).toBeInstanceOf(ProviderError)
    expect(err.failover).toBe('timeout')
    expect(got).toHaveLength(1)
    expect(performance.now() - started).toBeLessThan(900)
    await waitFor(() => lastFor(m).closed, { what: 'the fake to see the stream closed' })
  })

  test('an error event after the 200 ends the iterator with a ProviderError', async () => {
    const m = model('stream-error')
    fake.script(m, [{ text: 'partial answer', streamError: 'server_error' }])
    const err = await errorOf(collect(openai().chatStream({ model: m, messages: [{ role: 'user', content: 'x' }] }, live())))
    expect(err).toBeInstanceOf(ProviderError)
    expect(err.message).toContain('scripted server_error')
  })

  test('a consumer that stops early closes the upstream connection', async () => {
    const m = model('early')
    fake.script(m, [{ text: 'w '.repeat(50), delayMs: 20 }])
    for await (const c of openai().chatStream({ model: m, messages: [{ role: 'user', content: 'x' }] }, live())) {
      if (c.choices[0]?.delta.content) break
    }
    await waitFor(() => lastFor(m).closed, { what: 'the fake to see the stream closed' })
  })
})

describe('openai: embeddings and rerank', () => {
  test('vectors ordered by index whatever the order of data, usage tokens reported', async () => {
    const m = model('embed')
    fake.script(m, [{ reverse: true, dimensions: 16 }])
    const inputs = ['first text', 'second', 'the third one']
    const res = await openai().embed(m, inputs, live())
    expect(res.vectors).toEqual(inputs.map((s) => fakeVector(s, 16)))
    expect(res.tokens).toBe(6)
    expect(lastFor(m).json).toEqual({ model: m, input: inputs })
  })

  test('inputs beyond max_batch go in several requests, concatenated in order; no usage → counted', async () => {
    const m = model('batch')
    fake.script(m, [{ usage: false }])
    const inputs = ['a', 'b', 'c', 'd', 'e']
    const res = await openai({ max_batch: 2 }).embed(m, inputs, live())
    expect(fake.requests.filter((r) => r.model === m).map((r) => r.json.input)).toEqual([['a', 'b'], ['c', 'd'], ['e']])
    expect(res.vectors).toEqual(inputs.map((s) => fakeVector(s, 8)))
    expect(res.tokens).toBe(inputs.reduce((t, s) => t + countTokens(s), 0))
  })

  test.each(['jina', 'cohere'] as const)('rerank, %s shape: results by score, top_n sent', async (shape) => {
    const m = model(`rerank-${shape}`)
    fake.script(m, [{ shape, scores: [0.1, 0.9, 0.5] }])
    const docs = ['cats purr', 'dogs bark loudly', 'birds sing']
    const res = await openai().rerank(m, 'which animal barks', docs, 2, live())
    expect(res.results).toEqual([
      { index: 1, relevance_score: 0.9 },
      { index: 2, relevance_score: 0.5 },
    ])
    expect(lastFor(m).json).toEqual({ model: m, query: 'which animal barks', documents: docs, top_n: 2 })
    // Jina reports total_tokens (the fake: 7 document words + 3 query words × 3); Cohere bills
    // search units, so its tokens are counted.
    const counted = docs.reduce((t, d) => t + countTokens('which animal barks') + countTokens(d), 0)
    expect(res.tokens).toBe(shape === 'jina' ? 16 : counted)
  })
})

describe('openai: errors', () => {
  const call = (m: string, over: Partial<ResolvedProvider> = {}, signal = live()) => openai(over).chat({ model: m, messages: [{ role: 'user', content: 'x' }] }, signal)

  test.each([
    [429, 'rate_limited'],
    [500, 'server_error'],
    [503, 'server_error'],
    [400, null],
    [401, null],
  ] as const)('HTTP %i → failover %p, with the upstream message', async (status, failover) => {
    const m = model(`status-${status}`)
    fake.script(m, [{ status }])
    const err = await errorOf(call(m))
    expect(err).toBeInstanceOf(ProviderError)
    expect(err.status).toBe(status)
    expect(err.failover).toBe(failover)
    expect(err.message).toContain(`scripted ${status}`)
  })

  test('429 with retry-after → retryAfterMs; the stream path classifies the same', async () => {
    const m = model('retry')
    fake.script(m, [{ status: 429, retryAfter: 2 }])
    const err = await errorOf(call(m))
    expect(err.failover).toBe('rate_limited')
    expect(err.retryAfterMs).toBe(2_000)
    const streamErr = await errorOf(collect(openai().chatStream({ model: m, messages: [{ role: 'user', content: 'x' }] }, live())))
    expect(streamErr).toBeInstanceOf(ProviderError)
    expect(streamErr.failover).toBe('rate_limited')
    expect(streamErr.retryAfterMs).toBe(2_000)
  })

  test('the key is sent but never appears in an error, even when the upstream echoes it', async () => {
    const m = model('echo-key')
    fake.script(m, [{ status: 401, body: { error: { message: `Incorrect API key provided: ${KEY}` } } }])
    const err = await errorOf(call(m))
    expect(lastFor(m).headers.authorization).toBe(`Bearer ${KEY}`)
    expect(err.message).toContain('Incorrect API key provided')
    expect(err.message).not.toContain(KEY)
    expect(JSON.stringify(err)).not.toContain(KEY)
  })

  test('an upstream that never answers → timeout after timeout_ms, and the connection is closed', async () => {
    const m = model('hang')
    fake.script(m, ['hang'])
    const started = performance.now()
    const err = await errorOf(call(m, { timeout_ms: 200 }))
    const elapsed = performance.now() - started
    expect(err).toBeInstanceOf(ProviderError)
    expect(err.failover).toBe('timeout')
    expect(err.status).toBeNull()
    expect(elapsed).toBeGreaterThanOrEqual(190)
    expect(elapsed).toBeLessThan(1_500)
    await waitFor(() => lastFor(m).closed, { what: 'the fake to see the request closed' })
  })

  test('a closed port → network_error', async () => {
    const probe = Bun.serve({ hostname: '127.0.0.1', port: 0, fetch: () => new Response('') })
    const port = probe.port
    await probe.stop(true)
    const err = await errorOf(new OpenAIProvider({ id: 'gone', kind: 'openai', base_url: `http://127.0.0.1:${port}/v1`, key: KEY }).chat({ model: 'm', messages: [{ role: 'user', content: 'x' }] }, live()))
    expect(err).toBeInstanceOf(ProviderError)
    expect(err.failover).toBe('network_error')
    expect(err.message).not.toContain(KEY)
  })

  test('a connection reset before the status → network_error; mid-stream → the iterator throws', async () => {
    const m = model('drop')
    fake.script(m, [{ drop: 0 }, { text: 'one two three four five', drop: 3 }])
    const err = await errorOf(call(m))
    expect(err.failover).toBe('network_error')
    const got: ChatChunk[] = []
    const streamErr = await errorOf(
      (async () => {
        for await (const c of openai().chatStream({ model: m, messages: [{ role: 'user', content: 'x' }] }, live())) got.push(c)
      })(),
    )
    expect(streamErr).toBeInstanceOf(ProviderError)
    expect(streamErr.failover).toBe('network_error')
    // Three events were sent before the reset (the role chunk and two words); at least one got through.
    expect(got.length).toBeGreaterThan(0)
    expect(got.length).toBeLessThanOrEqual(3)
  })

  test('the caller aborting ends the upstream request and is not a failover', async () => {
    const m = model('abort')
    fake.script(m, ['hang'])
    const ctl = new AbortController()
    const pending = errorOf(call(m, {}, ctl.signal))
    await waitFor(() => fake.requests.some((r) => r.model === m), { what: 'the request to reach the fake' })
    ctl.abort()
    const err = await pending
    expect(err).not.toBeInstanceOf(ProviderError)
    expect(err.name).toBe('AbortError')
    await waitFor(() => lastFor(m).closed, { what: 'the fake to see the request closed' })
  })

  test('the caller aborting mid-stream ends the stream upstream too', async () => {
    const m = model('abort-stream')
    fake.script(m, [{ text: 'w '.repeat(100), delayMs: 20 }])
    const ctl = new AbortController()
    const err = await errorOf(
      (async () => {
        for await (const c of openai().chatStream({ model: m, messages: [{ role: 'user', content: 'x' }] }, ctl.signal)) if (c.choices[0]?.delta.content) ctl.abort()
      })(),
    )
    expect(err).not.toBeInstanceOf(ProviderError)
    expect(err.name).toBe('AbortError')
    await waitFor(() => lastFor(m).closed, { what: 'the fake to see the stream closed' })
  })
})

describe('anthropic', () => {
  const conversation: ChatRequest['messages'] = [
    { role: 'system', content: 'You are terse.' },
    { role: 'developer', content: 'Use tools.' },
    { role: 'user', content: 'Weather in Paris and Rome?' },
    {
      role: 'assistant',
      content: 'Checking.',
      tool_calls: [
        { id: 'toolu_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
        { id: 'toolu_2', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Rome"}' } },
      ],
    },
    { role: 'tool', tool_call_id: 'toolu_1', content: 'sunny' },
    { role: 'tool', tool_call_id: 'toolu_2', content: 'rain' },
    { role: 'user', content: 'And tomorrow?' },
  ]

  test('maps the OpenAI request: system, merged turns, tool_use and tool_result blocks, tools, defaults', async () => {
    const m = model('an-map')
    fake.script(m, [{ text: 'Sunny, then rain.' }])
    const res = await anthropic().chat({ model: m, messages: conversation, tools: [weather], tool_choice: 'required', stop: 'END', temperature: 0.5, user: 'u1' }, live())
    const sent = lastFor(m)
    expect(sent.path).toBe('/v1/messages')
    expect(sent.headers['x-api-key']).toBe(KEY)
    expect(sent.headers['anthropic-version']).toBe('2023-06-01')
    expect(sent.headers.authorization).toBeUndefined()
    expect(sent.json).toEqual({
      model: m,
      max_tokens: 1024,
      system: 'You are terse.\n\nUse tools.',
      messages: [
        { role: 'user', content: [{ type: 'text', text: 'Weather in Paris and Rome?' }] },
        {
          role: 'assistant',
          content: [
            { type: 'text', text: 'Checking.' },
            { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } },
            { type: 'tool_use', id: 'toolu_2', name: 'get_weather', input: { city: 'Rome' } },
          ],
        },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 'toolu_1', content: 'sunny' },
            { type: 'tool_result', tool_use_id: 'toolu_2', content: 'rain' },
            { type: 'text', text: 'And tomorrow?' },
          ],
        },
      ],
      temperature: 0.5,
      stop_sequences: ['END'],
      metadata: { user_id: 'u1' },
      tools: [{ name: 'get_weather', description: 'Weather in a city', input_schema: weather.function.parameters }],
      tool_choice: { type: 'any' },
    })
    expect(res.object).toBe('chat.completion')
    expect(res.choices[0]!.message).toEqual({ role: 'assistant', content: 'Sunny, then rain.' })
    // As reported, not counted: the fake counts a word per token, system (5) and turns (5 + 1 + 4) alike.
    expect(res.usage).toEqual({ prompt_tokens: 15, completion_tokens: 3, total_tokens: 18 })
  })

  test('provider headers override the default version', async () => {
    const m = model('an-headers')
    await anthropic({ headers: { 'anthropic-version': '2099-01-01', 'anthropic-beta': 'x' } }).chat({ model: m, messages: [{ role: 'user', content: 'hi' }], max_tokens: 10 }, live())
    expect(lastFor(m).headers['anthropic-version']).toBe('2099-01-01')
    expect(lastFor(m).headers['anthropic-beta']).toBe('x')
    expect(lastFor(m).json.max_tokens).toBe(10)
  })

  test('tool_use blocks → tool_calls with JSON-string arguments', async () => {
    const m = model('an-tool')
    fake.script(m, [{ text: 'Let me check.', toolCalls: [{ id: 'call_9', name: 'get_weather', arguments: { city: 'Oslo' } }] }])
    const res = await anthropic().chat({ model: m, messages: [{ role: 'user', content: 'Oslo?' }], tools: [weather] }, live())
    expect(res.choices[0]!.finish_reason).toBe('tool_calls')
    expect(res.choices[0]!.message).toEqual({
      role: 'assistant',
      content: 'Let me check.',
      tool_calls: [{ id: 'toolu_9', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }],
    })
  })

  test.each([
    ['end_turn', 'stop'],
    ['stop_sequence', 'stop'],
    ['max_tokens', 'length'],
    ['tool_use', 'tool_calls'],
  ] as const)('stop_reason %s → finish_reason %s, sync and streamed', async (stopReason, finish) => {
    const m = model(`an-stop-${stopReason}`)
    fake.script(m, [{ text: 'done', stopReason }])
    const req: ChatRequest = { model: m, messages: [{ role: 'user', content: 'x' }] }
    expect((await anthropic().chat(req, live())).choices[0]!.finish_reason).toBe(finish)
    expect((await collect(anthropic().chatStream(req, live()))).at(-1)!.choices[0]!.finish_reason).toBe(finish)
  })

  test('a stream becomes OpenAI chunks: role first, text deltas, a final chunk with finish and usage', async () => {
    const m = model('an-stream')
    fake.script(m, [{ text: 'red green blue' }])
    const chunks = await collect(anthropic().chatStream({ model: m, messages: [{ role: 'system', content: 'colours' }, { role: 'user', content: 'three colours please' }] }, live()))
    expect(lastFor(m).json.stream).toBe(true)
    expect(lastFor(m).json.system).toBe('colours')
    expect(chunks.every((c) => c.object === 'chat.completion.chunk' && c.id.startsWith('msg_'))).toBe(true)
    expect(chunks[0]!.choices[0]!.delta).toEqual({ role: 'assistant', content: '' })
    expect(chunks.slice(1, -1).map((c) => c.choices[0]!.delta.content)).toEqual(['red ', 'green ', 'blue'])
    const last = chunks.at(-1)!
    expect(last.choices[0]).toEqual({ index: 0, delta: {}, finish_reason: 'stop' })
    // input_tokens from message_start (4 words), output_tokens from message_delta (3 chunks).
    expect(last.usage).toEqual({ prompt_tokens: 4, completion_tokens: 3, total_tokens: 7 })
  })

  test('tool_use blocks stream as tool_call deltas: index, id and name, then argument fragments', async () => {
    const m = model('an-stream-tool')
    const input = { city: 'Reykjavik', days: 3 }
    fake.script(m, [{ text: 'Looking.', toolCalls: [{ id: 'call_x', name: 'get_weather', arguments: input }, { id: 'call_y', name: 'get_time', arguments: {} }] }])
    const chunks = await collect(anthropic().chatStream({ model: m, messages: [{ role: 'user', content: 'x' }], tools: [weather] }, live()))
    expect(text(chunks)).toBe('Looking.')
    const calls = assembleTools(chunks)
    expect(calls).toEqual([
      { id: 'toolu_x', name: 'get_weather', arguments: JSON.stringify(input) },
      { id: 'toolu_y', name: 'get_time', arguments: '{}' },
    ])
    expect(JSON.parse(calls[0]!.arguments)).toEqual(input)
    expect(chunks.at(-1)!.choices[0]!.finish_reason).toBe('tool_calls')
  })

  test.each([
    [529, 'server_error'],
    [500, 'server_error'],
    [429, 'rate_limited'],
    [400, null],
    [401, null],
  ] as const)('HTTP %i → failover %p with the message of the error object', async (status, failover) => {
    const m = model(`an-status-${status}`)
    fake.script(m, [{ status, retryAfter: status === 429 ? 3 : undefined }])
    const err = await errorOf(anthropic().chat({ model: m, messages: [{ role: 'user', content: 'x' }] }, live()))
    expect(err).toBeInstanceOf(ProviderError)
    expect(err.status).toBe(status)
    expect(err.failover).toBe(failover)
    expect(err.message).toContain(`scripted ${status}`)
    expect(err.message).not.toContain(KEY)
    if (status === 429) expect(err.retryAfterMs).toBe(3_000)
  })

  test('an overloaded error event mid-stream → server_error', async () => {
    const m = model('an-overloaded')
    fake.script(m, [{ text: 'some words here', streamError: 'overloaded_error' }])
    const err = await errorOf(collect(anthropic().chatStream({ model: m, messages: [{ role: 'user', content: 'x' }] }, live())))
    expect(err).toBeInstanceOf(ProviderError)
    expect(err.failover).toBe('server_error')
  })

  test('a hang → timeout; a drop mid-stream → the iterator throws', async () => {
    const m = model('an-faults')
    fake.script(m, ['hang', { text: 'a b c d', drop: 4 }])
    const err = await errorOf(anthropic({ timeout_ms: 200 }).chat({ model: m, messages: [{ role: 'user', content: 'x' }] }, live()))
    expect(err.failover).toBe('timeout')
    const streamErr = await errorOf(collect(anthropic().chatStream({ model: m, messages: [{ role: 'user', content: 'x' }] }, live())))
    expect(streamErr).toBeInstanceOf(ProviderError)
    expect(streamErr.failover).toBe('network_error')
  })

  test('embeddings and rerank are refused without a request: 400, no failover', async () => {
    const before = fake.requests.length
    for (const p of [anthropic().embed('m', ['x'], live()), anthropic().rerank('m', 'q', ['d'], undefined, live())]) {
      const err = await errorOf(p)
      expect(err).toBeInstanceOf(ProviderError)
      expect(err.status).toBe(400)
      expect(err.failover).toBeNull()
    }
    expect(fake.requests.length).toBe(before)
  })
})

test('no upstream request is left open by any of the above', async () => {
  await waitFor(() => fake.open() === 0, { what: `the fake's open requests to end (${fake.open()} open)` })
})
