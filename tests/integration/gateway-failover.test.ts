import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Server } from 'bun'
import { fakeVector, startFakeProvider, type FakeProvider, type Step } from '../helpers/fake-provider'
import { keyFor, startHarness, waitFor, workspaceOf, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The gateway's failover, circuit breaker and stream edge cases through the HTTP endpoints, against
 * three loopback providers: `primary` (openai kind), `secondary` (anthropic kind), `tertiary` (openai
 * kind), plus `closed` (a port nothing listens on) and `batcher` (openai, max_batch 3). Each test has
 * a catalogue model of its own whose upstream names are `<model>-p`, `-s`, `-t`, so scripts, breaker
 * state and events never leak between tests.
 */

/** Short enough that the time-out cases cost well under a second each; ample for a loopback answer. */
const TIMEOUT_MS = 300
/** The slow stream of the disconnect case: 200 chunks 20 ms apart would take 4 s to finish. */
const SLOW_CHUNKS = 200
const SLOW_DELAY_MS = 20

let h: Harness
let primary: FakeProvider
let secondary: FakeProvider
let tertiary: FakeProvider
let dir: string
let key: string
let ws: string

type Leg = 'p' | 's' | 't' | 'x'
const PROVIDER: Record<Leg, string> = { p: 'primary', s: 'secondary', t: 'tertiary', x: 'closed' }
const SUFFIX: Record<Leg, string> = { p: 'p', s: 's', t: 't', x: 'p' }
const LLMS: Record<string, Leg[]> = {
  rl: ['p', 's'],
  srv: ['p', 's'],
  hang: ['p', 's'],
  net: ['x', 's'],
  chain: ['p', 's', 't'],
  bad400: ['p', 's'],
  bad401: ['p', 's'],
  allfail: ['p', 's', 't'],
  alltimeout: ['p', 's', 't'],
  cb: ['p', 's'],
  cball: ['p', 's'],
  sfo: ['p', 's'],
  sdrop: ['p', 's'],
  sabort: ['p', 's'],
  sleave: ['p', 's'],
  direct: ['t'],
}

/** A port that was just free and is closed again: connecting to it is refused. */
function closedPort(): number {
  const s = Bun.serve({ hostname: '127.0.0.1', port: 0, fetch: () => new Response() })
  const port = s.port!
  s.stop(true)
  return port
}

beforeAll(async () => {
  ;[primary, secondary, tertiary] = await Promise.all([startFakeProvider(), startFakeProvider(), startFakeProvider()])
  dir = mkdtempSync(join(tmpdir(), 'ap-failover-'))
  const file = join(dir, 'models.json')
  const pricing = { input_per_1k: 1, output_per_1k: 2 }
  writeFileSync(
    file,
    JSON.stringify({
      providers: [
        { id: 'primary', kind: 'openai', base_url: primary.baseUrl, api_key: 'sk-primary', timeout_ms: TIMEOUT_MS },
        { id: 'secondary', kind: 'anthropic', base_url: secondary.baseUrl, api_key: 'sk-secondary', timeout_ms: TIMEOUT_MS },
        { id: 'tertiary', kind: 'openai', base_url: tertiary.baseUrl, api_key: 'sk-tertiary', timeout_ms: TIMEOUT_MS },
        { id: 'closed', kind: 'openai', base_url: `http://127.0.0.1:${closedPort()}/v1`, api_key: 'sk-closed', timeout_ms: TIMEOUT_MS },
        { id: 'batcher', kind: 'openai', base_url: primary.baseUrl, api_key: 'sk-batcher', timeout_ms: 5_000, max_batch: 3 },
      ],
      models: [
        ...Object.entries(LLMS).map(([id, legs]) => ({
          id,
          type: 'llm',
          vendor: 'test',
          routes: legs.map((l) => ({ provider: PROVIDER[l], model: `${id}-${SUFFIX[l]}` })),
          pricing,
        })),
        { id: 'emb', type: 'embedding', vendor: 'test', dimensions: 8, routes: [{ provider: 'batcher', model: 'emb-b' }], pricing: { input_per_1k: 1 } },
      ],
    }),
  )
  h = await startHarness({ MODELS_FILE: file, RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000' })
  key = await keyFor(h, 'failover-user')
  ws = await workspaceOf(h, key, 'Failover')
})

afterAll(async () => {
  await h?.close()
  await Promise.all([primary?.close(), secondary?.close(), tertiary?.close()])
  if (dir) rmSync(dir, { recursive: true, force: true })
})

const say = (content = 'hello there') => [{ role: 'user', content }]
const chat = (model: string, extra: Record<string, unknown> = {}) =>
  h.call('POST', '/v1/models/llm/chat', { key, body: { model, messages: say(), workspace_id: ws, ...extra } })
/** What the fake behind `leg` received for `model`. */
const sent = (fake: FakeProvider, upstream: string) => fake.requests.filter((r) => r.model === upstream)

async function failovers(model: string) {
  return h.deps.db.sql<{ workspace_id: string; data: any }[]>`
    select workspace_id, data from events where type = 'model.failover.triggered' and data->>'model' = ${model} order by created_at, id`
}

async function ledger(model: string) {
  await h.deps.models.charges.flush()
  return h.deps.db.sql<{ tokens_in: number; tokens_out: number; credits: string; request_id: string | null }[]>`
    select tokens_in, tokens_out, credits::text as credits, request_id from credit_ledger where model = ${model} order by created_at, id`
}

/** The ledger rows of `model` once there is one (a stream's charge is written as it ends). */
async function charged(model: string) {
  await waitFor(async () => (await ledger(model)).length > 0, { what: `the ledger row of ${model}` })
  return ledger(model)
}

interface Sse {
  event?: string
  data: string
}

function parseSse(text: string): Sse[] {
  return text
    .split(/\n\n/)
    .filter((block) => block.trim())
    .map((block) => {
      const e: Sse = { data: '' }
      for (const line of block.split('\n')) {
        if (line.startsWith('event: ')) e.event = line.slice(7)
        else if (line.startsWith('data: ')) e.data += line.slice(6)
      }
      return e
    })
}


const content = (events: Sse[]) =>
  events
    .filter((e) => !e.event && e.data !== '[DONE]')
    .map((e) => JSON.parse(e.data).choices?.[0]?.delta?.content ?? '')
    .join('')

describe('failover order and reasons', () => {
  test('primary 429 (retry-after 30 s) → secondary answers at once; one event, reason rate_limited', async () => {
    primary.script('rl-p', [{ status: 429, retryAfter: 30 }])
    secondary.script('rl-s', [{ text: 'from secondary' }])
    const started = performance.now()
    const res = await chat('rl')
    expect(res.status).toBe(200)
    expect(res.body.choices[0].message.content).toBe('from secondary')
    expect(res.body.model).toBe('rl')
    // The retry-after of one route is no reason to keep the caller waiting when another route exists.
    expect(performance.now() - started).toBeLessThan(5_000)
    expect(sent(primary, 'rl-p')).toHaveLength(1)
    expect(sent(secondary, 'rl-s').map((r) => r.path)).toEqual(['/v1/messages'])
    const events = await failovers('rl')
    expect(events).toHaveLength(1)
    expect(events[0]!.workspace_id).toBe(ws)
    expect(events[0]!.data).toEqual({ model: 'rl', from: 'primary/rl-p', to: 'secondary/rl-s', reason: 'rate_limited' })
  })

  const reasons: [string, Step, string][] = [
    ['srv', { status: 500 }, 'server_error'],
    ['hang', 'hang', 'timeout'],
  ]
  for (const [model, step, reason] of reasons) {
    test(`primary ${typeof step === 'string' ? step : (step as { status: number }).status} → reason ${reason}`, async () => {
      primary.script(`${model}-p`, [step])
      secondary.script(`${model}-s`, [{ text: 'rescued' }])
      const res = await chat(model)
      expect(res.status).toBe(200)
      expect(res.body.choices[0].message.content).toBe('rescued')
      const events = await failovers(model)
      expect(events.map((e) => e.data)).toEqual([{ model, from: `primary/${model}-p`, to: `secondary/${model}-s`, reason }])
      expect(events[0]!.workspace_id).toBe(ws)
    })
  }

  test('a closed port → reason network_error', async () => {
    secondary.script('net-s', [{ text: 'rescued' }])
    const res = await chat('net')
    expect(res.status).toBe(200)
    expect(res.body.choices[0].message.content).toBe('rescued')
    const events = await failovers('net')
    expect(events.map((e) => e.data)).toEqual([{ model: 'net', from: 'closed/net-p', to: 'secondary/net-s', reason: 'network_error' }])
  })

  test('chained: primary 429, secondary 500, tertiary answers; two events in order', async () => {
    primary.script('chain-p', [{ status: 429 }])
    secondary.script('chain-s', [{ status: 500 }])
    tertiary.script('chain-t', [{ text: 'third time lucky' }])
    const res = await chat('chain')
    expect(res.status).toBe(200)
    expect(res.body.choices[0].message.content).toBe('third time lucky')
    const events = await failovers('chain')
    expect(events.map((e) => e.data)).toEqual([
      { model: 'chain', from: 'primary/chain-p', to: 'secondary/chain-s', reason: 'rate_limited' },
      { model: 'chain', from: 'secondary/chain-s', to: 'tertiary/chain-t', reason: 'server_error' },
    ])
    expect(events.every((e) => e.workspace_id === ws)).toBe(true)
  })
})

describe('an openai-kind route answering directly', () => {
  // OpenAI's own top-level fields (system_fingerprint, service_tier) are dropped, not refused.
  test("an OpenAI-kind route's own answer fields (system_fingerprint) → 200", async () => {
    tertiary.script('direct-t', [{ text: 'plain openai answer' }])
    const res = await chat('direct')
    expect(res.status).toBe(200)
    expect(res.body.choices[0].message.content).toBe('plain openai answer')
    expect(res.body.usage.credits).toBeGreaterThan(0)
  })
})

describe('no failover', () => {
  test('400 upstream → 400 validation_error; secondary never called, no event', async () => {
    primary.script('bad400-p', [{ status: 400 }])
    const res = await chat('bad400')
    expect(res.status).toBe(400)
    expect(res.body.error.code).toBe('validation_error')
    expect(typeof res.body.request_id).toBe('string')
    expect(sent(primary, 'bad400-p')).toHaveLength(1)
    expect(sent(secondary, 'bad400-s')).toHaveLength(0)
    expect(await failovers('bad400')).toHaveLength(0)
  })

  test('401 upstream (our key is wrong) → 502 upstream_error; secondary never called, key not leaked', async () => {
    primary.script('bad401-p', [{ status: 401, body: { error: { message: 'Incorrect API key provided: sk-primary', type: 'invalid_request_error' } } }])
    const res = await chat('bad401')
    expect(res.status).toBe(502)
    expect(res.body.error.code).toBe('upstream_error')
    expect(res.text).not.toContain('sk-primary')
    expect(sent(secondary, 'bad401-s')).toHaveLength(0)
    expect(await failovers('bad401')).toHaveLength(0)
  })
})

describe('every route fails', () => {
  test('all 5xx → 502 upstream_error, every route tried once, nothing charged', async () => {
    primary.script('allfail-p', [{ status: 500 }])
    secondary.script('allfail-s', [{ status: 529 }])
    tertiary.script('allfail-t', [{ status: 503 }])
    const res = await chat('allfail')
    expect(res.status).toBe(502)
    expect(res.body.error.code).toBe('upstream_error')
    expect([sent(primary, 'allfail-p').length, sent(secondary, 'allfail-s').length, sent(tertiary, 'allfail-t').length]).toEqual([1, 1, 1])
    expect((await failovers('allfail')).map((e) => e.data.reason)).toEqual(['server_error', 'server_error'])
    expect(await ledger('allfail')).toHaveLength(0)
  })

  test('all time out → 504 upstream_timeout', async () => {
    for (const [fake, leg] of [[primary, 'p'], [secondary, 's'], [tertiary, 't']] as const) fake.script(`alltimeout-${leg}`, ['hang'])
    const started = performance.now()
    const res = await chat('alltimeout')
    expect(res.status).toBe(504)
    expect(res.body.error.code).toBe('upstream_timeout')
    // Three routes, each given its 300 ms.
    expect(performance.now() - started).toBeGreaterThanOrEqual(3 * TIMEOUT_MS - 30)
    expect((await failovers('alltimeout')).map((e) => e.data.reason)).toEqual(['timeout', 'timeout'])
    // The gateway gave up on every hanging request: none is left open upstream.
    await waitFor(() => ['p', 's', 't'].every((l, i) => sent([primary, secondary, tertiary][i]!, `alltimeout-${l}`).every((r) => r.closed)), {
      what: 'the hanging upstream requests to be closed',
    })
  })
})

describe('circuit breaker', () => {
  test('after 3 consecutive failures primary is skipped: no new request, secondary answers, no event', async () => {
    primary.script('cb-p', [{ status: 500 }])
    secondary.script('cb-s', [{ text: 'steady' }])
    for (let i = 0; i < 3; i++) {
      const res = await chat('cb')
      expect(res.status).toBe(200)
    }
    expect(sent(primary, 'cb-p')).toHaveLength(3)
    expect(h.deps.models.breaker.openRoutes()).toContain('primary/cb-p')
    for (let i = 0; i < 2; i++) {
      const res = await chat('cb')
      expect(res.status).toBe(200)
      expect(res.body.choices[0].message.content).toBe('steady')
    }
    expect(sent(primary, 'cb-p')).toHaveLength(3)
    expect(sent(secondary, 'cb-s')).toHaveLength(5)
    // A skipped route is not a failover: only the three real switches were announced.
    expect(await failovers('cb')).toHaveLength(3)
  })

  test('when every route of a model is open they are still tried', async () => {
    primary.script('cball-p', [{ status: 500 }])
    secondary.script('cball-s', [{ status: 500 }])
    for (let i = 0; i < 3; i++) expect((await chat('cball')).status).toBe(502)
    expect(h.deps.models.breaker.openRoutes()).toEqual(expect.arrayContaining(['primary/cball-p', 'secondary/cball-s']))
    expect((await chat('cball')).status).toBe(502)
    expect(sent(primary, 'cball-p')).toHaveLength(4)
    expect(sent(secondary, 'cball-s')).toHaveLength(4)
    // Once the upstream recovers, the trial call goes through and closes the breaker.
    primary.script('cball-p', [{ text: 'back' }])
    const res = await chat('cball')
    expect(res.status).toBe(200)
    expect(res.body.choices[0].message.content).toBe('back')
    expect(h.deps.models.breaker.openRoutes()).not.toContain('primary/cball-p')
  })
})

describe('streams', () => {
  test('primary 500 on a stream → the stream comes from secondary, a normal SSE stream', async () => {
    primary.script('sfo-p', [{ status: 500 }])
    secondary.script('sfo-s', [{ text: 'streamed from the secondary' }])
    const res = await chat('sfo', { stream: true })
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toStartWith('text/event-stream')
    const events = parseSse(res.text)
    expect(events.some((e) => e.event === 'error')).toBe(false)
    expect(events.at(-1)!.data).toBe('[DONE]')
    expect(content(events)).toBe('streamed from the secondary')
    const chunks = events.filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data))
    expect(chunks.every((c) => c.object === 'chat.completion.chunk' && c.model === 'sfo')).toBe(true)
    // The usage chunk (choices: []) carries the credits.
    const usage = chunks.at(-1)
    expect(usage.choices).toEqual([])
    expect(usage.usage.credits).toBeGreaterThan(0)
    expect(sent(primary, 'sfo-p')[0]!.stream).toBe(true)
    expect(sent(secondary, 'sfo-s')[0]!.stream).toBe(true)
    expect((await failovers('sfo')).map((e) => e.data)).toEqual([{ model: 'sfo', from: 'primary/sfo-p', to: 'secondary/sfo-s', reason: 'server_error' }])
  })

  test('the upstream drops after some chunks → those chunks, an error event (docs/api.md, "Errors"), no [DONE]; partial output charged', async () => {
    // Events sent: the role chunk, "one ", "two ", "three ", then the connection is reset.
    primary.script('sdrop-p', [{ chunks: ['one ', 'two ', 'three ', 'four ', 'five'], drop: 4 }])
    const res = await chat('sdrop', { stream: true })
    expect(res.status).toBe(200)
    const events = parseSse(res.text)
    expect(events.some((e) => e.data === '[DONE]')).toBe(false)
    expect(content(events)).toBe('one two three ')
    const last = events.at(-1)!
    expect(last.event).toBe('error')
    const body = JSON.parse(last.data)
    expect(body.request_id).toBe(res.headers.get('x-request-id')!)
    expect(body.error.code).toBe('upstream_error')
    expect(typeof body.error.message).toBe('string')
    expect(Object.keys(body).sort()).toEqual(['error', 'request_id'])
    // After the first byte there is no failover.
    expect(sent(secondary, 'sdrop-s')).toHaveLength(0)
    const rows = await charged('sdrop')
    expect(rows).toHaveLength(1)
    expect(rows[0]!.tokens_out).toBeGreaterThan(0)
    expect(rows[0]!.tokens_in).toBeGreaterThan(0)
    expect(Number(rows[0]!.credits)).toBeGreaterThan(0)
    expect(rows[0]!.request_id).toBe(body.request_id)
  })

  test('the client disconnects → the upstream connection is closed long before it would end; the output is charged', async () => {
    const words = Array.from({ length: SLOW_CHUNKS }, (_, i) => `w${i}`).join(' ')
    primary.script('sabort-p', [{ text: words, delayMs: SLOW_DELAY_MS }])
    const server: Server<undefined> = Bun.serve({ hostname: '127.0.0.1', port: 0, idleTimeout: 0, fetch: (r) => h.app.handle(r) })
    try {
      const ctl = new AbortController()
      const res = await fetch(`http://127.0.0.1:${server.port}/v1/models/llm/chat`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'sabort', messages: say(), workspace_id: ws, stream: true }),
        signal: ctl.signal,
      })
      expect(res.status).toBe(200)
      const reader = res.body!.getReader()
      const first = await reader.read()
      expect(first.done).toBe(false)
      expect(new TextDecoder().decode(first.value)).toContain('data: ')
      const abortedAt = performance.now()
      ctl.abort()
      await reader.cancel().catch(() => {})
      const upstream = sent(primary, 'sabort-p')[0]!
      await waitFor(() => upstream.closed, { timeoutMs: 3_000, intervalMs: 10, what: 'the upstream connection to be closed' })
      const closedAfter = performance.now() - abortedAt
      // The whole stream would take 200 × 20 ms = 4 s; closing follows the abort within a moment.
      expect(closedAfter).toBeLessThan(1_500)
      expect(performance.now() - upstream.at).toBeLessThan((SLOW_CHUNKS * SLOW_DELAY_MS) / 2)
      const rows = await charged('sabort')
      expect(rows).toHaveLength(1)
      expect(rows[0]!.tokens_in).toBeGreaterThan(0)
      // Charged for what was produced, not for the 200 words that never came.
      expect(rows[0]!.tokens_out).toBeLessThan(SLOW_CHUNKS)
      expect(sent(secondary, 'sabort-s')).toHaveLength(0)
    } finally {
      await server.stop(true)
    }
  })

  test('the client leaves as soon as the first chunk is read → what was produced is charged', async () => {
    primary.script('sleave-p', [{ chunks: ['one ', 'two ', 'three ', 'four ', 'five'] }])
    const res = await h.app.handle(new Request('http://localhost/v1/models/llm/chat', {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sleave', messages: say(), workspace_id: ws, stream: true }),
    }))
    expect(res.status).toBe(200)
    const reader = res.body!.getReader()
    const first = await reader.read()
    expect(new TextDecoder().decode(first.value)).toContain('"content":"one "')
    // Gone before anything but the first write: the relay had not asked for more yet.
    await reader.cancel()
    const rows = await charged('sleave')
    expect(rows).toHaveLength(1)
    expect(rows[0]!.tokens_in).toBeGreaterThan(0)
    expect(rows[0]!.tokens_out).toBeGreaterThan(0)
  })
})

