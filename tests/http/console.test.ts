import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { CONSOLE_CSP } from '../../src/routes/console'
import { startHarness, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

/** The console's page and assets as the service serves them (the browser test drives the pages). */
describe('console routes', () => {
  let h: Harness
  let based: Harness
  beforeAll(async () => {
    ;[h, based] = await Promise.all([startHarness(), startHarness({ BASE_PATH: '/platform' })])
  })
  afterAll(async () => {
    await Promise.all([h?.close(), based?.close()])
  })

  test('the page: HTML with no inline script, the API base in a meta element, the console CSP', async () => {
    for (const path of ['/console', '/console/']) {
      const res = await h.call('GET', path, { key: null })
      expect(res.status).toBe(200)
      expect(res.headers.get('content-type')).toBe('text/html; charset=utf-8')
      expect(res.headers.get('content-security-policy')).toBe(CONSOLE_CSP)
      expect(res.headers.get('x-frame-options')).toBe('DENY')
      expect(res.headers.get('x-content-type-options')).toBe('nosniff')
      expect(res.text).toContain('<meta name="api-base" content="/v1">')
      expect(res.text).toContain('<script type="module" src="/console/app.js"></script>')
      // Every script of the page has a src: nothing inline for the CSP to refuse.
      expect(res.text.match(/<script\b[^>]*>/g)!.every((tag) => /\bsrc="\/console\//.test(tag))).toBe(true)
    }
    expect(CONSOLE_CSP).toContain("default-src 'none'")
    expect(CONSOLE_CSP).toMatch(/script-src 'self'(;|$)/)
    expect(CONSOLE_CSP).not.toMatch(/https?:|\*/)
  })

  test('the script is bundled from src/console, the styles and Mermaid come from the service', async () => {
    const js = await h.call('GET', '/console/app.js', { key: null })
    expect(js.status).toBe(200)
    expect(js.headers.get('content-type')).toBe('text/javascript; charset=utf-8')
    expect(js.text).toContain('api-base')
    // Bundled: no bare import left for the browser to resolve (eventsource-parser is inside).
    expect(js.text).not.toMatch(/\bfrom\s*["'](?!\.)/)
    const css = await h.call('GET', '/console/app.css', { key: null })
    expect(css.status).toBe(200)
    expect(css.headers.get('content-type')).toBe('text/css; charset=utf-8')
    expect(css.text).not.toMatch(/@import|url\(\s*["']?https?:/)
    const mermaid = await h.call('GET', '/console/vendor/mermaid.min.js', { key: null })
    expect(mermaid.status).toBe(200)
    expect(mermaid.headers.get('cache-control')).toBe('public, max-age=86400')
    expect(mermaid.text.length).toBeGreaterThan(1_000_000)
  })

  test('an unknown console path is a 404 of the contract\'s shape', async () => {
    const res = await h.call('GET', '/console/nothing-here.js', { key: null })
    expect(res.status).toBe(404)
    expect(res.body.error.code).toBe('not_found')
  })

  test('under BASE_PATH the console lives at <BASE_PATH>/console and calls <BASE_PATH>/v1', async () => {
    const res = await based.call('GET', '/console', { key: null })
    expect(res.status).toBe(200)
    expect(res.headers.get('content-security-policy')).toBe(CONSOLE_CSP)
    expect(res.text).toContain('<meta name="api-base" content="/platform/v1">')
    expect(res.text).toContain('src="/platform/console/app.js"')
    expect(res.text).toContain('href="/platform/console/app.css"')
    expect((await based.call('GET', '/console/app.js', { key: null })).status).toBe(200)
    expect((await based.call('GET', '/console/vendor/mermaid.min.js', { key: null })).status).toBe(200)
    const outside = await based.app.handle(new Request('http://localhost/console'))
    expect(outside.status).toBe(404)
  })

  test('the console\'s page is documented under the console tag, without authentication; its files are not', async () => {
    const doc = await h.call('GET', '/docs/json', { key: null })
    const paths = Object.keys(doc.body.paths).filter((p) => p.startsWith('/console'))
    // /console/ serves the same page but is one path too many for the document (no trailing-slash twin);
    // the page's script, stylesheet and Mermaid are files, not API.
    expect(paths.sort()).toEqual(['/console'])
    for (const p of paths) {
      expect(doc.body.paths[p].get.tags).toEqual(['console'])
      expect(doc.body.paths[p].get.security).toEqual([])
    }
    expect(Object.keys(doc.body.paths['/console'].get.responses['200'].content)).toEqual(['text/html'])
  })
})
