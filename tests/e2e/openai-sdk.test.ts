import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import OpenAI from 'openai'
import { generateKey } from '../../src/domain/api-keys'
import { apiCall, EMBEDDED, killAll, spawnService, type ServiceProcess } from '../helpers/process'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The official OpenAI SDK as a client of the real service (`bun run src/main.ts`, embedded store):
 * baseURL `<service>/v1` and one of our keys are all it needs (docs/models.md, "OpenAI compatibility").
 */
let tmp: string
let sp: ServiceProcess
let rootKey: string
/** Restricted to `ws`: resolves the workspace with no header. */
let client: OpenAI
/** An unrestricted key of a user with two workspaces, naming `ws2` with X-Workspace-Id. */
let headerClient: OpenAI
let userKey: string
let ws: string
let ws2: string

const CONTEXT = 'Our office is in Lisbon. It opens at 9 am on weekdays. The cafeteria serves lunch from noon. Parking is free for visitors.'
const MESSAGES: OpenAI.Chat.ChatCompletionMessageParam[] = [{ role: 'system', content: CONTEXT }, { role: 'user', content: 'Where is the office, and is parking free?' }]
const WEATHER: OpenAI.Chat.ChatCompletionTool = {
  type: 'function',
  function: { name: 'get_weather', description: 'Forecast for a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
}

beforeAll(async () => {
  tmp = mkdtempSync(join(tmpdir(), 'ap-e2e-sdk-'))
  rootKey = generateKey()
  sp = spawnService({ env: { ...EMBEDDED, DATA_DIR: join(tmp, 'data'), BOOTSTRAP_API_KEY: rootKey } })
  await sp.ready(45_000)
  const issued = await apiCall(sp, rootKey, 'POST', '/v1/api-keys', { user_id: 'sdk-user', name: 'sdk user' })
  expect(issued.status).toBe(201)
  userKey = issued.body.data.key
  for (const name of ['SDK one', 'SDK two']) {
    const created = await apiCall(sp, userKey, 'POST', '/v1/workspaces', { name })
    expect(created.status).toBe(201)
    if (name === 'SDK one') ws = created.body.data.id
    else ws2 = created.body.data.id
  }
  const restricted = await apiCall(sp, rootKey, 'POST', '/v1/api-keys', { user_id: 'sdk-user', name: 'sdk restricted', workspace_id: ws })
  expect(restricted.status).toBe(201)
  // maxRetries 0: a refusal is asserted as it comes, not after the SDK's back-off.
  client = new OpenAI({ apiKey: restricted.body.data.key, baseURL: `${sp.url}/v1`, maxRetries: 0 })
  headerClient = new OpenAI({ apiKey: userKey, baseURL: `${sp.url}/v1`, maxRetries: 0, defaultHeaders: { 'X-Workspace-Id': ws2 } })
}, 60_000)

afterAll(async () => {
  await killAll()
  rmSync(tmp, { recursive: true, force: true })
})

/** The calls charged to a workspace so far (GET /v1/workspaces/{id}/usage). */
async function callsIn(workspace: string): Promise<number> {
  const res = await apiCall(sp, userKey, 'GET', `/v1/workspaces/${workspace}/usage`)
  expect(res.status).toBe(200)
  return res.body.data.total.calls
}

/** The error the SDK throws for `run` (try/catch: Bun's `.rejects` is slow). */
async function thrown(run: () => Promise<unknown>): Promise<unknown> {
  try {
    await run()
  } catch (err) {
    return err
  }
  throw new Error('expected the SDK to throw')
}

describe('chat completions', () => {
  test('create: the content answered from the context, with usage', async () => {
    const before = await callsIn(ws)
    const completion = await client.chat.completions.create({ model: 'local-chat', messages: MESSAGES })
    expect(completion.object).toBe('chat.completion')
    expect(completion.model).toBe('local-chat')
    expect(completion.id).toMatch(/^chatcmpl-/)
    expect(completion.choices.length).toBe(1)
    const choice = completion.choices[0]!
    expect(choice.finish_reason).toBe('stop')
    expect(choice.message.role).toBe('assistant')
    expect(choice.message.content).toBe('From the context: Our office is in Lisbon. Parking is free for visitors.')
    const usage = completion.usage!
    expect(usage.prompt_tokens).toBeGreaterThan(0)
    expect(usage.completion_tokens).toBeGreaterThan(0)
    expect(usage.total_tokens).toBe(usage.prompt_tokens + usage.completion_tokens)
    // Our additions ride along: the request id and the credits.
    const extra = completion as unknown as { request_id: string; usage: { credits: number } }
    expect(extra.request_id).toMatch(/^req_/)
    expect(extra.usage.credits).toBe(0)
    // withResponse gives the HTTP answer too: the request id is the header's.
    const { data, response } = await client.chat.completions.create({ model: 'local-chat', messages: MESSAGES }).withResponse()
    expect((data as unknown as { request_id: string }).request_id).toBe(response.headers.get('x-request-id')!)
    expect(await callsIn(ws)).toBe(before + 2)
  })

  test('stream: the chunks add up to the sync content; include_usage adds a last chunk with the usage', async () => {
    const sync = await client.chat.completions.create({ model: 'local-chat', messages: MESSAGES })
    const content = sync.choices[0]!.message.content!

    const stream = await client.chat.completions.create({ model: 'local-chat', messages: MESSAGES, stream: true, stream_options: { include_usage: true } })
    const chunks: OpenAI.Chat.ChatCompletionChunk[] = []
    for await (const chunk of stream) chunks.push(chunk)
    expect(chunks.length).toBeGreaterThan(3)
    for (const c of chunks) {
      expect(c.object).toBe('chat.completion.chunk')
      expect(c.model).toBe('local-chat')
      expect(c.id).toBe(chunks[0]!.id)
    }
    const last = chunks.at(-1)!
    expect(last.choices).toEqual([])
    expect(last.usage).toMatchObject({ prompt_tokens: sync.usage!.prompt_tokens, completion_tokens: sync.usage!.completion_tokens, total_tokens: sync.usage!.total_tokens })
    const text = chunks.slice(0, -1).map((c) => c.choices[0]?.delta.content ?? '').join('')
    expect(text).toBe(content)
    expect(chunks.at(-2)!.choices[0]!.finish_reason).toBe('stop')

    // Without include_usage (OpenAI's default): no usage chunk.
    const plain = await client.chat.completions.create({ model: 'local-chat', messages: MESSAGES, stream: true })
    let joined = ''
    let withUsage = 0
    for await (const chunk of plain) {
      expect(chunk.choices.length).toBe(1)
      if (chunk.usage) withUsage++
      joined += chunk.choices[0]!.delta.content ?? ''
    }
    expect(joined).toBe(content)
    expect(withUsage).toBe(0)
  })

  test('the SDK\'s stream helper assembles the final completion', async () => {
    const runner = client.chat.completions.stream({ model: 'local-chat', messages: MESSAGES })
    const deltas: string[] = []
    runner.on('content', (delta) => deltas.push(delta))
    const final = await runner.finalChatCompletion()
    expect(final.choices[0]!.message.content).toBe('From the context: Our office is in Lisbon. Parking is free for visitors.')
    expect(deltas.join('')).toBe(final.choices[0]!.message.content!)
  })

  test('X-Workspace-Id through defaultHeaders charges that workspace; without it an ambiguous key is refused', async () => {
    const [one, two] = [await callsIn(ws), await callsIn(ws2)]
    const completion = await headerClient.chat.completions.create({ model: 'local-chat', messages: MESSAGES })
    expect(completion.choices[0]!.message.content).toContain('Lisbon')
    await headerClient.embeddings.create({ model: 'local-embed', input: 'refund' })
    expect([await callsIn(ws), await callsIn(ws2)]).toEqual([one, two + 2])

    const bare = new OpenAI({ apiKey: userKey, baseURL: `${sp.url}/v1`, maxRetries: 0 })
    const err = await thrown(() => bare.chat.completions.create({ model: 'local-chat', messages: MESSAGES }))
    expect(err).toBeInstanceOf(OpenAI.BadRequestError)
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('workspace_id')
  })
})

describe('embeddings', () => {
  const INPUT = ['refund policy', 'how do I get my money back?', 'Our office is in Lisbon.']
  let reference: number[][]
  beforeAll(async () => {
    const res = await apiCall(sp, userKey, 'POST', '/v1/models/embeddings', { model: 'local-embed', input: INPUT, workspace_id: ws })
    expect(res.status).toBe(200)
    reference = res.body.data.map((d: { embedding: number[] }) => d.embedding)
  })

  test('default (the SDK asks for base64 and decodes it): the vectors of /v1/models/embeddings, as float32', async () => {
    const res = await client.embeddings.create({ model: 'local-embed', input: INPUT })
    expect(res.object).toBe('list')
    expect(res.model).toBe('local-embed')
    expect(res.data.map((d) => d.index)).toEqual([0, 1, 2])
    for (const [i, d] of res.data.entries()) {
      expect(d.object).toBe('embedding')
      expect(d.embedding.length).toBe(384)
      expect(d.embedding).toEqual(reference[i]!.map(Math.fround))
    }
    expect(res.usage.prompt_tokens).toBeGreaterThan(0)
    expect(res.usage.total_tokens).toBe(res.usage.prompt_tokens)
  })

  test('encoding_format float: the very same numbers', async () => {
    const res = await client.embeddings.create({ model: 'local-embed', input: INPUT, encoding_format: 'float' })
    expect(res.data.map((d) => d.embedding)).toEqual(reference)
  })

  test('a single string', async () => {
    const res = await client.embeddings.create({ model: 'local-embed', input: INPUT[2]! })
    expect(res.data.length).toBe(1)
    expect(res.data[0]!.embedding).toEqual(reference[2]!.map(Math.fround))
  })
})

describe('errors as the SDK sees them', () => {
  test('an unknown model → NotFoundError (404) with our code, param and request id', async () => {
    for (const run of [
      () => client.chat.completions.create({ model: 'gpt-nope', messages: MESSAGES }),
      () => client.chat.completions.create({ model: 'gpt-nope', messages: MESSAGES, stream: true }),
      () => client.embeddings.create({ model: 'embed-nope', input: 'x' }),
    ]) {
      const err = await thrown(run)
      expect(err).toBeInstanceOf(OpenAI.NotFoundError)
      const e = err as InstanceType<typeof OpenAI.NotFoundError>
      expect(e.status).toBe(404)
      expect(e.code).toBe('not_found')
      expect(e.param).toBe('model')
      expect(e.requestID).toMatch(/^req_/)
    }
  })

  test('a model of the wrong type → BadRequestError (400)', async () => {
    for (const run of [
      () => client.chat.completions.create({ model: 'local-embed', messages: MESSAGES }),
      () => client.chat.completions.create({ model: 'local-rerank', messages: MESSAGES }),
      () => client.embeddings.create({ model: 'local-chat', input: 'x' }),
    ]) {
      const err = await thrown(run)
      expect(err).toBeInstanceOf(OpenAI.BadRequestError)
      const e = err as InstanceType<typeof OpenAI.BadRequestError>
      expect(e.status).toBe(400)
      expect(e.code).toBe('validation_error')
      expect(e.param).toBe('model')
    }
  })

  test('a bad body → BadRequestError naming the field; a bad key → AuthenticationError', async () => {
    const err = await thrown(() => client.chat.completions.create({ model: 'local-chat', messages: MESSAGES, temperature: 3 }))
    expect(err).toBeInstanceOf(OpenAI.BadRequestError)
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('temperature')
    const stranger = new OpenAI({ apiKey: `ap_${'x'.repeat(40)}`, baseURL: `${sp.url}/v1`, maxRetries: 0 })
    const auth = await thrown(() => stranger.chat.completions.create({ model: 'local-chat', messages: MESSAGES }))
    expect(auth).toBeInstanceOf(OpenAI.AuthenticationError)
    expect((auth as InstanceType<typeof OpenAI.AuthenticationError>).code).toBe('unauthenticated')
  })
})

describe('tool calling', () => {
  /** Ask, get a tool call, send its result back, get the final answer. */
  async function roundTrip(extra: { tool_choice?: OpenAI.Chat.ChatCompletionToolChoiceOption }) {
    const ask: OpenAI.Chat.ChatCompletionMessageParam = { role: 'user', content: 'Please use get_weather for "Paris".' }
    const first = await client.chat.completions.create({ model: 'local-chat', messages: [ask], tools: [WEATHER], ...extra })
    const choice = first.choices[0]!
    expect(choice.finish_reason).toBe('tool_calls')
    expect(choice.message.content).toBeNull()
    const calls = choice.message.tool_calls!
    expect(calls.length).toBe(1)
    const call = calls[0]!
    expect(call.type).toBe('function')
    if (call.type !== 'function') throw new Error('not a function call')
    expect(call.id).toMatch(/^call_/)
    expect(call.function.name).toBe('get_weather')
    expect(JSON.parse(call.function.arguments)).toEqual({ city: 'Paris' })

    const second = await client.chat.completions.create({
      model: 'local-chat',
      tools: [WEATHER],
      ...extra,
      messages: [ask, choice.message, { role: 'tool', tool_call_id: call.id, content: '{"temp_c": 21, "sky": "clear"}' }],
    })
    expect(second.choices[0]!.finish_reason).toBe('stop')
    expect(second.choices[0]!.message.content).toBe('From get_weather: {"temp_c": 21, "sky": "clear"}')

    // Streamed, the SDK's helper assembles the same call from the pieces.
    const runner = client.chat.completions.stream({ model: 'local-chat', messages: [ask], tools: [WEATHER], ...extra })
    const final = await runner.finalChatCompletion()
    const streamed = final.choices[0]!.message.tool_calls![0]!
    expect(final.choices[0]!.finish_reason).toBe('tool_calls')
    expect(streamed).toMatchObject({ type: 'function', function: { name: 'get_weather', arguments: call.function.arguments } })
    // A call of its own, with an id of its own.
    expect(streamed.id).toMatch(/^call_[0-9a-f]{24}$/)
    expect(streamed.id).not.toBe(call.id)
  }

  test('tool_choice auto: tool_calls, then the final answer from the tool result', async () => {
    await roundTrip({ tool_choice: 'auto' })
  })

  // No tool_choice means auto, as the SDK assumes.
  test('no tool_choice (OpenAI\'s default, auto): tool_calls, then the final answer', async () => {
    await roundTrip({})
  })

  test('every call has its own id; arguments come from the message, optional properties included', async () => {
    const NOTE: OpenAI.Chat.ChatCompletionTool = {
      type: 'function',
      function: { name: 'add_note', description: 'Keeps a note', parameters: { type: 'object', properties: { text: { type: 'string' } } } },
    }
    const ORDERS: OpenAI.Chat.ChatCompletionTool = {
      type: 'function',
      function: { name: 'list_orders', parameters: { type: 'object', properties: { status: { type: 'string', enum: ['open', 'shipped'] }, limit: { type: 'integer' } } } },
    }
    const ids: string[] = []
    for (const content of ['add_note buy milk', 'add_note buy milk', 'add_note call the bank']) {
      const answer = await client.chat.completions.create({ model: 'local-chat', messages: [{ role: 'user', content }], tools: [NOTE] })
      const call = answer.choices[0]!.message.tool_calls![0]!
      if (call.type !== 'function') throw new Error('not a function call')
      ids.push(call.id)
      expect(JSON.parse(call.function.arguments)).toEqual({ text: content.slice('add_note '.length) })
    }
    expect(new Set(ids).size).toBe(3)
    const listed = await client.chat.completions.create({ model: 'local-chat', messages: [{ role: 'user', content: 'list_orders: the 5 latest shipped ones' }], tools: [NOTE, ORDERS] })
    const call = listed.choices[0]!.message.tool_calls![0]!
    if (call.type !== 'function') throw new Error('not a function call')
    expect(call.function.name).toBe('list_orders')
    expect(JSON.parse(call.function.arguments)).toEqual({ status: 'shipped', limit: 5 })
  })
})

describe('the catalogue', () => {
  test('models.list pages through GET /v1/models', async () => {
    const ids: string[] = []
    for await (const m of client.models.list()) ids.push(m.id)
    expect(ids).toEqual(expect.arrayContaining(['local-chat', 'local-embed', 'local-rerank']))
  })
})

describe('what the OpenAI wire format has and the service does not do is a 400 naming the parameter', () => {
  test('models.retrieve: the model object of the catalogue; an unknown id is NotFoundError', async () => {
    const model = await client.models.retrieve('local-embed')
    expect(model).toMatchObject({ id: 'local-embed', object: 'model', owned_by: expect.any(String), created: expect.any(Number) })
    const listed = (await client.models.list()).data.find((m) => m.id === 'local-embed')
    const { request_id: _, ...fields } = model as unknown as Record<string, unknown>
    expect(listed).toEqual(fields as never)
    const err = await thrown(() => client.models.retrieve('no-such-model'))
    expect(err).toBeInstanceOf(OpenAI.NotFoundError)
  })

  test('local-chat: n: 1 is fine, n: 2 is refused rather than answered with one choice (it answers one)', async () => {
    const one = await client.chat.completions.create({ model: 'local-chat', messages: MESSAGES, n: 1 })
    expect(one.choices).toHaveLength(1)
    const err = await thrown(() => client.chat.completions.create({ model: 'local-chat', messages: MESSAGES, n: 2 }))
    expect(err).toBeInstanceOf(OpenAI.BadRequestError)
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('n')
  })

  test.each([
    ['presence_penalty', { presence_penalty: 0.5 }],
    ['logprobs', { logprobs: true }],
    ['seed', { seed: 7 }],
  ])('local-chat: %s with a value other than the default is refused, naming it (the local models take none of them)', async (param, extra) => {
    const err = await thrown(() => client.chat.completions.create({ model: 'local-chat', messages: MESSAGES, ...extra }))
    expect(err).toBeInstanceOf(OpenAI.BadRequestError)
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).param).toBe(param)
  })

  test('response_format: local-chat cannot produce structured output and says so, naming it (docs/models.md, "Structured output")', async () => {
    for (const response_format of [{ type: 'json_object' as const }, { type: 'json_schema' as const, json_schema: { name: 'verdict', schema: { type: 'object' } } }]) {
      const err = await thrown(() => client.chat.completions.create({ model: 'local-chat', messages: MESSAGES, response_format }))
      expect(err).toBeInstanceOf(OpenAI.BadRequestError)
      expect((err as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('response_format')
    }
    const text = await client.chat.completions.create({ model: 'local-chat', messages: MESSAGES, response_format: { type: 'text' } })
    expect(text.choices[0]!.message.content).toBeTruthy()
  })

  test('defaults are accepted (clients send them), and max_completion_tokens works as max_tokens', async () => {
    const c = await client.chat.completions.create({
      model: 'local-chat', messages: MESSAGES, presence_penalty: 0, frequency_penalty: 0, logprobs: false, store: false, parallel_tool_calls: true, max_completion_tokens: 50,
    })
    expect(c.choices[0]!.message.content).toBeTruthy()
  })

  test('an unknown parameter is refused, naming it', async () => {
    const err = await thrown(() => client.chat.completions.create({ model: 'local-chat', messages: MESSAGES, temprature: 0.2 } as never))
    expect(err).toBeInstanceOf(OpenAI.BadRequestError)
    expect(JSON.stringify((err as InstanceType<typeof OpenAI.BadRequestError>).error)).toContain('temprature')
  })

  test('dimensions: the model\'s own is fine; another is refused for a model that cannot be shortened', async () => {
    const native = (await client.models.retrieve('local-embed')) as unknown as { dimensions: number }
    const same = await client.embeddings.create({ model: 'local-embed', input: 'refund', dimensions: native.dimensions, encoding_format: 'float' })
    expect(same.data[0]!.embedding).toHaveLength(native.dimensions)
    const err = await thrown(() => client.embeddings.create({ model: 'local-embed', input: 'refund', dimensions: 8 }))
    expect(err).toBeInstanceOf(OpenAI.BadRequestError)
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('dimensions')
  })
})
