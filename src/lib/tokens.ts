import { countTokens as count, encode } from 'gpt-tokenizer/encoding/o200k_base'

/**
 * Token counts where a provider reports none (local models, streams without usage), with a real BPE
 * tokenizer (o200k_base, GPT-4o's): ~50 µs for 500 tokens. Counts for other vendors' models are an
 * estimate, and usage says so nowhere: it is what gets priced.
 */
// User text is data: "<|endoftext|>" in a message is counted as the characters it is, never refused
// as a special token (the library's default throws).
const ASIS = { disallowedSpecial: new Set<string>() }

export function countTokens(text: string): number {
  return text.length === 0 ? 0 : count(text, ASIS)
}

/** The token ids (for tools that cut text to a token budget). */
export function tokenize(text: string): number[] {
  return encode(text, ASIS)
}

/** Tokens of a chat prompt: content plus OpenAI's per-message overhead (3) and reply priming (3). */
export function countChatTokens(messages: readonly { role: string; content: string | null; name?: string }[]): number {
  let n = 3
  for (const m of messages) n += 3 + countTokens(m.content ?? '') + (m.name ? countTokens(m.name) + 1 : 0)
  return n
}
