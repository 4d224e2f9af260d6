import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { resolve } from 'node:path'
import { ConfigError, loadConfig } from '../../src/config'

setDefaultTimeout(TEST_TIMEOUT_MS)

/** The ConfigError a load throws. */
function failure(env: Record<string, string>): ConfigError {
  try {
    loadConfig(env)
  } catch (err) {
    if (err instanceof ConfigError) return err
    throw err
  }
  throw new Error(`loadConfig(${JSON.stringify(env)}) did not fail`)
}

test('an empty environment gives the defaults of docs/deployment.md', () => {
  expect(loadConfig({})).toEqual({
    port: 8080,
    host: '0.0.0.0',
    basePath: '',
    dataDir: './data',
    databaseUrl: null,
    databasePoolMax: 10,
    databaseSearchPoolMax: 5,
    knowledgeEfSearch: 40,
    redisUrl: null,
    bootstrapApiKey: null,
    secretKey: null,
    modelsFile: null,
    tls: null,
    syncRunTimeoutMs: 120_000,
    iterationMaxItems: 10_000,
    webhookRetryDelaysMs: [30_000, 60_000, 300_000, 1_800_000, 7_200_000],
    webhookTimeoutMs: 10_000,
    webhookDisableAfterMs: 432_000_000,
    webhookAllowHttp: false,
    webhookAllowPrivateNetworks: false,
    mcpCallTimeoutMs: 30_000,
    maxUploadBytes: 52_428_800,
    documentProcesses: 2,
    perWorkspace: { runs: 8, childRuns: 32, documents: 8, documentProcesses: 1 },
    runSteps: 1,
    workerPollMs: 100,
    maxJsonBytes: 1_048_576,
    rateLimit: { perSecond: 50, burst: 100 },
    shutdownTimeoutMs: 10_000,
    sseHeartbeatMs: 15_000,
    dataDirLockWaitMs: 30_000,
    creditsFlushMs: 10,
    accessCacheTtlMs: 1_000,
    exitWithLauncher: false,
    logLevel: 'info',
    tracing: null,
    storage: { kind: 'file', dir: 'data/files' },
    consoleBundle: null,
    testFailpoint: null,
  })
})

describe('CONSOLE_BUNDLE (the console built ahead of time, as the container image does)', () => {
  test('a file that is there is used, as an absolute path', () => {
    expect(loadConfig({ CONSOLE_BUNDLE: 'package.json' }).consoleBundle).toBe(resolve('package.json'))
  })
  test('a path naming no file, or a directory, stops start-up naming the variable', () => {
    for (const value of ['dist/no-such-bundle.js', 'src']) {
      const err = failure({ CONSOLE_BUNDLE: value })
      expect(err.variable).toBe('CONSOLE_BUNDLE')
      expect(err.message).toMatch(/^configuration: CONSOLE_BUNDLE names no file .*bun run build:console/)
    }
  })
})

test('DOCUMENT_PROCESSES: 2 in both modes, or as set (1..64)', () => {
  expect(loadConfig({}).documentProcesses).toBe(2)
  expect(loadConfig({ DATABASE_URL: 'postgres://db/ap' }).documentProcesses).toBe(2)
  expect(loadConfig({ DATABASE_URL: 'postgres://db/ap', DOCUMENT_PROCESSES: '1' }).documentProcesses).toBe(1)
  expect(loadConfig({ DOCUMENT_PROCESSES: '4' }).documentProcesses).toBe(4)
  expect(() => loadConfig({ DOCUMENT_PROCESSES: '0' })).toThrow(/DOCUMENT_PROCESSES/)
  expect(() => loadConfig({ DOCUMENT_PROCESSES: 'two' })).toThrow(/DOCUMENT_PROCESSES/)
})

