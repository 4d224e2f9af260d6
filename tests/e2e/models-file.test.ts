import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { generateKey } from '../../src/domain/api-keys'
import { startFakeProvider, type FakeProvider } from '../helpers/fake-provider'
import { apiCall, EMBEDDED, killAll, runToExit, spawnService } from '../helpers/process'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * MODELS_FILE at start-up (docs/models.md): a bad file stops `bun run src/main.ts` with exit code 2 and
 * a message naming the bad field; a good one is merged over the built-in local models.
 */
let tmp: string
let fake: FakeProvider
let seq = 0

beforeAll(async () => {
  tmp = mkdtempSync(join(tmpdir(), 'ap-e2e-models-file-'))
  fake = await startFakeProvider()
})
afterAll(async () => {
  await killAll()
  await fake?.close()
  rmSync(tmp, { recursive: true, force: true })
})

/** Writes `content` (an object is JSON-encoded) to a file of its own; returns the path. */
function modelsFile(content: unknown): string {
  const file = join(tmp, `models-${++seq}.json`)
  writeFileSync(file, typeof content === 'string' ? content : JSON.stringify(content, null, 2))
  return file
}

const provider = (over: Record<string, unknown> = {}) => ({ id: 'acme', kind: 'openai', base_url: 'http://127.0.0.1:9/v1', api_key: 'sk-unused', ...over })
const llm = (over: Record<string, unknown> = {}) => ({ id: 'acme-chat', type: 'llm', vendor: 'acme', routes: [{ provider: 'acme', model: 'up-chat' }], ...over })

/** Runs the service with MODELS_FILE set; a DATA_DIR of its own, so nothing is left in the repository. */
function run(file: string, env: Record<string, string | undefined> = {}) {
  return runToExit({ env: { ...EMBEDDED, DATA_DIR: join(tmp, `data-${++seq}`), MODELS_FILE: file, ...env } })
}

describe('a bad MODELS_FILE stops start-up with exit code 2, naming the field', () => {
  const UNSET = 'AP_TEST_SURELY_UNSET_KEY'
  const cases: [string, () => string, string, RegExp][] = [
    ['an unknown provider in a route', () => modelsFile({ providers: [provider()], models: [llm({ routes: [{ provider: 'acme', model: 'a' }, { provider: 'nope', model: 'b' }] })] }), 'models[0].routes[1].provider', /unknown provider "nope"/],
    ['a model without routes', () => modelsFile({ providers: [provider()], models: [llm(), { id: 'bare', type: 'llm', vendor: 'acme' }] }), 'models[1].routes', /required/],
    ['a model with an empty route list', () => modelsFile({ providers: [provider()], models: [llm({ routes: [] })] }), 'models[0].routes', /length/],
    ['a wrong type value', () => modelsFile({ providers: [provider()], models: [llm({ type: 'chat' })] }), 'models[0].type', /./],
    ['a JSON syntax error', () => modelsFile('{ "providers": [ { "id": "acme", } ] '), '(file)', /is not JSON/],
    ['api_key_env naming an unset variable', () => modelsFile({ providers: [provider({ api_key: undefined, api_key_env: UNSET })], models: [llm()] }), 'providers[0].api_key_env', new RegExp(`${UNSET}, which is unset`)],
    ['a missing file', () => join(tmp, 'no-such-models.json'), '(file)', /cannot read .*no-such-models\.json.*ENOENT/],
    ['an unknown provider kind', () => modelsFile({ providers: [provider({ kind: 'azure' })], models: [llm()] }), 'providers[0].kind', /./],
    ['an embedding model without dimensions', () => modelsFile({ providers: [provider()], models: [{ id: 'e', type: 'embedding', vendor: 'acme', routes: [{ provider: 'acme', model: 'e' }] }] }), 'models[0].dimensions', /required/],
    ['an unknown field', () => modelsFile({ providers: [provider({ apikey: 'typo' })], models: [llm()] }), 'providers[0].apikey', /Unexpected property/],
    ['a provider reusing the id "local"', () => modelsFile({ providers: [provider({ id: 'local' })] }), 'providers[0].id', /built-in/],
  ]

  test.each(cases)('%s', async (_, make, field, message) => {
    const { code, output } = await run(make(), { [UNSET]: undefined })
    expect({ code, output }).toEqual({ code: 2, output: expect.stringContaining(`MODELS_FILE: ${field}`) })
    const line = output.split('\n').find((l) => l.includes(`MODELS_FILE: ${field}`))!
    expect(line).toMatch(message)
    // Stopped before anything started: no listener, no database, no root key printed.
    expect(output).not.toContain('listening on')
    expect(output).not.toMatch(/ap_[A-Za-z0-9]{40}/)
    expect(output).not.toMatch(/\n\s+at /)
  })

  test('the key of a provider is never printed, even when the file is refused', async () => {
    const secret = 'sk-very-secret-value-123'
    const { code, output } = await run(modelsFile({ providers: [provider({ api_key: secret })], models: [llm({ routes: [{ provider: 'nope', model: 'x' }] })] }))
    expect(code).toBe(2)
    expect(output).not.toContain(secret)
  })
})

