import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { rmSync } from 'node:fs'
import OpenAI from 'openai'
import { JSON_INSTRUCTION } from '../../src/domain/models/providers/anthropic'
import { startFakeProvider, writeModelsFile, type FakeProvider } from '../helpers/fake-provider'
import { keyFor, startHarness, workspaceOf, type Answer, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Structured output on the chat routes (docs/models.md, "Structured output"): `response_format`
 * reaches an OpenAI-compatible upstream as sent, becomes a forced tool on Anthropic's wire (its
 * input mapped back to JSON content), is refused by the built-in local-chat, and a malformed one is a
 * 400 naming it. The upstreams are the loopback fake provider, which records every body it received.
 */
let h: Harness
let fake: FakeProvider
let dir: string
let modelsFile: string
let alice: string

const USER = [{ role: 'user', content: 'Is the sky blue?' }]
const SCHEMA = { type: 'object', properties: { answer: { type: 'boolean' }, why: { type: 'string' } }, required: ['answer', 'why'], additionalProperties: false }
const JSON_SCHEMA = { type: 'json_schema', json_schema: { name: 'verdict', schema: SCHEMA, strict: true } } as const
const JSON_OBJECT = { type: 'json_object' } as const
const ROUTES = ['/v1/chat/completions', '/v1/models/llm/chat'] as const

beforeAll(async () => {
  fake = await startFakeProvider()
  ;({ dir, file: modelsFile } = writeModelsFile('ap-structured-', {
    providers: fake.catalogProviders(),
    models: [
      { id: 'oa-chat', type: 'llm', vendor: 'test', routes: [{ provider: 'oa', model: 'oa-up' }] },
      { id: 'an-chat', type: 'llm', vendor: 'test', routes: [{ provider: 'an', model: 'an-up' }] },
    ],
  }))
  h = await startHarness({ RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000', MODELS_FILE: modelsFile })
  alice = await keyFor(h, 'structured-alice')
  await workspaceOf(h, alice, 'Structured')
})
afterAll(async () => {
  await h?.close()
  await fake?.close()
  rmSync(dir, { recursive: true, force: true })
})

const post = (path: string, body: unknown) => h.call('POST', path, { key: alice, body })

/** The content of an SSE answer, its chunks joined. */
function streamedContent(res: Answer): { content: string; finish: string | null; toolCalls: number } {
  expect(res.status).toBe(200)
  let content = ''
  let finish: string | null = null
  let toolCalls = 0
  for (const e of res.text.split('\n\n')) {
    if (!e.startsWith('data: ') || e === 'data: [DONE]') continue
    const chunk = JSON.parse(e.slice('data: '.length))
    for (const c of chunk.choices) {
      content += c.delta.content ?? ''
      toolCalls += c.delta.tool_calls?.length ?? 0
      if (c.finish_reason) finish = c.finish_reason
    }
  }
  return { content, finish, toolCalls }
}

describe('OpenAI-compatible upstream: response_format as sent', () => {
  const cases = ROUTES.flatMap((route) => [JSON_SCHEMA, JSON_OBJECT].flatMap((format) => [false, true].map((stream) => [route, format.type, stream, format] as const)))

  test.each(cases)('%s with %s (stream %p) reaches the upstream unchanged', async (route, _type, stream, format) => {
    const answer = '{"answer": true, "why": "Rayleigh scattering"}'
    fake.script('oa-up', [{ text: answer }])
    const before = fake.requests.length
    const res = await post(route, { model: 'oa-chat', messages: USER, response_format: format, stream })
    expect(res.status).toBe(200)
    expect(fake.requests.length).toBe(before + 1)
    const sent = fake.sentFor('oa-up')
    expect(sent.path).toBe('/v1/chat/completions')
    expect(sent.stream).toBe(stream)
    expect(sent.json.response_format).toEqual(format)
    const content = stream ? streamedContent(res).content : res.body.choices[0].message.content
    expect(JSON.parse(content)).toEqual({ answer: true, why: 'Rayleigh scattering' })
  })

  test('{ type: "text" } and null are accepted; text is passed on, null is not', async () => {
    fake.script('oa-up', [{ text: 'plain' }])
    const text = await post('/v1/chat/completions', { model: 'oa-chat', messages: USER, response_format: { type: 'text' } })
    expect(text.status).toBe(200)
    expect(fake.sentFor('oa-up').json.response_format).toEqual({ type: 'text' })
    const none = await post('/v1/chat/completions', { model: 'oa-chat', messages: USER, response_format: null })
    expect(none.status).toBe(200)
    expect('response_format' in fake.sentFor('oa-up').json).toBe(false)
  })

  test('the official openai SDK sends response_format and reads the JSON answer, streamed and not', async () => {
    const client = new OpenAI({
      apiKey: alice,
      baseURL: `${h.base}/v1`,
      maxRetries: 0,
      fetch: (url, init) => h.app.handle(new Request(url as string, init as RequestInit)),
    })
    fake.script('oa-up', [{ text: '{"answer": false, "why": "night"}' }])
    const completion = await client.chat.completions.create({ model: 'oa-chat', messages: [{ role: 'user', content: 'Is the sky blue?' }], response_format: JSON_SCHEMA as OpenAI.ResponseFormatJSONSchema })
    expect(JSON.parse(completion.choices[0]!.message.content!)).toEqual({ answer: false, why: 'night' })
    expect(fake.sentFor('oa-up').json.response_format).toEqual(JSON_SCHEMA)

    const stream = await client.chat.completions.create({ model: 'oa-chat', messages: [{ role: 'user', content: 'Is the sky blue?' }], response_format: { type: 'json_object' }, stream: true })
    let content = ''
    for await (const chunk of stream) content += chunk.choices[0]?.delta.content ?? ''
    expect(JSON.parse(content)).toEqual({ answer: false, why: 'night' })
    expect(fake.sentFor('oa-up').json.response_format).toEqual({ type: 'json_object' })

    const err = await client.chat.completions.create({ model: 'oa-chat', messages: [{ role: 'user', content: 'x' }], response_format: { type: 'json_schema', json_schema: { name: 'has space', schema: {} } } }).then(() => null, (e: unknown) => e)
    expect(err).toBeInstanceOf(OpenAI.BadRequestError)
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).param).toStartWith('response_format')
  })
})

