/**
 * Screenshots of every console page for the README (docs/console/*.png): the service started as the
 * README starts it, data made through the API (tests/helpers/console.ts), Debian's Chromium driven by
 * Playwright. Run: `bun run scripts/console-screenshots.ts` (needs /usr/bin/chromium).
 */
import { mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { chromium } from 'playwright-core'
import { CHROMIUM, CHROMIUM_ARGS, CONSOLE_KEY, startConsoleWorld } from '../tests/helpers/console'

const out = join(import.meta.dir, '..', 'docs', 'console')
mkdirSync(out, { recursive: true })
const world = await startConsoleWorld()
const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS })
try {
  const page = await browser.newPage({ viewport: { width: 1366, height: 900 } })
  const errors: string[] = []
  page.on('console', (m) => m.type() === 'error' && errors.push(m.text()))
  page.on('pageerror', (e) => errors.push(e.message))
  await page.goto(`${world.service.url}/console`)
  await page.screenshot({ path: join(out, 'sign-in.png') })
  await page.getByLabel('API key').fill(CONSOLE_KEY)
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.getByRole('heading', { name: 'Workspaces' }).waitFor()
  await page.getByLabel('Workspace').selectOption(world.workspaceId)
  const run = await world.call('POST', `/v1/workflows/${world.waitWorkflowId}/runs?async=true`, { inputs: {}, user_id: 'dana' })
  const shots: [string, string, string][] = [
    ['workspaces', '#/workspaces', 'Workspaces'],
    ['workspace', `#/workspaces/${world.workspaceId}`, 'Members'],
    ['webhooks', `#/webhooks/${world.webhookId}`, 'Deliveries'],
    ['delivery', `#/webhooks/${world.webhookId}/deliveries/${world.failedDeliveryId}`, 'Attempts'],
    ['runs', `#/workflows/${world.quickWorkflowId}`, 'Greeting'],
    ['run', `#/runs/${run.body.run_id}`, 'Event timeline'],
    ['documents', `#/knowledge-bases/${world.kbId}`, 'Documents'],
    ['document', `#/knowledge-bases/${world.kbId}/documents/${world.documentId}`, 'Metadata'],
    ['machines', '#/machines', 'State machines'],
    ['agent', `#/agents/${world.agentId}`, 'Support assistant'],
  ]
  for (const [name, hash, heading] of shots) {
    await page.goto(`${world.service.url}/console${hash}`)
    await page.getByRole('heading', { name: heading, exact: true }).first().waitFor()
    if (name === 'documents') {
      await page.getByLabel('Search query').fill('how long do refunds take')
      await page.getByRole('button', { name: 'Search', exact: true }).click()
      await page.locator('.results li').first().waitFor()
    }
    if (name === 'agent') {
      await page.getByLabel('Message').fill('How long do refunds take?')
      await page.getByRole('button', { name: 'Send' }).click()
      await page.locator('.turn-meta').filter({ hasText: 'credits' }).waitFor()
    }
    await page.locator('figure.diagram svg').first().waitFor({ timeout: 10_000 }).catch(() => {})
    await page.waitForTimeout(300)
    await page.screenshot({ path: join(out, `${name}.png`), fullPage: name !== 'machines' })
    console.log(`docs/console/${name}.png`)
  }
  if (errors.length) console.log('browser errors:', errors)
} finally {
  await browser.close()
  await world.close()
}
