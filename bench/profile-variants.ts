/** The variants of bench/profile-server.ts, each with what it leaves out of the service. */
export const VARIANTS = {
  bare: 'Bun.serve answering a fixed JSON body',
  'bare-headers': 'the same with the 7 headers every answer of the service carries (security, request id)',
  elysia: 'new Elysia() with one GET /healthz returning an object',
  'elysia-schema': 'the same with the response schema of /healthz',
  full: 'buildApp(deps), exactly as src/main.ts serves it',
  'no-metrics': 'full, metrics.observe a no-op (no prom-client per request)',
  'no-openapi': 'full without the @elysiajs/openapi plugin',
  'no-ratelimit': 'full, the token bucket stubbed to "allowed" (no take per request)',
  'no-key-hash': 'full, authenticate() memoised by the token string (no SHA-256 per request)',
  lean: 'full without metrics, openapi, rate limit and key hash together',
} as const
export type Variant = keyof typeof VARIANTS
