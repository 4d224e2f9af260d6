/** What every format's parser shares: the block shapes, the one error class, text clean-up. */

export type DocType = 'txt' | 'md' | 'html' | 'pdf' | 'docx' | 'csv' | 'json'

export interface Block {
  kind: 'heading' | 'text' | 'rows'
  /**
   * heading: its text; text: a paragraph (or list item, table row, code block...) as plain text;
   * rows: data lines of a table (CSV), one per line, without the header
   */
  text: string
  /** heading only: 1..6 */
  level?: number
  /** rows only: the header line, repeated at the top of every chunk cut from these rows */
  header?: string
}

export interface ParsedDocument {
  blocks: Block[]
}

export type ParseErrorCode = 'empty_document' | 'parse_error' | 'unsupported_type'

export class ParseError extends Error {
  constructor(
    readonly code: ParseErrorCode,
    message: string,
  ) {
    super(message)
    this.name = 'ParseError'
  }
}

const strictUtf8 = new TextDecoder('utf-8', { fatal: true })

/** The file as text: UTF-8 or a parse_error (a BOM is dropped by the decoder; CRLF and CR become LF). */
export function decodeText(bytes: Uint8Array): string {
  let text: string
  try {
    text = strictUtf8.decode(bytes)
  } catch {
    throw new ParseError('parse_error', 'the file is not valid UTF-8 text')
  }
  return text.includes('\r') ? text.replace(/\r\n?/g, '\n') : text
}

/** Runs of whitespace (NBSP and line breaks included) as one space, trimmed: how HTML renders text. */
export function collapse(text: string): string {
  return text.replace(/\s+/g, ' ').trim()
}

export function heading(text: string, level: number): Block {
  return { kind: 'heading', text, level: Math.min(6, Math.max(1, level)) }
}

/** Keeps the blocks that say something: no empty paragraph or heading reaches the chunker. */
export function nonEmpty(blocks: Block[]): Block[] {
  return blocks.filter((b) => b.text.trim() !== '')
}
