import { afterAll, beforeAll, expect, test } from 'bun:test'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { generateKey } from '../../src/domain/api-keys'
import { startFakeProvider, type FakeProvider } from '../helpers/fake-provider'
import { apiCall, EMBEDDED, killAll, spawnService, type ServiceProcess } from '../helpers/process'

/**
 * A model call's charge is committed before its answer is sent (docs/models.md, "Credits and
 * budgets"): the real service as a subprocess, in the embedded default, SIGKILLed the moment the last
 * answers arrive, then restarted on the same DATA_DIR. Every call that was answered 200 (streamed or
 * not, one at a time or many at once) is in the ledger exactly once, and the period's total is their sum.
 */
let tmp: string
let fake: FakeProvider

beforeAll(async () => {
  tmp = mkdtempSync(join(tmpdir(), 'ap-e2e-credits-crash-'))
  fake = await startFakeProvider()
})

afterAll(async () => {
  await killAll()
  await fake?.close()
  if (tmp) rmSync(tmp, { recursive: true, force: true })
})

function start(dataDir: string, rootKey: string, modelsFile: string): ServiceProcess {
  return spawnService({ env: { ...EMBEDDED, DATA_DIR: dataDir, BOOTSTRAP_API_KEY: rootKey, MODELS_FILE: modelsFile, RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000' } })
}

test('a SIGKILL right after the answers loses no charge and doubles none', async () => {
  const rootKey = generateKey()
  const dataDir = join(tmp, 'data')
  const modelsFile = join(tmp, 'models.json')
  writeFileSync(modelsFile, JSON.stringify({
    providers: [{ id: 'fake', kind: 'openai', base_url: fake.baseUrl, api_key: 'sk-fake', timeout_ms: 5000 }],
    models: [{ id: 'priced', type: 'llm', vendor: 'test', routes: [{ provider: 'fake', model: 'up' }], pricing: { input_per_1k: 1, output_per_1k: 2 } }],
  }))
  let sp = start(dataDir, rootKey, modelsFile)
  await sp.ready()
  const ws = await apiCall(sp, rootKey, 'POST', '/v1/workspaces', { name: 'Crash credits' })
  expect(ws.status).toBe(201)
  const id = ws.body.data.id as string
  expect((await apiCall(sp, rootKey, 'PUT', `/v1/workspaces/${id}/budget`, { credits: 1_000_000, period: 'month', thresholds: [50], hard_limit: true })).status).toBe(200)
  const headers = { authorization: `Bearer ${rootKey}`, 'content-type': 'application/json', 'x-workspace-id': id }
  const body = (stream: boolean) => JSON.stringify({ model: 'priced', messages: [{ role: 'user', content: 'say something short' }], stream })
  const call = async (stream: boolean): Promise<number> => {
    const res = await fetch(`${sp.url}/v1/chat/completions`, { method: 'POST', headers, body: body(stream) })
    expect(res.status).toBe(200)
    if (!stream) return ((await res.json()) as { usage: { credits: number } }).usage.credits
    const text = await res.text()
    expect(text).toContain('data: [DONE]')
    // The usage chunk is sent only on request; its credits are the same as a non-streamed call's.
    return -1
  }
  const credits: number[] = []
  for (let i = 0; i < 5; i++) credits.push(await call(false))
  credits.push(...(await Promise.all(Array.from({ length: 20 }, (_, i) => call(i % 4 === 0)))))
  // Killed the moment the last answer is in: nothing is left to finish in the background.
  sp.proc.kill('SIGKILL')
  await sp.exited
  sp = start(dataDir, rootKey, modelsFile)
  await sp.ready()
  const usage = await apiCall(sp, rootKey, 'GET', `/v1/workspaces/${id}/usage`)
  expect(usage.status).toBe(200)
  expect(usage.body.data.total.calls).toBe(25)
  const nonStreamed = credits.filter((c) => c >= 0)
  const each = nonStreamed[0]!
  expect(nonStreamed.every((c) => c === each)).toBe(true)
  const total = usage.body.data.total
  expect(total.credits).toBeCloseTo(each * 25, 6)
  const budget = usage.body.data.budget
  expect(budget.used).toBeCloseTo(each * 25, 6)
  await sp.stop('SIGTERM')
}, 60_000)
