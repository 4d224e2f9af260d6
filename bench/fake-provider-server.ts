import { startFakeProvider, type Reply } from '../tests/helpers/fake-provider'

/**
 * The models bench's upstream: the tests' fake OpenAI-compatible provider in a process of its own, so
 * that the bench client, the service and the provider each have their own event loop. Prints
 * `listening <url>` once it answers, then runs until killed.
 *
 * FAKE_MODELS (JSON) scripts one streamed answer per upstream model name:
 *   { "<model>": { "tokens": 2000, "delayMs": 1, "eventWrites": true } }
 *   - tokens: content chunks, one short word each (` t0`, ` t1`...), so one chunk is one token;
 *   - delayMs: the wait before each event after the first (Bun.sleep: whole milliseconds, ~1.1 ms
 *     for 1 on this machine);
 *   - eventWrites: with delayMs 0, still produce each event as its own enqueue of a pulled stream
 *     (as the service itself streams) instead of one write of the whole answer, which is what the
 *     helper does for a fast test. Done by setting `drop` beyond the last event, so it never fires.
 * Usage is reported (completion tokens = chunks), so the service never counts tokens itself.
 */
interface Shape {
  tokens: number
  delayMs?: number
  eventWrites?: boolean
}

const models = JSON.parse(process.env.FAKE_MODELS ?? '{}') as Record<string, Shape>
const fake = await startFakeProvider()
for (const [model, s] of Object.entries(models)) {
  const reply: Reply = {
    chunks: Array.from({ length: s.tokens }, (_, i) => ` t${i}`),
    delayMs: s.delayMs ?? 0,
    usage: { prompt_tokens: 12, completion_tokens: s.tokens },
  }
  if (s.eventWrites) reply.drop = Number.MAX_SAFE_INTEGER
  fake.script(model, [reply])
}

// The helper records every request (headers and body) for the tests' assertions; a bench sends
// thousands, so the record is emptied now and then to keep the heap flat.
setInterval(() => fake.requests.splice(0), 5_000).unref()

console.log(`listening ${fake.url}`)
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => fake.close().then(() => process.exit(0)))
