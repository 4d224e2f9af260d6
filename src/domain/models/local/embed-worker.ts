import { countTokens } from '../../../lib/tokens'
import { DIMENSIONS, embedText } from './embed'

/**
 * local-embed off the service's thread (see embed-thread.ts): a batch of texts in, their vectors
 * (one flat Float64Array, transferred, not copied) and token count out.
 */
declare const self: Worker

export type ToEmbedWorker = { id: number; inputs: string[] }
export type FromEmbedWorker = { id: number; vectors: Float64Array; tokens: number } | { id: number; error: string }

self.onmessage = (event: MessageEvent<ToEmbedWorker>) => {
  const { id, inputs } = event.data
  try {
    const vectors = new Float64Array(inputs.length * DIMENSIONS)
    let tokens = 0
    inputs.forEach((text, i) => {
      vectors.set(embedText(text), i * DIMENSIONS)
      tokens += countTokens(text)
    })
    self.postMessage({ id, vectors, tokens } satisfies FromEmbedWorker, [vectors.buffer])
  } catch (err) {
    self.postMessage({ id, error: (err as Error).message } satisfies FromEmbedWorker)
  }
}
