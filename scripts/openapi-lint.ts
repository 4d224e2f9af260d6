/**
 * Lints the OpenAPI document the service serves at /docs/json with Redocly's recommended rules
 * (redocly.yaml), as a client generator would read it. Built in-process on the embedded store: no port,
 * no network. `.ci/run` runs it; exits non-zero on any error or warning.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { startHarness } from '../tests/helpers/harness'

const h = await startHarness()
const dir = mkdtempSync(join(tmpdir(), 'ap-openapi-'))
try {
  const res = await h.app.handle(new Request('http://localhost/docs/json'))
  const text = await res.text()
  const file = join(dir, 'openapi.json')
  writeFileSync(file, text)
  console.log(`openapi.json: ${(text.length / 1024).toFixed(0)} KB, ${Object.keys(JSON.parse(text).paths).length} paths`)
  const lint = Bun.spawnSync([join(import.meta.dir, '..', 'node_modules', '.bin', 'redocly'), 'lint', '--config', join(import.meta.dir, '..', 'redocly.yaml'), '--max-problems', '200', file], {
    stdout: 'inherit', stderr: 'inherit', env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true' },
  })
  process.exitCode = lint.exitCode ?? 1
} finally {
  rmSync(dir, { recursive: true, force: true })
  await h.close()
}
