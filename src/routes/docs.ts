import { openapi } from '@elysiajs/openapi'
import { Elysia } from 'elysia'

type Operation = { requestBody?: { content?: Record<string, unknown>; required?: boolean }; responses?: Record<string, unknown> }
type Document = { paths: Record<string, Record<string, Operation>> }
type RouteInfo = { method: string; path: string; hooks: { body?: unknown } }

const RAW_SPEC = '/docs/openapi-raw.json'

/**
 * The OpenAPI document at /docs/json and its reference UI at /docs. The generator cannot see the
 * media type of bodies read by our own JSON parser (the one that turns bad JSON into CONTRACT
 * errors), so the document is completed from the routes' own TypeBox body schemas, once.
 */
export function docsRoutes(documentation: Record<string, unknown>, app: () => { routes: never[]; handle(r: Request): Promise<Response> }) {
  let cached: Document | null = null
  return new Elysia({ name: 'routes.docs' })
    .use(
      openapi({
        path: '/docs',
        specPath: RAW_SPEC,
        exclude: { paths: ['/docs', RAW_SPEC, '/docs/json'] },
        documentation: documentation as never,
        // The UI reads the completed document, not the raw one.
        scalar: { url: "/docs/json" } as never,
      }),
    )
    .get('/docs/json', async ({ request }) => {
      if (!cached) {
        // The raw document comes from the same app, in process.
        const raw = await (await app().handle(new Request(new URL(RAW_SPEC, request.url).toString()))).json()
        cached = complete(raw as Document, app().routes as RouteInfo[])
      }
      return cached
    }, { detail: { hide: true } })
}

function complete(doc: Document, routes: RouteInfo[]): Document {
  for (const route of routes) {
    const path = route.path.replace(/:([A-Za-z0-9_]+)/g, '{$1}')
    const op = doc.paths[path]?.[route.method.toLowerCase()]
    if (!op) continue
    if (route.hooks.body && op.requestBody && Object.keys(op.requestBody.content ?? {}).length === 0) {
      op.requestBody.content = { 'application/json': { schema: JSON.parse(JSON.stringify(route.hooks.body)) } }
    }
  }
  const metrics = doc.paths['/metrics']?.get
  if (metrics && !metrics.responses) {
    metrics.responses = { 200: { description: 'Prometheus text exposition format', content: { 'text/plain': { schema: { type: 'string' } } } } }
  }
  return doc
}
