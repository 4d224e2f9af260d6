import { afterAll, beforeAll, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { existsSync } from 'node:fs'
import { chromium, type Browser } from 'playwright-core'
import { CHROMIUM, CHROMIUM_ARGS } from '../helpers/console'
import { startHarness, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The API reference as an air-gapped operator opens it: headless Chromium loads /docs from the service
 * with every request to another host refused and recorded; the page must render the operations all the
 * same, and must not even try another host. A machine without /usr/bin/chromium skips it (CI has it).
 */
const hasChromium = existsSync(CHROMIUM)
if (!hasChromium && process.env.CI) throw new Error(`${CHROMIUM} is missing: .ci/run installs it (apt-get install chromium)`)

let h: Harness
let server: ReturnType<typeof Bun.serve>
let browser: Browser

beforeAll(async () => {
  if (!hasChromium) return
  h = await startHarness()
  server = Bun.serve({ hostname: '127.0.0.1', port: 0, fetch: (req) => h.app.handle(req) })
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS })
}, 60_000)

afterAll(async () => {
  await browser?.close()
  server?.stop(true)
  await h?.close()
})

test.skipIf(!hasChromium)('/docs renders the operations with every other host unreachable', async () => {
  const page = await browser.newPage()
  const offHost: string[] = []
  const origin = `http://127.0.0.1:${server.port}`
  await page.route('**/*', (route) => {
    const url = route.request().url()
    if (url.startsWith(`${origin}/`) || url.startsWith('data:')) return route.continue()
    offHost.push(url)
    return route.abort()
  })
  const errors: string[] = []
  page.on('pageerror', (e) => errors.push(String(e)))
  await page.goto(`${origin}/docs`)
  // An operation summary of the document, as Swagger UI lists it.
  await page.getByText('Get one model of the catalogue').first().waitFor({ timeout: 30_000 })
  expect(await page.locator('.opblock').count()).toBeGreaterThan(50)
  expect(offHost).toEqual([])
  expect(errors).toEqual([])
  await page.close()
}, 60_000)
