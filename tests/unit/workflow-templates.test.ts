import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { compileTemplate, render, renderDeep, renderText } from '../../src/domain/workflows/templates'
import { NodeError, type Variables } from '../../src/domain/workflows/types'

setDefaultTimeout(TEST_TIMEOUT_MS)

const vars: Variables = {
  inputs: { name: 'Ada', n: 3, ok: false, tags: ['a', 'b'], obj: { k: 'v' }, nothing: null, zero: 0 },
  nodes: {
    search: { output: { results: [{ content: 'first', score: 0.9 }, { content: 'second' }], total: 2 } },
    'fetch-user': { output: { status: 200, body: { tier: 'vip' } } },
    text: { output: 'plain' },
  },
}

function templateError(fn: () => unknown): NodeError {
  try {
    fn()
  } catch (err) {
    expect(err).toBeInstanceOf(NodeError)
    expect((err as NodeError).code).toBe('template_error')
    return err as NodeError
  }
  throw new Error('expected a template_error')
}

describe('a lone placeholder keeps the value’s type', () => {
  test.each([
    ['{{inputs.n}}', 3],
    ['{{ inputs.n }}', 3],
    ['{{inputs.ok}}', false],
    ['{{inputs.zero}}', 0],
    ['{{inputs.nothing}}', null],
    ['{{inputs.tags}}', ['a', 'b']],
    ['{{inputs.obj}}', { k: 'v' }],
    ['{{nodes.search.output.total}}', 2],
    ['{{nodes.search.output.results[0].score}}', 0.9],
    ['{{nodes.search.output.results.1.content}}', 'second'],
    ['{{nodes.fetch-user.output.body}}', { tier: 'vip' }],
    ['{{nodes.text.output}}', 'plain'],
  ] as [string, unknown][])('%s', (template, expected) => {
    expect(render(template, vars)).toEqual(expected)
  })

  test('whitespace outside the braces makes it text', () => {
    expect(render(' {{inputs.n}}', vars)).toBe(' 3')
  })
})

describe('placeholders inside text are stringified', () => {
  test.each([
    ['Hello {{inputs.name}}!', 'Hello Ada!'],
    ['{{inputs.name}}{{inputs.n}}', 'Ada3'],
    ['n={{inputs.n}} ok={{inputs.ok}} zero={{inputs.zero}}', 'n=3 ok=false zero=0'],
    ['tags: {{inputs.tags}}', 'tags: ["a","b"]'],
    ['obj: {{inputs.obj}}', 'obj: {"k":"v"}'],
    ['[{{inputs.nothing}}]', '[]'],
    ['first: {{nodes.search.output.results[0].content}}', 'first: first'],
    ['{"name": "{{inputs.name}}"}', '{"name": "Ada"}'],
    ['no placeholders', 'no placeholders'],
    ['', ''],
    ['a { b } {c}', 'a { b } {c}'],
  ])('%s', (template, expected) => {
    expect(render(template, vars)).toBe(expected)
  })

  test('renderText turns a lone placeholder into text too', () => {
    expect(renderText('{{inputs.n}}', vars)).toBe('3')
    expect(renderText('{{inputs.obj}}', vars)).toBe('{"k":"v"}')
    expect(renderText('{{inputs.nothing}}', vars)).toBe('')
  })
})

describe('strict references, lenient data', () => {
  test('a missing input throws naming the placeholder', () => {
    const err = templateError(() => render('Hi {{inputs.missing}}', vars))
    expect(err.message).toContain('{{inputs.missing}}')
    expect(err.message).toContain('no input missing')
  })

  test('a node that has not run throws naming the node', () => {
    const err = templateError(() => render('{{nodes.later.output.text}}', vars))
    expect(err.message).toContain('node later has not run')
  })

  test.each([
    '{{nodes.search.output.nope}}',
    '{{nodes.search.output.results[5].content}}',
    '{{nodes.search.output.total.deeper}}',
    '{{nodes.text.output.length}}',
    '{{inputs.obj.constructor}}',
    '{{inputs.obj.__proto__}}',
    '{{inputs.tags.length}}',
    '{{inputs.nothing.x}}',
  ])('%s (inside an existing value) is undefined', (template) => {
    expect(render(template, vars)).toBeUndefined()
    expect(render(`[${template}]`, vars)).toBe('[]')
  })
})

describe('malformed placeholders', () => {
  test.each([
    ['{{}}', 'is not a valid path'],
    ['{{ inputs. }}', 'is not a valid path'],
    ['{{inputs..name}}', 'is not a valid path'],
    ['{{inputs.na me}}', 'is not a valid path'],
    ['{{inputs.name[x]}}', 'is not a valid path'],
    ['{{inputs.[0]}}', 'is not a valid path'],
    ['{{[0]}}', 'is not a valid path'],
    ['{{secrets.key}}', 'unknown variable secrets'],
    ['{{inputs}}', 'names no input'],
    ['{{nodes}}', 'names no node'],
    ['{{nodes.search.results}}', 'read through its output'],
    ['{{nodes.search}}', 'read through its output'],
  ])('%s → %s', (template, why) => {
    const err = templateError(() => compileTemplate(template))
    expect(err.message).toContain(why)
    expect(err.message).toContain(template)
  })
})

test('compiled templates are cached by string', () => {
  expect(compileTemplate('cached {{inputs.name}}')).toBe(compileTemplate('cached {{inputs.name}}'))
})

test('renderDeep renders every string and keeps keys and other values', () => {
  const value = {
    '{{inputs.name}}': 'key untouched',
    who: '{{inputs.name}}',
    count: '{{inputs.n}}',
    fixed: 7,
    flag: true,
    none: null,
    list: ['{{inputs.tags}}', 'x-{{inputs.n}}', { deep: '{{nodes.fetch-user.output.body.tier}}' }],
  }
  expect(renderDeep(value, vars)).toEqual({
    '{{inputs.name}}': 'key untouched',
    who: 'Ada',
    count: 3,
    fixed: 7,
    flag: true,
    none: null,
    list: [['a', 'b'], 'x-3', { deep: 'vip' }],
  })
  expect(value.who).toBe('{{inputs.name}}')
})

test('rendering a compiled template is fast', () => {
  const template = 'Dear {{inputs.name}}, your {{nodes.search.output.total}} results: {{nodes.search.output.results[0].content}}.'
  render(template, vars)
  const n = 100_000
  const t = performance.now()
  for (let i = 0; i < n; i++) render(template, vars)
  const usPer = ((performance.now() - t) * 1000) / n
  // ~0.4 µs here; the bound only catches a regression to re-parsing per call.
  expect(usPer).toBeLessThan(20)
})
