import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { Elysia } from 'elysia'
import type { Deps } from '../deps'

/**
 * The management console (docs/console.md): a page at `<BASE_PATH>/console` whose script, built by
 * Bun's bundler from src/console/ when the page is first visited or ahead of time (CONSOLE_BUNDLE, as
 * in the container image), talks only to the public /v1 API with the API key the user signs in with.
 * Mermaid is served from node_modules and loaded only by pages with a diagram.
 */
export const CONSOLE_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  // Mermaid writes <style> elements into the SVG diagrams it draws; no script may be inline.
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data:",
  "font-src 'self' data:",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ')

const ROOT = join(import.meta.dir, '..', 'console')
const MERMAID = join(import.meta.dir, '..', '..', 'node_modules', 'mermaid', 'dist', 'mermaid.min.js')

/** Bundles the console's script from src/console (~15 ms here; `bun run build:console` writes it to a file ahead of time). */
export async function buildConsole(): Promise<string> {
  const out = await Bun.build({ entrypoints: [join(ROOT, 'main.ts')], target: 'browser', format: 'esm', minify: true })
  if (!out.success || !out.outputs[0]) throw new AggregateError(out.logs, 'the console failed to build')
  return out.outputs[0].text()
}

let bundle: Promise<string> | undefined
/**
 * The console's script, read from `prebuilt` (CONSOLE_BUNDLE, the container image's) or bundled,
 * once per process; a failure is retried on the next request.
 */
export function consoleBundle(prebuilt: string | null): Promise<string> {
  bundle ??= (prebuilt ? Bun.file(prebuilt).text() : buildConsole())
    .catch((err) => {
      bundle = undefined
      throw err
    })
  return bundle
}

let mermaid: Blob | undefined
let styles: string | undefined

export function consoleRoutes(deps: Deps) {
  const base = `${deps.config.basePath}/console`
  // The page knows where the API is from a meta element: no inline script, whatever BASE_PATH is.
  const page = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="api-base" content="${deps.config.basePath}/v1">
<meta name="console-base" content="${base}">
<title>Agent Platform console</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="${base}/app.css">
<script type="module" src="${base}/app.js"></script>
</head>
<body>
<a class="skip" href="#main">Skip to content</a>
<div id="app"><p class="loading">Loading the console…</p></div>
<noscript>The console needs JavaScript.</noscript>
</body>
</html>
`
  const headers = (type: string, cache = 'no-cache') => ({ 'content-type': type, 'cache-control': cache })
  // The page's visit starts the script's build (~15 ms; ~3 MB that a process whose console nobody
  // opens never holds), so it is ready, or nearly, when the browser asks for it; a failure is logged
  // here and retried by the script's own request.
  const script = () => {
    const first = bundle === undefined
    const p = consoleBundle(deps.config.consoleBundle)
    if (first) p.then(() => deps.log.info('console script ready'), (err) => deps.log.error({ err }, 'the console failed to build'))
    return p
  }
  const html = () => {
    void script().catch(() => {})
    return new Response(page, { headers: headers('text/html; charset=utf-8') })
  }
  // Documented like /metrics: no authentication (the page signs in to the API itself), not JSON.
  const page200 = {
    detail: {
      operationId: 'getConsole',
      tags: ['console'],
      summary: 'The console\'s page (docs/console.md): sign in with an API key',
      security: [],
      responses: { 200: { description: 'The console\'s page (HTML); it loads its script and stylesheet from /console/', content: { 'text/html': { schema: { type: 'string' as const } } } } },
    },
  }
  // The page's files are no API: left out of the OpenAPI document, like the reference UI's own.
  const asset = { detail: { hide: true } }
  return new Elysia({ name: 'routes.console' })
    .get(base, html, page200)
    // The same page with a trailing slash, left out of the OpenAPI document (one path, one operation).
    .get(`${base}/`, html, { detail: { hide: true } })
    .get(`${base}/app.js`, async () => new Response(await script(), { headers: headers('text/javascript; charset=utf-8') }), asset)
    .get(`${base}/app.css`, () => {
      styles ??= readFileSync(join(ROOT, 'style.css'), 'utf8')
      return new Response(styles, { headers: headers('text/css; charset=utf-8') })
    }, asset)
    .get(`${base}/vendor/mermaid.min.js`, () => {
      mermaid ??= Bun.file(MERMAID)
      // The file changes only with the installed package: a day in the browser's cache.
      return new Response(mermaid, { headers: headers('text/javascript; charset=utf-8', 'public, max-age=86400') })
    }, asset)
}