describe('malformed response_format: 400 naming it', () => {
  const bad: [string, unknown][] = [
    ['an unknown type', { type: 'yaml' }],
    ['a string', 'json_object'],
    ['json_schema without json_schema', { type: 'json_schema' }],
    ['no name', { type: 'json_schema', json_schema: { schema: SCHEMA } }],
    ['a name with a space', { type: 'json_schema', json_schema: { name: 'my schema', schema: SCHEMA } }],
    ['a name of 65 characters', { type: 'json_schema', json_schema: { name: 'x'.repeat(65), schema: SCHEMA } }],
    ['a schema that is an array', { type: 'json_schema', json_schema: { name: 'v', schema: [SCHEMA] } }],
    ['no schema', { type: 'json_schema', json_schema: { name: 'v' } }],
    ['strict not a boolean', { type: 'json_schema', json_schema: { name: 'v', schema: SCHEMA, strict: 'yes' } }],
    ['an unknown field in json_schema', { type: 'json_schema', json_schema: { name: 'v', schema: SCHEMA, mode: 'fast' } }],
    ['json_schema beside json_object', { type: 'json_object', json_schema: { name: 'v', schema: SCHEMA } }],
  ]
  test.each(ROUTES.flatMap((route) => bad.map(([what, v]) => [route, what, v] as const)))('%s: %s', async (route, _what, value) => {
    const before = fake.requests.length
    const res = await post(route, { model: 'oa-chat', messages: USER, response_format: value })
    expect(res.status).toBe(400)
    expect(res.body.error.code).toBe('validation_error')
    expect(res.body.error.param).toStartWith('response_format')
    expect(fake.requests.length).toBe(before)
  })
})

