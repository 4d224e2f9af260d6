import type { TracingConfig } from './lib/tracing'
import { Value } from '@sinclair/typebox/value'
import { Env } from './env'
import { existsSync, statSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

/**
 * The only reader of process.env. Every variable of the configuration table (README.md, "Configuration")
 * and SYNC_RUN_TIMEOUT_MS (docs/workflows.md, "Runs"), each validated; a bad value stops start-up with a
 * message naming the variable.
 */

export type { TracingConfig }

export interface Config {
  port: number
  host: string
  basePath: string
  dataDir: string
  databaseUrl: string | null
  databasePoolMax: number
  /** Knowledge search's own pool (store/db.ts, `Database.search`); 0: none (searches set their settings in a transaction). */
  databaseSearchPoolMax: number
  /** HNSW's candidate list knowledge searches start from (store/knowledge/search.ts): a longer one finds more of the nearest chunks for more CPU a search (docs/knowledge.md, "Search"). */
  knowledgeEfSearch: number
  redisUrl: string | null
  bootstrapApiKey: string | null
  secretKey: string | null
  modelsFile: string | null
  tls: { certFile: string; keyFile: string } | null
  syncRunTimeoutMs: number
  /** The most items an iteration node runs its workflow over (more fail the node with too_many_items). */
  iterationMaxItems: number
  webhookRetryDelaysMs: number[]
  webhookTimeoutMs: number
  webhookDisableAfterMs: number
  webhookAllowHttp: boolean
  webhookAllowPrivateNetworks: boolean
  /** An agent's call of an MCP server's tool (docs/agents.md, "MCP tools"); listing its tools gets at most 10 s of it. */
  mcpCallTimeoutMs: number
  maxUploadBytes: number
  /** Document processes of the document worker (docs/knowledge.md, "Limits"): 2. */
  documentProcesses: number
  /**
   * Fair shares between workspaces (docs/workflows.md and docs/knowledge.md, "Fair shares between
   * workspaces"): what one workspace may hold at once. Top-level runs held by workers, child runs
   * running (a node with none running may always start one), documents held by workers (all
   * processes together), and the document processes of one worker reading its documents.
   */
  perWorkspace: { runs: number; childRuns: number; documents: number; documentProcesses: number }
  /**
   * Steps of runs (a transition written, a child started, a claim) one process executes at once,
   * shared between the workspaces that have steps to take (docs/workflows.md, "Fair shares between
   * workspaces"): 1 embedded, 4 in server mode.
   */
  runSteps: number
  /**
   * How long an idle run, document or fan-out worker waits before it looks for new work again when
   * nothing woke it (work created in its own process, or announced by an API process over Redis,
   * wakes it at once).
   */
  workerPollMs: number
  maxJsonBytes: number
  rateLimit: { perSecond: number; burst: number }
  shutdownTimeoutMs: number
  /** A comment on a quiet event stream this often (0: never). */
  sseHeartbeatMs: number
  /** How long a held model call's charge waits for the next batch to the ledger (docs/models.md, "Credits and budgets"). */
  creditsFlushMs: number
  /**
   * Server mode: how long the answer of the check before a model call (access and budget) is kept at
   * most; changes made through the API reach every process at once over Redis, this bounds one that
   * is not announced (docs/models.md, "Credits and budgets"). 0: read every call. Embedded: unused.
   */
  accessCacheTtlMs: number
  /** How long a start waits for an exiting holder of the embedded database's lock (docs/deployment.md). */
  dataDirLockWaitMs: number
  /** Shut down when the launcher that started this process (`bun start`) is gone (docs/deployment.md). */
  exitWithLauncher: boolean
  logLevel: string
  /** Traces over OTLP/HTTP, or null when no endpoint is set (docs/observability.md). */
  tracing: TracingConfig | null
  /** Where uploaded originals live (STORAGE_URL; docs/deployment.md, "Where uploaded files live"). */
  storage: StorageConfig
  /** The console's script built ahead of time (`bun run build:console`), served instead of bundling src/console at start; null: bundled at start. */
  consoleBundle: string | null
  /**
   * Tests only (TEST_FAILPOINT): where a request with an Idempotency-Key stops and waits forever, so
   * that a crash test can SIGKILL the process exactly there: after the key is taken and before the
   * write (`idempotency.before-write`), or after the write committed and before its answer is
   * stored (`idempotency.before-store`). Never set in a deployment.
   */
  testFailpoint: 'idempotency.before-write' | 'idempotency.before-store' | null
}

/** STORAGE_URL=s3://<bucket>/<prefix> and its credentials (store/files/s3.ts; the secret is never logged). */
export interface S3Settings {
  bucket: string
  /** Object keys begin with it (no leading or trailing slash; empty for the bucket's root). */
  prefix: string
  /** An S3-compatible service (MinIO, R2, ...); null for AWS itself. */
  endpoint: string | null
  region: string | null
  accessKeyId: string | null
  secretAccessKey: string | null
  sessionToken: string | null
  virtualHostedStyle: boolean
}

/**
 * `file`: a directory (DATA_DIR/files by default). `postgres`: the database, reading originals an
 * older version left in `legacyDir` (DATA_DIR/files) when the table does not have them. `s3`: a
 * bucket; its secret key and session token are not enumerable, so no log or JSON of the config shows them.
 */
export type StorageConfig = { kind: 'file'; dir: string } | { kind: 'postgres'; legacyDir: string | null } | ({ kind: 's3' } & S3Settings)

export class ConfigError extends Error {
  constructor(readonly variable: string, message: string) {
    super(`configuration: ${variable} ${message}`)
    this.name = 'ConfigError'
  }
}

/** Variables whose values are credentials: a bad one is named, never shown. */
const SECRETS = new Set(['OTEL_EXPORTER_OTLP_HEADERS', 'S3_SECRET_ACCESS_KEY', 'AWS_SECRET_ACCESS_KEY', 'S3_SESSION_TOKEN', 'AWS_SESSION_TOKEN'])

/**
 * HNSW's candidate list (ef_search) searches start from, by default (KNOWLEDGE_EF_SEARCH sets it:
 * docs/knowledge.md, "Search"). Measured on a clustered corpus of 100 000 chunks (bench/README.md,
 * "Knowledge at scale"), 5 builds of the graph (m 12, ef_construction 128: store/knowledge/vector-index.ts):
 * recall@10 at ef_search 40 ≥ 0.963 in each (median 0.974), and the 20 rows of a hybrid search's
 * list at 40 ≥ 0.962; 50 rows at 100 ≥ 0.996. A hybrid search (both lists 20 deep for top_k 10)
 * walks with 40 and stays on the search pool's session setting. Vectors that spread like noise
 * (local-embed's hashed words) find 0.85-0.89 at 40 and 0.94-0.97 at 80-100.
 */
export const EF_SEARCH = 40

/** The variables this service reads, set and non-empty, each checked against its schema (the first bad one refused). */
function checkedEnv(source: Record<string, string | undefined>): Env {
  const raw: Record<string, string> = {}
  for (const key of Object.keys(Env.properties)) {
    const value = source[key]
    if (value !== undefined && value !== '') raw[key] = value
  }
  const first = Value.Errors(Env, raw).First()
  if (first) {
    const variable = first.path.replace(/^\//, '')
    // The exporter's headers carry credentials: named, never shown.
    const shown = SECRETS.has(variable) ? '[redacted]' : JSON.stringify(raw[variable])
    throw new ConfigError(variable, `is invalid (${shown}): ${first.message}`)
  }
  return raw as Env
}

/** The search pool's default size: half the main pool's, at least 2 (store/db.ts). */
export const searchPoolDefault = (poolMax: number) => Math.max(2, Math.ceil(poolMax / 2))

export function loadConfig(source: Record<string, string | undefined> = process.env): Config {
  const env = checkedEnv(source)
  const int = (name: keyof Env, fallback: number, min = 0, max = Number.MAX_SAFE_INTEGER) => {
    const v = env[name]
    if (v === undefined) return fallback
    const n = Number(v)
    if (n < min || n > max) throw new ConfigError(name, `is out of range (${v}; ${min}..${max})`)
    return n
  }
  const bool = (v: string | undefined) => v === 'true' || v === '1'
  if ((env.TLS_CERT_FILE === undefined) !== (env.TLS_KEY_FILE === undefined)) {
    throw new ConfigError(env.TLS_CERT_FILE ? 'TLS_KEY_FILE' : 'TLS_CERT_FILE', 'must be set together with its pair')
  }
  return {
    port: int('PORT', 8080, 0, 65535),
    host: env.HOST ?? '0.0.0.0',
    basePath: env.BASE_PATH ?? '',
    dataDir: env.DATA_DIR ?? './data',
    databaseUrl: env.DATABASE_URL ?? null,
    databasePoolMax: int('DATABASE_POOL_MAX', 10, 1, 1000),
    databaseSearchPoolMax: int('DATABASE_SEARCH_POOL_MAX', searchPoolDefault(int('DATABASE_POOL_MAX', 10, 1, 1000)), 0, 1000),
    knowledgeEfSearch: int('KNOWLEDGE_EF_SEARCH', EF_SEARCH, 10, 1000),
    redisUrl: env.REDIS_URL ?? null,
    bootstrapApiKey: env.BOOTSTRAP_API_KEY ?? null,
    secretKey: env.SECRET_KEY ?? null,
    modelsFile: env.MODELS_FILE ?? null,
    tls: env.TLS_CERT_FILE && env.TLS_KEY_FILE ? { certFile: env.TLS_CERT_FILE, keyFile: env.TLS_KEY_FILE } : null,
    syncRunTimeoutMs: int('SYNC_RUN_TIMEOUT_MS', 120_000, 1),
    iterationMaxItems: int('ITERATION_MAX_ITEMS', 10_000, 1, 1_000_000),
    webhookRetryDelaysMs: (env.WEBHOOK_RETRY_DELAYS_MS ?? '30000,60000,300000,1800000,7200000').split(',').map(Number),
    webhookTimeoutMs: int('WEBHOOK_TIMEOUT_MS', 10_000, 1, 600_000),
    // Five days of nothing but failed deliveries disables a webhook (Stripe's and Svix's rule).
    webhookDisableAfterMs: int('WEBHOOK_DISABLE_AFTER_MS', 432_000_000, 1, 2_000_000_000),
    webhookAllowHttp: bool(env.WEBHOOK_ALLOW_HTTP),
    webhookAllowPrivateNetworks: bool(env.WEBHOOK_ALLOW_PRIVATE_NETWORKS),
    mcpCallTimeoutMs: int('MCP_CALL_TIMEOUT_MS', 30_000, 1, 600_000),
    maxUploadBytes: int('MAX_UPLOAD_BYTES', 52_428_800, 1),
    documentProcesses: int('DOCUMENT_PROCESSES', 2, 1, 64),
    perWorkspace: {
      runs: int('RUNS_PER_WORKSPACE', 8, 1, 100_000),
      childRuns: int('CHILD_RUNS_PER_WORKSPACE', 32, 1, 100_000),
      documents: int('DOCUMENTS_PER_WORKSPACE', 8, 1, 100_000),
      // One process left for the others: a workspace's long documents never hold all of them.
      documentProcesses: int('DOCUMENT_PROCESSES_PER_WORKSPACE', Math.max(1, int('DOCUMENT_PROCESSES', 2, 1, 64) - 1), 1, 64),
    },
    // Embedded, the database runs on the service's own thread: one step at a time keeps what another
    // workspace's step waits behind to one step. A separate PostgreSQL works on several at once.
    runSteps: int('RUN_STEPS', env.DATABASE_URL ? 4 : 1, 1, 1024),
    workerPollMs: int('WORKER_POLL_MS', 100, 10, 60_000),
    maxJsonBytes: int('MAX_JSON_BYTES', 1_048_576, 1),
    // 50 requests/s sustained with bursts of 100 per API key: generous for an integration, tight
    // enough that one runaway client cannot starve the 2-core default deployment.
    rateLimit: { perSecond: int('RATE_LIMIT_PER_SECOND', 50, 1), burst: int('RATE_LIMIT_BURST', 100, 1) },
    shutdownTimeoutMs: int('SHUTDOWN_TIMEOUT_MS', 10_000),
    // Under Bun's idle time-out (30 s, which closes a connection that sent nothing) and proxies' (60 s).
    sseHeartbeatMs: int('SSE_HEARTBEAT_MS', 15_000, 0, 25_000),
    // A SIGKILLed process with a few GB mapped is gone within a second or two; 30 s covers a slow disk.
    dataDirLockWaitMs: int('DATA_DIR_LOCK_WAIT_MS', 30_000, 0, 600_000),
    creditsFlushMs: int('CREDITS_FLUSH_MS', 10, 0, 600_000),
    accessCacheTtlMs: int('ACCESS_CACHE_TTL_MS', 1_000, 0, 600_000),
    // `bun start` is a launcher process with the service as its child: watched by default then only.
    exitWithLauncher: env.EXIT_WITH_LAUNCHER === undefined ? env.npm_lifecycle_event !== undefined : bool(env.EXIT_WITH_LAUNCHER),
    logLevel: env.LOG_LEVEL ?? 'info',
    tracing: tracingConfig(env, int, bool),
    storage: storageConfig(env, bool),
    consoleBundle: consoleBundlePath(env.CONSOLE_BUNDLE),
    testFailpoint: env.TEST_FAILPOINT ?? null,
  }
}

/**
 * The variables a MODELS_FILE provider's `api_key_env` may name: any, since the catalogue chooses the
 * names (docs/models.md, "The catalogue"); handed to `loadCatalog` at start-up.
 */
export function catalogEnv(): Readonly<Record<string, string | undefined>> {
  return process.env
}

/** CONSOLE_BUNDLE: a file that must be there now (a missing bundle stops start-up, not the console's first visit). */
function consoleBundlePath(value: string | undefined): string | null {
  if (value === undefined) return null
  const path = resolve(value)
  if (!existsSync(path) || !statSync(path).isFile()) throw new ConfigError('CONSOLE_BUNDLE', `names no file (${path}): build it with \`bun run build:console ${value}\` or unset it`)
  return path
}

const STORAGE_FORMS = 'expected file:, file:///absolute/path, postgres: or s3://<bucket>/<prefix>'

/**
 * STORAGE_URL. Unset: DATA_DIR/files with the embedded database, and the database itself in server
 * mode (DATABASE_URL set), so that processes on different hosts share nothing but PostgreSQL and Redis.
 */
function storageConfig(env: Env, bool: (v: string | undefined) => boolean): StorageConfig {
  const dataFiles = join(env.DATA_DIR ?? './data', 'files')
  const value = env.STORAGE_URL
  if (value === undefined) return env.DATABASE_URL ? { kind: 'postgres', legacyDir: dataFiles } : { kind: 'file', dir: dataFiles }
  if (value === 'postgres:' || value === 'postgresql:') return { kind: 'postgres', legacyDir: dataFiles }
  if (value === 'file:' || value === 'file://') return { kind: 'file', dir: dataFiles }
  if (/^file:\/\/\/[^?#]+$/.test(value)) return { kind: 'file', dir: resolve(fileURLToPath(value)) }
  const s3 = /^s3:\/\/([A-Za-z0-9][A-Za-z0-9._-]{0,62})(\/[^?#]*)?$/.exec(value)
  if (!s3) {
    // A URL with credentials in it is not shown.
    const shown = value.includes('@') ? '[redacted]' : JSON.stringify(value)
    throw new ConfigError('STORAGE_URL', `is invalid (${shown}): ${STORAGE_FORMS}`)
  }
  const prefix = (s3[2] ?? '').replace(/^\/+|\/+$/g, '')
  if (prefix && !/^[A-Za-z0-9._-]+(\/[A-Za-z0-9._-]+)*$/.test(prefix)) {
    throw new ConfigError('STORAGE_URL', `is invalid (${JSON.stringify(value)}): the prefix may hold letters, digits, ".", "_", "-" and "/" between them`)
  }
  const accessKeyId = env.S3_ACCESS_KEY_ID ?? env.AWS_ACCESS_KEY_ID ?? null
  const secretAccessKey = env.S3_SECRET_ACCESS_KEY ?? env.AWS_SECRET_ACCESS_KEY ?? null
  if (!accessKeyId || !secretAccessKey) {
    throw new ConfigError(accessKeyId ? 'S3_SECRET_ACCESS_KEY' : 'S3_ACCESS_KEY_ID', `(or AWS_${accessKeyId ? 'SECRET_ACCESS_KEY' : 'ACCESS_KEY_ID'}) must be set with STORAGE_URL=s3://…`)
  }
  const settings = {
    kind: 's3' as const,
    bucket: s3[1]!,
    prefix,
    endpoint: env.S3_ENDPOINT ?? env.AWS_ENDPOINT_URL_S3 ?? env.AWS_ENDPOINT_URL ?? env.AWS_ENDPOINT ?? null,
    region: env.S3_REGION ?? env.AWS_REGION ?? null,
    accessKeyId,
    virtualHostedStyle: bool(env.S3_VIRTUAL_HOSTED_STYLE),
  } as Extract<StorageConfig, { kind: 's3' }>
  Object.defineProperty(settings, 'secretAccessKey', { value: secretAccessKey, enumerable: false })
  Object.defineProperty(settings, 'sessionToken', { value: env.S3_SESSION_TOKEN ?? env.AWS_SESSION_TOKEN ?? null, enumerable: false })
  return settings
}

function tracingConfig(env: Env, int: (name: keyof Env, fallback: number, min?: number, max?: number) => number, bool: (v: string | undefined) => boolean): TracingConfig | null {
  const base = env.OTEL_EXPORTER_OTLP_ENDPOINT
  const url = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ?? (base ? `${base.replace(/\/+$/, '')}/v1/traces` : undefined)
  if (!url) return null
  return {
    url,
    headers: keyValues(env.OTEL_EXPORTER_OTLP_HEADERS, 'OTEL_EXPORTER_OTLP_HEADERS'),
    serviceName: env.OTEL_SERVICE_NAME ?? 'agent-platform-api',
    resourceAttributes: keyValues(env.OTEL_RESOURCE_ATTRIBUTES, 'OTEL_RESOURCE_ATTRIBUTES'),
    sampler: env.OTEL_TRACES_SAMPLER ?? 'parentbased_always_on',
    samplerArg: env.OTEL_TRACES_SAMPLER_ARG === undefined ? 1 : Number(env.OTEL_TRACES_SAMPLER_ARG),
    // The SDK's default: spans leave in batches every 5 s (and at shutdown).
    scheduleDelayMs: int('OTEL_BSP_SCHEDULE_DELAY', 5000, 1, 600_000),
    captureContent: bool(env.OTEL_GENAI_CAPTURE_CONTENT),
  }
}

/** `k1=v1,k2=v2` with percent-encoded values (the W3C Baggage form the OTEL_* lists use). */
function keyValues(text: string | undefined, variable: string): Record<string, string> {
  const out: Record<string, string> = {}
  if (!text) return out
  for (const pair of text.split(',')) {
    const at = pair.indexOf('=')
    try {
      out[decodeURIComponent(pair.slice(0, at).trim())] = decodeURIComponent(pair.slice(at + 1).trim())
    } catch {
      throw new ConfigError(variable, 'is invalid: a key or value is not valid percent-encoding')
    }
  }
  return out
}
