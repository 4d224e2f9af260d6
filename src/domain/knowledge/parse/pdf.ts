import { getDocumentProxy } from 'unpdf'
import { type Block, ParseError } from './types'

interface Line {
  text: string
  /** Baseline, PDF user space (y grows upwards). */
  y: number
  size: number
}

interface Item {
  str: string
  transform: number[]
  width: number
  height: number
  hasEOL: boolean
}

/**
 * A PDF's text with pdf.js (through unpdf, which bundles a build that needs no worker or canvas),
 * page by page: text items → lines (by baseline) → paragraphs. A paragraph ends where the gap to the
 * next line is over 1.3 times the page's usual line spacing (the median gap between lines of one font
 * size: 1.2 × the font size in most documents, 2.4 × in double-spaced ones), where the font size
 * changes by over 15 % (a heading-like line is its own paragraph) and at the end of a page.
 *
 * PDFs carry no reliable headings (tagged PDFs are rare), so every paragraph is a text block. pdf.js
 * has no time or memory limit of its own: like every parser, it runs in the document process
 * (src/domain/knowledge/sandbox.ts), which is killed at either limit. (sample.pdf, 2 pages: ~2.6 ms.)
 */
export async function readPdf(bytes: Uint8Array): Promise<Block[]> {
  let pdf: Awaited<ReturnType<typeof getDocumentProxy>>
  try {
    // A copy: pdf.js takes ownership of the buffer it is given (it detaches it), and it is the caller's.
    pdf = await getDocumentProxy(new Uint8Array(bytes), { verbosity: 0 })
  } catch (err) {
    throw pdfError(err)
  }
  try {
    const blocks: Block[] = []
    for (let n = 1; n <= pdf.numPages; n++) {
      const content = await (await pdf.getPage(n)).getTextContent()
      const items: Item[] = []
      for (const item of content.items) if ('str' in item) items.push(item)
      for (const text of paragraphs(lines(items))) blocks.push({ kind: 'text', text })
    }
    return blocks
  } catch (err) {
    throw pdfError(err)
  } finally {
    await pdf.loadingTask.destroy().catch(() => undefined)
  }
}

function pdfError(err: unknown): ParseError {
  const e = err as { name?: string; message?: string }
  if (e?.name === 'PasswordException') return new ParseError('parse_error', 'the PDF is protected by a password')
  return new ParseError('parse_error', `the PDF could not be read: ${e?.message ?? String(err)}`)
}

/** Text items → lines: a line ends at an item's end-of-line mark or where the baseline moves. */
function lines(items: readonly Item[]): Line[] {
  const out: Line[] = []
  let parts: string[] = []
  let y = 0
  let size = 0
  let end = 0
  const finish = () => {
    const text = parts.join('').replace(/\s+/g, ' ').trim()
    if (text !== '') out.push({ text, y, size })
    parts = []
  }
  for (const item of items) {
    const [, , c = 0, d = 0, x = 0, baseline = 0] = item.transform
    const itemSize = Math.hypot(c, d) || item.height || 1
    if (item.str !== '') {
      if (parts.length > 0 && Math.abs(baseline - y) > Math.max(size, itemSize) / 2) finish()
      if (parts.length === 0) {
        y = baseline
        size = itemSize
      } else if (x > end + itemSize * 0.2 && !/\s$/.test(parts.at(-1)!) && !/^\s/.test(item.str)) {
        // Runs placed apart on one line without a space character between them: a word gap.
        parts.push(' ')
      }
      parts.push(item.str)
      size = Math.max(size, itemSize)
      end = x + item.width
    }
    if (item.hasEOL) finish()
  }
  finish()
  return out
}

/** Lines of one page → paragraphs, on vertical gaps and font size changes. */
function paragraphs(page: readonly Line[]): string[] {
  const gaps: number[] = []
  for (let i = 1; i < page.length; i++) {
    const gap = page[i - 1]!.y - page[i]!.y
    if (gap > 0 && sameSize(page[i - 1]!, page[i]!)) gaps.push(gap)
  }
  gaps.sort((a, b) => a - b)
  const usual = gaps.length > 0 ? gaps[gaps.length >> 1]! : undefined

  const out: string[] = []
  let text = ''
  for (let i = 0; i < page.length; i++) {
    const line = page[i]!
    const prev = page[i - 1]
    if (prev) {
      const gap = prev.y - line.y
      const limit = (usual ?? Math.min(prev.size, line.size) * 1.2) * 1.3
      // A gap ≤ 0 is a line above the previous one: another column or a text box elsewhere.
      if (gap <= 0 || gap > limit || !sameSize(prev, line)) {
        out.push(text)
        text = ''
      }
    }
    text = text === '' ? line.text : join(text, line.text)
  }
  if (text !== '') out.push(text)
  return out
}

function sameSize(a: Line, b: Line): boolean {
  return Math.abs(a.size - b.size) <= 0.15 * Math.max(a.size, b.size)
}

/** Joins two lines of a paragraph; a word hyphenated at the end of a line is joined back, hyphen kept. */
function join(text: string, next: string): string {
  return /\p{L}-$/u.test(text) && /^\p{Ll}/u.test(next) ? text + next : `${text} ${next}`
}
