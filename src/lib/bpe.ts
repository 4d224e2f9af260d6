type Bpe = typeof import('gpt-tokenizer/encoding/o200k_base')

let bpe: Bpe | undefined

/**
 * The o200k_base tokenizer, loaded on first use: loading its tables took ~0.65 s, half of what the
 * service spent importing its code at start-up (bench/README.md, "Start-up"). The first token count of
 * a process pays it instead.
 */
export function o200k(): Bpe {
  // require, not import(): token counts are synchronous wherever they are taken.
  bpe ??= require('gpt-tokenizer/encoding/o200k_base') as Bpe
  return bpe
}