describe('a good MODELS_FILE', () => {
  test('the service starts; GET /v1/models lists the file\'s models with the local ones; a route reaches its provider with the key of api_key_env', async () => {
    const rootKey = generateKey()
    const secret = 'sk-from-the-environment-456'
    const file = modelsFile({
      providers: [
        { id: 'acme', kind: 'openai', base_url: fake.baseUrl, api_key_env: 'AP_TEST_ACME_KEY', timeout_ms: 5_000 },
        // Not reachable: nothing calls it, and start-up does not try.
        { id: 'claude', kind: 'anthropic', base_url: 'http://127.0.0.1:9/v1', api_key: 'sk-unused', headers: { 'anthropic-version': '2023-06-01' } },
      ],
      models: [
        { id: 'acme-chat', type: 'llm', vendor: 'acme', context_length: 128_000, supports_function_call: true, routes: [{ provider: 'acme', model: 'up-chat' }, { provider: 'claude', model: 'claude-x' }], pricing: { input_per_1k: 0.15, output_per_1k: 0.6 } },
        { id: 'acme-embed', type: 'embedding', vendor: 'acme', dimensions: 8, routes: [{ provider: 'acme', model: 'up-embed' }], pricing: { input_per_1k: 0.02 } },
        { id: 'acme-rerank', type: 'rerank', vendor: 'acme', routes: [{ provider: 'acme', model: 'up-rerank' }] },
      ],
    })
    const sp = spawnService({ env: { ...EMBEDDED, DATA_DIR: join(tmp, 'data-good'), BOOTSTRAP_API_KEY: rootKey, MODELS_FILE: file, AP_TEST_ACME_KEY: secret } })
    await sp.ready(45_000)

    const list = await apiCall(sp, rootKey, 'GET', '/v1/models')
    expect(list.status).toBe(200)
    // OpenAI's created and owned_by (the vendor) beside our fields on every model.
    for (const m of list.body.data) expect([m.owned_by, Number.isInteger(m.created)]).toEqual([m.vendor, true])
    const byId = Object.fromEntries(list.body.data.map(({ created: _c, owned_by: _o, ...m }: { id: string; created: number; owned_by: string }) => [m.id, m]))
    expect(Object.keys(byId).sort()).toEqual(['acme-chat', 'acme-embed', 'acme-rerank', 'local-chat', 'local-embed', 'local-rerank'])
    expect(byId['acme-chat']).toEqual({ id: 'acme-chat', object: 'model', type: 'llm', vendor: 'acme', context_length: 128_000, supports_function_call: true })
    expect(byId['acme-embed']).toEqual({ id: 'acme-embed', object: 'model', type: 'embedding', vendor: 'acme', dimensions: 8 })
    expect(byId['acme-rerank']).toEqual({ id: 'acme-rerank', object: 'model', type: 'rerank', vendor: 'acme' })
    expect(byId['local-embed']).toEqual({ id: 'local-embed', object: 'model', type: 'embedding', vendor: 'local', dimensions: 384 })
    const acme = await apiCall(sp, rootKey, 'GET', '/v1/models?vendor=acme&type=embedding')
    expect(acme.body.data.map((m: { id: string }) => m.id)).toEqual(['acme-embed'])

    // The file's route is live: an embeddings call reaches the fake provider with the key from the environment.
    const ws = await apiCall(sp, rootKey, 'POST', '/v1/workspaces', { name: 'Models file' })
    expect(ws.status).toBe(201)
    const emb = await apiCall(sp, rootKey, 'POST', '/v1/models/embeddings', { model: 'acme-embed', input: ['hello'], workspace_id: ws.body.data.id })
    expect(emb.status).toBe(200)
    expect(emb.body.data[0].embedding.length).toBe(8)
    const sent = fake.requests.find((r) => r.model === 'up-embed')!
    expect(sent.headers.authorization).toBe(`Bearer ${secret}`)

    // Neither key shows in the list or the log.
    expect(JSON.stringify(list.body)).not.toContain(secret)
    expect(sp.output()).not.toContain(secret)
    expect(sp.output()).not.toContain('sk-unused')
    expect(await sp.stop()).toBe(0)
  }, 60_000)
})
