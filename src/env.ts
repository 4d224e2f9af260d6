import { Type, type Static } from '@sinclair/typebox'

/**
 * Every environment variable the service reads, each with the form it must have; src/config.ts, the
 * only reader of process.env, checks them against this schema and turns them into the `Config`.
 */
const Bool = Type.Union([Type.Literal('true'), Type.Literal('false'), Type.Literal('1'), Type.Literal('0')])
const Int = () => Type.String({ pattern: '^[0-9]{1,15}$' })

export const Env = Type.Object({
  PORT: Type.Optional(Int()),
  HOST: Type.Optional(Type.String({ minLength: 1 })),
  BASE_PATH: Type.Optional(Type.String({ pattern: '^(/[A-Za-z0-9._~-]+)*$' })),
  DATA_DIR: Type.Optional(Type.String({ minLength: 1 })),
  DATABASE_URL: Type.Optional(Type.String({ pattern: '^postgres(ql)?://' })),
  DATABASE_POOL_MAX: Type.Optional(Int()),
  DATABASE_SEARCH_POOL_MAX: Type.Optional(Int()),
  KNOWLEDGE_EF_SEARCH: Type.Optional(Int()),
  REDIS_URL: Type.Optional(Type.String({ pattern: '^rediss?://' })),
  BOOTSTRAP_API_KEY: Type.Optional(Type.String({ pattern: '^[A-Za-z0-9_-]{20,128}$' })),
  SECRET_KEY: Type.Optional(Type.String({ minLength: 32 })),
  MODELS_FILE: Type.Optional(Type.String({ minLength: 1 })),
  TLS_CERT_FILE: Type.Optional(Type.String({ minLength: 1 })),
  TLS_KEY_FILE: Type.Optional(Type.String({ minLength: 1 })),
  SYNC_RUN_TIMEOUT_MS: Type.Optional(Int()),
  WEBHOOK_RETRY_DELAYS_MS: Type.Optional(Type.String({ pattern: '^[0-9]+(,[0-9]+)*$' })),
  WEBHOOK_TIMEOUT_MS: Type.Optional(Int()),
  WEBHOOK_DISABLE_AFTER_MS: Type.Optional(Int()),
  WEBHOOK_ALLOW_HTTP: Type.Optional(Bool),
  WEBHOOK_ALLOW_PRIVATE_NETWORKS: Type.Optional(Bool),
  MCP_CALL_TIMEOUT_MS: Type.Optional(Int()),
  MAX_UPLOAD_BYTES: Type.Optional(Int()),
  DOCUMENT_PROCESSES: Type.Optional(Int()),
  DOCUMENT_PROCESSES_PER_WORKSPACE: Type.Optional(Int()),
  DOCUMENTS_PER_WORKSPACE: Type.Optional(Int()),
  RUNS_PER_WORKSPACE: Type.Optional(Int()),
  CHILD_RUNS_PER_WORKSPACE: Type.Optional(Int()),
  RUN_STEPS: Type.Optional(Int()),
  WORKER_POLL_MS: Type.Optional(Int()),
  MAX_JSON_BYTES: Type.Optional(Int()),
  ITERATION_MAX_ITEMS: Type.Optional(Int()),
  RATE_LIMIT_PER_SECOND: Type.Optional(Int()),
  RATE_LIMIT_BURST: Type.Optional(Int()),
  SHUTDOWN_TIMEOUT_MS: Type.Optional(Int()),
  SSE_HEARTBEAT_MS: Type.Optional(Int()),
  DATA_DIR_LOCK_WAIT_MS: Type.Optional(Int()),
  CREDITS_FLUSH_MS: Type.Optional(Int()),
  ACCESS_CACHE_TTL_MS: Type.Optional(Int()),
  // Tests only: hold every request with an Idempotency-Key at this point (src/routes/plugins/idempotency.ts).
  TEST_FAILPOINT: Type.Optional(Type.Union([Type.Literal('idempotency.before-write'), Type.Literal('idempotency.before-store')])),
  // Where uploaded originals live (docs/deployment.md, "Where uploaded files live"), and the usual
  // variables of S3 clients for s3:// (the S3_* ones first, as Bun's own client reads them).
  STORAGE_URL: Type.Optional(Type.String({ minLength: 1 })),
  // The console's script bundled ahead of time (the container image does: docs/deployment.md).
  CONSOLE_BUNDLE: Type.Optional(Type.String({ minLength: 1 })),
  S3_ACCESS_KEY_ID: Type.Optional(Type.String({ minLength: 1 })),
  S3_SECRET_ACCESS_KEY: Type.Optional(Type.String({ minLength: 1 })),
  S3_SESSION_TOKEN: Type.Optional(Type.String({ minLength: 1 })),
  S3_REGION: Type.Optional(Type.String({ pattern: '^[a-z0-9-]{1,64}$' })),
  S3_ENDPOINT: Type.Optional(Type.String({ pattern: '^https?://' })),
  S3_VIRTUAL_HOSTED_STYLE: Type.Optional(Bool),
  AWS_ACCESS_KEY_ID: Type.Optional(Type.String({ minLength: 1 })),
  AWS_SECRET_ACCESS_KEY: Type.Optional(Type.String({ minLength: 1 })),
  AWS_SESSION_TOKEN: Type.Optional(Type.String({ minLength: 1 })),
  AWS_REGION: Type.Optional(Type.String({ pattern: '^[a-z0-9-]{1,64}$' })),
  AWS_ENDPOINT_URL_S3: Type.Optional(Type.String({ pattern: '^https?://' })),
  AWS_ENDPOINT_URL: Type.Optional(Type.String({ pattern: '^https?://' })),
  AWS_ENDPOINT: Type.Optional(Type.String({ pattern: '^https?://' })),
  EXIT_WITH_LAUNCHER: Type.Optional(Bool),
  /** Set by `bun run <script>` (and npm): the process was started through a package script. */
  npm_lifecycle_event: Type.Optional(Type.String()),
  // OpenTelemetry (docs/observability.md): the standard variables, read here and handed to the SDK.
  OTEL_EXPORTER_OTLP_ENDPOINT: Type.Optional(Type.String({ pattern: '^https?://' })),
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: Type.Optional(Type.String({ pattern: '^https?://' })),
  OTEL_EXPORTER_OTLP_HEADERS: Type.Optional(Type.String({ pattern: '^\\s*[^=,\\s]+\\s*=[^,]*(,\\s*[^=,\\s]+\\s*=[^,]*)*$' })),
  OTEL_SERVICE_NAME: Type.Optional(Type.String({ minLength: 1, maxLength: 256 })),
  OTEL_RESOURCE_ATTRIBUTES: Type.Optional(Type.String({ pattern: '^\\s*[^=,\\s]+\\s*=[^,]*(,\\s*[^=,\\s]+\\s*=[^,]*)*$' })),
  OTEL_TRACES_SAMPLER: Type.Optional(
    Type.Union(['always_on', 'always_off', 'traceidratio', 'parentbased_always_on', 'parentbased_always_off', 'parentbased_traceidratio'].map((l) => Type.Literal(l))),
  ),
  OTEL_TRACES_SAMPLER_ARG: Type.Optional(Type.String({ pattern: '^(0(\\.[0-9]+)?|1(\\.0+)?)$' })),
  OTEL_BSP_SCHEDULE_DELAY: Type.Optional(Int()),
  OTEL_GENAI_CAPTURE_CONTENT: Type.Optional(Bool),
  LOG_LEVEL: Type.Optional(
    Type.Union(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].map((l) => Type.Literal(l))),
  ),
})

export type Env = Static<typeof Env>
