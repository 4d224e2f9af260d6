import { afterAll, beforeAll, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { existsSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { makeTemplate, templateDir } from '../../src/store/pglite-template'
import { EMBEDDED, killAll, spawnService } from '../helpers/process'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * `bun start` on a fresh DATA_DIR starts from the installation's migrated template (what `bun install`
 * makes; docs/deployment.md, "Start-up"), is ready as soon as /healthz answers, and a restart opens
 * the directory it left without the template.
 */
let tmp: string

beforeAll(async () => {
  tmp = mkdtempSync(join(tmpdir(), 'ap-e2e-startup-'))
  // As `bun install` would have made it (an install with --ignore-scripts has none).
  if (!existsSync(templateDir())) await makeTemplate()
}, 60_000)

afterAll(async () => {
  await killAll()
  rmSync(tmp, { recursive: true, force: true })
})

test('a fresh DATA_DIR starts from the migrated template, ready at its first /healthz; a restart does not use it', async () => {
  const env = { ...EMBEDDED, DATA_DIR: join(tmp, 'data') }
  const first = spawnService({ env })
  await first.ready()
  expect((await fetch(`${first.url}/readyz`)).status).toBe(200)
  expect(first.output()).toContain('started from the migrated template')
  expect(first.output()).not.toContain('initialising the database')
  expect(await first.stop()).toBe(0)

  const again = spawnService({ env })
  await again.ready()
  expect((await fetch(`${again.url}/readyz`)).status).toBe(200)
  expect(again.output()).not.toContain('migrated template')
  expect(again.output()).not.toContain('initialising the database')
  expect(await again.stop()).toBe(0)
}, 60_000)
