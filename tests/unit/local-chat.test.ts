import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { localChat, localChatStream } from '../../src/domain/models/local/chat'
import { LocalProvider } from '../../src/domain/models/providers/local'
import { ProviderError, type ChatChunk, type ChatRequest, type ToolDefinition } from '../../src/domain/models/types'
import { countChatTokens, countTokens } from '../../src/lib/tokens'

setDefaultTimeout(TEST_TIMEOUT_MS)

const CONTEXT = 'Our office is in Lisbon. It opens at 9 am on weekdays. The cafeteria serves lunch from noon. Parking is free for visitors.'
const withContext = (question: string, extra: Partial<ChatRequest> = {}): ChatRequest => ({
  model: 'local-chat',
  messages: [{ role: 'system', content: CONTEXT }, { role: 'user', content: question }],
  ...extra,
})
const weather: ToolDefinition = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Forecast for a city',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string' }, days: { type: 'integer' }, unit: { type: 'string', enum: ['celsius', 'fahrenheit'] }, detailed: { type: 'boolean' } },
      required: ['city', 'days', 'unit'],
    },
  },
}
const notes: ToolDefinition = { type: 'function', function: { name: 'add_note', parameters: { type: 'object', properties: { text: { type: 'string' } } } } }
const listing: ToolDefinition = {
  type: 'function',
  function: {
    name: 'list_orders',
    parameters: { type: 'object', properties: { status: { type: 'string', enum: ['open', 'shipped'] }, limit: { type: 'integer' }, newest_first: { type: 'boolean' }, tags: { type: 'array' } } },
  },
}
const search: ToolDefinition = { type: 'function', function: { name: 'search_docs', parameters: { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] } } }

async function collect(stream: AsyncIterable<ChatChunk>): Promise<ChatChunk[]> {
  const chunks: ChatChunk[] = []
  for await (const c of stream) chunks.push(c)
  return chunks
}
const never = new AbortController().signal
const content = (req: ChatRequest) => localChat(req).choices[0]!.message.content

describe('local-chat answers', () => {
  test('from the context: the sentences sharing words with the question, in their order', () => {
    expect(content(withContext('When does the office open?'))).toBe('From the context: Our office is in Lisbon. It opens at 9 am on weekdays.')
    expect(content(withContext('Is parking free?'))).toBe('From the context: Parking is free for visitors.')
    expect(content(withContext('Tell me about dinosaurs'))).toBe('The context says nothing about "Tell me about dinosaurs".')
    // Earlier turns are context too.
    const turns: ChatRequest = {
      model: 'local-chat',
      messages: [{ role: 'user', content: 'My dog is called Rex.' }, { role: 'assistant', content: 'Noted.' }, { role: 'user', content: 'What is my dog called?' }],
    }
    expect(content(turns)).toBe('From the context: My dog is called Rex.')
  })

  test('without context: a fixed sentence quoting the question and saying it is not an AI', () => {
    const answer = content({ model: 'local-chat', messages: [{ role: 'user', content: 'What is the capital of France?' }] })
    expect(answer).toStartWith('You asked: "What is the capital of France?".')
    expect(answer).toContain('not an AI')
  })

  test('deterministic; OpenAI shape; usage counted with the real tokenizer', () => {
    const req = withContext('When does the office open?')
    const a = localChat(req)
    const b = localChat(req)
    expect(a.choices).toEqual(b.choices)
    expect(a.usage).toEqual(b.usage)
    expect(a.id).toMatch(/^chatcmpl-[0-9a-f]{24}$/)
    expect(a.id).not.toBe(b.id)
    expect(a.object).toBe('chat.completion')
    expect(Math.abs(a.created - Date.now() / 1000)).toBeLessThan(5)
    expect(a.model).toBe('local-chat')
    expect(a.choices).toHaveLength(1)
    expect(a.choices[0]!.index).toBe(0)
    expect(a.choices[0]!.finish_reason).toBe('stop')
    expect(a.choices[0]!.message.role).toBe('assistant')
    expect(a.usage.prompt_tokens).toBe(countChatTokens(req.messages))
    expect(a.usage.completion_tokens).toBe(countTokens(a.choices[0]!.message.content!))
    expect(a.usage.total_tokens).toBe(a.usage.prompt_tokens + a.usage.completion_tokens)
  })

  test('max_tokens cuts the answer at that many tokens (finish_reason length); a larger one changes nothing', () => {
    const full = content(withContext('When does the office open?'))!
    for (const max of [0, 1, 5, 9]) {
      const cut = localChat(withContext('When does the office open?', { max_tokens: max }))
      const text = cut.choices[0]!.message.content!
      expect(cut.choices[0]!.finish_reason).toBe('length')
      expect(full.startsWith(text)).toBe(true)
      expect(countTokens(text)).toBe(max)
      expect(cut.usage.completion_tokens).toBe(max)
    }
    const roomy = localChat(withContext('When does the office open?', { max_tokens: 1000 }))
    expect(roomy.choices[0]!.message.content).toBe(full)
    expect(roomy.choices[0]!.finish_reason).toBe('stop')
  })

  test('stop sequences end the answer before them', () => {
    const r = localChat(withContext('When does the office open?', { stop: ['Lisbon', 'never there'] }))
    expect(r.choices[0]!.message.content).toBe('From the context: Our office is in ')
    expect(r.choices[0]!.finish_reason).toBe('stop')
  })
})

