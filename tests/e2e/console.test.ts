import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { existsSync } from 'node:fs'
import { chromium, type Browser, type Page } from 'playwright-core'
import { CHROMIUM, CHROMIUM_ARGS, CONSOLE_KEY, startConsoleWorld, XSS_NAME, type ConsoleWorld } from '../helpers/console'
import { waitFor } from '../helpers/harness'
import { chain } from '../helpers/runs'
import { killAll } from '../helpers/process'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The console in a real browser: Debian's Chromium driven by Playwright against the service started as
 * the README starts it. CI installs Chromium (.ci/run) and this file fails there without it; elsewhere
 * a machine without /usr/bin/chromium skips it.
 */
const hasChromium = existsSync(CHROMIUM)
if (!hasChromium && process.env.CI) throw new Error(`${CHROMIUM} is missing: .ci/run installs it (apt-get install chromium)`)

describe.skipIf(!hasChromium)('console (Chromium)', () => {
  let world: ConsoleWorld
  let browser: Browser
  let page: Page
  /** Every script error and console error of the page, CSP violations included. */
  const problems: string[] = []

  beforeAll(async () => {
    ;[world, browser] = await Promise.all([
      startConsoleWorld(),
      chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS }),
    ])
    page = await browser.newPage({ viewport: { width: 1366, height: 900 } })
    page.setDefaultTimeout(15_000)
    page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`))
    page.on('console', (m) => {
      if (m.type() === 'error' && !/favicon/.test(m.location().url)) problems.push(`console: ${m.text()}`)
    })
  }, 90_000)

  afterAll(async () => {
    await browser?.close()
    await world?.close()
    await killAll()
  })

  const open = (hash: string) => page.goto(`${world.service.url}/console${hash}`)
  const diagram = () => page.locator('figure.diagram').first()

  /**
   * Measures the drawn SVG (the first matching `svg`): every transition label's box against every other
   * label and every state box (touching is not overlapping); fails naming the pairs that overlap.
   */
  const expectNoOverlaps = async (svgSelector: string, machine: string) => {
    const overlaps = await page.evaluate((selector) => {
      type Box = { what: string; x: number; y: number; w: number; h: number }
      // Runs in the page: its DOM, untyped here (this file is compiled without the DOM library).
      const svg = (globalThis as any).document.querySelector(selector)
      const boxes = (sel: string, what: (el: any) => string): Box[] =>
        ([...svg.querySelectorAll(sel)] as any[])
          .map((el) => ({ el, r: el.getBoundingClientRect() }))
          .filter(({ r }) => r.width > 1 && r.height > 1)
          .map(({ el, r }) => ({ what: what(el), x: r.x, y: r.y, w: r.width, h: r.height }))
      const labels = boxes('g.edgeLabel', (el) => `label "${el.textContent?.trim()}"`)
      const states = boxes('g.node', (el) => `state "${el.textContent?.trim().slice(0, 30)}"`)
      // One pixel of slack: touching is not overlapping.
      const hit = (a: Box, b: Box) => a.x + 1 < b.x + b.w && b.x + 1 < a.x + a.w && a.y + 1 < b.y + b.h && b.y + 1 < a.y + a.h
      const found: string[] = []
      labels.forEach((a, i) => {
        for (const b of labels.slice(i + 1)) if (hit(a, b)) found.push(`${a.what} over ${b.what}`)
        for (const s of states) if (hit(a, s)) found.push(`${a.what} over ${s.what}`)
      })
      return { found, labels: labels.length, states: states.length }
    }, svgSelector)
    expect(overlaps.labels).toBeGreaterThan(0)
    expect(overlaps.states).toBeGreaterThan(0)
    expect({ machine, overlaps: overlaps.found }).toEqual({ machine, overlaps: [] })
  }

  test('a wrong key is refused with the API\'s message; the right one signs in', async () => {
    await open('')
    await page.getByLabel('API key').fill('ap_wrongwrongwrongwrongwrongwrongwrongwron')
    await page.getByRole('button', { name: 'Sign in' }).click()
    expect(await page.getByRole('alert').textContent()).toContain('401')
    // Enter in the field submits the form (keyboard only).
    await page.getByLabel('API key').fill(CONSOLE_KEY)
    await page.getByLabel('API key').press('Enter')
    await page.getByRole('heading', { name: 'Workspaces' }).waitFor()
    expect(await page.getByRole('link', { name: 'Acme support' }).count()).toBe(1)
    // The key is in this tab's session storage, nowhere else.
    expect(await page.evaluate(() => JSON.stringify(sessionStorage))).toContain(CONSOLE_KEY)
    expect(await page.evaluate<string>('JSON.stringify(localStorage) + document.cookie')).not.toContain(CONSOLE_KEY)
    await page.getByLabel('Workspace').selectOption(world.workspaceId)
    // The refused key's 401 was logged by the browser; from here on the pages must log no error.
    expect(problems.every((p) => p.includes('401'))).toBe(true)
    problems.length = 0
  }, 30_000)

  test('the selector starts on the oldest workspace, not a newer empty one; opening a workspace chooses it', async () => {
    const made = await fetch(`${world.service.url}/v1/workspaces`, {
      method: 'POST', headers: { authorization: `Bearer ${CONSOLE_KEY}`, 'content-type': 'application/json' }, body: JSON.stringify({ name: 'Newest and empty' }),
    })
    expect(made.status).toBe(201)
    const newest = ((await made.json()) as { data: { id: string } }).data.id
    await page.evaluate(() => sessionStorage.removeItem('agent-platform.console.workspace'))
    await open('#/workspaces')
    await page.reload()
    await page.getByRole('heading', { name: 'Workspaces' }).waitFor()
    expect(await page.getByLabel('Workspace').inputValue()).toBe(world.workspaceId)
    await open(`#/workspaces/${newest}`)
    await waitFor(async () => (await page.getByLabel('Workspace').inputValue()) === newest, { what: 'the opened workspace chosen' })
    await open(`#/workspaces/${world.workspaceId}`)
    await waitFor(async () => (await page.getByLabel('Workspace').inputValue()) === world.workspaceId, { what: 'the first workspace chosen again' })
    // No header breaks inside a word ("Statu s"): headers keep to one line.
    const members = page.locator('table', { has: page.locator('caption', { hasText: 'Members' }) })
    await members.waitFor()
    const styles = await page.locator('th, td').evaluateAll((cells) =>
      cells.map((c) => {
        const style = (globalThis as unknown as { getComputedStyle(e: unknown): { whiteSpace: string; wordBreak: string } }).getComputedStyle(c)
        return { th: (c as { tagName: string }).tagName === 'TH', whiteSpace: style.whiteSpace, wordBreak: style.wordBreak }
      }))
    expect(styles.filter((c) => c.th).every((c) => c.whiteSpace === 'nowrap')).toBe(true)
    expect(styles.filter((c) => c.wordBreak === 'break-all' || c.wordBreak === 'break-word')).toEqual([])
  }, 30_000)

  test('a workspace shows its members with their roles, usage and budget', async () => {
    await open(`#/workspaces/${world.workspaceId}`)
    const members = page.locator('table', { has: page.locator('caption', { hasText: 'Members' }) })
    await members.waitFor()
    expect(await members.locator('tbody tr').count()).toBe(3)
    expect(await members.textContent()).toMatch(/dana.*developer/s)
    expect(await page.locator('dl.facts').nth(1).textContent()).toContain('of 1000 credits used')
    // The audit log: the writes that made this workspace, by the root key's user.
    const audit = page.locator('table', { has: page.locator('caption', { hasText: 'The last 50 writes' }) })
    expect(await audit.locator('tbody tr', { hasText: 'POST /v1/workspaces/{id}/members' }).count()).toBe(2)
    expect(await audit.locator('tbody tr', { hasText: 'PUT /v1/workspaces/{id}/budget' }).count()).toBe(1)
  })

  test('a failed delivery shows its attempts; Resend, once the receiver answers 200, succeeds', async () => {
    // In the list, an enabled endpoint whose deliveries all failed reads as failing, not as healthy.
    await open('#/webhooks')
    const listed = page.locator('tbody tr', { has: page.locator(`a[href="#/webhooks/${world.webhookId}"]`) })
    await listed.waitFor()
    expect(await listed.locator('[data-health]').getAttribute('data-health')).toBe('failing')
    await open(`#/webhooks/${world.webhookId}`)
    await page.getByLabel('Delivery status').selectOption('failed')
    const row = page.locator('tbody tr', { hasText: 'webhook.test' }).first()
    expect(await row.textContent()).toContain('failed')
    await row.getByRole('link', { name: 'webhook.test' }).click()
    await page.getByRole('heading', { name: 'Attempts' }).waitFor()
    const attempts = page.locator('table', { has: page.locator('caption', { hasText: 'Attempts' }) }).locator('tbody tr')
    expect(await attempts.count()).toBe(2)
    expect(await attempts.first().textContent()).toContain('500')
    // The receiver's answer is shown as text, its markup included.
    expect(await attempts.first().locator('pre').textContent()).toBe('{"error":"receiver says no <b>500</b>"}')
    expect(await page.locator('main b').count()).toBe(0)
    await waitFor(async () => (await diagram().getAttribute('data-current-state')) === 'failed', { what: 'the failed state highlighted' })

    world.setReceiverStatus(200)
    const hits = world.receiverHits()
    await page.getByRole('button', { name: 'Resend' }).click()
    await waitFor(async () => (await diagram().getAttribute('data-current-state')) === 'succeeded', { timeoutMs: 15_000, what: 'the delivery to succeed on the page' })
    expect(await page.locator('.badge').filter({ hasText: 'succeeded' }).count()).toBeGreaterThan(0)
    expect(await attempts.count()).toBe(3)
    expect(await attempts.nth(2).textContent()).toContain('200')
    expect(await page.getByRole('button', { name: 'Resend' }).count()).toBe(0)
    expect(world.receiverHits()).toBe(hits + 1)
    // The diagram marks the state reached, and the states passed through.
    expect(await diagram().locator('svg g.current').count()).toBe(1)
    expect(await diagram().locator('svg g.current').textContent()).toContain('succeeded')
    expect(await diagram().locator('svg g.visited').count()).toBeGreaterThanOrEqual(2)
    const api = await world.call('GET', `/v1/webhooks/${world.webhookId}/deliveries/${world.failedDeliveryId}`)
    expect(api.body.data.status).toBe('succeeded')
  }, 45_000)

  test('Ping, Disable, Enable and Rotate secret act on the webhook', async () => {
    await open(`#/webhooks/${world.webhookId}`)
    const before = (await world.call('GET', `/v1/webhooks/${world.webhookId}/deliveries?limit=100`)).body.data.length
    await page.getByRole('button', { name: 'Ping' }).click()
    await page.getByText('A webhook.test delivery was queued.').waitFor()
    expect((await world.call('GET', `/v1/webhooks/${world.webhookId}/deliveries?limit=100`)).body.data.length).toBe(before + 1)

    await page.getByRole('button', { name: 'Disable' }).click()
    await page.getByRole('button', { name: 'Enable' }).waitFor()
    expect((await world.call('GET', `/v1/webhooks/${world.webhookId}`)).body.data.enabled).toBe(false)
    await page.getByRole('button', { name: 'Enable' }).click()
    await page.getByRole('button', { name: 'Disable' }).waitFor()
    expect((await world.call('GET', `/v1/webhooks/${world.webhookId}`)).body.data.enabled).toBe(true)

    page.once('dialog', (d) => d.accept())
    await page.getByRole('button', { name: 'Rotate secret' }).click()
    const secret = await page.locator('code.secret').textContent()
    expect(secret).toMatch(/^whsec_[A-Za-z0-9_-]{43}$/)
    const hook = (await world.call('GET', `/v1/webhooks/${world.webhookId}`)).body.data
    expect(hook.previous_secret_expires_at).not.toBeNull()
  }, 30_000)

  test('a run with a wait node: started from the console, its state live, then cancelled', async () => {
    await open(`#/workflows/${world.waitWorkflowId}`)
    await page.getByText('Start a run').click()
    await page.getByLabel('Inputs (JSON)').fill('{}')
    await page.getByRole('button', { name: 'Start run' }).click()
    await page.getByRole('heading', { name: /^Run run_/ }).waitFor()
    const runId = (await page.getByRole('heading', { name: /^Run run_/ }).textContent())!.replace('Run ', '')
    await waitFor(async () => (await diagram().getAttribute('data-current-state')) === 'running', { what: 'the running state highlighted' })
    expect(await diagram().locator('svg g.current').textContent()).toContain('running')
    // Live timeline from the event stream: the wait node started and is parked.
    await page.locator('.timeline li', { hasText: 'cool_down' }).waitFor()
    expect(await page.locator('.timeline li[data-event="node_end"]', { hasText: 'start' }).count()).toBe(1)
    // The graph shows the wait node parked.
    await waitFor(async () => (await page.locator('svg.run-graph g.gnode[data-node="cool_down"]').getAttribute('data-state')) === 'waiting', { what: 'the wait node drawn waiting' })

    await page.getByRole('button', { name: 'Cancel' }).click()
    await waitFor(async () => (await diagram().getAttribute('data-current-state')) === 'cancelled', { what: 'the highlight to move to cancelled' })
    expect(await diagram().locator('svg g.current').textContent()).toContain('cancelled')
    expect(await diagram().locator('svg g.visited').textContent()).toContain('running')
    expect(await page.getByRole('button', { name: 'Cancel' }).count()).toBe(0)
    expect((await world.call('GET', `/v1/runs/${runId}`)).body.status).toBe('cancelled')
  }, 45_000)

  test('a run waiting on a human_input node: the graph shows it waiting, the form built from its schema completes the run', async () => {
    const made = await world.call('POST', '/v1/workflows', {
      workspace_id: world.workspaceId,
      name: 'Approve a refund',
      graph: chain(
        { id: 'start', type: 'start', config: {} },
        {
          id: 'approve', type: 'human_input', name: 'Approval',
          config: { prompt: 'Approve the refund?', schema: { type: 'object', required: ['approved'], properties: { approved: { type: 'boolean' }, comment: { type: 'string' } } } },
        },
        { id: 'end', type: 'end', config: { outputs: { done: 'yes' } } },
      ),
    })
    expect(made.status).toBe(201)
    const started = await world.call('POST', `/v1/workflows/${made.body.data.id}/runs?async=true`, { inputs: {} })
    const runId = started.body.run_id as string
    await waitFor(async () => (await world.call('GET', `/v1/runs/${runId}`)).body.waiting?.node === 'approve', { what: 'the run to wait for input' })

    await open(`#/runs/${runId}`)
    const svg = page.locator('svg.run-graph[role="img"]')
    await svg.waitFor()
    expect(await svg.getAttribute('aria-label')).toContain('approve waiting')
    expect(await svg.locator('g.gnode').count()).toBe(3)
    expect(await svg.locator('g.edge').count()).toBe(2)
    const approve = svg.locator('g.gnode[data-node="approve"]')
    expect(await approve.getAttribute('data-state')).toBe('waiting')
    expect(await approve.getAttribute('class')).toContain('state-waiting')
    expect(await approve.textContent()).toContain('human_input')
    expect(await svg.locator('g.gnode[data-node="start"]').getAttribute('data-state')).toBe('completed')
    const states = page.locator('table', { has: page.locator('caption', { hasText: 'Node states' }) })
    expect(await states.locator('tbody tr', { hasText: 'approve' }).textContent()).toContain('waiting')
    expect(await states.locator('tbody tr', { hasText: 'end' }).last().textContent()).toContain('pending')
    // Deeper nodes sit further right: start → approve → end. A box is null while the page redraws the
    // graph (it follows the run), so the three are read again until all three are laid out.
    let xs: number[] = []
    await waitFor(async () => {
      const boxes = await Promise.all(['start', 'approve', 'end'].map((n) => svg.locator(`g.gnode[data-node="${n}"]`).boundingBox()))
      if (boxes.some((b) => b === null)) return false
      xs = boxes.map((b) => b!.x)
      return true
    }, { what: 'the run graph\'s three nodes to be laid out' })
    expect(xs[0]! < xs[1]! && xs[1]! < xs[2]!).toBe(true)

    // The form from the node's schema: a checkbox for the required boolean, a text field for the string.
    const form = page.getByRole('form', { name: 'Input for node approve' })
    expect(await page.locator('.waiting .prompt').textContent()).toBe('Approve the refund?')
    expect(await form.getByLabel('approved').getAttribute('type')).toBe('checkbox')
    expect(await form.locator('label', { hasText: 'approved' }).textContent()).toContain('required')
    expect(await form.getByLabel('comment').getAttribute('type')).toBe('text')
    await form.getByLabel('approved').check()
    await form.getByLabel('comment').fill('Fine by me')
    await form.getByRole('button', { name: 'Submit input' }).click()
    await waitFor(async () => (await svg.locator('g.gnode[data-node="end"]').getAttribute('data-state')) === 'completed', { what: 'the graph to show the end node done' })
    await waitFor(async () => (await page.locator('dl.facts .badge').first().textContent()) === 'completed', { what: 'the page to show the run completed' })
    expect(await page.locator('.waiting').count()).toBe(0)
    const run = (await world.call('GET', `/v1/runs/${runId}`)).body
    expect(run.status).toBe('completed')
    expect(run.waiting).toBeNull()
    const nodes = (await world.call('GET', `/v1/runs/${runId}/nodes`)).body.data
    expect(nodes.map((n: { state: string }) => n.state)).toEqual(['completed', 'completed', 'completed'])
    expect(problems).toEqual([])
  }, 45_000)

  test('the input form shows a 400 beside the field the API names, and a select for an enum', async () => {
    const made = await world.call('POST', '/v1/workflows', {
      workspace_id: world.workspaceId,
      name: 'Refund amount',
      graph: chain(
        { id: 'start', type: 'start', config: {} },
        {
          id: 'amount_in', type: 'human_input',
          config: { prompt: 'How much?', schema: { type: 'object', required: ['amount', 'reason'], properties: { amount: { type: 'integer', minimum: 1 }, reason: { type: 'string', enum: ['late', 'broken'] } } } },
        },
        { id: 'end', type: 'end', config: { outputs: { done: 'yes' } } },
      ),
    })
    expect(made.status).toBe(201)
    const runId = (await world.call('POST', `/v1/workflows/${made.body.data.id}/runs?async=true`, { inputs: {} })).body.run_id as string
    await waitFor(async () => (await world.call('GET', `/v1/runs/${runId}`)).body.waiting?.node === 'amount_in', { what: 'the run to wait for input' })
    await open(`#/runs/${runId}`)
    const form = page.getByRole('form', { name: 'Input for node amount_in' })
    await form.waitFor()
    expect(await form.getByLabel('reason').evaluate((el) => (el as { tagName: string }).tagName)).toBe('SELECT')
    await form.getByLabel('reason').selectOption('broken')
    await form.getByLabel('amount').fill('0')
    await form.getByRole('button', { name: 'Submit input' }).click()
    // data.amount fails minimum: the message sits in the amount field, the run still waits.
    const amountField = page.locator('.input-form .field', { has: page.getByLabel('amount') })
    await amountField.locator('.field-error', { hasText: 'data.amount' }).waitFor()
    expect((await world.call('GET', `/v1/runs/${runId}`)).body.waiting?.node).toBe('amount_in')
    await form.getByLabel('amount').fill('12')
    await form.getByRole('button', { name: 'Submit input' }).click()
    await waitFor(async () => (await world.call('GET', `/v1/runs/${runId}`)).body.status === 'completed', { what: 'the run to complete' })
    await waitFor(async () => (await page.locator('svg.run-graph g.gnode[data-node="end"]').getAttribute('data-state')) === 'completed', { what: 'the page to show the run done' })
    // The failed submission was the API's 400 (logged by the browser); nothing else went wrong.
    expect(problems.filter((p) => !p.includes('400'))).toEqual([])
    problems.length = 0
  }, 45_000)

  test('with no schema the form is one JSON text area; the graph follows the run to its end', async () => {
    const made = await world.call('POST', '/v1/workflows', {
      workspace_id: world.workspaceId,
      name: 'Any answer, then a pause',
      graph: chain(
        { id: 'start', type: 'start', config: {} },
        { id: 'ask', type: 'human_input', config: { prompt: 'Anything to add?' } },
        { id: 'pause', type: 'wait', config: { seconds: 1.5 } },
        { id: 'end', type: 'end', config: { outputs: { done: 'yes' } } },
      ),
    })
    expect(made.status).toBe(201)
    const runId = (await world.call('POST', `/v1/workflows/${made.body.data.id}/runs?async=true`, { inputs: {} })).body.run_id as string
    await waitFor(async () => (await world.call('GET', `/v1/runs/${runId}`)).body.waiting?.node === 'ask', { what: 'the run to wait for input' })
    await open(`#/runs/${runId}`)
    const form = page.getByRole('form', { name: 'Input for node ask' })
    await form.waitFor()
    expect(await form.locator('textarea').count()).toBe(1)
    expect(await form.locator('input').count()).toBe(0)
    await form.getByLabel('Data (JSON)').fill('not json')
    await form.getByRole('button', { name: 'Submit input' }).click()
    await form.locator('.field-error', { hasText: 'is not JSON' }).waitFor()
    expect((await world.call('GET', `/v1/runs/${runId}`)).body.waiting?.node).toBe('ask')
    await form.getByLabel('Data (JSON)').fill('{"note": "ship it"}')
    await form.getByRole('button', { name: 'Submit input' }).click()
    const state = (node: string) => page.locator(`svg.run-graph g.gnode[data-node="${node}"]`).getAttribute('data-state')
    await waitFor(async () => (await state('end')) === 'completed', { timeoutMs: 15_000, what: 'the graph to reach the end node' })
    expect(await state('pause')).toBe('completed')
    await page.locator('.timeline li[data-event="done"]').waitFor()
    expect((await world.call('GET', `/v1/runs/${runId}`)).body.outputs).toEqual({ done: 'yes' })
    expect(problems).toEqual([])
  }, 45_000)

  test('a child run links to its parent, and run lists mark child runs', async () => {
    const made = await world.call('POST', '/v1/workflows', {
      workspace_id: world.workspaceId,
      name: 'Greet through a child',
      graph: chain(
        { id: 'start', type: 'start', config: {} },
        { id: 'child', type: 'sub_workflow', config: { workflow_id: world.quickWorkflowId, inputs: { name: 'Kid' } } },
        { id: 'end', type: 'end', config: { outputs: { done: 'yes' } } },
      ),
    })
    expect(made.status).toBe(201)
    const parent = await world.call('POST', `/v1/workflows/${made.body.data.id}/runs`, { inputs: {} })
    expect(parent.body.status).toBe('completed')
    const children = (await world.call('GET', `/v1/workflows/${world.quickWorkflowId}/runs?limit=100`)).body.data.filter((r: { parent_run_id: string | null }) => r.parent_run_id === parent.body.run_id)
    expect(children.length).toBe(1)
    const childId = children[0].run_id as string

    await open(`#/workflows/${world.quickWorkflowId}`)
    const row = page.locator('tbody tr', { has: page.locator(`a[href="#/runs/${childId}"]`) })
    await row.waitFor()
    expect(await row.locator('.child-run').count()).toBe(1)
    expect(await page.locator('tbody tr', { has: page.locator(`a[href="#/runs/${world.completedRunId}"]`) }).locator('.child-run').count()).toBe(0)

    await open(`#/runs/${childId}`)
    const up = page.getByRole('link', { name: parent.body.run_id })
    await up.waitFor()
    expect(await page.locator('dl.facts dt', { hasText: 'Parent run' }).count()).toBe(1)
    await up.click()
    await page.getByRole('heading', { name: `Run ${parent.body.run_id}` }).waitFor()
    await waitFor(async () => (await page.locator('svg.run-graph g.gnode[data-node="child"]').getAttribute('data-state')) === 'completed', { what: 'the parent graph drawn' })
    expect(await page.locator('dl.facts dt', { hasText: 'Parent run' }).count()).toBe(0)
  }, 45_000)

  test('the workflow page lists its triggers: a schedule with its next run, a hook with its URL', async () => {
    const schedule = await world.call('POST', `/v1/workflows/${world.quickWorkflowId}/triggers`, { type: 'schedule', cron: '0 9 * * 1-5', timezone: 'Europe/Paris' })
    expect(schedule.status).toBe(201)
    const hook = await world.call('POST', `/v1/workflows/${world.quickWorkflowId}/triggers`, { type: 'webhook', inputs: {} })
    expect(hook.status).toBe(201)
    expect((await world.call('PATCH', `/v1/triggers/${hook.body.data.id}`, { enabled: false })).status).toBe(200)
    try {
      await open(`#/workflows/${world.quickWorkflowId}`)
      const rows = page.locator('table', { has: page.locator('caption', { hasText: 'Triggers of the workflow' }) }).locator('tbody tr')
      await rows.first().waitFor()
      expect(await rows.count()).toBe(2)
      const text = (await rows.allTextContents()).join('\n')
      expect(text).toContain('0 9 * * 1-5 (Europe/Paris)')
      expect(text).toContain('enabled')
      expect(text).toContain('disabled')
      expect(await page.locator('section.triggers code', { hasText: hook.body.data.url }).count()).toBe(1)
      // Rotate URL, confirmed: the page shows the new URL, the one the API now answers.
      page.once('dialog', (d) => void d.accept())
      await page.locator('section.triggers button', { hasText: 'Rotate URL' }).click()
      await waitFor(async () => (await page.locator('section.triggers code').first().textContent()) !== hook.body.data.url, { what: 'the new hook URL shown' })
      const rotated = (await world.call('GET', `/v1/triggers/${hook.body.data.id}`)).body.data.url
      expect(rotated).not.toBe(hook.body.data.url)
      expect(await page.locator('section.triggers code', { hasText: rotated }).count()).toBe(1)
    } finally {
      await world.call('DELETE', `/v1/triggers/${schedule.body.data.id}`)
      await world.call('DELETE', `/v1/triggers/${hook.body.data.id}`)
    }
  }, 30_000)

  test('recent runs of every workflow on one page, filtered by status', async () => {
    await open('#/runs')
    const recent = page.locator('table', { has: page.locator('caption', { hasText: 'Recent runs across workflows' }) })
    await recent.waitFor()
    expect(await recent.textContent()).toContain(world.completedRunId)
    await page.getByLabel('Status').selectOption('failed')
    await page.getByRole('button', { name: 'Filter' }).click()
    await page.getByText('Recent runs across workflows, newest first: Nothing yet.').waitFor()
    await page.getByLabel('Status').selectOption('completed')
    await page.getByRole('button', { name: 'Filter' }).click()
    await waitFor(async () => (await recent.textContent() ?? '').includes(world.completedRunId), { what: 'the completed run listed' })
  }, 30_000)

  test('runs are filtered by status and time', async () => {
    await open(`#/workflows/${world.quickWorkflowId}`)
    const runs = page.locator('table', { has: page.locator('caption', { hasText: 'Runs' }) })
    await runs.waitFor()
    expect(await runs.textContent()).toContain(world.completedRunId)
    await page.getByLabel('Status').selectOption('failed')
    await page.getByRole('button', { name: 'Filter' }).click()
    await page.getByText('Runs, newest first: Nothing yet.').waitFor()
    await page.getByLabel('Status').selectOption('completed')
    await page.getByLabel('Started after').fill('2000-01-01T00:00')
    await page.getByRole('button', { name: 'Filter' }).click()
    await runs.waitFor()
    expect(await runs.textContent()).toContain(world.completedRunId)
    await page.getByLabel('Started after').fill('2999-01-01T00:00')
    await page.getByRole('button', { name: 'Filter' }).click()
    await page.getByText('Runs, newest first: Nothing yet.').waitFor()
    // A finished run shows its stored timeline.
    await open(`#/runs/${world.completedRunId}`)
    await page.locator('.timeline li[data-event="node_end"]', { hasText: 'greet' }).waitFor()
    await waitFor(async () => (await diagram().getAttribute('data-current-state')) === 'completed', { what: 'the completed state highlighted' })
  }, 30_000)

  test('a document name full of markup renders as text, in the list, the search results and its page', async () => {
    await open(`#/knowledge-bases/${world.kbId}`)
    const link = page.getByRole('link', { name: XSS_NAME })
    await link.waitFor()
    expect(await link.textContent()).toBe(XSS_NAME)
    expect(await page.locator('main img').count()).toBe(0)

    await page.getByLabel('Search query').fill('harmless body markup')
    await page.getByRole('button', { name: 'Search', exact: true }).click()
    const hit = page.locator('.results li', { hasText: 'harmless' }).first()
    await hit.waitFor()
    expect(await hit.locator('.content').textContent()).toContain('<script>window.__xss=2</script>')
    expect(await hit.locator('.score').textContent()).toMatch(/^\d\.\d{3}$/)

    await link.click()
    await page.getByRole('heading', { name: 'Metadata' }).waitFor()
    expect(await page.locator('dl.facts dd').first().textContent()).toBe(XSS_NAME)
    expect(await page.locator('main img, main script').count()).toBe(0)
    expect(await page.evaluate<number | undefined>('window.__xss')).toBeUndefined()
  }, 30_000)

  test('Reparse sends a ready document through the machine again', async () => {
    await open(`#/knowledge-bases/${world.kbId}/documents/${world.documentId}`)
    await waitFor(async () => (await diagram().getAttribute('data-current-state')) === 'ready', { what: 'the ready state highlighted' })
    expect(await diagram().getAttribute('data-path')).toBe('uploading parsing chunking embedding ready')
    await page.getByRole('button', { name: 'Reparse' }).click()
    await page.getByText('Reparse started.').waitFor()
    await waitFor(async () => (await world.call('GET', `/v1/documents/${world.documentId}`)).body.status === 'ready', { timeoutMs: 20_000, what: 'the reparsed document to be ready' })
    await waitFor(async () => (await diagram().getAttribute('data-current-state')) === 'ready', { what: 'the page to show it ready' })
  }, 30_000)

  test('the machines page draws every machine of /v1/machines', async () => {
    await open('#/machines')
    const names = (await world.call('GET', '/v1/machines')).body.data.map((m: { name: string }) => m.name)
    expect(names.length).toBeGreaterThanOrEqual(3)
    await waitFor(async () => (await page.locator('figure.diagram svg').count()) === names.length, { what: 'every diagram drawn' })
    for (const name of names) expect(await page.locator(`figure[data-machine="${name}"] svg`).count()).toBe(1)
    // Every label readable as drawn: no transition label over another, none over a state.
    for (const name of names) await expectNoOverlaps(`figure[data-machine="${name}"] svg`, name)
  }, 30_000)

  test('the diagram of a delivery, a document and a run, highlighted on their pages, has no label over another or over a state', async () => {
    // The highlight styles the current state (bold, thicker border), which changes the drawing's sizes.
    const pages: [string, string][] = [
      ['webhook-delivery', `#/webhooks/${world.webhookId}/deliveries/${world.failedDeliveryId}`],
      ['document', `#/knowledge-bases/${world.kbId}/documents/${world.documentId}`],
      ['workflow-run', `#/runs/${world.completedRunId}`],
    ]
    for (const [machine, hash] of pages) {
      await open(hash)
      // The figure is marked once drawn; the previous page's figure names another machine.
      await waitFor(async () => (await diagram().getAttribute('data-machine')) === machine && (await diagram().getAttribute('data-current-state')) !== null, { what: `the ${machine} diagram drawn` })
      expect(await diagram().locator('svg').count()).toBe(1)
      await expectNoOverlaps('figure.diagram svg', machine)
    }
  }, 30_000)

  test('the agent chat panel streams the answer with its tool calls', async () => {
    await open(`#/agents/${world.agentId}`)
    await page.getByLabel('Message').fill('How long do refunds take?')
    await page.getByLabel('Message').press('Enter')
    await page.locator('.turn-meta', { hasText: 'credits' }).waitFor()
    const turn = page.locator('.turn.assistant').last()
    expect(await turn.locator('.answer').textContent()).toContain('5 business days')
    expect(await turn.locator('summary', { hasText: 'Tool call: knowledge_search' }).count()).toBe(1)
    const conversation = await page.locator('.conversation').textContent()
    expect(conversation).toMatch(/^conv_/)
    // The second turn continues the same conversation.
    await page.getByLabel('Message').fill('And shipping?')
    await page.getByRole('button', { name: 'Send' }).click()
    await waitFor(async () => (await page.locator('.turn-meta', { hasText: 'credits' }).count()) === 2, { what: 'the second answer' })
    const stored = await world.call('GET', `/v1/conversations/${conversation}`)
    expect(stored.body.data.messages.length).toBe(4)
  }, 30_000)

  test('the Content-Security-Policy refuses inline script; nothing on the pages broke it', async () => {
    const res = await fetch(`${world.service.url}/console`)
    const csp = res.headers.get('content-security-policy')!
    expect(csp).toContain("script-src 'self'")
    expect(csp).toContain("default-src 'none'")
    expect(csp).not.toMatch(/script-src[^;]*unsafe-inline/)
    await open('#/machines')
    // Run in the page (a string: the test's own TypeScript has no DOM types).
    const blocked = await page.evaluate<boolean>(`new Promise((resolve) => {
      document.addEventListener('securitypolicyviolation', () => resolve(true), { once: true })
      const s = document.createElement('script')
      s.textContent = 'window.__inline = 1'
      document.head.append(s)
      // The violation event comes at once when the policy blocks the script; the second is only a bound.
      setTimeout(() => resolve(false), 1000)
    })`)
    expect(blocked).toBe(true)
    expect(await page.evaluate<number | undefined>('window.__inline')).toBeUndefined()
    expect(problems.filter((p) => !/Content Security Policy/.test(p))).toEqual([])
  }, 20_000)

  test('signing out forgets the key', async () => {
    await open('#/workspaces')
    await page.getByRole('button', { name: 'Sign out' }).click()
    await page.getByLabel('API key').waitFor()
    expect(await page.evaluate(() => JSON.stringify(sessionStorage))).not.toContain(CONSOLE_KEY)
  })
})
