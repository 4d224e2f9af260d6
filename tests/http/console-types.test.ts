import { afterAll, beforeAll, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { CONSOLE_TYPES_FILE, consoleTypes, type OpenApiDocument } from '../../scripts/console-types'
import { startHarness, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The console's types of the API's objects are generated from the OpenAPI document the service
 * serves (src/console/api-types.ts): a schema changed on the server without `bun run console-types`
 * fails here, and the console's type check then shows what it has to follow.
 */
let h: Harness

beforeAll(async () => {
  h = await startHarness()
})

afterAll(async () => {
  await h?.close()
})

test('src/console/api-types.ts is generated from the document /docs/json serves now', async () => {
  const document = (await (await h.app.handle(new Request('http://localhost/docs/json'))).json()) as OpenApiDocument
  const expected = await consoleTypes(document)
  const onDisk = await Bun.file(CONSOLE_TYPES_FILE).text()
  if (onDisk !== expected) throw new Error('src/console/api-types.ts is stale: run bun run console-types (and commit the result)')
  // Not vacuous: the named schemas and the operations the console reads are in it.
  for (const name of ['Workspace: {', 'Run: {', 'Delivery: {', '"/v1/workspaces/{id}/usage": {', '"/v1/runs/{run_id}/nodes": {']) expect(onDisk).toContain(name)
})
