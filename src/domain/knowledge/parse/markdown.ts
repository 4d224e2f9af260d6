import { decodeHTML } from 'entities'
import { Lexer, type Token, type Tokens } from 'marked'
import { htmlToBlocks, renderRow } from './html'
import { type Block, decodeText, heading, nonEmpty } from './types'

/**
 * Markdown through marked's lexer (CommonMark + GFM: ATX and setext headings, tables, task lists),
 * never its renderer: blocks come from the token tree, inline syntax that is only decoration
 * (emphasis, link and image syntax, code spans' backticks) is dropped and its text kept. Block HTML
 * goes through the HTML path; entities are decoded as a renderer would.
 */
export function parseMarkdown(bytes: Uint8Array): Block[] {
  const blocks: Block[] = []
  walk(lexMarkdown(decodeText(bytes)), blocks)
  return nonEmpty(blocks)
}

/**
 * A line that could underline a setext heading, once the prefixes of the blocks it may sit in
 * (blockquotes' `>`, list items' indentation) are taken off: only `=` or only `-`.
 */
const UNDERLINE = /^[ \t>]*(?:=+|-+)[ \t]*$/m
const NEVER = { exec: () => null, test: () => false }

/**
 * marked's lexer (GFM). At every block, marked tries its setext-heading rule, which reads the
 * whole paragraph ahead looking for an underline below it: a third of the time spent parsing
 * ordinary Markdown (a 100-chunk document of paragraphs). Without any line that could be an
 * underline, the rule can match nowhere, and this lexer leaves it out; the tokens are the same.
 */
export function lexMarkdown(text: string): Token[] {
  const lexer = new Lexer({ gfm: true })
  if (!UNDERLINE.test(text)) {
    const rules = (lexer as unknown as { tokenizer: { rules: { block: Record<string, unknown> } } }).tokenizer.rules
    rules.block = { ...rules.block, lheading: NEVER }
  }
  return lexer.lex(text)
}

function walk(tokens: readonly Token[], out: Block[]): void {
  for (const token of tokens) {
    const t = token as Tokens.Generic
    switch (token.type) {
      case 'heading':
        out.push(heading(inline(t.tokens ?? []).replace(/\s+/g, ' ').trim(), t.depth as number))
        break
      case 'paragraph':
      case 'text':
        out.push({ kind: 'text', text: inline(t.tokens ?? [{ type: 'text', raw: t.raw, text: t.text } as Tokens.Text]).trim() })
        break
      case 'code':
        out.push({ kind: 'text', text: (t.text as string).trimEnd() })
        break
      case 'blockquote':
        walk(t.tokens ?? [], out)
        break
      case 'list':
        for (const item of (token as Tokens.List).items) listItem(item, out)
        break
      case 'table': {
        const table = token as Tokens.Table
        const header = table.header.map((cell) => inline(cell.tokens).trim())
        for (const row of table.rows) out.push({ kind: 'text', text: renderRow(header, row.map((cell) => inline(cell.tokens).trim())) })
        if (table.rows.length === 0) out.push({ kind: 'text', text: renderRow(null, header) })
        break
      }
      case 'html':
        out.push(...htmlToBlocks(t.text as string))
        break
      // space, hr, def (link reference definitions) and checkboxes carry no text
    }
  }
}

/** A list item is one block: its own text; nested lists and block content become blocks after it. */
function listItem(item: Tokens.ListItem, out: Block[]): void {
  const own: string[] = []
  const rest: Token[] = []
  for (const child of item.tokens) {
    if (child.type === 'text' || child.type === 'paragraph') own.push(inline((child as Tokens.Text).tokens ?? [child]).trim())
    else if (child.type !== 'checkbox' && child.type !== 'space') rest.push(child)
  }
  out.push({ kind: 'text', text: own.filter((s) => s !== '').join('\n') })
  walk(rest, out)
}

/** The plain text of inline tokens. */
function inline(tokens: readonly Token[]): string {
  let s = ''
  for (const token of tokens) {
    const t = token as Tokens.Generic
    switch (token.type) {
      case 'text':
        s += t.tokens ? inline(t.tokens) : decode(t.text as string)
        break
      case 'escape':
      case 'codespan':
        s += t.text as string
        break
      case 'br':
        s += '\n'
        break
      case 'html':
        break
      default:
        // strong, em, del, link, image (its alt text) and whatever extension keeps its text in tokens
        s += t.tokens ? inline(t.tokens) : typeof t.text === 'string' ? decode(t.text) : ''
    }
  }
  return s
}

function decode(text: string): string {
  return text.includes('&') ? decodeHTML(text) : text
}