describe('local-chat streams', () => {
  test('one chunk per token; the pieces make the sync answer; the last chunk has finish_reason and usage', async () => {
    const req = withContext('When does the office open?')
    const sync = localChat(req)
    const chunks = await collect(localChatStream(req, never))
    expect(chunks[0]!.choices[0]!.delta).toEqual({ role: 'assistant', content: '' })
    const last = chunks.at(-1)!
    expect(last.choices[0]!.finish_reason).toBe('stop')
    expect(last.choices[0]!.delta).toEqual({})
    expect(last.usage).toEqual(sync.usage)
    const middle = chunks.slice(1, -1)
    expect(middle.map((c) => c.choices[0]!.delta.content).join('')).toBe(sync.choices[0]!.message.content!)
    expect(middle).toHaveLength(sync.usage.completion_tokens)
    for (const c of chunks) {
      expect(c.object).toBe('chat.completion.chunk')
      expect(c.id).toBe(chunks[0]!.id)
      expect(c.id).toStartWith('chatcmpl-')
      if (c !== last) expect(c.choices[0]!.finish_reason).toBeNull()
    }
  })

  test('characters spread over several tokens stay whole; max_tokens applies to streams too', async () => {
    const req: ChatRequest = { model: 'local-chat', messages: [{ role: 'user', content: 'Say 🎉🎉, 日本語 and naïve café' }] }
    const chunks = await collect(localChatStream(req, never))
    const pieces = chunks.slice(1, -1).map((c) => c.choices[0]!.delta.content!)
    expect(pieces.join('')).toBe(localChat(req).choices[0]!.message.content!)
    expect(pieces.some((p) => p.includes('\uFFFD'))).toBe(false)
    expect(pieces.length).toBeLessThanOrEqual(chunks.at(-1)!.usage!.completion_tokens)
    const cut = await collect(localChatStream({ ...req, max_tokens: 4 }, never))
    expect(cut.at(-1)!.choices[0]!.finish_reason).toBe('length')
    expect(cut.slice(1, -1).map((c) => c.choices[0]!.delta.content).join('')).toBe(localChat({ ...req, max_tokens: 4 }).choices[0]!.message.content!)
  })

  test('an abort stops the stream: no chunk after it, no finish', async () => {
    const controller = new AbortController()
    const seen: ChatChunk[] = []
    for await (const c of localChatStream(withContext('When does the office open?'), controller.signal)) {
      seen.push(c)
      if (seen.length === 3) controller.abort()
    }
    expect(seen).toHaveLength(3)
    expect(seen.every((c) => c.choices[0]!.finish_reason === null)).toBe(true)
    const already = new AbortController()
    already.abort()
    expect(await collect(localChatStream(withContext('hello'), already.signal))).toEqual([])
  })
})

