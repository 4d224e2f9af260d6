import { expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { embedText } from '../../src/domain/models/local/embed'
import { LocalProvider } from '../../src/domain/models/providers/local'
import { countTokens } from '../../src/lib/tokens'

setDefaultTimeout(TEST_TIMEOUT_MS)

/** local-embed batches run on a worker thread (src/domain/models/local/embed-thread.ts): same answers, in order. */

const texts = Array.from({ length: 64 }, (_, i) => `Chunk ${i}: the valve number ${i * 7} opens slowly under pressure, ${'word '.repeat(i % 9)}end.`)

test('a batch of 64 answers what embedText and countTokens give for each text, in input order', async () => {
  const { vectors, tokens } = await new LocalProvider().embed('local-embed', texts, new AbortController().signal)
  expect(vectors).toEqual(texts.map((t) => embedText(t)))
  expect(tokens).toBe(texts.reduce((n, t) => n + countTokens(t), 0))
})

test('batches sent together come back each to its caller', async () => {
  const p = new LocalProvider()
  const batches = [texts.slice(0, 20), texts.slice(20, 50), texts.slice(50)]
  const answers = await Promise.all(batches.map((b) => p.embed('local-embed', b, new AbortController().signal)))
  answers.forEach((a, i) => expect(a.vectors).toEqual(batches[i]!.map((t) => embedText(t))))
})

test('an aborted call rejects at once; the thread goes on serving others', async () => {
  const p = new LocalProvider()
  const ac = new AbortController()
  const big = Array.from({ length: 2000 }, (_, i) => `${texts[i % 64]} ${i}`)
  const pending = p.embed('local-embed', big, ac.signal)
  ac.abort(new Error('stopped'))
  await expect(pending).rejects.toThrow('stopped')
  const after = await p.embed('local-embed', texts.slice(0, 10), new AbortController().signal)
  expect(after.vectors).toEqual(texts.slice(0, 10).map((t) => embedText(t)))
  const already = new AbortController()
  already.abort(new Error('before'))
  await expect(p.embed('local-embed', texts, already.signal)).rejects.toThrow('before')
})
