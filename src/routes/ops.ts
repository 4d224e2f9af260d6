import { Elysia } from 'elysia'
import type { Deps } from '../deps'
import { ping } from '../store/db'
import { Described } from './common.model'
import { Liveness, Readiness } from './ops.model'
import { stateOf } from './plugins/request-state'

const tags = ['operations']

/** Liveness, readiness and metrics: no authentication, no /v1 (docs/decisions.md, "HTTP conventions"). */
export function opsRoutes(deps: Deps) {
  const check = async (kind: string, probe: () => Promise<unknown>) => {
    try {
      await Promise.race([probe(), new Promise((_, reject) => setTimeout(() => reject(new Error('timed out after 2 s')), 2000).unref?.())])
      return { status: 'ok' as const, kind }
    } catch (err) {
      return { status: 'down' as const, kind, error: (err as Error).message.slice(0, 200) }
    }
  }
  return new Elysia({ name: 'routes.ops' })
    .get('/healthz', ({ request }) => ({ request_id: requestIdOf(request), status: 'ok' as const }), {
      response: { 200: Described(Liveness, 'The process answers') },
      detail: { operationId: 'getHealth', tags, summary: 'Liveness: the process answers', security: [] },
    })
    .get('/readyz', async ({ request, set }) => {
      const [database, redis] = await Promise.all([
        check(deps.db.kind, () => ping(deps.db.sql)),
        check(deps.redis.kind, () => deps.redis.ping()),
      ])
      const ready = database.status === 'ok' && redis.status === 'ok'
      if (!ready) {
        set.status = 503
        set.headers['retry-after'] = '5'
      }
      return { request_id: requestIdOf(request), status: ready ? ('ok' as const) : ('unavailable' as const), checks: { database, redis } }
    }, {
      response: {
        200: Described(Readiness, 'Ready: the database and Redis answer'),
        503: Described(Readiness, 'Not ready: checks names what does not answer'),
      },
      detail: { operationId: 'getReadiness', tags, summary: 'Readiness: the database and Redis answer', security: [] },
    })
    .get('/metrics', async () =>
      new Response(await deps.metrics.text(), { headers: { 'content-type': deps.metrics.contentType, 'cache-control': 'no-store' } }), {
      detail: {
        operationId: 'getMetrics',
        tags,
        summary: 'Prometheus metrics: request counts and latency histograms by route and status',
        security: [],
        responses: { 200: { description: 'Prometheus text exposition format', content: { 'text/plain': { schema: { type: 'string' } } } } },
      },
    })
}

const requestIdOf = (request: Request) => stateOf(request).id
