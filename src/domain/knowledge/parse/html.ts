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
  const reader = new PageReader()
  const parser = new Parser(
    {
      onopentagname: (name) => reader.open(name),
      onclosetag: (name) => reader.close(name),
      ontext: (data) => reader.text(data),
    },
    { decodeEntities: true, lowerCaseTags: true },
  )
  parser.write(html)
  parser.end()
  return reader.end()
}

/** The blocks of one page as its tags and text stream by (htmlToBlocks). */
class PageReader {
  private readonly blocks: Block[] = []
  private buf: string[] = []
  private skip = 0
  private inHead = false
  private title: string[] | null = null
  private inTitle = false
  private headingLevel = 0
  private pre = 0
  private readonly tables: Table[] = []
  // Inside a <td>/<th> of the innermost table: blocks there are spaces, the row is the block.
  private inCell = false

  text(data: string): void {
    if (this.skip > 0) return
    if (this.inTitle) this.title!.push(data)
    else if (!this.inHead) this.buf.push(this.pre > 0 ? data : data.replace(/\s+/g, ' '))
  }

  open(name: string): void {
    if (SKIP.has(name)) return void this.skip++
    if (this.skip > 0) return
    if (name === 'head') return void (this.inHead = true)
    if (name === 'title' && this.title === null) {
      this.title = []
      this.inTitle = true
      return
    }
    const level = HEADING.exec(name)?.[1]
    if (this.inHead && (level || BLOCK.has(name) || name === 'table')) this.inHead = false
    const t = this.tables.at(-1)
    if (name === 'table') this.openTable()
    else if (t && name === 'tr') {
      this.endCell(t)
      if (t.row) this.endRow(t)
      t.row = []
      t.rowAllTh = true
    } else if (t && (name === 'td' || name === 'th')) {
      this.endCell(t)
      if (!t.row) {
        t.row = []
        t.rowAllTh = true
      }
      if (name === 'td') t.rowAllTh = false
      this.buf = []
      this.inCell = true
    } else if (name === 'br') {
      this.buf.push(this.headingLevel > 0 || this.inCell ? ' ' : '\n')
    } else if (level && !this.inCell) {
      this.flush()
      this.headingLevel = Number(level)
    } else if (BLOCK.has(name)) {
      if (this.headingLevel > 0 || this.inCell) this.buf.push(' ')
      else {
        this.flush()
        if (name === 'pre') this.pre++
      }
    }
  }

  close(name: string): void {
    if (SKIP.has(name)) return void (this.skip > 0 && this.skip--)
    if (this.skip > 0) return
    if (name === 'head') return void (this.inHead = false)
    if (name === 'title' && this.inTitle) return void (this.inTitle = false)
    const t = this.tables.at(-1)
    if (name === 'table' && t) this.closeTable(t)
    else if (t && name === 'tr') {
      this.endCell(t)
      this.endRow(t)
    } else if (t && (name === 'td' || name === 'th')) {
      this.endCell(t)
    } else if (this.headingLevel > 0 && HEADING.test(name)) {
      const text = collapse(this.buf.join(''))
      this.buf = []
      if (text !== '') this.blocks.push(heading(text, this.headingLevel))
      this.headingLevel = 0
    } else if (BLOCK.has(name)) {
      if (this.headingLevel > 0 || this.inCell) this.buf.push(' ')
      else {
        this.flush()
        if (name === 'pre' && this.pre > 0) this.pre--
      }
    }
  }

  /** The page's blocks, its title first when it has no level-1 heading. */
  end(): Block[] {
    this.flush()
    const titleText = this.title ? collapse(this.title.join('')) : ''
    if (titleText !== '' && !this.blocks.some((b) => b.kind === 'heading' && b.level === 1)) this.blocks.unshift(heading(titleText, 1))
    return nonEmpty(this.blocks)
  }

  private flush(): void {
    const raw = this.buf.join('')
    this.buf = []
    const text =
      this.pre > 0
        ? raw.replace(/^\n/, '').trimEnd()
        : raw
            .split('\n')
            .map((line) => line.replace(/ {2,}/g, ' ').trim())
            .filter((line) => line !== '')
            .join('\n')
    if (text !== '') this.blocks.push({ kind: 'text', text })
  }

  private openTable(): void {
    let outerCell: string[] | null = null
    if (this.inCell) {
      outerCell = this.buf
      this.buf = []
      this.inCell = false
    } else this.flush()
    this.tables.push({ header: null, row: null, rowAllTh: true, rows: 0, outerCell })
  }

  private closeTable(t: Table): void {
    this.endCell(t)
    this.endRow(t)
    // A table that is only a header row: its header is all the content it has.
    if (t.rows === 0 && t.header) this.blocks.push({ kind: 'text', text: renderRow(null, t.header) })
    this.tables.pop()
    if (t.outerCell) {
      this.buf = t.outerCell
      this.inCell = true
    }
  }

  private endRow(t: Table): void {
    const cells = t.row
    t.row = null
    if (!cells || cells.every((c) => c === '')) return
    if (t.rowAllTh && t.rows === 0 && !t.header) {
      t.header = cells
      return
    }
    t.rows++
    this.blocks.push({ kind: 'text', text: renderRow(t.header, cells) })
  }

  private endCell(t: Table): void {
    if (!this.inCell) return
    t.row!.push(collapse(this.buf.join('')))
    this.buf = []
    this.inCell = false
  }
}

export function parseHtml(bytes: Uint8Array): Block[] {
  return htmlToBlocks(decodeText(bytes))
}
