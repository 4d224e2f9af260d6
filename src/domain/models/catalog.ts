import { Type, type Static } from '@sinclair/typebox'
import { Value } from '@sinclair/typebox/value'
import { readFileSync } from 'node:fs'

/**
 * The model catalogue (docs/models.md, "The catalogue"): the JSON file named by MODELS_FILE merged over the
 * built-in `local` provider (local-embed, local-rerank, local-chat). A bad file stops start-up with a
 * message naming the bad field (`models[2].routes[0].provider: ...`).
 */
const Id = Type.String({ minLength: 1, maxLength: 128, pattern: '^[A-Za-z0-9._:/@-]+$' })

const ProviderSpec = Type.Object(
  {
    id: Id,
    kind: Type.Union([Type.Literal('openai'), Type.Literal('anthropic'), Type.Literal('local')]),
    base_url: Type.Optional(Type.String({ pattern: '^https?://' })),
    api_key: Type.Optional(Type.String({ minLength: 1 })),
    api_key_env: Type.Optional(Type.String({ pattern: '^[A-Za-z_][A-Za-z0-9_]*$' })),
    timeout_ms: Type.Optional(Type.Integer({ minimum: 1, maximum: 600_000 })),
    /** Extra headers sent upstream (e.g. an API version). */
    headers: Type.Optional(Type.Record(Type.String(), Type.String())),
    /** Largest number of inputs one embeddings request may carry (default 2048 for openai). */
    max_batch: Type.Optional(Type.Integer({ minimum: 1, maximum: 100_000 })),
    /** Most embeddings requests in flight to this provider at once, across all calls (default 4). */
    max_concurrency: Type.Optional(Type.Integer({ minimum: 1, maximum: 256 })),
  },
  { additionalProperties: false },
)

const Pricing = Type.Object(
  {
    input_per_1k: Type.Optional(Type.Number({ minimum: 0 })),
    output_per_1k: Type.Optional(Type.Number({ minimum: 0 })),
  },
  { additionalProperties: false },
)

const ModelSpec = Type.Object(
  {
    id: Id,
    type: Type.Union([Type.Literal('llm'), Type.Literal('embedding'), Type.Literal('rerank')]),
    vendor: Type.String({ minLength: 1, maxLength: 64 }),
    context_length: Type.Optional(Type.Integer({ minimum: 1 })),
    supports_function_call: Type.Optional(Type.Boolean()),
    dimensions: Type.Optional(Type.Integer({ minimum: 1, maximum: 65_536 })),
    routes: Type.Array(Type.Object({ provider: Id, model: Type.String({ minLength: 1, maxLength: 256 }) }, { additionalProperties: false }), { minItems: 1 }),
    pricing: Type.Optional(Pricing),
  },
  { additionalProperties: false },
)

const CatalogFile = Type.Object(
  { providers: Type.Optional(Type.Array(ProviderSpec)), models: Type.Optional(Type.Array(ModelSpec)) },
  { additionalProperties: false },
)

export type ProviderSpec = Static<typeof ProviderSpec>
export type ModelSpec = Static<typeof ModelSpec>
export type ModelType = ModelSpec['type']

export interface ResolvedProvider extends ProviderSpec {
  /** The key itself (from api_key or the variable api_key_env names), never logged or listed. */
  key: string | null
}

export interface Catalog {
  providers: Map<string, ResolvedProvider>
  models: Map<string, ModelSpec>
}

export class CatalogError extends Error {
  override name = 'CatalogError'
  constructor(readonly field: string, message: string) {
    super(`MODELS_FILE: ${field}: ${message}`)
  }
}

export const LOCAL_PROVIDER: ProviderSpec = { id: 'local', kind: 'local' }