test('per-workspace shares: runs 8, child runs 32, documents 8, document processes one fewer than DOCUMENT_PROCESSES (at least 1), or as set', () => {
  expect(loadConfig({}).perWorkspace).toEqual({ runs: 8, childRuns: 32, documents: 8, documentProcesses: 1 })
  expect(loadConfig({ DOCUMENT_PROCESSES: '4' }).perWorkspace.documentProcesses).toBe(3)
  expect(loadConfig({ DOCUMENT_PROCESSES: '1' }).perWorkspace.documentProcesses).toBe(1)
  expect(loadConfig({ RUNS_PER_WORKSPACE: '4', CHILD_RUNS_PER_WORKSPACE: '8', DOCUMENTS_PER_WORKSPACE: '2', DOCUMENT_PROCESSES_PER_WORKSPACE: '2' }).perWorkspace).toEqual({ runs: 4, childRuns: 8, documents: 2, documentProcesses: 2 })
  // One step of runs at a time on the embedded database (it shares the service's thread), four beside a PostgreSQL server.
  expect(loadConfig({}).runSteps).toBe(1)
  expect(loadConfig({ DATABASE_URL: 'postgres://db/x' }).runSteps).toBe(4)
  expect(loadConfig({ RUN_STEPS: '16' }).runSteps).toBe(16)
  expect(loadConfig({ WORKER_POLL_MS: '2000' }).workerPollMs).toBe(2000)
  expect(() => loadConfig({ WORKER_POLL_MS: '0' })).toThrow(/WORKER_POLL_MS/)
  for (const v of ['RUNS_PER_WORKSPACE', 'CHILD_RUNS_PER_WORKSPACE', 'DOCUMENTS_PER_WORKSPACE', 'DOCUMENT_PROCESSES_PER_WORKSPACE']) {
    expect(() => loadConfig({ [v]: '0' })).toThrow(new RegExp(v))
  }
})

test('KNOWLEDGE_EF_SEARCH: 40, or as set (10..1000)', () => {
  expect(loadConfig({}).knowledgeEfSearch).toBe(40)
  expect(loadConfig({ KNOWLEDGE_EF_SEARCH: '100' }).knowledgeEfSearch).toBe(100)
  expect(loadConfig({ KNOWLEDGE_EF_SEARCH: '10' }).knowledgeEfSearch).toBe(10)
  expect(loadConfig({ KNOWLEDGE_EF_SEARCH: '1000' }).knowledgeEfSearch).toBe(1000)
})

describe('STORAGE_URL (docs/deployment.md, "Where uploaded files live")', () => {
  const creds = { AWS_ACCESS_KEY_ID: 'AKIDEXAMPLE', AWS_SECRET_ACCESS_KEY: 'the-secret-value' }

  test('unset: DATA_DIR/files when embedded, the database in server mode (reading DATA_DIR/files for older uploads)', () => {
    expect(loadConfig({ DATA_DIR: '/srv/ap' }).storage).toEqual({ kind: 'file', dir: '/srv/ap/files' })
    expect(loadConfig({ DATA_DIR: '/srv/ap', DATABASE_URL: 'postgres://db/ap' }).storage).toEqual({ kind: 'postgres', legacyDir: '/srv/ap/files' })
  })

  test.each([
    ['file:', { kind: 'file', dir: '/srv/ap/files' }],
    ['file:///mnt/originals', { kind: 'file', dir: '/mnt/originals' }],
    ['postgres:', { kind: 'postgres', legacyDir: '/srv/ap/files' }],
  ])('%s', (value, expected) => {
    expect(loadConfig({ DATA_DIR: '/srv/ap', STORAGE_URL: value }).storage).toEqual(expected as any)
  })

  test('s3://bucket/prefix with the AWS_* variables; S3_* ones win; the secret is in no JSON of the config', () => {
    const c = loadConfig({ STORAGE_URL: 's3://originals/ap/prod/', ...creds, AWS_REGION: 'eu-west-1', AWS_ENDPOINT_URL: 'http://minio:9000' })
    expect(c.storage).toEqual({ kind: 's3', bucket: 'originals', prefix: 'ap/prod', endpoint: 'http://minio:9000', region: 'eu-west-1', accessKeyId: 'AKIDEXAMPLE', virtualHostedStyle: false } as any)
    expect((c.storage as any).secretAccessKey).toBe('the-secret-value')
    expect(JSON.stringify(c)).not.toContain('the-secret-value')
    const s = loadConfig({ STORAGE_URL: 's3://b', ...creds, S3_ACCESS_KEY_ID: 'other', S3_SECRET_ACCESS_KEY: 'other-secret', S3_ENDPOINT: 'https://r2.example' }).storage as any
    expect([s.prefix, s.accessKeyId, s.secretAccessKey, s.endpoint]).toEqual(['', 'other', 'other-secret', 'https://r2.example'])
  })

  test.each([
    [{ STORAGE_URL: 'ftp://host/x' }, 'STORAGE_URL', /expected file:, file:\/\/\/absolute\/path, postgres: or s3:\/\/<bucket>\/<prefix>/],
    [{ STORAGE_URL: 'file:relative' }, 'STORAGE_URL', /expected file:/],
    [{ STORAGE_URL: 's3://' }, 'STORAGE_URL', /expected/],
    [{ STORAGE_URL: 's3://b/a b' }, 'STORAGE_URL', /prefix/],
    [{ STORAGE_URL: 's3://b/x' }, 'S3_ACCESS_KEY_ID', /must be set with STORAGE_URL=s3/],
    [{ STORAGE_URL: 's3://b/x', AWS_ACCESS_KEY_ID: 'k' }, 'S3_SECRET_ACCESS_KEY', /must be set/],
    [{ STORAGE_URL: 's3://b/x', ...creds, S3_ENDPOINT: 'minio:9000' }, 'S3_ENDPOINT', /invalid/],
  ])('%j fails naming %s', (env, variable, message) => {
    const err = failure(env as Record<string, string>)
    expect(err.variable).toBe(variable)
    expect(err.message).toMatch(message)
  })

  test('credentials are never shown in a failure', () => {
    expect(failure({ STORAGE_URL: 's3://key:secret-in-url@b/x' }).message).not.toContain('secret-in-url')
  })
})

