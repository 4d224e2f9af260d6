import { Elysia, t } from 'elysia'
import { buildApp } from '../src/app'
import { createLogger, openDeps } from '../src/boot'
import { loadConfig } from '../src/config'
import type { Deps } from '../src/deps'
import { opsRoutes } from '../src/routes/ops'
import { conventions } from '../src/routes/plugins/conventions'
import { workspaceRoutes } from '../src/routes/workspaces'
import { VARIANTS, type Variant } from './profile-variants'

/**
 * One variant of the service for bench/profile.ts: the real plugins from src/, with one part taken
 * out (stubbed through Deps, or left out of the composition), so that the difference from `full` is
 * what that part costs. Configured like the service (PORT, DATA_DIR, BOOTSTRAP_API_KEY, LOG_LEVEL...);
 * BENCH_VARIANT picks the variant. Nothing in src/ is changed.
 */
const variant = (process.env.BENCH_VARIANT ?? 'full') as Variant
if (!(variant in VARIANTS)) throw new Error(`BENCH_VARIANT must be one of ${Object.keys(VARIANTS).join(', ')}`)
const port = Number(process.env.PORT ?? 0)
const listen = { port, hostname: '127.0.0.1' }

if (variant === 'bare') {
  const body = JSON.stringify({ request_id: 'req_01jc0000000000000000000000', status: 'ok' })
  Bun.serve({ ...listen, fetch: () => new Response(body, { headers: { 'content-type': 'application/json' } }) })
} else if (variant === 'bare-headers') {
  let n = 0
  Bun.serve({
    ...listen,
    fetch: () => {
      const id = `req_01jc${String(n++).padStart(22, '0')}`
      return new Response(JSON.stringify({ request_id: id, status: 'ok' }), {
        headers: {
          'x-content-type-options': 'nosniff',
          'x-frame-options': 'DENY',
          'referrer-policy': 'no-referrer',
          'cache-control': 'no-store',
          'content-security-policy': "default-src 'none'; frame-ancestors 'none'",
          'x-request-id': id,
          'content-type': 'application/json',
        },
      })
    },
  })
} else if (variant === 'elysia') {
  new Elysia().get('/healthz', () => ({ request_id: 'req_01jc0000000000000000000000', status: 'ok' as const })).listen(listen)
} else if (variant === 'elysia-schema') {
  new Elysia()
    .get('/healthz', () => ({ request_id: 'req_01jc0000000000000000000000', status: 'ok' as const }), {
      response: { 200: t.Object({ request_id: t.String(), status: t.Literal('ok') }) },
    })
    .listen(listen)
} else {
  const config = loadConfig()
  const deps = await openDeps(config, { log: createLogger(config.logLevel), defaultMetrics: true })
  await deps.apiKeys.bootstrap(config.bootstrapApiKey)
  const stub = new Set<string>(variant === 'lean' ? ['no-metrics', 'no-openapi', 'no-ratelimit', 'no-key-hash'] : [variant])
  const d: Deps = { ...deps }
  if (stub.has('no-metrics')) d.metrics = { ...deps.metrics, observe: () => {} }
  if (stub.has('no-ratelimit')) {
    const allowed = { allowed: true, remaining: config.rateLimit.burst, retryAfterMs: 0, resetMs: 0 }
    d.redis = Object.assign(Object.create(deps.redis), { take: async () => allowed })
  }
  if (stub.has('no-key-hash')) {
    const memo = new Map<string, Awaited<ReturnType<typeof deps.apiKeys.authenticate>>>()
    const authenticate = deps.apiKeys.authenticate.bind(deps.apiKeys)
    d.apiKeys = Object.assign(Object.create(deps.apiKeys), {
      authenticate: async (token: string) => memo.get(token) ?? memo.set(token, await authenticate(token)).get(token)!,
    })
  }
  const app = stub.has('no-openapi')
    ? new Elysia().use(conventions(d)).use(opsRoutes(d)).group(`${config.basePath}/v1`, (a) => a.use(workspaceRoutes(d)))
    : buildApp(d)
  app.listen(listen)
  const stop = async () => {
    await app.stop()
    await deps.apiKeys.stop()
    await deps.db.close()
    process.exit(0)
  }
  process.on('SIGTERM', () => void stop())
}
