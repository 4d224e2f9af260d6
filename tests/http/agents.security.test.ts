import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { chat, chatOk, createAgent, postAgent, rowCount } from '../helpers/agents'
import { keyFor, startHarness, workspaceOf, type Answer, type Harness } from '../helpers/harness'
import { expectError } from '../helpers/knowledge'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Who may do what with agents and conversations (docs/api.md, "Keys, roles and workspaces"): another workspace's agents and
 * conversations are 404 (existence never leaks); readonly may read but not chat; user may chat but
 * not build; below developer a caller sees only the conversations of its own key's user_id.
 */

let h: Harness
/** Owner of `ws`. */
let owner: string
let dev: string
/** Members of role user, as-user and as-user2. */
let user: string
let user2: string
/** A readonly member, and the owner's own key limited to readonly. */
let reader: string
let limitedOwner: string
/** Owner of another workspace, with its agent and a conversation of it. */
let outsider: string
let ws: string
let agent: any
let foreign: any
let foreignConv: string

beforeAll(async () => {
  h = await startHarness({ RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000' })
  ;[owner, dev, user, user2, reader, outsider] = (await Promise.all(['as-owner', 'as-dev', 'as-user', 'as-user2', 'as-ro', 'as-outsider'].map((u) => keyFor(h, u)))) as [string, string, string, string, string, string]
  ws = await workspaceOf(h, owner, 'Secured')
  limitedOwner = await keyFor(h, 'as-owner', { workspace_id: ws, role_limit: 'readonly' })
  for (const [userId, role] of [['as-dev', 'developer'], ['as-user', 'user'], ['as-user2', 'user'], ['as-ro', 'readonly']]) {
    const res = await h.call('POST', `/v1/workspaces/${ws}/members`, { key: owner, body: { user_id: userId, role } })
    expect(res.status).toBe(201)
  }
  agent = await createAgent(h, owner, ws, { name: 'Shared' })
  const otherWs = await workspaceOf(h, outsider, 'Elsewhere')
  foreign = await createAgent(h, outsider, otherWs, { name: 'Foreign' })
  foreignConv = (await chatOk(h, outsider, foreign.id, { message: 'a secret of mine', user_id: 'as-outsider' })).conversation_id
})
afterAll(() => h?.close())

const get = (path: string, key: string) => h.call('GET', path, { key })

describe('another workspace: 404 not_found, nothing changed', () => {
  test.each([
    ['GET agent', (key: string) => get(`/v1/agents/${foreign.id}`, key)],
    ['PATCH agent', (key: string) => h.call('PATCH', `/v1/agents/${foreign.id}`, { key, body: { name: 'Taken' } })],
    ['DELETE agent', (key: string) => h.call('DELETE', `/v1/agents/${foreign.id}`, { key })],
    ['chat', (key: string) => chat(h, key, foreign.id, { message: 'hello', user_id: 'as-outsider' })],
    ['chat in its conversation', (key: string) => chat(h, key, foreign.id, { message: 'hello', user_id: 'as-outsider', conversation_id: foreignConv })],
    ['list its conversations', (key: string) => get(`/v1/agents/${foreign.id}/conversations`, key)],
    ['GET its conversation', (key: string) => get(`/v1/conversations/${foreignConv}`, key)],
    ['DELETE its conversation', (key: string) => h.call('DELETE', `/v1/conversations/${foreignConv}`, { key })],
  ])('%s', async (_, call) => {
    for (const key of [owner, dev, user]) expectError(await call(key), 404, 'not_found')
    const still = await get(`/v1/agents/${foreign.id}`, outsider)
    expect(still.body.data).toEqual(foreign)
    expect(await rowCount(h, 'conversations', 'agent_id', foreign.id)).toBe(1)
    expect(await rowCount(h, 'messages', 'conversation_id', foreignConv)).toBe(2)
  })

  test('its agents are not listed, and naming its workspace is 404', async () => {
    const mine = await get(`/v1/agents?workspace_id=${ws}&limit=100`, owner)
    expect(mine.body.data.map((a: any) => a.id)).not.toContain(foreign.id)
    expectError(await get(`/v1/agents?workspace_id=${foreign.workspace_id}`, owner), 404, 'not_found')
    expectError(await postAgent(h, owner, foreign.workspace_id), 404, 'not_found')
  })
})

/** Create, change and delete an agent; the agent `target` is the one changed or deleted. */
const builds: [string, (key: string, target: string) => Promise<Answer>][] = [
  ['create an agent', (key) => postAgent(h, key, ws, { name: 'Intruder' })],
  ['change an agent', (key, target) => h.call('PATCH', `/v1/agents/${target}`, { key, body: { instructions: 'Obey me.' } })],
  ['delete an agent', (key, target) => h.call('DELETE', `/v1/agents/${target}`, { key })],
]

describe('roles', () => {
  test.each(builds)('readonly (member, or a key limited to readonly) and user may not %s: 403', async (_, call) => {
    const target = await createAgent(h, owner, ws, { name: 'Target' })
    const before = await rowCount(h, 'agents', 'workspace_id', ws)
    for (const key of [reader, limitedOwner, user]) expectError(await call(key, target.id), 403, 'forbidden')
    expect(await rowCount(h, 'agents', 'workspace_id', ws)).toBe(before)
    expect((await get(`/v1/agents/${target.id}`, owner)).body.data).toEqual(target)
  })

  test.each(builds)('developer may %s', async (_, call) => {
    const target = await createAgent(h, owner, ws, { name: 'Target' })
    const res = await call(dev, target.id)
    expect([200, 201]).toContain(res.status)
  })

  test('readonly may read the agent and list agents, but not chat (403, nothing stored)', async () => {
    for (const key of [reader, limitedOwner]) {
      expect((await get(`/v1/agents/${agent.id}`, key)).body.data).toEqual(agent)
      expect((await get(`/v1/agents?workspace_id=${ws}`, key)).status).toBe(200)
      const before = await rowCount(h, 'conversations', 'agent_id', agent.id)
      expectError(await chat(h, key, agent.id, { message: 'may I?', user_id: 'as-ro' }), 403, 'forbidden')
      expect(await rowCount(h, 'conversations', 'agent_id', agent.id)).toBe(before)
    }
  })

  test('user may chat', async () => {
    const res = await chatOk(h, user, agent.id, { message: 'hello as a user', user_id: 'as-user' })
    expect(res).toMatchObject({ agent_id: agent.id, message: { role: 'assistant' } })
    expect((await get(`/v1/conversations/${res.conversation_id}`, user)).body.data.message_count).toBe(2)
  })
})

describe('conversations below developer: only the caller\'s own user_id', () => {
  let talk: any
  /** One conversation each of as-user, as-user2 and an end user of the developer's backend. */
  const conv = { user: '', user2: '', end: '' }
  beforeAll(async () => {
    talk = await createAgent(h, owner, ws, { name: 'Private talk' })
    conv.user = (await chatOk(h, user, talk.id, { message: 'mine', user_id: 'as-user' })).conversation_id
    conv.user2 = (await chatOk(h, user2, talk.id, { message: 'my secret plans', user_id: 'as-user2' })).conversation_id
    conv.end = (await chatOk(h, dev, talk.id, { message: 'from the backend', user_id: 'end-77' })).conversation_id
  })
  const listed = async (key: string, query = '') => {
    const res = await get(`/v1/agents/${talk.id}/conversations${query}`, key)
    expect(res.status).toBe(200)
    return res.body.data.map((c: any) => c.id).sort()
  }

  test('the list shows a user only its own conversations, whatever user_id it asks for', async () => {
    expect(await listed(user)).toEqual([conv.user])
    expect(await listed(user2)).toEqual([conv.user2])
    expect(await listed(user, '?user_id=as-user2')).toEqual([])
    expect(await listed(user, '?user_id=as-user')).toEqual([conv.user])
    expect(await listed(reader)).toEqual([])
  })

  test('another user\'s conversation is 404 on GET and DELETE, and stays', async () => {
    for (const id of [conv.user2, conv.end]) {
      expectError(await get(`/v1/conversations/${id}`, user), 404, 'not_found')
      expectError(await h.call('DELETE', `/v1/conversations/${id}`, { key: user }), 404, 'not_found')
      expect((await get(`/v1/conversations/${id}`, owner)).status).toBe(200)
    }
    expectError(await get(`/v1/conversations/${conv.user}`, reader), 404, 'not_found')
  })

  test('a user reads its own conversation', async () => {
    const res = await get(`/v1/conversations/${conv.user}`, user)
    expect(res.status).toBe(200)
    expect(res.body.data).toMatchObject({ id: conv.user, user_id: 'as-user', message_count: 2 })
  })

  // docs/api.md ("Keys, roles and workspaces") gives role user "conversations of its own user_id": naming another user_id in the body
  // must not let a user-role key continue (and so read, through the model's context) another user's conversation.
  // Fails as built: prepareTurn (src/domain/agents/chat.ts) compares the conversation's user_id with the body's only.
  test('a user cannot continue another user\'s conversation by naming that user_id', async () => {
    const res = await chat(h, user, talk.id, { message: 'what are my secret plans?', user_id: 'as-user2', conversation_id: conv.user2 })
    expectError(res, 404, 'not_found')
    expect(await rowCount(h, 'messages', 'conversation_id', conv.user2)).toBe(2)
  })

  test('a developer sees, reads and deletes every conversation of the workspace', async () => {
    expect(await listed(dev)).toEqual([conv.user, conv.user2, conv.end].sort())
    expect(await listed(dev, '?user_id=as-user2')).toEqual([conv.user2])
    expect((await get(`/v1/conversations/${conv.user2}`, dev)).status).toBe(200)
    expect((await h.call('DELETE', `/v1/conversations/${conv.end}`, { key: dev })).status).toBe(200)
    expect(await rowCount(h, 'conversations', 'id', conv.end)).toBe(0)
  })

  test('a user deletes its own conversation', async () => {
    expect((await h.call('DELETE', `/v1/conversations/${conv.user}`, { key: user })).status).toBe(200)
    expect(await listed(user)).toEqual([])
    expect(await listed(dev)).toEqual([conv.user2])
  })
})
