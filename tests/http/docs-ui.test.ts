import { afterAll, beforeAll, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { DOCS_CSP } from '../../src/routes/docs'
import { startHarness, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The API reference at /docs works without internet: the page names only this service's own files,
 * each of which it serves, under a CSP that admits no other host (the browser test renders it).
 */
let h: Harness
beforeAll(async () => {
  h = await startHarness()
})
afterAll(async () => {
  await h?.close()
})

const TYPES: Record<string, string> = { '.js': 'text/javascript; charset=utf-8', '.css': 'text/css; charset=utf-8' }

test('the page references only same-origin files, and every one of them is served', async () => {
  const page = await h.call('GET', '/docs', { key: null })
  expect(page.status).toBe(200)
  expect(page.headers.get('content-type')).toBe('text/html; charset=utf-8')
  const refs = [...page.text.matchAll(/\b(?:src|href)="([^"]*)"/g)].map((m) => m[1]!)
  expect(refs.length).toBeGreaterThanOrEqual(3)
  for (const ref of refs) {
    if (ref.startsWith('data:')) continue
    expect(ref).toStartWith('/docs/')
    const res = await h.call('GET', ref, { key: null })
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toBe(TYPES[ref.slice(ref.lastIndexOf('.'))]!)
  }
  // Nothing inline for the CSP to refuse: every script has a src.
  expect(page.text.match(/<script\b[^>]*>/g)!.every((tag) => /\bsrc="\/docs\//.test(tag))).toBe(true)
  expect(page.text).not.toMatch(/https?:\/\//)
})

test('the CSP admits scripts and connections from this service only', async () => {
  const page = await h.call('GET', '/docs', { key: null })
  expect(page.headers.get('content-security-policy')).toBe(DOCS_CSP)
  expect(DOCS_CSP).toMatch(/script-src 'self'(;|$)/)
  expect(DOCS_CSP).toMatch(/connect-src 'self'(;|$)/)
  expect(DOCS_CSP).not.toMatch(/https?:|\*/)
  const json = await h.call('GET', '/docs/json', { key: null })
  expect(json.status).toBe(200)
  expect(json.body.openapi).toStartWith('3.')
})
