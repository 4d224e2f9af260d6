import { Parser } from 'htmlparser2'
import { type Block, collapse, decodeText, heading, nonEmpty } from './types'

/** Elements whose text is not the page's content: code, chrome around the article, fallbacks. */
const SKIP = new Set(['script', 'style', 'noscript', 'template', 'svg', 'math', 'iframe', 'nav', 'footer', 'aside'])

/** Elements that end the paragraph before them and start a new one. */
const BLOCK = new Set([
  'address', 'article', 'blockquote', 'body', 'caption', 'center', 'dd', 'details', 'dialog', 'div', 'dl', 'dt', 'fieldset',
  'figcaption', 'figure', 'form', 'header', 'hgroup', 'hr', 'html', 'legend', 'li', 'main', 'menu', 'ol', 'p', 'pre', 'section',
  'summary', 'ul',
])

const HEADING = /^h([1-6])$/

interface Table {
  /** Cell texts of the first row when it is all <th>: later rows are rendered against it. */
  header: string[] | null
  row: string[] | null
  rowAllTh: boolean
  rows: number
  /** The text of the enclosing table's cell, set aside while this nested table is read. */
  outerCell: string[] | null
}

/**
 * A table row as one line of text. With a header row, `Plan: Free; Documents: 100`: each row then
 * says what its values are even when a chunk holds it without the header. Without one, the cells
 * joined by ` | `.
 */
export function renderRow(header: readonly string[] | null, cells: readonly string[]): string {
  if (!header) return cells.filter((c) => c !== '').join(' | ')
  return cells
    .map((c, i) => (c === '' ? '' : header[i] ? `${header[i]}: ${c}` : c))
    .filter((c) => c !== '')
    .join('; ')
}

/**
 * Readable text of an HTML page, headings kept, with htmlparser2's streaming parser (it decodes
 * entities and closes what HTML leaves implied: `<p>` by the next block, `<li>` by the next item).
 * Whitespace collapses as a browser would; `<br>` and `<pre>` keep their line breaks. Table rows
 * are one block each. The `<title>` becomes a level-1 heading when the page has no `<h1>`.
 */
export function htmlToBlocks(html: string): Block[] {
  const blocks: Block[] = []
  let buf: string[] = []
  let skip = 0
  let inHead = false
  let title: string[] | null = null
  let inTitle = false
  let headingLevel = 0
  let pre = 0
  const tables: Table[] = []
  // Inside a <td>/<th> of the innermost table: blocks there are spaces, the row is the block.
  let inCell = false

  function flush(): void {
    const raw = buf.join('')
    buf = []
    const text =
      pre > 0
        ? raw.replace(/^\n/, '').trimEnd()
        : raw
            .split('\n')
            .map((line) => line.replace(/ {2,}/g, ' ').trim())
            .filter((line) => line !== '')
            .join('\n')
    if (text !== '') blocks.push({ kind: 'text', text })
  }

  function endRow(t: Table): void {
    const cells = t.row
    t.row = null
    if (!cells || cells.every((c) => c === '')) return
    if (t.rowAllTh && t.rows === 0 && !t.header) {
      t.header = cells
      return
    }
    t.rows++
    blocks.push({ kind: 'text', text: renderRow(t.header, cells) })
  }

  function endCell(t: Table): void {
    if (!inCell) return
    t.row!.push(collapse(buf.join('')))
    buf = []
    inCell = false
  }

  function open(name: string): void {
    if (SKIP.has(name)) return void skip++
    if (skip > 0) return
    if (name === 'head') return void (inHead = true)
    if (name === 'title' && title === null) {
      title = []
      inTitle = true
      return
    }
    const level = HEADING.exec(name)?.[1]
    if (inHead && (level || BLOCK.has(name) || name === 'table')) inHead = false
    const t = tables.at(-1)
    if (name === 'table') {
      let outerCell: string[] | null = null
      if (inCell) {
        outerCell = buf
        buf = []
        inCell = false
      } else flush()
      tables.push({ header: null, row: null, rowAllTh: true, rows: 0, outerCell })
    } else if (t && name === 'tr') {
      endCell(t)
      if (t.row) endRow(t)
      t.row = []
      t.rowAllTh = true
    } else if (t && (name === 'td' || name === 'th')) {
      endCell(t)
      if (!t.row) {
        t.row = []
        t.rowAllTh = true
      }
      if (name === 'td') t.rowAllTh = false
      buf = []
      inCell = true
    } else if (name === 'br') {
      buf.push(headingLevel > 0 || inCell ? ' ' : '\n')
    } else if (level && !inCell) {
      flush()
      headingLevel = Number(level)
    } else if (BLOCK.has(name)) {
      if (headingLevel > 0 || inCell) buf.push(' ')
      else {
        flush()
        if (name === 'pre') pre++
      }
    }
  }

  function close(name: string): void {
    if (SKIP.has(name)) return void (skip > 0 && skip--)
    if (skip > 0) return
    if (name === 'head') return void (inHead = false)
    if (name === 'title' && inTitle) return void (inTitle = false)
    const t = tables.at(-1)
    if (name === 'table' && t) {
      endCell(t)
      endRow(t)
      // A table that is only a header row: its header is all the content it has.
      if (t.rows === 0 && t.header) blocks.push({ kind: 'text', text: renderRow(null, t.header) })
      tables.pop()
      if (t.outerCell) {
        buf = t.outerCell
        inCell = true
      }
    } else if (t && name === 'tr') {
      endCell(t)
      endRow(t)
    } else if (t && (name === 'td' || name === 'th')) {
      endCell(t)
    } else if (headingLevel > 0 && HEADING.test(name)) {
      const text = collapse(buf.join(''))
      buf = []
      if (text !== '') blocks.push(heading(text, headingLevel))
      headingLevel = 0
    } else if (BLOCK.has(name)) {
      if (headingLevel > 0 || inCell) buf.push(' ')
      else {
        flush()
        if (name === 'pre' && pre > 0) pre--
      }
    }
  }

  const parser = new Parser(
    {
      onopentagname: open,
      onclosetag: close,
      ontext(data) {
        if (skip > 0) return
        if (inTitle) title!.push(data)
        else if (!inHead) buf.push(pre > 0 ? data : data.replace(/\s+/g, ' '))
      },
    },
    { decodeEntities: true, lowerCaseTags: true },
  )
  parser.write(html)
  parser.end()
  flush()

  const titleText = title ? collapse((title as string[]).join('')) : ''
  if (titleText !== '' && !blocks.some((b) => b.kind === 'heading' && b.level === 1)) blocks.unshift(heading(titleText, 1))
  return nonEmpty(blocks)
}

export function parseHtml(bytes: Uint8Array): Block[] {
  return htmlToBlocks(decodeText(bytes))
}
