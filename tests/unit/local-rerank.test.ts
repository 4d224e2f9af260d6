import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { hashRange } from '../../src/domain/models/local/embed'
import { bm25, relevance, rerank, terms } from '../../src/domain/models/local/rerank'
import { LocalProvider } from '../../src/domain/models/providers/local'
import { ProviderError } from '../../src/domain/models/types'
import { countTokens } from '../../src/lib/tokens'

setDefaultTimeout(TEST_TIMEOUT_MS)

const documents = [
  'The oven should be preheated before baking bread.',
  'Kubernetes schedules containers onto the nodes of a cluster.',
  'Interest rates were raised by the central bank.',
  'A cluster of containers: how Kubernetes places pods on nodes, and what the scheduler weighs.',
  'Bread needs flour, water, salt and yeast.',
]

describe('local-rerank', () => {
  test('the relevant documents come first; scores in [0, 1] and sorted', () => {
    const { results } = rerank('how does kubernetes schedule containers on a cluster', documents)
    expect(results).toHaveLength(documents.length)
    expect(results.slice(0, 2).map((r) => r.index).sort()).toEqual([1, 3])
    for (const r of results) {
      expect(r.relevance_score).toBeGreaterThanOrEqual(0)
      expect(r.relevance_score).toBeLessThanOrEqual(1)
    }
    for (let i = 1; i < results.length; i++) expect(results[i - 1]!.relevance_score).toBeGreaterThanOrEqual(results[i]!.relevance_score)
    expect(results.at(-1)!.relevance_score).toBe(0)
    expect(rerank('bread', documents).results.slice(0, 2).map((r) => r.index).sort()).toEqual([0, 4])
  })

  test('top_n keeps the best n; all by default; 0 keeps none', () => {
    const all = rerank('bank interest rates', documents).results
    expect(rerank('bank interest rates', documents, 2).results).toEqual(all.slice(0, 2))
    expect(rerank('bank interest rates', documents, 99).results).toEqual(all)
    expect(rerank('bank interest rates', documents, 0).results).toEqual([])
    expect(all[0]!.index).toBe(2)
  })

  test('ties are ordered by index', () => {
    const { results } = rerank('apple', ['pear', 'apple pie', 'plum', 'apple pie', 'fig'])
    expect(results.map((r) => r.index)).toEqual([1, 3, 0, 2, 4])
    expect(results[0]!.relevance_score).toBe(results[1]!.relevance_score)
  })

  test('an empty list of documents, an empty query', () => {
    expect(rerank('anything', [])).toEqual({ results: [], tokens: 0 })
    const { results } = rerank('', ['a b', 'c'])
    expect(results).toEqual([{ index: 0, relevance_score: 0 }, { index: 1, relevance_score: 0 }])
  })

  test('tokens: the query once per document plus the documents', () => {
    const query = 'central bank'
    expect(rerank(query, documents).tokens).toBe(countTokens(query) * documents.length + documents.reduce((n, d) => n + countTokens(d), 0))
  })

  test('BM25: more matches and rarer terms score higher; relevance is monotonic', () => {
    const q = terms('red fox')
    const [both, red, fox, none] = bm25(q, ['a red fox', 'a red car', 'the fox den', 'a blue car'].map(terms))
    expect(both!).toBeGreaterThan(red!)
    expect(none).toBe(0)
    // "red" appears twice over the fixed set, "fox" twice too: equal IDF, equal length → equal scores.
    expect(red).toBeCloseTo(fox!, 12)
    const scores = [0, 0.1, 0.5, 1, 2, 5, 50]
    const mapped = scores.map((s) => relevance(s, 2))
    for (let i = 1; i < mapped.length; i++) expect(mapped[i]!).toBeGreaterThan(mapped[i - 1]!)
    expect(mapped.every((r) => r >= 0 && r < 1)).toBe(true)
  })

  test('light stemming and normalisation: plurals and case match', () => {
    expect(terms('Cats')).toEqual(terms('cat'))
    const hashes = (...ws: string[]) => ws.map((w) => hashRange(w, 0, w.length))
    expect(terms('Cats Dogs bus')).toEqual(hashes('cat', 'dog', 'bus'))
    expect(terms('glass status analysis')).toEqual(hashes('glass', 'status', 'analysis'))
    expect(rerank('CATS', ['dogs bark', 'a cat sleeps']).results[0]!.index).toBe(1)
  })

  test('through the provider; a wrong model is a 400 without failover', async () => {
    const provider = new LocalProvider()
    const signal = new AbortController().signal
    expect(await provider.rerank('local-rerank', 'bread', documents, 1, signal)).toEqual(rerank('bread', documents, 1))
    let failure: unknown
    try {
      await provider.rerank('local-embed', 'bread', documents, 1, signal)
    } catch (err) {
      failure = err
    }
    expect(failure).toBeInstanceOf(ProviderError)
    expect((failure as ProviderError).status).toBe(400)
    expect((failure as ProviderError).failover).toBeNull()
  })
})
