import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { rmSync } from 'node:fs'
import { MAX_BATCH_ATTEMPTS } from '../../src/domain/models/embed-batches'
import type { CallContext } from '../../src/domain/models/gateway'
import type { Provider } from '../../src/domain/models/types'
import { AppError } from '../../src/lib/errors'
import type { Limiter } from '../../src/lib/limiter'
import { startWorkers, type Workers } from '../../src/workers'
import { fakeVector, startFakeProvider, writeModelsFile, type FakeProvider, type FakeRequest } from '../helpers/fake-provider'
import { keyFor, startHarness, waitFor, workspaceOf, type Harness } from '../helpers/harness'
import { createKb, settled, uploadText } from '../helpers/knowledge'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * Embeddings against a remote provider (docs/models.md, "Embeddings: batches, concurrency and
 * retries"): the batches of a call go out at once up to the provider's max_concurrency (shared by
 * every call to it), come back in input order, are retried on 429 (after its Retry-After) and 5xx,
 * and a queued batch whose caller left is never sent. Then the same through the document worker:
 * a many-batch document is written in position order with the right vectors, and a 429 in the
 * middle does not fail it. One loopback fake answers every provider, each after LATENCY_MS, so
 * requests of one call really overlap; each test has upstream model names of its own.
 */

const DIMS = 8
/** Long enough for the batches let through to be in flight together; the fake's pace, not a wait in a test. */
const LATENCY_MS = 20
const LIMIT = 3

let h: Harness
let workers: Workers
let fake: FakeProvider
let dir: string
let owner: string
let ws: string

/** Catalogue models named as their upstream model, on `provider`. */
const MODELS: Record<string, string> = {
  order: 'limited',
  share_a: 'limited',
  share_b: 'limited',
  rl: 'limited',
  rl_far: 'limited',
  srv: 'limited',
  down: 'limited',
  refused: 'limited',
  queued_a: 'solo',
  queued_b: 'solo',
  held: 'solo',
  back: 'solo',
  front: 'solo',
  doc: 'ingest',
  doc_429: 'ingest',
}

