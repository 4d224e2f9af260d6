import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { createLogger } from '../../src/boot'
import { redactUrls, scrubUrl, shownUrl } from '../../src/lib/redact-url'

setDefaultTimeout(TEST_TIMEOUT_MS)

/** What messages, spans and logs may show of an outgoing call's URL (docs/observability.md). */
describe('shownUrl', () => {
  test.each([
    ['https://hooks.example.com/services/T0/B0/XXXX?token=abc', 'https://hooks.example.com'],
    ['http://127.0.0.1:8080/a/b#frag', 'http://127.0.0.1:8080'],
    ['https://user:pw@example.com/secret', 'https://example.com'],
    ['https://[::1]:8443/x?y=z', 'https://[::1]:8443'],
    ['https://example.com', 'https://example.com'],
    ['{{inputs.url}}/path', '{{inputs.url}}'],
  ])('%s → %s', (raw, shown) => {
    expect(shownUrl(raw)).toBe(shown)
  })
})

describe('redactUrls and scrubUrl', () => {
  test('every absolute URL in a text keeps its origin only', () => {
    expect(redactUrls('GET https://a.example/x/y?t=1 failed, then http://u:p@b.example:81/z too')).toBe('GET https://a.example failed, then http://b.example:81 too')
    expect(redactUrls('no URL here')).toBe('no URL here')
  })

  test('the path and query of the URL called, echoed without a scheme, are cut out', () => {
    const raw = 'https://api.example.com/proxy/sk-path-secret/v1?key=q-secret'
    expect(scrubUrl('Cannot POST /proxy/sk-path-secret/v1/chat/completions', raw)).toBe('Cannot POST …/chat/completions')
    expect(scrubUrl('bad query key=q-secret', raw)).toBe('bad query …')
    expect(scrubUrl('see https://api.example.com/proxy/sk-path-secret/v1?key=q-secret', raw)).toBe('see https://api.example.com')
  })
})

describe('the logger', () => {
  test('level is a name; an error\'s URL (Bun puts the whole one in `path`) keeps its origin only', () => {
    const lines: string[] = []
    const log = createLogger('info', { write: (s: string) => void lines.push(s) })
    const err = Object.assign(new TypeError('ECONNREFUSED: Unable to connect to http://10.0.0.1:9/hooks/tok-123?x=tok-456'), { code: 'ECONNREFUSED', path: 'http://10.0.0.1:9/hooks/tok-123?x=tok-456' })
    log.warn({ err }, 'a call failed')
    log.info('plain')
    const [first, second] = lines.map((l) => JSON.parse(l))
    expect(first.level).toBe('warn')
    expect(second.level).toBe('info')
    expect(first.err.path).toBe('http://10.0.0.1:9')
    expect(first.err.code).toBe('ECONNREFUSED')
    expect(lines.join('\n')).not.toContain('tok-123')
    expect(lines.join('\n')).not.toContain('tok-456')
  })
})
