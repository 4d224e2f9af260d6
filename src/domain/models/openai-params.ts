import { invalid } from '../../lib/errors'

/**
 * The OpenAI wire-format parameters the drop-ins (`POST /v1/chat/completions`, `POST /v1/embeddings`) do
 * not implement. A value that asks for the default behaviour is accepted (the SDKs and LangChain send some
 * of them on every call); any other value is a 400 naming the parameter, never silently ignored
 * (docs/models.md, "OpenAI compatibility"). Parameters missing from both this table and the schema are
 * refused by the schema itself.
 */
const CHAT_DEFAULTS: Record<string, (v: unknown) => boolean> = {
  n: (v) => v === 1 || v === null,
  presence_penalty: (v) => v === 0 || v === null,
  frequency_penalty: (v) => v === 0 || v === null,
  logit_bias: (v) => v === null || (typeof v === 'object' && Object.keys(v as object).length === 0),
  logprobs: (v) => v === false || v === null,
  top_logprobs: (v) => v === 0 || v === null,
  parallel_tool_calls: (v) => v === true || v === null,
  seed: (v) => v === null,
  service_tier: (v) => v === null || v === 'auto' || v === 'default',
  store: (v) => v === false || v === null,
  metadata: (v) => v === null || (typeof v === 'object' && Object.keys(v as object).length === 0),
  modalities: (v) => v === null || (Array.isArray(v) && v.length === 1 && v[0] === 'text'),
  audio: (v) => v === null,
  prediction: (v) => v === null,
  reasoning_effort: (v) => v === null,
  web_search_options: (v) => v === null,
  functions: (v) => v === null,
  function_call: (v) => v === null,
}

export const unsupportedChatParams = Object.keys(CHAT_DEFAULTS)

export function checkChatParams(body: Record<string, unknown>): void {
  for (const [param, isDefault] of Object.entries(CHAT_DEFAULTS)) {
    if (body[param] === undefined || isDefault(body[param])) continue
    const hint = param === 'n' ? ': one choice per call; send the request again for another' : ''
    throw invalid(param, `not supported by this service with this value${hint} (docs/models.md, "OpenAI compatibility")`)
  }
  if (body.max_tokens !== undefined && body.max_completion_tokens !== undefined && body.max_tokens !== body.max_completion_tokens) {
    throw invalid('max_completion_tokens', 'disagrees with max_tokens; send one of them')
  }
}

/** Embedding models that can be shortened by truncation and re-normalisation, as OpenAI's own do. */
const SHORTENABLE = /(^|\/)text-embedding-3-/

export function shortenEmbeddings(model: { id: string; dimensions?: number }, asked: number | undefined, vectors: number[][]): number[][] {
  if (asked === undefined) return vectors
  const native = model.dimensions ?? vectors[0]?.length
  if (asked === native) return vectors
  if (native === undefined || asked > native || !SHORTENABLE.test(model.id)) {
    throw invalid('dimensions', `model ${model.id} answers ${native ?? 'a fixed number of'} dimensions and cannot be shortened${native !== undefined && SHORTENABLE.test(model.id) ? ` beyond 1..${native}` : ''}`)
  }
  return vectors.map((v) => {
    const cut = v.slice(0, asked)
    const norm = Math.hypot(...cut) || 1
    return cut.map((x) => x / norm)
  })
}