describe('Anthropic upstream: a forced tool for json_schema, an instruction for json_object', () => {
  test('json_schema: the schema is a tool the model must call; its input comes back as the JSON content', async () => {
    fake.script('an-up', [{ toolCalls: [{ name: 'verdict', arguments: { answer: true, why: 'scattering' } }] }])
    const res = await post('/v1/models/llm/chat', { model: 'an-chat', messages: [{ role: 'system', content: 'Be brief.' }, ...USER], response_format: JSON_SCHEMA })
    expect(res.status).toBe(200)
    const sent = fake.sentFor('an-up')
    expect(sent.path).toBe('/v1/messages')
    expect(sent.json.tools).toEqual([{ name: 'verdict', description: 'The answer, as structured data', input_schema: SCHEMA }])
    expect(sent.json.tool_choice).toEqual({ type: 'tool', name: 'verdict' })
    expect(sent.json.system).toStartWith('Be brief.\n\n')
    expect(sent.json.system).toContain('calling the tool verdict')
    expect('response_format' in sent.json).toBe(false)
    const choice = res.body.choices[0]
    expect(JSON.parse(choice.message.content)).toEqual({ answer: true, why: 'scattering' })
    expect(choice.message.tool_calls).toBeUndefined()
    expect(choice.finish_reason).toBe('stop')
  })

  test('json_schema streamed: the tool input arrives as content deltas, no tool call, finish stop', async () => {
    fake.script('an-up', [{ toolCalls: [{ name: 'verdict', arguments: { answer: false, why: 'it is night here' } }] }])
    const res = await post('/v1/chat/completions', { model: 'an-chat', messages: USER, response_format: JSON_SCHEMA, stream: true })
    const { content, finish, toolCalls } = streamedContent(res)
    expect(fake.sentFor('an-up').stream).toBe(true)
    expect(fake.sentFor('an-up').json.tool_choice).toEqual({ type: 'tool', name: 'verdict' })
    expect(JSON.parse(content)).toEqual({ answer: false, why: 'it is night here' })
    expect(toolCalls).toBe(0)
    expect(finish).toBe('stop')
  })

  test('json_schema beside the caller\'s tools: tool_choice any, and a real tool call stays a tool call', async () => {
    const weather = { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }
    fake.script('an-up', [{ toolCalls: [{ name: 'get_weather', arguments: { city: 'Lisbon' } }] }])
    const res = await post('/v1/models/llm/chat', { model: 'an-chat', messages: USER, tools: [weather], response_format: JSON_SCHEMA })
    expect(res.status).toBe(200)
    const sent = fake.sentFor('an-up').json
    expect(sent.tools.map((t: { name: string }) => t.name)).toEqual(['get_weather', 'verdict'])
    expect(sent.tool_choice).toEqual({ type: 'any' })
    expect(res.body.choices[0].message.tool_calls[0].function).toEqual({ name: 'get_weather', arguments: '{"city":"Lisbon"}' })
    expect(res.body.choices[0].finish_reason).toBe('tool_calls')
    // A tool the caller named stays the choice; "none" leaves the schema's tool the only one to call.
    fake.script('an-up', [{ toolCalls: [{ name: 'verdict', arguments: { answer: true, why: 'x' } }] }])
    expect((await post('/v1/models/llm/chat', { model: 'an-chat', messages: USER, tools: [weather], tool_choice: { type: 'function', function: { name: 'get_weather' } }, response_format: JSON_SCHEMA })).status).toBe(200)
    expect(fake.sentFor('an-up').json.tool_choice).toEqual({ type: 'tool', name: 'get_weather' })
    const none = await post('/v1/models/llm/chat', { model: 'an-chat', messages: USER, tools: [weather], tool_choice: 'none', response_format: JSON_SCHEMA })
    expect(fake.sentFor('an-up').json.tool_choice).toEqual({ type: 'tool', name: 'verdict' })
    expect(JSON.parse(none.body.choices[0].message.content)).toEqual({ answer: true, why: 'x' })
    // A tool named as the schema would be ambiguous: refused, naming response_format.
    const clash = await post('/v1/models/llm/chat', { model: 'an-chat', messages: USER, tools: [{ ...weather, function: { ...weather.function, name: 'verdict' } }], response_format: JSON_SCHEMA })
    expect(clash.status).toBe(400)
    expect(clash.body.error.param).toBe('response_format')
  })

  test('json_object: a system instruction, the text answered as is', async () => {
    fake.script('an-up', [{ text: '{"ok": true}' }])
    const res = await post('/v1/chat/completions', { model: 'an-chat', messages: USER, response_format: JSON_OBJECT })
    expect(res.status).toBe(200)
    const sent = fake.sentFor('an-up').json
    expect(sent.system).toBe(JSON_INSTRUCTION)
    expect(sent.tools).toBeUndefined()
    expect(sent.tool_choice).toBeUndefined()
    expect(JSON.parse(res.body.choices[0].message.content)).toEqual({ ok: true })
  })

  test('json_schema whose root is not an object: the schema travels in the instruction', async () => {
    const list = { type: 'json_schema', json_schema: { name: 'colours', schema: { type: 'array', items: { type: 'string' } } } }
    fake.script('an-up', [{ text: '["blue"]' }])
    const res = await post('/v1/models/llm/chat', { model: 'an-chat', messages: USER, response_format: list })
    expect(res.status).toBe(200)
    const sent = fake.sentFor('an-up').json
    expect(sent.tools).toBeUndefined()
    expect(sent.system).toContain('{"type":"array","items":{"type":"string"}}')
    expect(res.body.choices[0].message.content).toBe('["blue"]')
  })
})

describe('local-chat: structured output refused, naming response_format', () => {
  test.each(ROUTES.flatMap((route) => [JSON_OBJECT, JSON_SCHEMA].flatMap((f) => [false, true].map((stream) => [route, f.type, stream, f] as const))))('%s %s (stream %p) → 400', async (route, _type, stream, format) => {
    const res = await post(route, { model: 'local-chat', messages: USER, response_format: format, stream })
    expect(res.status).toBe(400)
    expect(res.body.error).toMatchObject({ code: 'validation_error', param: 'response_format' })
    expect(res.body.error.message).toContain('cannot produce structured output')
  })

  test('{ type: "text" } is the default and answered', async () => {
    const res = await post('/v1/chat/completions', { model: 'local-chat', messages: USER, response_format: { type: 'text' } })
    expect(res.status).toBe(200)
  })
})

describe('OpenAPI', () => {
  test('both chat routes document response_format with json_object and json_schema', async () => {
    const res = await h.call('GET', '/docs/json', { key: null })
    expect(res.status).toBe(200)
    for (const path of ROUTES) {
      const schema = res.body.paths[path].post.requestBody.content['application/json'].schema
      const body = schema.$ref ? res.body.components.schemas[schema.$ref.split('/').at(-1)] : schema
      const text = JSON.stringify(body.properties.response_format)
      expect(text).toContain('"json_object"')
      expect(text).toContain('"json_schema"')
      expect(text).toContain('^[a-zA-Z0-9_-]{1,64}$')
    }
  })
})