test('OTEL_* variables: the traces URL, decoded headers and resource attributes, the sampler (docs/observability.md)', () => {
  const c = loadConfig({
    OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/',
    OTEL_EXPORTER_OTLP_HEADERS: 'x-api-key=a%20b,tenant=t1',
    OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment=prod',
    OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
    OTEL_TRACES_SAMPLER_ARG: '0.25',
    OTEL_GENAI_CAPTURE_CONTENT: 'true',
  })
  expect(c.tracing).toEqual({
    url: 'http://collector:4318/v1/traces',
    headers: { 'x-api-key': 'a b', tenant: 't1' },
    serviceName: 'agent-platform-api',
    resourceAttributes: { 'deployment.environment': 'prod' },
    sampler: 'parentbased_traceidratio',
    samplerArg: 0.25,
    scheduleDelayMs: 5000,
    captureContent: true,
  })
  expect(loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://a:4318', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://b:4318/traces' }).tracing!.url).toBe('http://b:4318/traces')
  expect(failure({ OTEL_TRACES_SAMPLER: 'sometimes' }).variable).toBe('OTEL_TRACES_SAMPLER')
  // A malformed header list is named, its value (credentials) never shown.
  const bad = failure({ OTEL_EXPORTER_OTLP_HEADERS: 'secret-token-without-equals' })
  expect(bad.variable).toBe('OTEL_EXPORTER_OTLP_HEADERS')
  expect(bad.message).not.toContain('secret-token')
})

test('started through a package script (bun start), the process follows its launcher unless told not to', () => {
  expect(loadConfig({ npm_lifecycle_event: 'start' }).exitWithLauncher).toBe(true)
  expect(loadConfig({ npm_lifecycle_event: 'start', EXIT_WITH_LAUNCHER: 'false' }).exitWithLauncher).toBe(false)
  expect(loadConfig({ EXIT_WITH_LAUNCHER: 'true' }).exitWithLauncher).toBe(true)
  expect(loadConfig({ DATA_DIR_LOCK_WAIT_MS: '0' }).dataDirLockWaitMs).toBe(0)
  expect(() => loadConfig({ DATA_DIR_LOCK_WAIT_MS: '600001' })).toThrow('DATA_DIR_LOCK_WAIT_MS')
})

test('empty strings count as unset', () => {
  expect(loadConfig({ PORT: '', DATABASE_URL: '', LOG_LEVEL: '' })).toMatchObject({ port: 8080, databaseUrl: null, logLevel: 'info' })
})

test('variables that are not ours are ignored', () => {
  expect(loadConfig({ PATH: '/usr/bin', HOME: '/root', port: 'abc' }).port).toBe(8080)
})

test('good values are taken and typed', () => {
  const c = loadConfig({
    PORT: '3000',
    HOST: '127.0.0.1',
    BASE_PATH: '/api',
    DATABASE_URL: 'postgresql://u:p@db:5432/app',
    REDIS_URL: 'rediss://cache:6380',
    TLS_CERT_FILE: '/tls/cert.pem',
    TLS_KEY_FILE: '/tls/key.pem',
    WEBHOOK_RETRY_DELAYS_MS: '10,20',
    WEBHOOK_ALLOW_HTTP: 'true',
    WEBHOOK_ALLOW_PRIVATE_NETWORKS: '1',
    MAX_JSON_BYTES: '1024',
    RATE_LIMIT_PER_SECOND: '5',
    RATE_LIMIT_BURST: '9',
    LOG_LEVEL: 'debug',
  })
  expect(c).toMatchObject({
    port: 3000,
    host: '127.0.0.1',
    basePath: '/api',
    databaseUrl: 'postgresql://u:p@db:5432/app',
    redisUrl: 'rediss://cache:6380',
    tls: { certFile: '/tls/cert.pem', keyFile: '/tls/key.pem' },
    webhookRetryDelaysMs: [10, 20],
    webhookAllowHttp: true,
    webhookAllowPrivateNetworks: true,
    maxJsonBytes: 1024,
    rateLimit: { perSecond: 5, burst: 9 },
    logLevel: 'debug',
  })
})

test.each([
  ['PORT', { PORT: 'abc' }],
  ['PORT', { PORT: '70000' }],
  ['PORT', { PORT: '-1' }],
  ['PORT', { PORT: '80.5' }],
  ['DATABASE_URL', { DATABASE_URL: 'mysql://x' }],
  ['DATABASE_URL', { DATABASE_URL: 'localhost:5432' }],
  ['REDIS_URL', { REDIS_URL: 'http://cache:6379' }],
  ['LOG_LEVEL', { LOG_LEVEL: 'loud' }],
  ['LOG_LEVEL', { LOG_LEVEL: 'INFO' }],
  ['TLS_KEY_FILE', { TLS_CERT_FILE: '/tls/cert.pem' }],
  ['TLS_CERT_FILE', { TLS_KEY_FILE: '/tls/key.pem' }],
  ['WEBHOOK_RETRY_DELAYS_MS', { WEBHOOK_RETRY_DELAYS_MS: '1,x' }],
  ['WEBHOOK_RETRY_DELAYS_MS', { WEBHOOK_RETRY_DELAYS_MS: '1,,2' }],
  ['WEBHOOK_ALLOW_HTTP', { WEBHOOK_ALLOW_HTTP: 'yes' }],
  ['BASE_PATH', { BASE_PATH: 'api' }],
  ['BASE_PATH', { BASE_PATH: '/api/' }],
  ['BOOTSTRAP_API_KEY', { BOOTSTRAP_API_KEY: 'short' }],
  ['SECRET_KEY', { SECRET_KEY: 'too-short' }],
  ['MAX_JSON_BYTES', { MAX_JSON_BYTES: '0' }],
  ['RATE_LIMIT_BURST', { RATE_LIMIT_BURST: '0' }],
  ['DATABASE_POOL_MAX', { DATABASE_POOL_MAX: '0' }],
  ['DATABASE_SEARCH_POOL_MAX', { DATABASE_SEARCH_POOL_MAX: '-1' }],
  ['KNOWLEDGE_EF_SEARCH', { KNOWLEDGE_EF_SEARCH: '9' }],
  ['KNOWLEDGE_EF_SEARCH', { KNOWLEDGE_EF_SEARCH: '1001' }],
  ['KNOWLEDGE_EF_SEARCH', { KNOWLEDGE_EF_SEARCH: 'many' }],
  ['SYNC_RUN_TIMEOUT_MS', { SYNC_RUN_TIMEOUT_MS: '1s' }],
])('a bad %s stops with a ConfigError naming it: %j', (variable, env) => {
  const err = failure(env)
  expect(err).toBeInstanceOf(ConfigError)
  expect(err.variable).toBe(variable)
  expect(err.message).toContain(variable)
})

test('the first bad variable is named even when good ones surround it', () => {
  const err = failure({ HOST: '127.0.0.1', PORT: 'abc', LOG_LEVEL: 'warn' })
  expect(err.variable).toBe('PORT')
  expect(err.message).toContain('"abc"')
})
