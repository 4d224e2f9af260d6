import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import pairs from '../fixtures/local-embed-pairs.json'
import { cosine, DIMENSIONS, embedText, normalise, scanWords } from '../../src/domain/models/local/embed'
import { LocalProvider } from '../../src/domain/models/providers/local'
import { ProviderError } from '../../src/domain/models/types'
import { countTokens } from '../../src/lib/tokens'

setDefaultTimeout(TEST_TIMEOUT_MS)

const norm = (v: number[]) => Math.sqrt(v.reduce((s, x) => s + x * x, 0))
const words = (text: string) => {
  const s = normalise(text)
  const { spans, count } = scanWords(s)
  return Array.from({ length: count }, (_, k) => s.slice(spans[2 * k]!, spans[2 * k + 1]!))
}

describe('local-embed vectors', () => {
  test('384 dimensions, unit length', () => {
    for (const text of ['hello', 'The quick brown fox jumps over the lazy dog.', 'x'.repeat(10_000), 'a b c d e f g '.repeat(500)]) {
      const v = embedText(text)
      expect(v).toHaveLength(DIMENSIONS)
      expect(Math.abs(norm(v) - 1)).toBeLessThan(1e-6)
    }
  })

  test('the same text gives the same vector, bit for bit, and the hashing is pinned', () => {
    const text = 'The quick brown fox jumps over the lazy dog.'
    const a = embedText(text)
    embedText('something else in between, to dirty the reused buffers')
    expect(embedText(text)).toEqual(a)
    // From a run: a change to tokenising, hashing or weighting shows up here.
    const nonZero = a.map((x, i) => [i, x] as const).filter(([, x]) => x !== 0).slice(0, 6)
    expect(nonZero).toEqual([[19, -0.07000714109260575], [24, -0.1400142821852115], [26, 0.07000714109260575], [37, 0.07000714109260575], [42, -0.07000714109260575], [56, 0.019801009679225972]])
  })

  test('related texts score higher than unrelated ones on every fixture triple', () => {
    const margins = pairs.triples.map(({ anchor, related, unrelated }) => {
      const a = embedText(anchor)
      return cosine(a, embedText(related)) - cosine(a, embedText(unrelated))
    })
    for (const [i, m] of margins.entries()) expect({ triple: i, positive: m > 0 }).toEqual({ triple: i, positive: true })
    // Measured: mean 0.375, smallest 0.164 (20 triples).
    expect(margins.reduce((s, m) => s + m, 0) / margins.length).toBeGreaterThan(0.25)
  })

  test('case, width and compatibility forms fold together (NFKC + lower case)', () => {
    expect(embedText('ＨＥＬＬＯ Ｗｏｒｌｄ')).toEqual(embedText('hello world'))
    expect(embedText('ﬁnancial report')).toEqual(embedText('FINANCIAL Report'))
  })

  test('unicode: letters of any script are words, Han and kana characters one word each, emoji none', () => {
    expect(words('Crème brûlée, naïve café!')).toEqual(['crème', 'brûlée', 'naïve', 'café'])
    expect(words('Привет, мир 42')).toEqual(['привет', 'мир', '42'])
    expect(words('日本語のテキスト')).toEqual(['日', '本', '語', 'の', 'テ', 'キ', 'ス', 'ト'])
    expect(words('emoji 🎉 here 𐌰𐌱𐌲 𝒜lpha')).toEqual(['emoji', 'here', '𐌰𐌱𐌲', 'alpha']) // Gothic (astral) letters; 𝒜 is NFKC's A
    expect(cosine(embedText('東京の天気'), embedText('東京の天気予報'))).toBeGreaterThan(cosine(embedText('東京の天気'), embedText('大阪の料理')))
    expect(Math.abs(norm(embedText('हिन्दी भाषा')) - 1)).toBeLessThan(1e-6)
  })

  test('a text without words is the zero vector (no features, no pretence)', () => {
    for (const text of ['', '   ', '!!! ... ???', '🎉🎉']) expect(embedText(text).every((x) => x === 0)).toBe(true)
    expect(cosine(embedText(''), embedText('hello'))).toBe(0)
  })
})

describe('LocalProvider.embed', () => {
  const provider = new LocalProvider()
  const signal = new AbortController().signal

  test('vectors in input order and token usage counted with the real tokenizer', async () => {
    const inputs = Array.from({ length: 70 }, (_, i) => `text number ${i} about topic ${i % 7}`)
    const { vectors, tokens } = await provider.embed('local-embed', inputs, signal)
    expect(vectors).toHaveLength(70)
    for (const [i, v] of vectors.entries()) expect(v).toEqual(embedText(inputs[i]!))
    expect(tokens).toBe(inputs.reduce((n, t) => n + countTokens(t), 0))
    expect(provider.maxEmbedBatch).toBeGreaterThanOrEqual(2048)
  })

  test('an aborted signal stops the batch; an unknown model is a 400 without failover', async () => {
    const controller = new AbortController()
    controller.abort()
    let aborted: unknown
    try {
      await provider.embed('local-embed', ['a'], controller.signal)
    } catch (err) {
      aborted = err
    }
    expect((aborted as Error)?.name).toBe('AbortError')
    for (const model of ['local-embedx', 'local-chat']) {
      let failure: unknown
      try {
        await provider.embed(model, ['a'], signal)
      } catch (err) {
        failure = err
      }
      expect(failure).toBeInstanceOf(ProviderError)
      expect((failure as ProviderError).status).toBe(400)
      expect((failure as ProviderError).failover).toBeNull()
      expect((failure as ProviderError).message).toContain('local-embed')
    }
  })
})
