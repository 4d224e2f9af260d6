import { invalid } from '../../lib/errors'

/**
 * OpenAI chat parameters passed to the providers that can take them, as the client sent them: an
 * OpenAI-kind provider takes every one, an Anthropic provider those it has an equivalent of (mapped in
 * anthropic.ts), the local models none. Which is decided per route: a route whose provider cannot take
 * one is passed over, and when no route of the model can, the call is a 400 naming the parameter
 * (docs/models.md, "OpenAI compatibility"). A value that asks for the default behaviour is left out,
 * so that every provider takes it (the SDKs and LangChain send some of them on every call).
 */
export const PASSED_CHAT_PARAMS = [
  'seed', 'reasoning_effort', 'logprobs', 'top_logprobs', 'presence_penalty', 'frequency_penalty', 'logit_bias', 'n', 'parallel_tool_calls',
  'metadata', 'service_tier', 'prediction', 'modalities', 'audio', 'verbosity', 'prompt_cache_key', 'safety_identifier',
] as const
export type PassedChatParam = (typeof PASSED_CHAT_PARAMS)[number]
export type PassedChatParams = Partial<Record<PassedChatParam, unknown>>

const empty = (v: unknown) => typeof v === 'object' && v !== null && Object.keys(v).length === 0
/** The values of a passed parameter that ask for what leaving it out asks for. */
const PASSED_DEFAULTS: Partial<Record<PassedChatParam, (v: unknown) => boolean>> = {
  n: (v) => v === 1,
  presence_penalty: (v) => v === 0,
  frequency_penalty: (v) => v === 0,
  logit_bias: empty,
  logprobs: (v) => v === false,
  top_logprobs: (v) => v === 0,
  parallel_tool_calls: (v) => v === true,
  service_tier: (v) => v === 'auto',
  metadata: empty,
  modalities: (v) => Array.isArray(v) && v.length === 1 && v[0] === 'text',
}

/** The passed parameters of a drop-in request, those that ask for the default left out; undefined for none. */
export function passedChatParams(body: Record<string, unknown>): PassedChatParams | undefined {
  let out: PassedChatParams | undefined
  for (const p of PASSED_CHAT_PARAMS) {
    const v = body[p]
    if (v === undefined || v === null || PASSED_DEFAULTS[p]?.(v)) continue
    ;(out ??= {})[p] = v
  }
  return out
}

/** What each kind of provider takes of the passed parameters. */
const TAKEN: Record<'openai' | 'anthropic' | 'local', (p: string) => boolean> = {
  openai: () => true,
  // Mapped to `tool_choice.disable_parallel_tool_use` (anthropic.ts).
  anthropic: (p) => p === 'parallel_tool_calls',
  local: () => false,
}

/** The first passed parameter a provider of this kind cannot take, or null. */
export function refusedChatParam(kind: keyof typeof TAKEN, params: PassedChatParams | undefined): string | null {
  if (!params) return null
  for (const p of Object.keys(params)) if (!TAKEN[kind](p)) return p
  return null
}

/**
 * The OpenAI parameters the drop-ins (`POST /v1/chat/completions`, `POST /v1/embeddings`) do not
 * implement at all: a value that asks for the default behaviour is accepted; any other value is a 400
 * naming the parameter, never silently ignored (docs/models.md, "OpenAI compatibility"). Parameters
 * missing from both lists and the schema are refused by the schema itself.
 */
const CHAT_DEFAULTS: Record<string, (v: unknown) => boolean> = {
  store: (v) => v === false || v === null,
  web_search_options: (v) => v === null,
  functions: (v) => v === null,
  function_call: (v) => v === null,
}

export const unsupportedChatParams = Object.keys(CHAT_DEFAULTS)

export function checkChatParams(body: Record<string, unknown>): void {
  for (const [param, isDefault] of Object.entries(CHAT_DEFAULTS)) {
    if (body[param] === undefined || isDefault(body[param])) continue
    throw invalid(param, `not supported by this service with this value (docs/models.md, "OpenAI compatibility")`)
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
