import { countTokens } from '../../../lib/tokens'
import { localChat, localChatStream } from '../local/chat'
import { embedText } from '../local/embed'
import { embedThread } from '../local/embed-thread'
import { rerank } from '../local/rerank'
import { ProviderError, type ChatChunk, type ChatCompletion, type ChatRequest, type EmbeddingResult, type Provider, type RerankResult } from '../types'

const MODELS = { chat: 'local-chat', embed: 'local-embed', rerank: 'local-rerank' } as const

// local-embed with its token count runs ~6 000 texts/s of 512 tokens (bench/local-embed.ts): a full batch
// of 2 048 would hold the event loop for ~0.35 s. Yielding every 32 texts bounds that to ~5 ms, and
// lets an abort land between slices.
const EMBED_SLICE = 32
/**
 * Batches of more texts than this go to the local-embed thread (ingestion's 64-chunk calls); fewer
 * (a search's one query) are computed here, at once, without a thread hop or a turn behind
 * ingestion's batches.
 */
const THREAD_FROM = 8

/**
 * The built-in provider: no network, no key, deterministic. It serves the three upstream names of
 * the catalogue's built-in models (catalog.ts LOCAL_MODELS); any other name is a configuration
 * mistake (a MODELS_FILE route to provider "local" with a model it does not have), answered as a
 * 400 without failover.
 */
export class LocalProvider implements Provider {
  readonly id = 'local'
  readonly kind = 'local' as const
  readonly maxEmbedBatch = 2048
  // Computed on one thread (this one, or the local-embed thread): sending batches at once would only make them take turns.
  readonly embedLimit = null

  async chat(req: ChatRequest, signal: AbortSignal): Promise<ChatCompletion> {
    signal.throwIfAborted()
    expectModel(req.model, 'chat')
    refuseStructured(req)
    return localChat(req)
  }

  async *chatStream(req: ChatRequest, signal: AbortSignal): AsyncGenerator<ChatChunk> {
    expectModel(req.model, 'chat')
    refuseStructured(req)
    yield* localChatStream(req, signal)
  }

  async embed(model: string, inputs: string[], signal: AbortSignal): Promise<EmbeddingResult> {
    expectModel(model, 'embed')
    if (inputs.length >= THREAD_FROM) return embedThread.embed(inputs, signal)
    const vectors: number[][] = []
    let tokens = 0
    for (let i = 0; i < inputs.length; i++) {
      if (i % EMBED_SLICE === 0) {
        if (i > 0) await new Promise((resolve) => setImmediate(resolve))
        signal.throwIfAborted()
      }
      vectors.push(embedText(inputs[i]!))
      tokens += countTokens(inputs[i]!)
    }
    return { vectors, tokens }
  }

  async rerank(model: string, query: string, documents: string[], topN: number | undefined, signal: AbortSignal): Promise<RerankResult> {
    signal.throwIfAborted()
    expectModel(model, 'rerank')
    return rerank(query, documents, topN)
  }
}

function expectModel(model: string, use: keyof typeof MODELS): void {
  if (model === MODELS[use]) return
  const known = Object.values(MODELS) as string[]
  const why = known.includes(model) ? `${model} is not a ${use === 'chat' ? 'chat' : use === 'embed' ? 'embedding' : 'rerank'} model` : `there is no model "${model}"`
  throw new ProviderError(`local provider: ${why} (it serves ${known.join(', ')})`, 400, null)
}

/**
 * local-chat answers with sentences picked from its context; it cannot be told to write JSON, and a
 * JSON object built around its text (`{"answer": ...}`) would satisfy json_object only by wrapping
 * prose, and no schema at all. So structured output is refused, naming the parameter, rather than
 * answered with something that merely parses (docs/models.md, "Structured output").
 */
function refuseStructured(req: ChatRequest): void {
  const f = req.response_format
  if (f === undefined || f.type === 'text') return
  throw new ProviderError(`local provider: ${req.model} cannot produce structured output (response_format ${f.type}); route the model to an OpenAI-compatible or Anthropic provider`, 400, null, undefined, 'response_format')
}
