import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { rmSync } from 'node:fs'
import OpenAI from 'openai'
import { startFakeProvider, writeModelsFile, type FakeProvider } from '../helpers/fake-provider'
import { keyFor, startHarness, workspaceOf, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * OpenAI's other chat parameters (docs/models.md, "OpenAI compatibility"), through the official SDK
 * over HTTP on loopback: passed as sent to an OpenAI-kind provider (the fake records the bytes it
 * receives), mapped or refused for an Anthropic one, a route that cannot take one passed over, and
 * what the provider adds to its answer handed back unchanged.
 */
let h: Harness
let fake: FakeProvider
let server: ReturnType<typeof Bun.serve>
let dir: string
let client: OpenAI

const MESSAGES: OpenAI.Chat.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Say hello.' }]
const WEATHER: OpenAI.Chat.ChatCompletionTool = {
  type: 'function',
  function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
}

beforeAll(async () => {
  fake = await startFakeProvider()
  let modelsFile: string
  ;({ dir, file: modelsFile } = writeModelsFile('ap-params-', {
    providers: fake.catalogProviders(),
    models: [
      { id: 'oa-chat', type: 'llm', vendor: 'test', routes: [{ provider: 'oa', model: 'oa-up' }] },
      { id: 'an-chat', type: 'llm', vendor: 'test', routes: [{ provider: 'an', model: 'an-up' }] },
      // Anthropic first: a parameter only OpenAI takes passes that route over.
      { id: 'both-chat', type: 'llm', vendor: 'test', routes: [{ provider: 'an', model: 'both-an-up' }, { provider: 'oa', model: 'both-oa-up' }] },
    ],
  }))
  h = await startHarness({ RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000', MODELS_FILE: modelsFile })
  const key = await keyFor(h, 'params-alice')
  const ws = await workspaceOf(h, key, 'Params')
  server = Bun.serve({ hostname: '127.0.0.1', port: 0, fetch: (req) => h.app.handle(req) })
  client = new OpenAI({ apiKey: key, baseURL: `http://127.0.0.1:${server.port}/v1`, maxRetries: 0, defaultHeaders: { 'X-Workspace-Id': ws } })
})

afterAll(async () => {
  server?.stop(true)
  await h?.close()
  await fake?.close()
  rmSync(dir, { recursive: true, force: true })
})

async function refusal(call: () => Promise<unknown>): Promise<InstanceType<typeof OpenAI.BadRequestError>> {
  try {
    await call()
  } catch (err) {
    expect(err).toBeInstanceOf(OpenAI.BadRequestError)
    return err as InstanceType<typeof OpenAI.BadRequestError>
  }
  throw new Error('the call was answered, not refused')
}

const PASSED = {
  seed: 7,
  reasoning_effort: 'low',
  logprobs: true,
  top_logprobs: 2,
  presence_penalty: 0.5,
  frequency_penalty: -0.5,
  logit_bias: { '50256': -100 },
  metadata: { team: 'billing' },
  service_tier: 'flex',
  verbosity: 'low',
  prompt_cache_key: 'greeting-v1',
  safety_identifier: 'user-hash-1',
  prediction: { type: 'content', content: 'Hello' },
} as const

describe('an OpenAI-kind provider', () => {
  test('gets every parameter as the client sent it, and its answer comes back with what it added', async () => {
    const before = fake.requests.length
    const c = await client.chat.completions.create({ model: 'oa-chat', messages: MESSAGES, ...PASSED } as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming)
    expect(fake.requests.length).toBe(before + 1)
    const sent = fake.sentFor('oa-up')
    expect(sent.path).toBe('/v1/chat/completions')
    for (const [param, value] of Object.entries(PASSED)) expect([param, sent.json[param]]).toEqual([param, value])
    expect(c.system_fingerprint).toBe('fp_fake')
    expect(c.service_tier).toBe('flex')
    expect(c.choices[0]!.logprobs?.content?.[0]).toMatchObject({ token: 'echo', logprob: -0.25 })
    expect(c.usage?.completion_tokens_details).toEqual({ reasoning_tokens: 2, accepted_prediction_tokens: 0 })
  })

  test('n: several choices, every one answered, the usage counting them all', async () => {
    const one = await client.chat.completions.create({ model: 'oa-chat', messages: MESSAGES })
    const three = await client.chat.completions.create({ model: 'oa-chat', messages: MESSAGES, n: 3 })
    expect(fake.sentFor('oa-up').json.n).toBe(3)
    expect(three.choices.map((ch) => ch.index)).toEqual([0, 1, 2])
    expect(three.choices[2]!.message.content).toContain('(choice 2)')
    expect(three.usage!.completion_tokens).toBe(one.usage!.completion_tokens * 3)
  })

  test('defaults are left out of what is sent: null, n: 1, penalties 0, logprobs false, parallel_tool_calls true', async () => {
    await client.chat.completions.create({
      model: 'oa-chat', messages: MESSAGES, n: 1, seed: null, presence_penalty: 0, frequency_penalty: 0, logprobs: false, parallel_tool_calls: true, metadata: {}, service_tier: 'auto',
    })
    const sent = fake.sentFor('oa-up').json
    for (const param of ['n', 'seed', 'presence_penalty', 'frequency_penalty', 'logprobs', 'parallel_tool_calls', 'metadata', 'service_tier']) expect([param, param in sent]).toEqual([param, false])
  })

  test('streamed: the parameters are sent, the chunks are the provider\'s own', async () => {
    const stream = await client.chat.completions.create({ model: 'oa-chat', messages: MESSAGES, stream: true, seed: 11, reasoning_effort: 'high' })
    const chunks: OpenAI.Chat.ChatCompletionChunk[] = []
    for await (const chunk of stream) chunks.push(chunk)
    const sent = fake.sentFor('oa-up').json
    expect([sent.seed, sent.reasoning_effort, sent.stream]).toEqual([11, 'high', true])
    expect(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('')).toBe('echo: Say hello.')
    expect(chunks.every((c) => c.system_fingerprint === 'fp_fake')).toBe(true)
  })

  test('a value of the wrong type is refused before any provider is called, naming the parameter', async () => {
    const before = fake.requests.length
    for (const [param, value] of [['seed', 'seven'], ['logprobs', 'yes'], ['n', 0], ['top_logprobs', 21], ['logit_bias', { token: 1 }]] as const) {
      const err = await refusal(() => client.chat.completions.create({ model: 'oa-chat', messages: MESSAGES, [param]: value } as never))
      expect(JSON.stringify(err.error)).toContain(param)
    }
    expect(fake.requests.length).toBe(before)
  })
})

describe('an Anthropic provider', () => {
  test('a parameter it has no equivalent of is a 400 naming it, and nothing is sent', async () => {
    const before = fake.requests.length
    for (const [param, extra] of [['seed', { seed: 7 }], ['reasoning_effort', { reasoning_effort: 'low' }], ['n', { n: 2 }], ['logprobs', { logprobs: true }]] as const) {
      const err = await refusal(() => client.chat.completions.create({ model: 'an-chat', messages: MESSAGES, ...extra }))
      expect(err.param).toBe(param)
      expect(err.message).toContain('anthropic')
    }
    const streamed = await refusal(() => client.chat.completions.create({ model: 'an-chat', messages: MESSAGES, stream: true, seed: 1 }))
    expect(streamed.param).toBe('seed')
    expect(fake.requests.length).toBe(before)
  })

  test('parallel_tool_calls: false is mapped to tool_choice.disable_parallel_tool_use', async () => {
    await client.chat.completions.create({ model: 'an-chat', messages: MESSAGES, tools: [WEATHER], parallel_tool_calls: false })
    const sent = fake.sentFor('an-up')
    expect(sent.path).toBe('/v1/messages')
    expect(sent.json.tool_choice).toEqual({ type: 'auto', disable_parallel_tool_use: true })
    await client.chat.completions.create({ model: 'an-chat', messages: MESSAGES, tools: [WEATHER], tool_choice: 'required', parallel_tool_calls: false })
    expect(fake.sentFor('an-up').json.tool_choice).toEqual({ type: 'any', disable_parallel_tool_use: true })
  })
})

describe('a model routed to both kinds', () => {
  test('a parameter only the OpenAI route takes passes the Anthropic route over; without one, the first route answers', async () => {
    const answered = await client.chat.completions.create({ model: 'both-chat', messages: MESSAGES, seed: 3 })
    expect(answered.choices[0]!.message.content).toBe('echo: Say hello.')
    expect(fake.sentFor('both-oa-up').json.seed).toBe(3)
    expect(fake.requests.some((r) => r.model === 'both-an-up')).toBe(false)
    await client.chat.completions.create({ model: 'both-chat', messages: MESSAGES })
    expect(fake.sentFor('both-an-up').path).toBe('/v1/messages')
  })
})

describe('an agent turn (model agent:<id>)', () => {
  test('takes none of them, refused before the agent is even looked up', async () => {
    const err = await refusal(() => client.chat.completions.create({ model: 'agent:agt_01jbz3k9x8q7r6s5t4v3w2y1z0', messages: MESSAGES, seed: 7 }))
    expect(err.param).toBe('seed')
    expect(err.message).toContain('agent turn')
  })
})

describe('the local models', () => {
  test('take none of them: a 400 naming the parameter', async () => {
    const err = await refusal(() => client.chat.completions.create({ model: 'local-chat', messages: MESSAGES, seed: 7 }))
    expect(err.param).toBe('seed')
    expect(err.message).toContain('local')
  })
})
