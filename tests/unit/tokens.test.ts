import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { countTokens as libraryCount } from 'gpt-tokenizer/encoding/o200k_base'
import { chunkDocument, DEFAULT_CHUNKING } from '../../src/domain/knowledge/chunk'
import { localChat, localChatStream } from '../../src/domain/models/local/chat'
import { boundedParts, countChatTokens, countTokens, MAX_RUN, tokenize } from '../../src/lib/tokens'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The tokenizer's bound on one "word" (hostile input, docs/hardening.md): the library's BPE is quadratic in the
 * length of a run without spaces, so 200 000 letters held the event loop for 74 s. Each test below
 * with a long run would take minutes without the bound, and so fails on the test's time limit.
 */
const LONG = 'x'.repeat(1_000_000)
const ASIS = { disallowedSpecial: new Set<string>() }

describe('boundedParts', () => {
  test('ordinary text is one part, itself', () => {
    const text = 'The office opens at 9 am. A URL like https://example.com/a/b?c=d stays whole.'
    expect([...boundedParts(text)]).toEqual([text])
    expect([...boundedParts('')]).toEqual([])
  })

  test('a long run is cut into pieces of at most MAX_RUN; the parts make the text again', () => {
    const text = `before ${'ab'.repeat(700)} between ${'9'.repeat(300)}\nafter`
    const parts = [...boundedParts(text)]
    expect(parts.join('')).toBe(text)
    for (const part of parts) for (const run of part.match(/\S+/g) ?? []) expect(run.length).toBeLessThanOrEqual(MAX_RUN)
    expect(parts.length).toBe(11)
  })

  test('a cut never splits a surrogate pair', () => {
    // 'a' then emoji (2 code units each): the MAX_RUN-th code unit is a high surrogate.
    const text = `a${'😀'.repeat(400)}`
    const parts = [...boundedParts(text)]
    expect(parts.join('')).toBe(text)
    for (const part of parts) {
      expect(part.isWellFormed()).toBe(true)
      expect(part.length).toBeLessThanOrEqual(MAX_RUN)
    }
  })
})

describe('counts', () => {
  test('ordinary text counts exactly as the library does', () => {
    const text = 'Our office is in Lisbon. It opens at 9 am on weekdays; the cafeteria serves lunch from noon. 😀 <|endoftext|>'
    expect(countTokens(text)).toBe(libraryCount(text, ASIS))
    expect(tokenize(text).length).toBe(countTokens(text))
  })

  test('counted twice (the second time from remembered pieces), any text counts exactly as the library does', () => {
    const texts = [
      'Refunds reach the card within 14 days; the warehouse confirms receipt first. Refunds, refunds: REFUNDS!',
      "  indented\n\n\tTabbed line\r\n  trailing spaces   \n12345678901 3.14159 -42 1e-7 don't we'll THEY'RE",
      'Ünïcödé façade naïve — « quotes » 日本語のテキスト 中文文本 한국어 مرحبا Здравствуйте 😀👍🏽 <|endoftext|> <|fim_prefix|>',
      `${'a'.repeat(40)} ${'ab1'.repeat(30)} ${' '.repeat(70)}x ${'\n'.repeat(50)}y ${'!?'.repeat(40)}`,
      'supercalifragilisticexpialidocious antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis',
    ]
    for (let round = 0; round < 2; round++) for (const text of texts) expect(countTokens(text)).toBe(libraryCount(text, ASIS))
  })

  test('a million characters without a space is counted at once, close to the whole run', () => {
    expect(countTokens(LONG)).toBe(125_000)
    expect(tokenize(LONG).length).toBe(125_000)
    // Cut or not, a run of 2 000 counts within a token per cut of the library's own count.
    const run = 'qwertyuiop'.repeat(200)
    expect(Math.abs(countTokens(run) - libraryCount(run, ASIS))).toBeLessThanOrEqual(Math.ceil(run.length / MAX_RUN))
  })

  test('a chat prompt of one huge word is counted', () => {
    expect(countChatTokens([{ role: 'user', content: LONG }])).toBe(125_000 + 6)
  })

  test('local-chat answers and streams a context of one huge word', async () => {
    const req = { model: 'local-chat', messages: [{ role: 'system' as const, content: `${LONG} ends here.` }, { role: 'user' as const, content: 'what ends here?' }], max_tokens: 50 }
    const answer = localChat(req)
    expect(answer.usage.prompt_tokens).toBeGreaterThan(125_000)
    let chunks = 0
    for await (const _ of localChatStream(req, new AbortController().signal)) chunks++
    expect(chunks).toBeGreaterThan(1)
  })

  test('a document of one huge word is chunked to the chunk size', () => {
    const chunks = chunkDocument({ blocks: [{ kind: 'text', text: LONG.slice(0, 200_000) }] }, DEFAULT_CHUNKING)
    expect(chunks.length).toBeGreaterThan(1)
    for (const c of chunks) expect(c.tokens).toBeLessThanOrEqual(DEFAULT_CHUNKING.chunk_size)
  })
})

describe('o200k ranks read from the .tiktoken data file', () => {
  test('are the table of gpt-tokenizer\'s own bpeRanks module, entry by entry', async () => {
    const { o200kRanks } = await import('../../src/lib/bpe')
    const library = (await import('gpt-tokenizer/esm/bpeRanks/o200k_base.js' as string)).default as (string | number[])[]
    const ours = o200kRanks()
    expect(ours.length).toBe(library.length)
    let differ = 0
    for (let i = 0; i < library.length; i++) {
      const a = library[i]
      const b = ours[i]
      if (i in library !== i in ours || (typeof a === 'string' ? a !== b : JSON.stringify(a) !== JSON.stringify(b))) differ++
    }
    expect(differ).toBe(0)
  })
})
