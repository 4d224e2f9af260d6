import { readFileSync } from 'node:fs'

type Bpe = typeof import('gpt-tokenizer/encoding/o200k_base')

let bpe: Bpe | undefined

/**
 * The o200k_base tokenizer, loaded on first use: loading its tables took ~0.65 s, half of what the
 * service spent importing its code at start-up (bench/README.md, "Start-up"). The first token count of
 * a process pays it instead.
 *
 * Its ranks are read from the package's own data file (data/o200k_base.tiktoken) rather than imported
 * from its 2.4 MB JavaScript module (bpeRanks/o200k_base.js): the same table (tests/unit/tokens.test.ts
 * checks it entry by entry), but without the module's source text and the code of a 200 000-element
 * array literal, which the engine kept for the life of the process: ~15 MB less resident memory
 * (bench/README.memory.md) and ~0.1 s quicker to load.
 */
export function o200k(): Bpe {
  // require, not import(): token counts are synchronous wherever they are taken.
  bpe ??= (require('gpt-tokenizer/GptEncoding') as typeof import('gpt-tokenizer/GptEncoding')).GptEncoding.getEncodingApi('o200k_base', o200kRanks) as unknown as Bpe
  return bpe
}

const BOM = [0xef, 0xbb, 0xbf]

/**
 * The rank table as gpt-tokenizer's bpeRanks/o200k_base.js has it: index = rank, the token as a string
 * when its bytes are UTF-8 (and do not begin with a byte order mark, which a decoder would drop),
 * otherwise its bytes.
 */
export function o200kRanks(): (string | number[])[] {
  const { tryConvertToString } = require('gpt-tokenizer/utfUtil') as typeof import('gpt-tokenizer/utfUtil')
  const text = readFileSync(require.resolve('gpt-tokenizer/data/o200k_base.tiktoken'), 'latin1')
  const ranks: (string | number[])[] = []
  let start = 0
  while (start < text.length) {
    let end = text.indexOf('\n', start)
    if (end < 0) end = text.length
    const space = text.indexOf(' ', start)
    if (space > start && space < end) {
      const bytes = Buffer.from(text.slice(start, space), 'base64')
      const bom = bytes.length >= 3 && bytes[0] === BOM[0] && bytes[1] === BOM[1] && bytes[2] === BOM[2]
      ranks[Number(text.slice(space + 1, end))] = (!bom && tryConvertToString(bytes)) || Array.from(bytes)
    }
    start = end + 1
  }
  return ranks
}
