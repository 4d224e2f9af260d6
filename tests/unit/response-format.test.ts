import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { cachedValidators, checkResponseFormat, parseStructured, validatorFor } from '../../src/domain/models/response-format'

setDefaultTimeout(TEST_TIMEOUT_MS)

/** The pure half of structured output (src/domain/models/response-format.ts): shape, parsing, the validator cache. */

const schema = { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] }
const format = { type: 'json_schema' as const, json_schema: { name: 'count', schema } }

describe('parseStructured', () => {
  test.each([
    ['bare', '{"n": 1}'],
    ['surrounded by whitespace', '  \n{"n": 1}\n\t'],
    ['in a ```json fence', '```json\n{"n": 1}\n```'],
    ['in a bare ``` fence, with whitespace around', '\n ```\n{"n": 1}\n``` \n'],
  ])('%s parses', (_what, text) => {
    expect(parseStructured(text, format)).toEqual({ ok: true, json: { n: 1 } })
  })

  test.each([
    ['prose', 'n is 1', 'not JSON'],
    ['prose around a fence', 'Here: ```json\n{"n": 1}\n```', 'not JSON'],
    ['a wrong type at the root', '[1]', '(root) must be object'],
    ['a missing property', '{}', '/n is required'],
    ['a wrong type below', '{"n": 1.5}', '/n must be integer'],
  ])('%s fails, saying where', (_what, text, message) => {
    const r = parseStructured(text, format)
    expect(r.ok).toBe(false)
    expect(!r.ok && r.message).toContain(message)
  })

  test('json_object wants an object', () => {
    expect(parseStructured('{"a": [1]}', { type: 'json_object' })).toEqual({ ok: true, json: { a: [1] } })
    for (const text of ['[1]', '"x"', '3', 'null']) expect(parseStructured(text, { type: 'json_object' }).ok).toBe(false)
  })
})

describe('validatorFor', () => {
  test('one compiled validator per schema text; at most 256 kept, the least recently used dropped first', () => {
    const first = validatorFor({ type: 'string', title: 'first' })
    expect(validatorFor(JSON.parse(JSON.stringify({ type: 'string', title: 'first' })))).toBe(first)
    const second = validatorFor({ type: 'string', title: 'second' })
    for (let i = 0; i < 300; i++) {
      validatorFor({ type: 'number', title: `s${i}` })
      // Used again and again: stays while the others come and go.
      validatorFor({ type: 'string', title: 'first' })
    }
    expect(cachedValidators()).toBe(256)
    expect(validatorFor({ type: 'string', title: 'first' })).toBe(first)
    expect(validatorFor({ type: 'string', title: 'second' })).not.toBe(second)
  })

  test('two different schemas with the same $id do not collide', () => {
    const a = validatorFor({ $id: 'https://example.com/s', type: 'string' })
    const b = validatorFor({ $id: 'https://example.com/s', type: 'number' })
    expect(a('x')).toBe(true)
    expect(b(1)).toBe(true)
    expect(b('x')).toBe(false)
  })
})

describe('checkResponseFormat', () => {
  const problems = (v: unknown) => {
    const out: string[] = []
    checkResponseFormat(v, (path) => out.push(path.join('.')))
    return out
  }
  test('the three forms pass; the first problem is reported at its path', () => {
    expect(problems({ type: 'text' })).toEqual([])
    expect(problems({ type: 'json_object' })).toEqual([])
    expect(problems({ type: 'json_schema', json_schema: { name: 'a-b_C9', description: 'd', schema: {}, strict: null } })).toEqual([])
    expect(problems(null)).toEqual([''])
    expect(problems({ type: 'json_schema', json_schema: { name: 'x'.repeat(65), schema: {} } })).toEqual(['json_schema.name'])
    expect(problems({ type: 'json_schema', json_schema: { name: 'ok', schema: { type: 12 } } })).toEqual(['json_schema.schema'])
  })
})
