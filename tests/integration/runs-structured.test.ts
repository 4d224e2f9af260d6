import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { chain, end, ends, start, startRunsEnv, starts, type RunsEnv } from '../helpers/runs'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * An llm node with `response_format` in real runs (docs/workflows.md, "Structured output"): the
 * model `scripted` is the loopback fake provider, told what to answer per test. A JSON answer adds
 * `json` to the node's output; one that does not parse, or fails the schema, fails the run with
 * `invalid_output`; a response_format the engine could not honour is refused when the workflow is saved.
 */
let env: RunsEnv

const SCHEMA = {
  type: 'object',
  properties: {
    category: { type: 'string', enum: ['billing', 'bug', 'other'] },
    urgent: { type: 'boolean' },
    tags: { type: 'array', items: { type: 'string' } },
  },
  required: ['category', 'urgent'],
  additionalProperties: false,
}
const TRIAGE = { type: 'json_schema', json_schema: { name: 'triage', schema: SCHEMA, strict: true } }

beforeAll(async () => {
  env = await startRunsEnv()
})

afterAll(async () => {
  await env?.close()
})

const triage = (responseFormat: unknown) =>
  chain(
    start([{ name: 'ticket', type: 'string', required: true }]),
    { id: 'triage', type: 'llm', config: { model: 'scripted', messages: [{ role: 'system', content: 'Classify the ticket.' }, { role: 'user', content: '{{inputs.ticket}}' }], response_format: responseFormat } },
    end({ category: '{{nodes.triage.output.json.category}}', urgent: '{{nodes.triage.output.json.urgent}}' }),
  )

/** Runs the triage workflow once with the fake answering `answer`. */
async function runWith(responseFormat: unknown, answer: string) {
  env.fake.script('scripted-up', [{ text: answer }])
  const wf = await env.workflow(triage(responseFormat))
  const res = await env.trigger(wf, { ticket: 'I was charged twice' })
  expect(res.status).toBe(200)
  return res
}

describe('the answer', () => {
  test('valid JSON (in a ```json fence, with whitespace): the output adds json; the upstream got response_format as written', async () => {
    const answer = '\n```json\n{ "category": "billing", "urgent": true, "tags": ["refund"] }\n```\n'
    const res = await runWith(TRIAGE, answer)
    expect(res.body).toMatchObject({ status: 'completed', outputs: { category: 'billing', urgent: true } })
    const out = ends(await env.eventsOf(res.body.run_id), 'triage')[0]!.data.output
    expect(out.json).toEqual({ category: 'billing', urgent: true, tags: ['refund'] })
    expect(out.text).toBe(answer)
    expect(Object.keys(out).sort()).toEqual(['json', 'text', 'usage'])
    const sent = env.fake.requests.filter((r) => r.model === 'scripted-up').at(-1)!
    expect(sent.json.response_format).toEqual(TRIAGE)
    expect(sent.stream).toBe(true)
  })

  test('json_object: any JSON object', async () => {
    const res = await runWith({ type: 'json_object' }, '{"category": "other", "urgent": false}')
    expect(res.body).toMatchObject({ status: 'completed', outputs: { category: 'other', urgent: false } })
    expect(env.fake.requests.at(-1)!.json.response_format).toEqual({ type: 'json_object' })
  })

  test('not JSON: the run fails with invalid_output naming the node; the end node never starts', async () => {
    const res = await runWith(TRIAGE, 'Sure! This looks like a billing issue.')
    expect(res.body.status).toBe('failed')
    expect(res.body.error).toMatchObject({ code: 'invalid_output', node: 'triage' })
    expect(res.body.error.message).toContain('not JSON')
    // The answer was charged, so the run counts its tokens although the node failed.
    expect(res.body.usage.tokens_out).toBeGreaterThan(0)
    const events = await env.eventsOf(res.body.run_id)
    expect(starts(events, 'end').length).toBe(0)
    expect(events.at(-1)).toMatchObject({ event: 'done', data: { status: 'failed', error: res.body.error } })
  })

  test.each([
    ['a wrong type, deep', '{"category": "bug", "urgent": true, "tags": ["ok", 7]}', '/tags/1 must be string'],
    ['a missing property', '{"category": "bug"}', '/urgent is required'],
    ['a value outside the enum', '{"category": "sales", "urgent": false}', '/category must be equal to one of the allowed values'],
    ['an unknown property', '{"category": "bug", "urgent": false, "mood": "sad"}', '/mood is not allowed'],
  ])('JSON that fails the schema (%s): invalid_output naming the path', async (_what, answer, path) => {
    const res = await runWith(TRIAGE, answer)
    expect(res.body.status).toBe('failed')
    expect(res.body.error).toMatchObject({ code: 'invalid_output', node: 'triage' })
    expect(res.body.error.message).toContain('schema triage')
    expect(res.body.error.message).toContain(path)
  })

  test('json_object answered with an array: invalid_output', async () => {
    const res = await runWith({ type: 'json_object' }, '[1, 2]')
    expect(res.body.error).toMatchObject({ code: 'invalid_output', node: 'triage' })
    expect(res.body.error.message).toContain('not an object')
  })
})

describe('at save time', () => {
  const save = (responseFormat: unknown) =>
    env.h.call('POST', '/v1/workflows', { key: env.owner, body: { workspace_id: env.ws, name: 'Structured refused', graph: triage(responseFormat) } })

  test.each([
    ['an unknown type', { type: 'yaml' }, 'response_format.type'],
    ['no name', { type: 'json_schema', json_schema: { schema: SCHEMA } }, 'response_format.json_schema.name'],
    ['a name with a space', { type: 'json_schema', json_schema: { name: 'tri age', schema: SCHEMA } }, 'response_format.json_schema.name'],
    ['a schema that is not an object', { type: 'json_schema', json_schema: { name: 'triage', schema: 'object' } }, 'response_format.json_schema.schema'],
    ['strict not a boolean', { type: 'json_schema', json_schema: { name: 'triage', schema: SCHEMA, strict: 1 } }, 'response_format.json_schema.strict'],
    ['an unknown field', { type: 'json_object', schema: SCHEMA }, 'response_format.schema'],
    ['a schema ajv cannot compile', { type: 'json_schema', json_schema: { name: 'triage', schema: { type: 'objekt' } } }, 'response_format.json_schema.schema'],
    ['a schema with a dangling $ref', { type: 'json_schema', json_schema: { name: 'triage', schema: { $ref: '#/$defs/nowhere' } } }, 'response_format.json_schema.schema'],
  ])('%s → 400 naming the path', async (_what, format, path) => {
    const res = await save(format)
    expect(res.status).toBe(400)
    expect(res.body.error.code).toBe('validation_error')
    expect(res.body.error.param).toBe(`graph.nodes.1.config.${path}`)
  })
})
