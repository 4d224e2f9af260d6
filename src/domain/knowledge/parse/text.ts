import { type Block, decodeText } from './types'

/**
 * Plain text: one block per paragraph, paragraphs being separated by blank lines (a line of only
 * spaces counts as blank). Line breaks inside a paragraph stay: the chunker cuts on them before it
 * cuts inside a line.
 */
export function parseTxt(bytes: Uint8Array): Block[] {
  return decodeText(bytes)
    .split(/\n[^\S\n]*\n\s*/)
    .map((p) => p.split('\n').map((line) => line.trimEnd()).join('\n').trim())
    .filter((p) => p !== '')
    .map((text) => ({ kind: 'text', text }))
}
