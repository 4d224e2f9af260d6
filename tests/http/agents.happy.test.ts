import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { startWorkers, type Workers } from '../../src/workers'
import { ISO_MS, META, chatOk, createAgent, createWorkflow, echoGraph, messagesOf, postAgent, rowCount } from '../helpers/agents'
import { keyFor, startHarness, workspaceOf, type Answer, type Harness } from '../helpers/harness'
import { createKb, settled, uploadText } from '../helpers/knowledge'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Agents and conversations over HTTP (docs/agents.md): definitions, conversations and
 * their history, a local-chat agent answering from a real knowledge base, a chatflow answering with
 * its workflow's run, and the agent.message.received outbox event. The workers run (documents, runs).
 */

let h: Harness
let workers: Workers
let owner: string
let ws: string

beforeAll(async () => {
  h = await startHarness({ RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000' })
  workers = await startWorkers(h.deps)
  owner = await keyFor(h, 'ah-owner')
  ws = await workspaceOf(h, owner, 'Agents')
})
afterAll(async () => {
  await workers?.stop()
  await h?.close()
})

const HTTP_TOOL = {
  type: 'http', name: 'weather', description: 'The weather of a city', method: 'GET', url: 'https://api.example.com/weather/{city}',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
}

describe('agent definitions', () => {
  test('POST: 201 in the envelope, active at version 1, the definition as sent; GET answers the same', async () => {
    const res = await postAgent(h, owner, ws, { name: 'Support', instructions: 'Answer briefly.', tools: [HTTP_TOOL] })
    expect(res.status).toBe(201)
    expect(res.body).toEqual({
      request_id: res.headers.get('x-request-id'),
      data: {
        id: expect.stringMatching(/^agt_[0-9a-z]{26}$/),
        name: 'Support',
        type: 'agent',
        model: 'local-chat',
        workspace_id: ws,
        status: 'active',
        version: 1,
        instructions: 'Answer briefly.',
        tools: [HTTP_TOOL],
        knowledge_base_ids: [],
        workflow_id: null,
        created_at: expect.stringMatching(ISO_MS),
        updated_at: expect.stringMatching(ISO_MS),
      },
      meta: META,
    })
    const got = await h.call('GET', `/v1/agents/${res.body.data.id}`, { key: owner })
    expect(got.status).toBe(200)
    expect(got.body).toEqual({ request_id: got.headers.get('x-request-id'), data: res.body.data, meta: META })
  })

  test('instructions default to empty, tools and knowledge bases to none', async () => {
    const a = await createAgent(h, owner, ws, { name: 'Bare' })
    expect(a).toMatchObject({ instructions: '', tools: [], knowledge_base_ids: [], workflow_id: null, status: 'active', version: 1 })
  })

  describe('list', () => {
    let listWs: string
    const made: { id: string; type: string; status: string }[] = []
    beforeAll(async () => {
      listWs = await workspaceOf(h, owner, 'Agent list')
      const wf = await createWorkflow(h, owner, listWs)
      const kinds = [['agent', 'active'], ['chatflow', 'active'], ['agent', 'disabled'], ['agent', 'active'], ['chatflow', 'disabled']] as const
      for (const [type, status] of kinds) {
        const a = await createAgent(h, owner, listWs, { type, status, ...(type === 'chatflow' ? { workflow_id: wf } : {}) })
        made.push({ id: a.id, type, status })
      }
    })
    const newestFirst = (keep: (a: (typeof made)[number]) => boolean) => made.filter(keep).map((a) => a.id).reverse()
    const ids = async (query: string) => {
      const res = await h.call('GET', `/v1/agents?workspace_id=${listWs}${query}`, { key: owner })
      expect(res.status).toBe(200)
      expect(Object.keys(res.body).sort()).toEqual(['data', 'has_more', 'next_cursor', 'request_id'])
      return res.body.data.map((a: any) => a.id)
    }

    test.each([
      ['', () => true],
      ['&type=agent', (a: (typeof made)[number]) => a.type === 'agent'],
      ['&type=chatflow', (a: (typeof made)[number]) => a.type === 'chatflow'],
      ['&status=disabled', (a: (typeof made)[number]) => a.status === 'disabled'],
      ['&type=chatflow&status=active', (a: (typeof made)[number]) => a.type === 'chatflow' && a.status === 'active'],
      ['&type_in=agent,chatflow&status=active', (a: (typeof made)[number]) => a.status === 'active'],
    ])('query "%s": the matching agents, newest first', async (query, keep) => {
      expect(await ids(query)).toEqual(newestFirst(keep))
    })

    test('pages of 2 follow next_cursor without repeats or gaps', async () => {
      const seen: string[] = []
      let cursor: string | null = null
      let pages = 0
      do {
        const res: Answer = await h.call('GET', `/v1/agents?workspace_id=${listWs}&limit=2${cursor ? `&cursor=${cursor}` : ''}`, { key: owner })
        expect(res.status).toBe(200)
        seen.push(...res.body.data.map((a: any) => a.id))
        cursor = res.body.next_cursor
        expect(res.body.has_more).toBe(cursor !== null)
        pages++
      } while (cursor)
      expect(pages).toBe(3)
      expect(seen).toEqual(newestFirst(() => true))
    })
  })

  test('PATCH replaces the given fields and bumps version by one; each answer records the version that gave it', async () => {
    const a = await createAgent(h, owner, ws, { name: 'Versioned', instructions: 'First.' })
    const first = await chatOk(h, owner, a.id, { message: 'hello', user_id: 'end-1' })
    const patched = await h.call('PATCH', `/v1/agents/${a.id}`, { key: owner, body: { instructions: 'Second.' } })
    expect(patched.status).toBe(200)
    expect(patched.body.meta).toEqual(META)
    expect(patched.body.data).toEqual({ ...a, instructions: 'Second.', version: 2, updated_at: expect.stringMatching(ISO_MS) })
    expect(Date.parse(patched.body.data.updated_at)).toBeGreaterThanOrEqual(Date.parse(a.updated_at))
    expect((await h.call('GET', `/v1/agents/${a.id}`, { key: owner })).body.data).toEqual(patched.body.data)
    await chatOk(h, owner, a.id, { message: 'hello again', user_id: 'end-1', conversation_id: first.conversation_id })
    const renamed = await h.call('PATCH', `/v1/agents/${a.id}`, { key: owner, body: { name: 'Renamed' } })
    expect(renamed.body.data).toMatchObject({ name: 'Renamed', instructions: 'Second.', version: 3 })
    const messages = await messagesOf(h, owner, first.conversation_id)
    expect(messages.map((m) => [m.role, m.agent_version])).toEqual([['user', 1], ['assistant', 1], ['user', 2], ['assistant', 2]])
  })

  // Fails as built: PatchAgent's `type` (t.UnionEnum, src/routes/agents.model.ts) defaults to 'agent', so any PATCH
  // without `type` turns a chatflow into an agent.
  test('PATCH of a chatflow\'s name keeps its type and workflow', async () => {
    const wf = await createWorkflow(h, owner, ws)
    const a = await createAgent(h, owner, ws, { name: 'Flow agent', type: 'chatflow', workflow_id: wf })
    const res = await h.call('PATCH', `/v1/agents/${a.id}`, { key: owner, body: { name: 'Flow agent 2' } })
    expect(res.status).toBe(200)
    expect(res.body.data).toEqual({ ...a, name: 'Flow agent 2', version: 2, updated_at: res.body.data.updated_at })
  })

  test('DELETE: {id, deleted: true}; the agent is then 404 and its conversations and messages are gone', async () => {
    const a = await createAgent(h, owner, ws, { name: 'Doomed' })
    const c = await chatOk(h, owner, a.id, { message: 'remember me', user_id: 'end-1' })
    const res = await h.call('DELETE', `/v1/agents/${a.id}`, { key: owner })
    expect(res.status).toBe(200)
    expect(res.body).toEqual({ request_id: res.headers.get('x-request-id'), data: { id: a.id, deleted: true }, meta: META })
    for (const [method, path] of [['GET', `/v1/agents/${a.id}`], ['DELETE', `/v1/agents/${a.id}`], ['GET', `/v1/agents/${a.id}/conversations`], ['GET', `/v1/conversations/${c.conversation_id}`]]) {
      const gone = await h.call(method!, path!, { key: owner })
      expect({ path, status: gone.status, code: gone.body.error?.code }).toEqual({ path, status: 404, code: 'not_found' })
    }
    expect(await rowCount(h, 'conversations', 'agent_id', a.id)).toBe(0)
    expect(await rowCount(h, 'messages', 'conversation_id', c.conversation_id)).toBe(0)
  })
})

describe('conversations', () => {
  let agent: string
  const LONG = `  What is the   opening\ntime of the office on weekdays, and does it change during the summer holidays?  `
  const FLAT = 'What is the opening time of the office on weekdays, and does it change during the summer holidays?'
  /** a: end-1 (two turns, the newest activity), b: end-2, c: end-1. */
  const conv = { a: '', b: '', c: '' }
  beforeAll(async () => {
    agent = (await createAgent(h, owner, ws, { name: 'Talker' })).id
    conv.a = (await chatOk(h, owner, agent, { message: LONG, user_id: 'end-1' })).conversation_id
    conv.b = (await chatOk(h, owner, agent, { message: 'Short one', user_id: 'end-2' })).conversation_id
    conv.c = (await chatOk(h, owner, agent, { message: 'Third', user_id: 'end-1' })).conversation_id
    await chatOk(h, owner, agent, { message: 'Is the office open on weekdays?', user_id: 'end-1', conversation_id: conv.a })
  })
  const list = async (query = '') => {
    const res = await h.call('GET', `/v1/agents/${agent}/conversations${query}`, { key: owner })
    expect(res.status).toBe(200)
    expect(Object.keys(res.body).sort()).toEqual(['data', 'has_more', 'next_cursor', 'request_id'])
    return res.body
  }

  test('newest activity first; the title is the first message cut to 80 characters; message_count counts both roles', async () => {
    const body = await list()
    expect(body.data.map((c: any) => c.id)).toEqual([conv.a, conv.c, conv.b])
    const [a, c, b] = body.data
    expect(a).toEqual({
      id: conv.a, agent_id: agent, user_id: 'end-1', title: expect.any(String), message_count: 4,
      created_at: expect.stringMatching(ISO_MS), updated_at: expect.stringMatching(ISO_MS),
    })
    expect([...a.title].length).toBe(80)
    expect(a.title.startsWith(FLAT.slice(0, 79))).toBe(true)
    expect(FLAT.startsWith(a.title)).toBe(false)
    expect(Date.parse(a.updated_at)).toBeGreaterThan(Date.parse(a.created_at))
    expect(c).toMatchObject({ user_id: 'end-1', title: 'Third', message_count: 2 })
    expect(b).toMatchObject({ user_id: 'end-2', title: 'Short one', message_count: 2 })
  })

  test('user_id narrows to that user; limit and cursor page through', async () => {
    expect((await list('?user_id=end-1')).data.map((c: any) => c.id)).toEqual([conv.a, conv.c])
    expect((await list('?user_id=end-2')).data.map((c: any) => c.id)).toEqual([conv.b])
    expect((await list('?user_id=nobody')).data).toEqual([])
    const first = await list('?limit=2')
    expect(first.has_more).toBe(true)
    const second = await list(`?limit=2&cursor=${first.next_cursor}`)
    expect(second).toMatchObject({ has_more: false, next_cursor: null })
    expect([...first.data, ...second.data].map((c: any) => c.id)).toEqual([conv.a, conv.c, conv.b])
  })

  test('history: the conversation with its messages, newest first by default, oldest first with sort=created_at', async () => {
    const res = await h.call('GET', `/v1/conversations/${conv.a}`, { key: owner })
    expect(res.status).toBe(200)
    expect(res.body.meta).toEqual(META)
    const { messages, ...rest } = res.body.data
    expect(rest).toEqual({ ...(await list()).data[0], next_cursor: null, has_more: false })
    expect(messages.map((m: any) => m.role)).toEqual(['assistant', 'user', 'assistant', 'user'])
    const oldest = await messagesOf(h, owner, conv.a)
    expect(oldest.map((m) => m.id)).toEqual(messages.map((m: any) => m.id).reverse())
    expect(oldest.map((m) => m.role)).toEqual(['user', 'assistant', 'user', 'assistant'])
    expect(oldest[0]).toEqual({ id: expect.stringMatching(/^msg_/), role: 'user', content: LONG, tool_calls: [], usage: null, agent_version: 1, finish_reason: null, run_id: null, created_at: expect.stringMatching(ISO_MS) })
    expect(oldest[2].content).toBe('Is the office open on weekdays?')
    const answer = oldest[3]
    expect(answer).toEqual({
      id: expect.stringMatching(/^msg_/), role: 'assistant', content: expect.any(String), tool_calls: [],
      usage: { tokens_in: expect.any(Number), tokens_out: expect.any(Number), credits: 0 },
      agent_version: 1, finish_reason: 'stop', run_id: null, created_at: expect.stringMatching(ISO_MS),
    })
    expect(answer.usage.tokens_in).toBeGreaterThan(0)
    expect(answer.usage.tokens_out).toBeGreaterThan(0)
    // The second turn was answered with the first as context (local-chat quotes it).
    expect(answer.content).toStartWith('From the context:')
  })

  test('history pages with limit and cursor; role filters', async () => {
    const all = (await messagesOf(h, owner, conv.a)).map((m) => m.id)
    const first = await h.call('GET', `/v1/conversations/${conv.a}?sort=created_at&limit=3`, { key: owner })
    expect(first.body.data.messages.map((m: any) => m.id)).toEqual(all.slice(0, 3))
    expect(first.body.data.has_more).toBe(true)
    const second = await h.call('GET', `/v1/conversations/${conv.a}?sort=created_at&limit=3&cursor=${first.body.data.next_cursor}`, { key: owner })
    expect(second.body.data.messages.map((m: any) => m.id)).toEqual(all.slice(3))
    expect(second.body.data).toMatchObject({ has_more: false, next_cursor: null, message_count: 4 })
    for (const role of ['user', 'assistant']) {
      const res = await h.call('GET', `/v1/conversations/${conv.a}?sort=created_at&role=${role}`, { key: owner })
      expect(res.status).toBe(200)
      expect(res.body.data.messages.map((m: any) => m.role)).toEqual([role, role])
    }
  })

  test('DELETE a conversation: {id, deleted: true}; it and its messages are gone, the others stay', async () => {
    const res = await h.call('DELETE', `/v1/conversations/${conv.b}`, { key: owner })
    expect(res.status).toBe(200)
    expect(res.body).toEqual({ request_id: res.headers.get('x-request-id'), data: { id: conv.b, deleted: true }, meta: META })
    expect((await h.call('GET', `/v1/conversations/${conv.b}`, { key: owner })).status).toBe(404)
    expect((await h.call('DELETE', `/v1/conversations/${conv.b}`, { key: owner })).status).toBe(404)
    expect(await rowCount(h, 'messages', 'conversation_id', conv.b)).toBe(0)
    expect((await list()).data.map((c: any) => c.id)).toEqual([conv.a, conv.c])
  })
})

describe('answers', () => {
  test('an agent with a knowledge base and no knowledge_search tool answers from the passage it retrieved', async () => {
    const kb = (await createKb(h, owner, { workspace_id: ws, name: 'Handbook' })).id
    const doc = await uploadText(h, owner, kb, {
      name: 'refunds.txt',
      content: 'Shipping is free above 50 euros. Refunds take fourteen days to reach the original card. Our support team answers on weekdays.',
    })
    expect((await settled(h, owner, doc)).status).toBe('ready')
    const a = await createAgent(h, owner, ws, { name: 'Librarian', knowledge_base_ids: [kb] })
    const question = 'How many days do refunds take?'
    const res = await chatOk(h, owner, a.id, { message: question, user_id: 'end-kb' })
    expect(res).toEqual({
      request_id: expect.stringMatching(/^req_/),
      agent_id: a.id,
      conversation_id: expect.stringMatching(/^conv_/),
      message: { role: 'assistant', content: expect.any(String) },
      tool_calls: [{ tool: 'knowledge_search', input: { query: question }, duration_ms: expect.any(Number) }],
      usage: { tokens_in: expect.any(Number), tokens_out: expect.any(Number), credits: 0 },
    })
    expect(res.message.content).toStartWith('From the context:')
    expect(res.message.content).toContain('Refunds take fourteen days to reach the original card.')
    expect(Number.isInteger(res.tool_calls[0].duration_ms)).toBe(true)
    const [, answer] = await messagesOf(h, owner, res.conversation_id)
    expect(answer.content).toBe(res.message.content)
    expect(answer.usage).toEqual(res.usage)
    expect(answer.tool_calls).toEqual([{ ...res.tool_calls[0], output: { results: [expect.objectContaining({ document_name: 'refunds.txt', knowledge_base_id: kb })] } }])
    expect(answer.tool_calls[0].output.results[0].content).toContain('Refunds take fourteen days')
  })

  test('a chatflow answers with its workflow\'s output `answer`; the run is linked to the message', async () => {
    const wf = await createWorkflow(h, owner, ws, echoGraph('You said: {{inputs.message}}'))
    const a = await createAgent(h, owner, ws, { name: 'Echo', type: 'chatflow', workflow_id: wf })
    expect(a).toMatchObject({ type: 'chatflow', workflow_id: wf })
    const res = await chatOk(h, owner, a.id, { message: 'hello there', user_id: 'end-flow' })
    expect(res).toMatchObject({ agent_id: a.id, message: { role: 'assistant', content: 'You said: hello there' }, tool_calls: [] })
    const [question, answer] = await messagesOf(h, owner, res.conversation_id)
    expect(question).toMatchObject({ role: 'user', content: 'hello there', run_id: null })
    const runId: string = answer.run_id
    expect(runId).toMatch(/^run_[0-9a-z]{26}$/)
    expect(answer).toMatchObject({ role: 'assistant', content: 'You said: hello there', finish_reason: 'stop', agent_version: 1 })
    const run = await h.call('GET', `/v1/runs/${runId}`, { key: owner })
    expect(run.status).toBe(200)
    expect(run.body).toMatchObject({ run_id: runId, workflow_id: wf, status: 'completed', inputs: { message: 'hello there' }, outputs: { answer: 'You said: hello there' }, user_id: 'end-flow' })
    expect(res.usage).toEqual(run.body.usage)
    expect(answer.usage).toEqual(run.body.usage)
  })
})

describe('events', () => {
  test('each user message writes agent.message.received to the outbox with the payload of docs/webhooks.md', async () => {
    const a = await createAgent(h, owner, ws, { name: 'Announcer' })
    const first = await chatOk(h, owner, a.id, { message: 'first words', user_id: 'end-ev' })
    await chatOk(h, owner, a.id, { message: 'second words', user_id: 'end-ev', conversation_id: first.conversation_id })
    const rows = await h.deps.db.sql<{ type: string; workspace_id: string; data: any }[]>`
      select type, workspace_id, data from events where data->>'conversation_id' = ${first.conversation_id} order by created_at, id`
    const questions = (await messagesOf(h, owner, first.conversation_id)).filter((m) => m.role === 'user')
    expect([...rows]).toEqual(questions.map((m) => ({
      type: 'agent.message.received',
      workspace_id: ws,
      data: { agent_id: a.id, conversation_id: first.conversation_id, user_id: 'end-ev', message_id: m.id, content: m.content },
    })))
    expect(rows.map((r) => r.data.content)).toEqual(['first words', 'second words'])
  })
})
