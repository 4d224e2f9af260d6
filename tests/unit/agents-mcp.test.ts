import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { checkServerUrl, MAX_RESULT_CHARS, toOutput } from '../../src/domain/agents/mcp-client'
import { mcpToolName } from '../../src/domain/agents/tools'

setDefaultTimeout(TEST_TIMEOUT_MS)

/** The pure parts of agents' mcp tools (docs/agents.md, "MCP tools"): names, results, the save-time URL rule. */

describe('mcpToolName', () => {
  const none = new Set<string>()

  test('<name>__<tool> when it fits', () => {
    expect(mcpToolName('crm', 'lookup', none)).toBe('crm__lookup')
  })

  test('characters outside [A-Za-z0-9_-] become _', () => {
    expect(mcpToolName('crm', 'orders.find/by id', none)).toBe('crm__orders_find_by_id')
  })

  test('a name past 64 characters is cut and ends with a hash of the tool\'s name; two such stay apart', () => {
    const a = mcpToolName('x'.repeat(32), 'y'.repeat(40) + 'a', none)
    const b = mcpToolName('x'.repeat(32), 'y'.repeat(40) + 'b', none)
    for (const n of [a, b]) {
      expect(n).toHaveLength(64)
      expect(n).toMatch(/^[A-Za-z0-9_-]+_[0-9a-f]{8}$/)
    }
    expect(a).not.toBe(b)
  })

  test('a taken name gets the hash too', () => {
    const taken = new Set(['crm__a_b'])
    const n = mcpToolName('crm', 'a.b', taken)
    expect(n).toMatch(/^crm__a_b_[0-9a-f]{8}$/)
    expect(n).not.toBe(mcpToolName('crm', 'a/b', taken))
  })
})

describe('toOutput', () => {
  test('text items joined; JSON text parsed; structured content preferred', () => {
    expect(toOutput({ content: [{ type: 'text', text: 'one' }, { type: 'text', text: 'two' }] })).toEqual({ text: 'one\ntwo' })
    expect(toOutput({ content: [{ type: 'text', text: ' {"a": 1} ' }] })).toEqual({ result: { a: 1 } })
    expect(toOutput({ content: [{ type: 'text', text: 'summary' }], structuredContent: { a: 2 } })).toEqual({ result: { a: 2 } })
  })

  test('isError is the model\'s error with the text', () => {
    expect(toOutput({ content: [{ type: 'text', text: 'nope' }], isError: true })).toEqual({ error: { code: 'tool_error', message: 'nope' } })
    expect(toOutput({ content: [], isError: true }).error).toMatchObject({ code: 'tool_error' })
  })

  test('images are named, not sent; resources keep their text', () => {
    const out = toOutput({
      content: [
        { type: 'image', data: 'A'.repeat(10_000), mimeType: 'image/png' },
        { type: 'resource', resource: { uri: 'file:///a.txt', text: 'hello' } },
      ],
    })
    expect(out).toEqual({ text: '', content: [{ type: 'image', mime_type: 'image/png' }, { type: 'resource', uri: 'file:///a.txt', text: 'hello' }] })
  })

  test('a result past the cap is cut and marked', () => {
    const long = toOutput({ content: [{ type: 'text', text: 'x'.repeat(MAX_RESULT_CHARS + 10) }] })
    expect(long.truncated).toBe(true)
    expect((long.text as string).length).toBe(MAX_RESULT_CHARS + 1)
    const big = toOutput({ content: [], structuredContent: { rows: Array.from({ length: 20_000 }, (_, i) => i) } })
    expect(big.truncated).toBe(true)
    expect(big.text as string).toStartWith('{"rows":[0,1,2')
  })
})

describe('checkServerUrl', () => {
  const strict = { allowHttp: false, allowPrivate: false }
  test.each([
    ['http://mcp.example.com/mcp', 'must use https://'],
    ['https://127.0.0.1/mcp', 'non-public'],
    ['https://[::ffff:10.0.0.1]/mcp', 'non-public'],
    ['https://169.254.169.254/latest', 'non-public'],
    ['https://app.localhost/mcp', 'non-public'],
    ['not a url', 'not a valid absolute URL'],
  ])('%s is refused', (url, why) => {
    expect(checkServerUrl(url, strict)).toContain(why)
  })

  test('a public name or address passes (it is resolved and checked again at each connection)', () => {
    expect(checkServerUrl('https://mcp.example.com/mcp', strict)).toBeNull()
    expect(checkServerUrl('https://8.8.8.8/mcp', strict)).toBeNull()
    expect(checkServerUrl('http://127.0.0.1:8080/mcp', { allowHttp: true, allowPrivate: true })).toBeNull()
  })
})