describe('embeddings batching', () => {
  test('max_batch 3 and 10 inputs → 4 upstream requests (3, 3, 3, 1), results in input order', async () => {
    // Each batch answers its items in reverse order (with their index): the order must come from the index.
    primary.script('emb-b', [{ reverse: true }])
    const inputs = Array.from({ length: 10 }, (_, i) => `input number ${i}`)
    const res = await h.call('POST', '/v1/models/embeddings', { key, body: { model: 'emb', input: inputs, workspace_id: ws } })
    expect(res.status).toBe(200)
    const batches = sent(primary, 'emb-b')
    expect(batches.map((r) => r.path)).toEqual(Array(4).fill('/v1/embeddings'))
    expect(batches.map((r) => r.json.input)).toEqual([inputs.slice(0, 3), inputs.slice(3, 6), inputs.slice(6, 9), inputs.slice(9)])
    expect(batches.every((r) => r.headers.authorization === 'Bearer sk-batcher')).toBe(true)
    expect(res.body.data.map((d: any) => d.index)).toEqual([...inputs.keys()])
    for (const [i, d] of res.body.data.entries()) {
      const want = fakeVector(inputs[i]!, 8)
      expect(d.embedding).toHaveLength(8)
      d.embedding.forEach((v: number, j: number) => expect(v).toBeCloseTo(want[j]!, 6))
    }
    // The fake counts a word a token: 3 words per input, summed over the 4 batches.
    expect(res.body.usage.tokens).toBe(30)
    expect(res.body.usage.credits).toBe(0.03)
  })
})