export const LOCAL_MODELS: ModelSpec[] = [
  { id: 'local-chat', type: 'llm', vendor: 'local', context_length: 32_768, supports_function_call: true, routes: [{ provider: 'local', model: 'local-chat' }], pricing: { input_per_1k: 0, output_per_1k: 0 } },
  { id: 'local-embed', type: 'embedding', vendor: 'local', dimensions: 384, routes: [{ provider: 'local', model: 'local-embed' }], pricing: { input_per_1k: 0 } },
  { id: 'local-rerank', type: 'rerank', vendor: 'local', routes: [{ provider: 'local', model: 'local-rerank' }], pricing: { input_per_1k: 0 } },
]

/** `/models/2/routes/0/provider` → `models[2].routes[0].provider` */
function fieldOf(path: string): string {
  return path.replace(/^\//, '').replace(/\/(\d+)(?=\/|$)/g, '[$1]').replace(/^(\d+)/, '[$1]').replace(/\//g, '.') || '(root)'
}

/** `env`: the variables `api_key_env` may name (`Config.catalogEnv`). */
export function parseCatalog(raw: unknown, env: Readonly<Record<string, string | undefined>>): Catalog {
  const first = Value.Errors(CatalogFile, raw).First()
  if (first) {
    // "Expected union value" says nothing: name the allowed values of a union of literals.
    const options = (first.schema as { anyOf?: { const?: unknown }[] }).anyOf?.map((o) => o.const)
    const message = options && options.every((o) => typeof o === 'string') ? `must be one of ${options.map((o) => `"${o}"`).join(', ')}` : first.message
    throw new CatalogError(fieldOf(first.path), message)
  }
  const file = raw as Static<typeof CatalogFile>
  const providers = new Map<string, ResolvedProvider>([['local', { ...LOCAL_PROVIDER, key: null }]])
  for (const [i, p] of (file.providers ?? []).entries()) {
    const at = `providers[${i}]`
    if (p.id === 'local') throw new CatalogError(`${at}.id`, '"local" is the built-in provider')
    if (providers.has(p.id)) throw new CatalogError(`${at}.id`, `duplicate provider "${p.id}"`)
    if (p.kind !== 'local' && !p.base_url) throw new CatalogError(`${at}.base_url`, `is required for kind "${p.kind}"`)
    let key = p.api_key ?? null
    if (p.api_key_env) {
      key = env[p.api_key_env] ?? null
      if (!key) throw new CatalogError(`${at}.api_key_env`, `names ${p.api_key_env}, which is unset`)
    }
    providers.set(p.id, { ...p, base_url: p.base_url?.replace(/\/+$/, ''), key })
  }
  const models = new Map<string, ModelSpec>(LOCAL_MODELS.map((m) => [m.id, m]))
  const seen = new Set<string>()
  for (const [i, m] of (file.models ?? []).entries()) {
    const at = `models[${i}]`
    if (seen.has(m.id)) throw new CatalogError(`${at}.id`, `duplicate model "${m.id}"`)
    seen.add(m.id)
    for (const [j, r] of m.routes.entries()) {
      const provider = providers.get(r.provider)
      if (!provider) throw new CatalogError(`${at}.routes[${j}].provider`, `unknown provider "${r.provider}"`)
      if (provider.kind === 'anthropic' && m.type !== 'llm') throw new CatalogError(`${at}.routes[${j}].provider`, `an anthropic provider serves llm models only`)
    }
    if (m.type === 'embedding' && m.dimensions === undefined) throw new CatalogError(`${at}.dimensions`, 'is required for embedding models')
    models.set(m.id, m)
  }
  return { providers, models }
}

export function loadCatalog(file: string | null, env: Readonly<Record<string, string | undefined>>): Catalog {
  if (!file) return parseCatalog({}, env)
  let text: string
  try {
    text = readFileSync(file, 'utf8')
  } catch (err) {
    throw new CatalogError('(file)', `cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`)
  }
  let raw: unknown
  try {
    raw = JSON.parse(text)
  } catch (err) {
    throw new CatalogError('(file)', `is not JSON: ${(err as Error).message}`)
  }
  return parseCatalog(raw, env)
}