beforeAll(async () => {
  fake = await startFakeProvider({ latencyMs: LATENCY_MS })
  let file: string
  ;({ dir, file } = writeModelsFile('ap-embconc-', {
    providers: [
      { id: 'limited', kind: 'openai', base_url: fake.baseUrl, api_key: 'sk-fake', max_batch: 64, max_concurrency: LIMIT },
      { id: 'solo', kind: 'openai', base_url: fake.baseUrl, api_key: 'sk-fake', max_batch: 64, max_concurrency: 1 },
      // Calls of 64 chunks (ingest.ts) cut in four: the gateway's batches and the document's calls both overlap.
      { id: 'ingest', kind: 'openai', base_url: fake.baseUrl, api_key: 'sk-fake', max_batch: 16, max_concurrency: LIMIT },
    ],
    models: Object.entries(MODELS).map(([id, provider]) => ({ id, type: 'embedding', vendor: 'test', dimensions: DIMS, routes: [{ provider, model: id }], pricing: { input_per_1k: 1 } })),
  }))
  for (const id of Object.keys(MODELS)) fake.script(id, [{ dimensions: DIMS }])
  h = await startHarness({ MODELS_FILE: file, RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000' })
  owner = await keyFor(h, 'embconc-owner')
  ws = await workspaceOf(h, owner, 'Embedding concurrency')
})

afterAll(async () => {
  await workers?.stop()
  await h?.close()
  await fake?.close()
  if (dir) rmSync(dir, { recursive: true, force: true })
})

const ctx = (): CallContext => ({ workspaceId: ws, requestId: `req_${crypto.randomUUID()}` })
const embed = (model: string, inputs: string[], signal = new AbortController().signal) => h.deps.models.embed(ctx(), h.deps.models.model(model, 'embedding'), inputs, signal)
const inputsOf = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix} input ${i}`)
const sent = (model: string) => fake.requests.filter((r) => r.model === model)
/** The fake counts a word a token. */
const words = (inputs: string[]) => inputs.reduce((n, s) => n + s.split(/\s+/).length, 0)
const cut = (inputs: string[], size: number) => Array.from({ length: Math.ceil(inputs.length / size) }, (_, b) => inputs.slice(b * size, (b + 1) * size))

/** The call's vectors are the fake's vectors of its own inputs, in input order. */
function expectVectorsOf(inputs: string[], vectors: number[][]) {
  expect(vectors).toHaveLength(inputs.length)
  vectors.forEach((v, i) => expect(v).toEqual(fakeVector(inputs[i]!, DIMS)))
}

/** The request that retried `failed`: the next one that carried the same inputs. */
function retryOf(model: string, failed: FakeRequest): FakeRequest {
  const again = sent(model).filter((r) => r !== failed && r.at >= failed.at && JSON.stringify(r.json.input) === JSON.stringify(failed.json.input))
  expect(again.length).toBeGreaterThanOrEqual(1)
  return again[0]!
}

const limiterOf = (provider: string): Limiter => (h.deps.models as unknown as { d: { providers: Map<string, Provider> } }).d.providers.get(provider)!.embedLimit!

async function rejection(p: Promise<unknown>): Promise<AppError> {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  )
  expect(err).toBeInstanceOf(AppError)
  return err as AppError
}

describe('the batches of one call', () => {
  test(`1 000 inputs, max_batch 64, max_concurrency ${LIMIT}: 16 requests, exactly ${LIMIT} in flight at most, vectors in input order, tokens summed`, async () => {
    // Each batch lists its items in reverse (with their index): the order must come from the index, then from the batch.
    fake.script('order', [{ dimensions: DIMS, reverse: true }])
    fake.maxInFlight = 0
    const inputs = inputsOf('order', 1000)
    const res = await embed('order', inputs)
    expect(fake.maxInFlight).toBe(LIMIT)
    const requests = sent('order')
    expect(requests).toHaveLength(16)
    // Every batch sent once, each the slice it should be (the order they left in is the limiter's).
    expect(requests.map((r) => r.json.input).sort((a, b) => inputs.indexOf(a[0]) - inputs.indexOf(b[0]))).toEqual(cut(inputs, 64))
    expectVectorsOf(inputs, res.vectors)
    expect(res.tokens).toBe(words(inputs))
    // One call, one charge.
    await h.deps.models.charges.flush()
    const ledger = await h.deps.db.sql<{ tokens_in: number }[]>`select tokens_in from credit_ledger where model = 'order'`
    expect(ledger.map((r) => r.tokens_in)).toEqual([words(inputs)])
  })

  test(`two calls at once on one provider share its ${LIMIT} slots`, async () => {
    fake.maxInFlight = 0
    const a = inputsOf('share a', 500)
    const b = inputsOf('share b', 500)
    const [ra, rb] = await Promise.all([embed('share_a', a), embed('share_b', b)])
    expect(fake.maxInFlight).toBe(LIMIT)
    expect(sent('share_a')).toHaveLength(8)
    expect(sent('share_b')).toHaveLength(8)
    // Both calls had requests in flight at the same time: they shared the slots rather than taking turns whole.
    const overlap = sent('share_a').some((x) => sent('share_b').some((y) => x.at < y.answeredAt! && y.at < x.answeredAt!))
    expect(overlap).toBe(true)
    expectVectorsOf(a, ra.vectors)
    expectVectorsOf(b, rb.vectors)
  })
})

describe('retries', () => {
  test('a 429 with Retry-After: 1 is waited for (the retry no sooner than 1 s after the answer), then the call completes', async () => {
    fake.script('rl', [{ status: 429, retryAfter: 1 }, { dimensions: DIMS }])
    const inputs = inputsOf('rl', 200)
    const res = await embed('rl', inputs)
    expectVectorsOf(inputs, res.vectors)
    const requests = sent('rl')
    expect(requests).toHaveLength(4 + 1)
    const refused = requests[0]!
    const retry = retryOf('rl', refused)
    // The fake shares this process's clock; 1 ms for the timer's granularity.
    expect(retry.at - refused.answeredAt!).toBeGreaterThanOrEqual(1000 - 1)
    // Only the refused batch waited: the others were answered before its retry left.
    expect(requests.filter((r) => r !== refused && r !== retry).every((r) => r.answeredAt! < retry.at)).toBe(true)
  })

  test('a Retry-After beyond 30 s is not waited for: the route fails at once (502 upstream_error)', async () => {
    fake.script('rl_far', [{ status: 429, retryAfter: 60 }])
    const res = await h.call('POST', '/v1/models/embeddings', { key: owner, body: { model: 'rl_far', input: ['one', 'two'], workspace_id: ws } })
    expect(res.status).toBe(502)
    expect(res.body.error.code).toBe('upstream_error')
    expect(sent('rl_far')).toHaveLength(1)
  })

  test('503 then 500 are retried; the call completes in order with one charge', async () => {
    fake.script('srv', [{ status: 503 }, { status: 500 }, { dimensions: DIMS }])
    const inputs = inputsOf('srv', 150)
    const res = await embed('srv', inputs)
    expectVectorsOf(inputs, res.vectors)
    expect(sent('srv')).toHaveLength(3 + 2)
    expect(sent('srv').slice(0, 2).map((r) => (r.step as { status: number }).status)).toEqual([503, 500])
    await h.deps.models.charges.flush()
    const ledger = await h.deps.db.sql<{ tokens_in: number }[]>`select tokens_in from credit_ledger where model = 'srv'`
    expect(ledger.map((r) => r.tokens_in)).toEqual([words(inputs)])
  })

  test(`a batch failing ${MAX_BATCH_ATTEMPTS} times fails the call as before: upstream_error (502 over HTTP), nothing charged`, async () => {
    fake.script('down', [{ status: 500 }])
    const err = await rejection(embed('down', inputsOf('down', 10)))
    expect(err.code).toBe('upstream_error')
    expect(sent('down')).toHaveLength(MAX_BATCH_ATTEMPTS)
    const res = await h.call('POST', '/v1/models/embeddings', { key: owner, body: { model: 'down', input: ['x'], workspace_id: ws } })
    expect(res.status).toBe(502)
    expect(res.body.error.code).toBe('upstream_error')
    await h.deps.models.charges.flush()
    expect(await h.deps.db.sql`select 1 from credit_ledger where model = 'down'`).toHaveLength(0)
  })

  test('a 400 is not retried: one request, validation_error', async () => {
    fake.script('refused', [{ status: 400 }])
    const err = await rejection(embed('refused', ['x']))
    expect(err.code).toBe('validation_error')
    expect(sent('refused')).toHaveLength(1)
  })
})

describe('abort', () => {
  test('a call queued behind a full provider and aborted leaves without sending anything; the slot is still usable', async () => {
    // `solo` has one slot: queued_a's request hangs in it.
    fake.script('queued_a', ['hang'])
    const a = new AbortController()
    const first = embed('queued_a', ['held'], a.signal)
    await waitFor(() => sent('queued_a').length === 1, { what: 'the held request' })
    const b = new AbortController()
    const second = embed('queued_b', inputsOf('queued b', 200), b.signal)
    // Its four batches wait in the provider's queue (read, not changed: the gateway's own limiter).
    await waitFor(() => limiterOf('solo').queued === 4, { what: 'four queued batches' })
    b.abort()
    expect((await rejection(second)).code).toBe('validation_error')
    expect(sent('queued_b')).toHaveLength(0)
    a.abort()
    expect((await rejection(first)).code).toBe('validation_error')
    await waitFor(() => sent('queued_a')[0]!.closed, { what: 'the held request to be closed' })
    // Nothing was left holding the slot or waiting in the queue.
    expect([limiterOf('solo').running, limiterOf('solo').queued]).toEqual([0, 0])
    const inputs = inputsOf('queued b again', 3)
    expectVectorsOf(inputs, (await embed('queued_b', inputs)).vectors)
    expect(sent('queued_b')).toHaveLength(1)
  })
})

describe('background calls', () => {
  test('a call someone waits for overtakes the queued batches of a background one (ingestion)', async () => {
    fake.script('held', ['hang'])
    const a = new AbortController()
    const first = embed('held', ['held'], a.signal)
    await waitFor(() => sent('held').length === 1, { what: 'the held request' })
    const backInputs = inputsOf('back', 130)
    const back = h.deps.models.embed({ ...ctx(), background: true }, h.deps.models.model('back', 'embedding'), backInputs, new AbortController().signal)
    await waitFor(() => limiterOf('solo').queued === 3, { what: 'the background call\'s three batches in the queue' })
    const front = embed('front', ['urgent'])
    await waitFor(() => limiterOf('solo').queued === 4, { what: 'the urgent batch in the queue' })
    // Freeing the one slot: the urgent batch goes first, then the background ones in their order.
    a.abort()
    await rejection(first)
    expectVectorsOf(['urgent'], (await front).vectors)
    expectVectorsOf(backInputs, (await back).vectors)
    const order = fake.requests.filter((r) => r.model === 'front' || r.model === 'back').map((r) => (r.model === 'front' ? 'front' : r.json.input[0]))
    expect(order).toEqual(['front', backInputs[0], backInputs[64], backInputs[128]])
  })
})

describe('ingestion through the document worker', () => {
  beforeAll(async () => {
    workers = await startWorkers(h.deps)
  })

  /** ~300 chunks of chunk_size 32: five calls of 64, each four requests of 16. */
  const text = (tag: string) =>
    Array.from({ length: 300 }, (_, i) => `Paragraph ${i} of ${tag} talks about lighthouse number ${i} and its keeper, who logs the weather every hour.`).join('\n\n')

  async function ingest(model: string, tag: string) {
    const kb = (await createKb(h, owner, { workspace_id: ws, name: `Ingest ${tag}`, embedding_model: model, chunking: { chunk_size: 32, chunk_overlap: 0 }, retrieval: { mode: 'vector' } })).id
    const id = await uploadText(h, owner, kb, { name: `${tag}.txt`, content: text(tag) })
    return { id, status: await settled(h, owner, id, 30_000) }
  }

  /** Checks every chunk and answers the position of each content. */
  async function expectChunks(id: string, count: number): Promise<Map<string, number>> {
    const rows = await h.deps.db.sql<{ position: number; content: string; embedding: string }[]>`
      select position, content, embedding::text as embedding from chunks where document_id = ${id}
      union all select position, content, embedding::text from chunks_unindexed where document_id = ${id}
      order by position`
    expect(rows).toHaveLength(count)
    expect(rows.map((r) => r.position)).toEqual([...Array(count).keys()])
    for (const r of rows) {
      const want = fakeVector(r.content, DIMS)
      ;(JSON.parse(r.embedding) as number[]).forEach((v, j) => expect(v).toBeCloseTo(want[j]!, 5))
    }
    // In position order in the text too: the paragraphs' numbers only go up.
    const numbers = rows.flatMap((r) => [...r.content.matchAll(/Paragraph (\d+)/g)].map((m) => Number(m[1])))
    expect(numbers.length).toBeGreaterThan(0)
    expect(numbers.every((n, i) => i === 0 || n >= numbers[i - 1]!)).toBe(true)
    return new Map(rows.map((r) => [r.content, r.position]))
  }

  test(`a document of several calls reaches ready with every chunk in order and its own vector; ${LIMIT} requests in flight`, async () => {
    fake.maxInFlight = 0
    const { id, status } = await ingest('doc', 'steady')
    expect(status.status).toBe('ready')
    const n = status.chunks_count as number
    expect(n).toBeGreaterThan(4 * 64)
    const position = await expectChunks(id, n)
    // 16 inputs a request, each chunk sent once.
    expect(sent('doc').reduce((k, r) => k + r.json.input.length, 0)).toBe(n)
    expect(sent('doc').every((r) => r.json.input.length <= 16)).toBe(true)
    expect(fake.maxInFlight).toBe(LIMIT)
    // The next call of 64 chunks was being embedded while the one before it was still out (and then written).
    const call = (r: FakeRequest) => Math.floor(position.get(r.json.input[0])! / 64)
    const overlapping = sent('doc').some((x) => sent('doc').some((y) => call(y) === call(x) + 1 && y.at < x.answeredAt!))
    expect(overlapping).toBe(true)
  })

  test('a 429 in the middle of a document is retried: ready on its first claim, nothing missing or twice', async () => {
    fake.script('doc_429', [{ dimensions: DIMS }, { dimensions: DIMS }, { dimensions: DIMS }, { dimensions: DIMS }, { dimensions: DIMS }, { status: 429, headers: { 'retry-after-ms': '200' } }, { dimensions: DIMS }])
    const { id, status } = await ingest('doc_429', 'rate limited')
    expect(status.status).toBe('ready')
    const n = status.chunks_count as number
    await expectChunks(id, n)
    const requests = sent('doc_429')
    const refused = requests[5]!
    expect((refused.step as { status: number }).status).toBe(429)
    expect(retryOf('doc_429', refused).at - refused.answeredAt!).toBeGreaterThanOrEqual(200 - 1)
    expect(requests.filter((r) => r !== refused).reduce((k, r) => k + r.json.input.length, 0)).toBe(n)
    const [row] = await h.deps.db.sql<{ attempts: number }[]>`select attempts from documents where id = ${id}`
    expect(row!.attempts).toBe(1)
  })
})