describe('local-chat tools', () => {
  test('a call when the last user message names a tool; arguments follow the schema', () => {
    const r = localChat({ model: 'local-chat', tools: [search, weather], messages: [{ role: 'user', content: 'Use get_weather for Paris, 3 days in fahrenheit.' }] })
    const choice = r.choices[0]!
    expect(choice.finish_reason).toBe('tool_calls')
    expect(choice.message.content).toBeNull()
    const call = choice.message.tool_calls![0]!
    expect(call.type).toBe('function')
    expect(call.id).toMatch(/^call_[0-9a-f]{24}$/)
    expect(call.function.name).toBe('get_weather')
    const args = JSON.parse(call.function.arguments)
    expect(args).toEqual({ city: 'Paris', days: 3, unit: 'fahrenheit' })
    expect(Object.keys(args).sort()).toEqual([...(weather.function.parameters!.required as string[])].sort())
    expect(r.usage.completion_tokens).toBe(countTokens('get_weather') + countTokens(call.function.arguments))
  })

  test('quoted text fills string properties; defaults when the message has no value', () => {
    const r = localChat({ model: 'local-chat', tools: [weather, search], messages: [{ role: 'user', content: 'please run SEARCH_DOCS on "refund policy"' }] })
    const call = r.choices[0]!.message.tool_calls![0]!
    expect(call.function.name).toBe('search_docs')
    expect(JSON.parse(call.function.arguments)).toEqual({ query: 'refund policy' })
    const w = localChat({ model: 'local-chat', tools: [weather], messages: [{ role: 'user', content: 'get_weather "New York"' }] })
    expect(JSON.parse(w.choices[0]!.message.tool_calls![0]!.function.arguments)).toEqual({ city: 'New York', days: 0, unit: 'celsius' })
  })

  test('every call has an id of its own, however alike the requests', () => {
    const req: ChatRequest = { model: 'local-chat', tools: [notes], messages: [{ role: 'user', content: 'add_note' }] }
    const ids = Array.from({ length: 50 }, () => localChat(req).choices[0]!.message.tool_calls![0]!.id)
    for (const id of ids) expect(id).toMatch(/^call_[0-9a-f]{24}$/)
    expect(new Set(ids).size).toBe(50)
  })

  test('optional properties: taken from the message when it gives them, left out when it does not', () => {
    const args = (tool: ToolDefinition, content: string) => JSON.parse(localChat({ model: 'local-chat', tools: [tool], messages: [{ role: 'user', content }] }).choices[0]!.message.tool_calls![0]!.function.arguments)
    // A lone string property, required or not, gets the message's text.
    expect(args(notes, 'add_note buy milk and eggs')).toEqual({ text: 'buy milk and eggs' })
    expect(args(notes, 'Please add_note: "call the bank"')).toEqual({ text: 'call the bank' })
    // The others only when the message says them.
    expect(args(weather, 'get_weather for Oslo, 5 days in celsius, detailed: yes')).toEqual({ city: 'Oslo', days: 5, unit: 'celsius', detailed: true })
    expect(args(listing, 'list_orders')).toEqual({})
    expect(args(listing, 'list_orders, 20 of them, open ones, newest first: no')).toEqual({ limit: 20, status: 'open', newest_first: false })
    // No properties: no arguments.
    expect(args({ type: 'function', function: { name: 'ping', parameters: { type: 'object', properties: {} } } }, 'ping it')).toEqual({})
  })

  test('no call when no tool is named, or tool_choice is none; a forced or required choice calls', () => {
    const plain = localChat({ model: 'local-chat', tools: [weather], messages: [{ role: 'user', content: 'what is the weather like?' }] })
    expect(plain.choices[0]!.finish_reason).toBe('stop')
    expect(plain.choices[0]!.message.tool_calls).toBeUndefined()
    // A name inside another word is not a mention.
    const inside = localChat({ model: 'local-chat', tools: [weather], messages: [{ role: 'user', content: 'try my_get_weather_v2' }] })
    expect(inside.choices[0]!.finish_reason).toBe('stop')
    const none = localChat({ model: 'local-chat', tools: [weather], tool_choice: 'none', messages: [{ role: 'user', content: 'get_weather Paris' }] })
    expect(none.choices[0]!.finish_reason).toBe('stop')
    const forced = localChat({ model: 'local-chat', tools: [weather, search], tool_choice: { type: 'function', function: { name: 'search_docs' } }, messages: [{ role: 'user', content: 'anything about invoices' }] })
    expect(forced.choices[0]!.message.tool_calls![0]!.function.name).toBe('search_docs')
    const required = localChat({ model: 'local-chat', tools: [weather], tool_choice: 'required', messages: [{ role: 'user', content: 'Lisbon tomorrow' }] })
    expect(required.choices[0]!.message.tool_calls![0]!.function.name).toBe('get_weather')
  })

  test('after the tool answers, the reply quotes its result', () => {
    const first = localChat({ model: 'local-chat', tools: [weather], messages: [{ role: 'user', content: 'get_weather for Paris' }] })
    const call = first.choices[0]!.message.tool_calls![0]!
    const second = localChat({
      model: 'local-chat',
      tools: [weather],
      messages: [
        { role: 'user', content: 'get_weather for Paris' },
        first.choices[0]!.message,
        { role: 'tool', tool_call_id: call.id, content: '{"temp_c": 21, "sky": "clear"}' },
      ],
    })
    expect(second.choices[0]!.finish_reason).toBe('stop')
    expect(second.choices[0]!.message.content).toBe('From get_weather: {"temp_c": 21, "sky": "clear"}')
  })

  test('a streamed tool call: id and name first, then the arguments piece by piece', async () => {
    const req: ChatRequest = { model: 'local-chat', tools: [weather], messages: [{ role: 'user', content: 'get_weather for Paris, 2 days' }] }
    const sync = localChat(req).choices[0]!.message.tool_calls![0]!
    const chunks = await collect(localChatStream(req, never))
    const first = chunks[0]!.choices[0]!.delta
    expect(first).toEqual({ role: 'assistant', content: null, tool_calls: [{ index: 0, id: expect.stringMatching(/^call_[0-9a-f]{24}$/), type: 'function', function: { name: 'get_weather', arguments: '' } }] })
    // Every call its own id, as a real model's: the same request answered twice is two calls.
    expect(first.tool_calls![0]!.id).not.toBe(sync.id)
    const args = chunks.slice(1, -1).map((c) => c.choices[0]!.delta.tool_calls![0]!.function!.arguments).join('')
    expect(args).toBe(sync.function.arguments)
    expect(chunks.at(-1)!.choices[0]!.finish_reason).toBe('tool_calls')
  })
})

describe('LocalProvider chat', () => {
  const provider = new LocalProvider()

  test('chat and chatStream serve local-chat', async () => {
    const req = withContext('When does the office open?')
    expect((await provider.chat(req, never)).choices).toEqual(localChat(req).choices)
    const chunks = await collect(provider.chatStream(req, never))
    expect(chunks.at(-1)!.choices[0]!.finish_reason).toBe('stop')
  })

  test('another model name is a 400 without failover, from chat and from the first chunk of a stream', async () => {
    const failures: unknown[] = []
    try {
      await provider.chat({ ...withContext('hi'), model: 'gpt-4o' }, never)
    } catch (err) {
      failures.push(err)
    }
    try {
      await collect(provider.chatStream({ ...withContext('hi'), model: 'local-embed' }, never))
    } catch (err) {
      failures.push(err)
    }
    expect(failures).toHaveLength(2)
    for (const f of failures) {
      expect(f).toBeInstanceOf(ProviderError)
      expect((f as ProviderError).status).toBe(400)
      expect((f as ProviderError).failover).toBeNull()
    }
    expect((failures[0] as Error).message).toContain('"gpt-4o"')
    expect((failures[1] as Error).message).toContain('local-embed is not a chat model')
  })
})
