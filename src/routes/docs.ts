import { join } from 'node:path'
import { openapi } from '@elysiajs/openapi'
import { Elysia, type TSchema } from 'elysia'
import { refineDocument } from './openapi-refine'

/**
 * The OpenAPI document at /docs/json, generated from the routes' own TypeBox schemas, and its reference
 * UI at /docs: Swagger UI served from node_modules by the service itself, so an install with no internet
 * access has its API reference too (docs/api.md, "Reference"). Routes with a JSON body declare
 * `parse: 'json'`: that is how the generator learns their media type (our own parser, which turns bad
 * JSON into `invalid_json` errors, is invisible to it).
 */
export const DOCS_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  // Swagger UI sets style attributes as it renders; no script is inline.
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ')

const SWAGGER = join(import.meta.dir, '..', '..', 'node_modules', 'swagger-ui-dist')

// No inline script: the page's settings are in its own small file.
const PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Agent Platform API reference</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/docs/assets/swagger-ui.css">
</head>
<body>
<div id="swagger-ui" data-url="/docs/json"></div>
<script src="/docs/assets/swagger-ui-bundle.js"></script>
<script src="/docs/assets/init.js"></script>
</body>
</html>
`
const INIT = `window.ui = SwaggerUIBundle({ url: document.getElementById('swagger-ui').dataset.url, dom_id: '#swagger-ui', deepLinking: true, tryItOutEnabled: false })\n`

const hidden = { detail: { hide: true } }
const asset = (body: string | Blob, type: string, cache: string) => new Response(body, { headers: { 'content-type': type, 'cache-control': cache } })
// The two files change only with the installed package: a day in the browser's cache.
const DAY = 'public, max-age=86400'

/** Where the generator serves its own, unrefined document; /docs/json serves it refined. */
const RAW = '/docs/openapi.generated.json'

export function docsRoutes(documentation: Record<string, unknown>, named: Record<string, TSchema>, app: () => { handle(r: Request): Promise<Response> }) {
  let refined: Promise<unknown> | undefined
  const document = (request: Request) => {
    refined ??= app().handle(new Request(new URL(RAW, request.url).href))
      .then((res) => res.json())
      .then((doc) => refineDocument(doc, named))
      // Generating it leaves ~10-20 MB of garbage that an idle process may hold for long: collected
      // now, once (15-35 ms on this first request; bench/README.memory.md).
      .then((doc) => (Bun.gc(true), doc))
      .catch((err) => {
        refined = undefined
        throw err
      })
    return refined
  }
  return new Elysia({ name: 'routes.docs' })
    .use(openapi({
      path: '/docs',
      specPath: RAW,
      provider: null,
      // staticFile: false: a path with a dot is documented unless its route says `hide` (the console's
      // files do), rather than left out silently.
      exclude: { paths: ['/docs', '/docs/json', RAW], staticFile: false },
      documentation,
    }))
    .get('/docs/json', ({ request }) => document(request), hidden)
    .get('/docs', () => asset(PAGE, 'text/html; charset=utf-8', 'no-cache'), hidden)
    .get('/docs/assets/init.js', () => asset(INIT, 'text/javascript; charset=utf-8', 'no-cache'), hidden)
    .get('/docs/assets/swagger-ui.css', () => asset(Bun.file(join(SWAGGER, 'swagger-ui.css')), 'text/css; charset=utf-8', DAY), hidden)
    .get('/docs/assets/swagger-ui-bundle.js', () => asset(Bun.file(join(SWAGGER, 'swagger-ui-bundle.js')), 'text/javascript; charset=utf-8', DAY), hidden)
}
