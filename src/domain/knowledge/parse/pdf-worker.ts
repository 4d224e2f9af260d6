import { readPdf, type PdfAnswer } from './pdf'

/**
 * The thread one PDF is read in (parsePdf in pdf.ts starts it, and terminates it when the PDF takes
 * too long): receives the bytes, answers the blocks or the parse error's message.
 */
declare const self: Worker

self.onmessage = async (event: MessageEvent<Uint8Array>) => {
  let answer: PdfAnswer
  try {
    answer = { blocks: await readPdf(event.data) }
  } catch (err) {
    answer = { error: (err as Error)?.message ?? String(err) }
  }
  self.postMessage(answer)
}
