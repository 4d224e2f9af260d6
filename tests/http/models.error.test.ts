import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { countTokens } from '../../src/lib/tokens'
import { keyFor, startHarness, workspaceOf, type Answer, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

/** Refusals of the model endpoints and the OpenAI drop-ins: every one in the error shape of docs/api.md ("Errors"). */
let h: Harness
let alice: string
let ws: string

beforeAll(async () => {
  h = await startHarness({ RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000' })
  alice = await keyFor(h, 'me-alice')
  ws = await workspaceOf(h, alice, 'Errors')
})
afterAll(() => h?.close())

/** docs/api.md, "Errors": `{ request_id, error: { code, message, param?, details? } }`, nothing else, nothing internal. */
function expectError(res: Answer, status: number, code: string, param?: string) {
  expect({ status: res.status, code: res.body?.error?.code, param: res.body?.error?.param }).toEqual({ status, code, param: param ?? res.body?.error?.param })
  if (param !== undefined) expect(res.body.error.param).toBe(param)
  expect(res.headers.get('content-type')).toStartWith('application/json')
  expect(Object.keys(res.body).sort()).toEqual(['error', 'request_id'])
  expect(res.body.request_id).toBe(res.headers.get('x-request-id'))
  for (const k of Object.keys(res.body.error)) expect(['code', 'details', 'message', 'param']).toContain(k)
  expect(typeof res.body.error.message).toBe('string')
  expect(res.body.error.message.length).toBeGreaterThan(0)
  if (res.body.error.details !== undefined) {
    expect(Array.isArray(res.body.error.details)).toBe(true)
    for (const d of res.body.error.details) expect(Object.keys(d).sort()).toEqual(['message', 'path'])
  }
  // Nothing internal: no stack, no SQL, no file path.
  expect(res.text).not.toMatch(/\bat \S+ \(|\/src\/|\.ts:\d|select |insert into/i)
}

const USER = [{ role: 'user', content: 'hello' }]
const post = (path: string, body: unknown, opts: { key?: string | null; headers?: Record<string, string> } = {}) =>
  h.call('POST', path, { key: opts.key === undefined ? alice : opts.key, headers: opts.headers, body })

/** Nothing may have been charged for a refused call. */
async function nothingCharged(res: Answer) {
  await h.deps.models.charges.flush()
  const rows = await h.deps.db.sql`select 1 from credit_ledger where request_id = ${res.body.request_id}`
  expect(rows.length).toBe(0)
}

describe('models by id and type', () => {
  test('an unknown model: 404 not_found, param model, on every endpoint (and streamed)', async () => {
    const calls: [string, unknown][] = [
      ['/v1/models/llm/chat', { model: 'no-such-model', messages: USER }],
      ['/v1/models/llm/chat', { model: 'no-such-model', messages: USER, stream: true }],
      ['/v1/models/embeddings', { model: 'no-such-model', input: ['x'] }],
      ['/v1/models/rerank', { model: 'no-such-model', query: 'x', documents: ['x'] }],
      ['/v1/chat/completions', { model: 'no-such-model', messages: USER }],
      ['/v1/embeddings', { model: 'no-such-model', input: 'x' }],
    ]
    for (const [path, body] of calls) {
      const res = await post(path, body)
      expectError(res, 404, 'not_found', 'model')
      expect(res.body.error.message).toContain('no-such-model')
      await nothingCharged(res)
    }
  })

  test('a model of another type: 400 validation_error, param model', async () => {
    const calls: [string, unknown][] = [
      ['/v1/models/embeddings', { model: 'local-chat', input: ['x'] }],
      ['/v1/embeddings', { model: 'local-chat', input: ['x'] }],
      ['/v1/models/llm/chat', { model: 'local-embed', messages: USER }],
      ['/v1/models/llm/chat', { model: 'local-rerank', messages: USER }],
      ['/v1/chat/completions', { model: 'local-embed', messages: USER }],
      ['/v1/chat/completions', { model: 'local-rerank', messages: USER, stream: true }],
      ['/v1/models/rerank', { model: 'local-chat', query: 'x', documents: ['x'] }],
      ['/v1/models/rerank', { model: 'local-embed', query: 'x', documents: ['x'] }],
    ]
    for (const [path, body] of calls) {
      const res = await post(path, body)
      expectError(res, 400, 'validation_error', 'model')
      await nothingCharged(res)
    }
  })
})

describe('bad bodies', () => {
  const chat = (over: Record<string, unknown>) => ({ model: 'local-chat', messages: USER, ...over })

  test.each([
    ['messages empty', chat({ messages: [] }), 'messages'],
    ['messages missing', { model: 'local-chat' }, 'messages'],
    ['model missing', { messages: USER }, 'model'],
    ["role 'robot'", chat({ messages: [{ role: 'robot', content: 'hi' }] }), 'messages.0.role'],
    ['temperature 3', chat({ temperature: 3 }), 'temperature'],
    ['temperature -0.1', chat({ temperature: -0.1 }), 'temperature'],
    ['max_tokens 0', chat({ max_tokens: 0 }), 'max_tokens'],
    ['max_tokens 1.5', chat({ max_tokens: 1.5 }), 'max_tokens'],
    ['stream a string', chat({ stream: 'yes' }), 'stream'],
    ['messages not an array', chat({ messages: 'hello' }), 'messages'],
    ['content a number', chat({ messages: [{ role: 'user', content: 42 }] }), 'messages.0.content'],
  ])('chat: %s → 400 validation_error naming the field', async (_, body, param) => {
    for (const path of ['/v1/models/llm/chat', '/v1/chat/completions']) {
      const res = await post(path, body)
      expectError(res, 400, 'validation_error', param)
      expect(res.body.error.details[0].path).toBe(param)
    }
  })

  test('a tool message without tool_call_id: 400 naming it', async () => {
    const messages = [{ role: 'user', content: 'get_weather for Paris' }, { role: 'tool', content: '{"temp_c": 21}' }]
    for (const path of ['/v1/models/llm/chat', '/v1/chat/completions']) {
      const res = await post(path, { model: 'local-chat', messages })
      expectError(res, 400, 'validation_error', 'messages.1.tool_call_id')
      await nothingCharged(res)
    }
  })

  test('an image content part: 400 (the gateway speaks text)', async () => {
    const messages = [{ role: 'user', content: [{ type: 'text', text: 'what is this?' }, { type: 'image_url', image_url: { url: 'https://example.com/cat.png' } }] }]
    for (const path of ['/v1/models/llm/chat', '/v1/chat/completions']) {
      const res = await post(path, { model: 'local-chat', messages })
      expectError(res, 400, 'validation_error')
      expect(res.body.error.param).toStartWith('messages.0.content')
    }
  })

  test.each([
    ['input not an array', { model: 'local-embed', input: 'refund policy' }, 'input'],
    ['input empty', { model: 'local-embed', input: [] }, 'input'],
    ['input of numbers', { model: 'local-embed', input: [1, 2] }, 'input.0'],
    ['model missing', { input: ['x'] }, 'model'],
  ])('POST /v1/models/embeddings: %s → 400', async (_, body, param) => {
    expectError(await post('/v1/models/embeddings', body), 400, 'validation_error', param)
  })

  test('POST /v1/embeddings: a bad encoding_format or no input → 400', async () => {
    expectError(await post('/v1/embeddings', { model: 'local-embed', input: 'x', encoding_format: 'hex' }), 400, 'validation_error', 'encoding_format')
    expectError(await post('/v1/embeddings', { model: 'local-embed' }), 400, 'validation_error', 'input')
  })

  test.each([
    ['documents empty', { model: 'local-rerank', query: 'refund', documents: [] }, 'documents'],
    ['documents not an array', { model: 'local-rerank', query: 'refund', documents: 'a b' }, 'documents'],
    ['top_n 0', { model: 'local-rerank', query: 'refund', documents: ['a'], top_n: 0 }, 'top_n'],
    ['top_n -1', { model: 'local-rerank', query: 'refund', documents: ['a'], top_n: -1 }, 'top_n'],
    ['query empty', { model: 'local-rerank', query: '', documents: ['a'] }, 'query'],
    ['query missing', { model: 'local-rerank', documents: ['a'] }, 'query'],
  ])('POST /v1/models/rerank: %s → 400', async (_, body, param) => {
    expectError(await post('/v1/models/rerank', body), 400, 'validation_error', param)
  })

  test('an unknown field on the /v1/models endpoints → 400 naming it', async () => {
    const calls: [string, unknown][] = [
      ['/v1/models/llm/chat', { model: 'local-chat', messages: USER, frequency_penalty: 0.5 }],
      ['/v1/models/embeddings', { model: 'local-embed', input: ['x'], frequency_penalty: 0.5 }],
      ['/v1/models/rerank', { model: 'local-rerank', query: 'x', documents: ['x'], frequency_penalty: 0.5 }],
    ]
    for (const [path, body] of calls) expectError(await post(path, body), 400, 'validation_error', 'frequency_penalty')
    // An unknown field inside a message too.
    expectError(await post('/v1/models/llm/chat', { model: 'local-chat', messages: [{ role: 'user', content: 'x', mood: 'happy' }] }), 400, 'validation_error', 'messages.0.mood')
  })

  test('OpenAI parameters the service does not implement: accepted with their default value only', async () => {
    const res = await post('/v1/chat/completions', {
      model: 'local-chat',
      messages: USER,
      frequency_penalty: 0,
      presence_penalty: 0,
      logit_bias: {},
      n: 1,
      response_format: { type: 'text' },
      parallel_tool_calls: true,
      metadata: {},
      store: false,
    })
    expect(res.status).toBe(200)
    expect(res.body.object).toBe('chat.completion')
    const emb = await post('/v1/embeddings', { model: 'local-embed', input: ['x'], user: 'u-1' })
    expect(emb.status).toBe(200)
  })

  test.each([
    ['frequency_penalty', 0.5],
    ['presence_penalty', -1],
    ['logit_bias', { '50256': -100 }],
    ['n', 2],
    ['seed', 42],
    ['response_format', { type: 'json_schema', json_schema: { name: 'no spaces allowed', schema: {} } }],
    ['parallel_tool_calls', false],
    ['metadata', { trace: 'abc' }],
    ['store', true],
    ['logprobs', true],
    ['audio', { voice: 'alloy', format: 'mp3' }],
    ['reasoning_effort', 'low'],
  ])('local-chat: %s with another value → 400 naming it, never silence', async (param, value) => {
    expectError(await post('/v1/chat/completions', { model: 'local-chat', messages: USER, [param]: value }), 400, 'validation_error', param)
  })

  test('unknown fields on the drop-ins → 400 naming them, as OpenAI answers', async () => {
    expectError(await post('/v1/chat/completions', { model: 'local-chat', messages: USER, some_future_param: true }), 400, 'validation_error', 'some_future_param')
    expectError(await post('/v1/embeddings', { model: 'local-embed', input: ['x'], some_future_param: true }), 400, 'validation_error', 'some_future_param')
  })

  test('not JSON → 400 invalid_json', async () => {
    for (const path of ['/v1/models/llm/chat', '/v1/models/embeddings', '/v1/models/rerank', '/v1/chat/completions', '/v1/embeddings']) {
      const res = await h.call('POST', path, { key: alice, raw: '{"model": "local-chat",', headers: { 'content-type': 'application/json' } })
      expectError(res, 400, 'invalid_json')
    }
  })

  test('GET /v1/models: an unknown type or query parameter → 400', async () => {
    expectError(await h.call('GET', '/v1/models?type=video', { key: alice }), 400, 'validation_error', 'query.type')
    expectError(await h.call('GET', '/v1/models?colour=red', { key: alice }), 400, 'validation_error')
  })
})

describe('workspace and authentication', () => {
  test('no workspace resolvable → 400 param workspace_id (none, and several)', async () => {
    const loner = await keyFor(h, 'me-loner')
    const many = await keyFor(h, 'me-many')
    await workspaceOf(h, many, 'One')
    await workspaceOf(h, many, 'Two')
    for (const key of [loner, many]) {
      for (const [path, body] of [
        ['/v1/models/llm/chat', { model: 'local-chat', messages: USER }],
        ['/v1/models/llm/chat', { model: 'local-chat', messages: USER, stream: true }],
        ['/v1/models/embeddings', { model: 'local-embed', input: ['x'] }],
        ['/v1/models/rerank', { model: 'local-rerank', query: 'x', documents: ['x'] }],
        ['/v1/chat/completions', { model: 'local-chat', messages: USER }],
        ['/v1/embeddings', { model: 'local-embed', input: 'x' }],
      ] as const) {
        expectError(await post(path, body, { key }), 400, 'validation_error', 'workspace_id')
      }
    }
  })

  test('a workspace id with characters no id has → 400; an unknown one → 404', async () => {
    expectError(await post('/v1/models/llm/chat', { model: 'local-chat', messages: USER, workspace_id: 'ws one!' }), 400, 'validation_error', 'workspace_id')
    const unknown = 'ws_' + '0'.repeat(26)
    expectError(await post('/v1/models/llm/chat', { model: 'local-chat', messages: USER, workspace_id: unknown }), 404, 'not_found')
    expectError(await post('/v1/models/embeddings', { model: 'local-embed', input: ['x'] }, { headers: { 'x-workspace-id': unknown } }), 404, 'not_found')
  })

  test('no key, or a bad one → 401 with WWW-Authenticate: Bearer', async () => {
    for (const [method, path, body] of [
      ['GET', '/v1/models', undefined],
      ['POST', '/v1/models/llm/chat', { model: 'local-chat', messages: USER }],
      ['POST', '/v1/models/embeddings', { model: 'local-embed', input: ['x'] }],
      ['POST', '/v1/models/rerank', { model: 'local-rerank', query: 'x', documents: ['x'] }],
      ['POST', '/v1/chat/completions', { model: 'local-chat', messages: USER }],
      ['POST', '/v1/embeddings', { model: 'local-embed', input: 'x' }],
    ] as const) {
      for (const key of [null, 'ap_' + 'x'.repeat(40)]) {
        const res = await h.call(method, path, { key, body })
        expectError(res, 401, 'unauthenticated')
        expect(res.headers.get('www-authenticate')).toStartWith('Bearer')
      }
    }
  })
})

describe('special tokens are text', () => {
  const SPECIAL = 'Our office is in Lisbon. <|endoftext|> The context ends here <|im_start|>.'

  test('chat, sync and streamed, with <|endoftext|> in the messages: 200, counted as text', async () => {
    const messages = [{ role: 'system', content: SPECIAL }, { role: 'user', content: 'where is the office? <|endoftext|>' }]
    const res = await post('/v1/models/llm/chat', { model: 'local-chat', messages })
    expect(res.status).toBe(200)
    expect(res.body.usage.prompt_tokens).toBeGreaterThan(countTokens('where is the office?'))
    expect(res.body.usage.completion_tokens).toBe(countTokens(res.body.choices[0].message.content))
    const stream = await post('/v1/models/llm/chat', { model: 'local-chat', messages, stream: true })
    expect(stream.status).toBe(200)
    expect(stream.text.trimEnd().endsWith('data: [DONE]')).toBe(true)
    expect(stream.text).not.toContain('event: error')
    // A context sentence with the marker inside is quoted, marker and all.
    const quoted = await post('/v1/models/llm/chat', { model: 'local-chat', messages: [{ role: 'system', content: 'The <|endoftext|> marker ends a document.' }, { role: 'user', content: 'what ends a document?' }] })
    expect(quoted.status).toBe(200)
    expect(quoted.body.choices[0].message.content).toContain('<|endoftext|>')
    const q = sseOf(await post('/v1/models/llm/chat', { model: 'local-chat', stream: true, messages: [{ role: 'system', content: 'The <|endoftext|> marker ends a document.' }, { role: 'user', content: 'what ends a document?' }] }))
    expect(q).toBe(quoted.body.choices[0].message.content)
  })

  test('embeddings and rerank with <|endoftext|>: 200, tokens counted', async () => {
    const emb = await post('/v1/models/embeddings', { model: 'local-embed', input: ['<|endoftext|>', SPECIAL] })
    expect(emb.status).toBe(200)
    expect(emb.body.usage.tokens).toBe(countTokens('<|endoftext|>') + countTokens(SPECIAL))
    expect(countTokens('<|endoftext|>')).toBeGreaterThan(1)
    const openai = await post('/v1/embeddings', { model: 'local-embed', input: '<|endoftext|>' })
    expect(openai.status).toBe(200)
    expect(openai.body.usage.prompt_tokens).toBe(countTokens('<|endoftext|>'))
    const rr = await post('/v1/models/rerank', { model: 'local-rerank', query: '<|endoftext|>', documents: [SPECIAL, 'nothing here'] })
    expect(rr.status).toBe(200)
    expect(rr.body.usage.tokens).toBeGreaterThan(0)
  })
})

/** The content of a chat stream: its deltas joined. */
function sseOf(res: Answer): string {
  expect(res.status).toBe(200)
  return res.text
    .split('\n\n')
    .filter((e) => e.startsWith('data: {'))
    .map((e) => JSON.parse(e.slice(6)))
    .map((c: any) => c.choices[0]?.delta?.content ?? '')
    .join('')
}

test('the workspace of the harness is used by default (sanity of the fixtures above)', async () => {
  const res = await post('/v1/models/embeddings', { model: 'local-embed', input: ['x'] })
  expect(res.status).toBe(200)
  await h.deps.models.charges.flush()
  const [row] = await h.deps.db.sql<{ workspace_id: string }[]>`select workspace_id from credit_ledger where request_id = ${res.body.request_id}`
  expect(row!.workspace_id).toBe(ws)
})
