import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { tool } from '@langchain/core/tools'
import { ChatOpenAI, OpenAIEmbeddings } from '@langchain/openai'
import { generateKey } from '../../src/domain/api-keys'
import { apiCall, EMBEDDED, killAll, spawnService, type ServiceProcess } from '../helpers/process'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * LangChain's OpenAI integration (`@langchain/openai`, which sends its own set of default parameters) as
 * a client of the real service: `configuration.baseURL` is `<service>/v1`, and a key of a user in two
 * workspaces names one with X-Workspace-Id (docs/models.md, "OpenAI compatibility").
 */
let tmp: string
let sp: ServiceProcess
let userKey: string
let ws: string

const CONTEXT = 'Our office is in Lisbon. It opens at 9 am on weekdays. Parking is free for visitors.'

beforeAll(async () => {
  tmp = mkdtempSync(join(tmpdir(), 'ap-e2e-langchain-'))
  const rootKey = generateKey()
  sp = spawnService({ env: { ...EMBEDDED, DATA_DIR: join(tmp, 'data'), BOOTSTRAP_API_KEY: rootKey } })
  await sp.ready(45_000)
  const issued = await apiCall(sp, rootKey, 'POST', '/v1/api-keys', { user_id: 'lc-user', name: 'langchain' })
  userKey = issued.body.data.key
  for (const name of ['LC one', 'LC two']) {
    const created = await apiCall(sp, userKey, 'POST', '/v1/workspaces', { name })
    expect(created.status).toBe(201)
    ws ??= created.body.data.id
  }
}, 60_000)

afterAll(async () => {
  await killAll()
  rmSync(tmp, { recursive: true, force: true })
})

const configuration = () => ({ baseURL: `${sp.url}/v1`, defaultHeaders: { 'X-Workspace-Id': ws } })
const chatModel = () => new ChatOpenAI({ model: 'local-chat', apiKey: userKey, configuration: configuration(), maxRetries: 0 })

describe('ChatOpenAI', () => {
  test('invoke: the answer comes from the context, with usage metadata', async () => {
    const answer = await chatModel().invoke([['system', CONTEXT], ['human', 'Where is the office?']])
    expect(String(answer.content)).toContain('Lisbon')
    expect(answer.usage_metadata?.input_tokens).toBeGreaterThan(0)
  })

  test('stream: the chunks add up to the invoke answer', async () => {
    const messages: [string, string][] = [['system', CONTEXT], ['human', 'Is parking free?']]
    const whole = await chatModel().invoke(messages)
    let text = ''
    for await (const chunk of await chatModel().stream(messages)) text += String(chunk.content)
    expect(text).toBe(String(whole.content))
  })

  test('bindTools: a tool call with parsed arguments', async () => {
    const weather = tool(async ({ city }: { city: string }) => `Sunny in ${city}`, {
      name: 'get_weather',
      description: 'Forecast for a city',
      schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    })
    const answer = await chatModel().bindTools([weather]).invoke('Call get_weather for Lisbon, please.')
    expect(answer.tool_calls?.[0]?.name).toBe('get_weather')
    expect(typeof answer.tool_calls?.[0]?.args).toBe('object')
  })

  test('a parameter the service does not implement surfaces as an error naming it', async () => {
    const model = new ChatOpenAI({ model: 'local-chat', apiKey: userKey, configuration: configuration(), maxRetries: 0, presencePenalty: 0.5 })
    let message = ''
    try {
      await model.invoke('hello')
    } catch (err) {
      message = String((err as Error).message)
    }
    expect(message).toContain('presence_penalty')
  })
})

describe('OpenAIEmbeddings', () => {
  test('embedQuery and embedDocuments: the vectors of /v1/models/embeddings', async () => {
    const embeddings = new OpenAIEmbeddings({ model: 'local-embed', apiKey: userKey, configuration: configuration(), maxRetries: 0 })
    const [one, many] = await Promise.all([embeddings.embedQuery('refund policy'), embeddings.embedDocuments(['refund policy', 'office hours'])])
    const direct = await apiCall(sp, userKey, 'POST', '/v1/models/embeddings', { model: 'local-embed', input: ['refund policy', 'office hours'], workspace_id: ws })
    expect(direct.status).toBe(200)
    const expected: number[][] = direct.body.data.map((d: { embedding: number[] }) => d.embedding)
    expect(many).toHaveLength(2)
    for (const [i, v] of many.entries()) v.forEach((x, j) => expect(x).toBeCloseTo(expected[i]![j]!, 5))
    one.forEach((x, j) => expect(x).toBeCloseTo(expected[0]![j]!, 5))
  })
})
