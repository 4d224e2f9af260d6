import { openapi } from '@elysiajs/openapi'

/**
 * The OpenAPI document at /docs/json and its reference UI at /docs, generated from the routes' own TypeBox
 * schemas. Routes with a JSON body declare `parse: 'json'`: that is how the generator learns their media
 * type (our own parser, which turns bad JSON into `invalid_json` errors (docs/api.md), is invisible to it).
 */
export function docsRoutes(documentation: Record<string, unknown>) {
  return openapi({
    path: '/docs',
    specPath: '/docs/json',
    // staticFile: false, or the console's assets (paths with a dot) would be left out silently.
    exclude: { paths: ['/docs', '/docs/json'], staticFile: false },
    documentation: documentation as never,
    // Absolute, so the page also works when opened as /docs/ (the default is relative).
    scalar: { url: '/docs/json' } as never,
  })
}
