import type { Server } from 'bun'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { waitFor } from './harness'
import { apiCall, EMBEDDED, spawnService, type ServiceProcess } from './process'
import { chain } from './runs'

/**
 * The console's end-to-end set-up: the service started as the README starts it (`bun run
 * src/main.ts`, embedded default, a DATA_DIR of its own), a webhook receiver on loopback whose answer
 * the test switches, and data made through the public API.
 */
export const CONSOLE_KEY = 'ap_console0123456789ABCDEFGHIJKLMNOPQRSTUVW'
/** A document name that would run script if the console rendered it as HTML. */
export const XSS_NAME = '<img src=x onerror="window.__xss=1">report.txt'

export interface ConsoleWorld {
  service: ServiceProcess
  receiver: Server<undefined>
  /** What the receiver answers next. */
  setReceiverStatus(status: number): void
  receiverHits(): number
  workspaceId: string
  webhookId: string
  failedDeliveryId: string
  waitWorkflowId: string
  quickWorkflowId: string
  completedRunId: string
  kbId: string
  documentId: string
  xssDocumentId: string
  agentId: string
  call(method: string, path: string, body?: unknown): Promise<{ status: number; headers: Headers; body: any }>
  close(): Promise<void>
}

export async function startConsoleWorld(): Promise<ConsoleWorld> {
  const tmp = mkdtempSync(join(tmpdir(), 'ap-console-'))
  let status = 500
  let hits = 0
  const receiver = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    fetch: async (req) => {
      await req.text()
      hits++
      return new Response(status >= 400 ? '{"error":"receiver says no <b>500</b>"}' : '{"ok":true}', { status, headers: { 'content-type': 'application/json' } })
    },
  })
  const service = spawnService({
    env: {
      ...EMBEDDED,
      DATA_DIR: join(tmp, 'data'),
      BOOTSTRAP_API_KEY: CONSOLE_KEY,
      WEBHOOK_ALLOW_HTTP: 'true',
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
      // One retry, soon: a receiver answering 500 fails the delivery within a second.
      WEBHOOK_RETRY_DELAYS_MS: '300',
      LOG_LEVEL: 'warn',
    },
  })
  const close = async () => {
    await service.stop('SIGKILL')
    receiver.stop(true)
    rmSync(tmp, { recursive: true, force: true })
  }
  try {
    await service.ready(30_000)
    const call = (method: string, path: string, body?: unknown) => apiCall(service, CONSOLE_KEY, method, path, body)
    const must = async (method: string, path: string, body?: unknown) => {
      const res = await call(method, path, body)
      if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(res.body)}`)
      return res.body
    }
    const ws = (await must('POST', '/v1/workspaces', { name: 'Acme support', description: 'The console end-to-end workspace' })).data.id as string
    await must('POST', `/v1/workspaces/${ws}/members`, { user_id: 'dana', role: 'developer' })
    await must('POST', `/v1/workspaces/${ws}/members`, { user_id: 'lee', role: 'readonly' })
    await must('PUT', `/v1/workspaces/${ws}/budget`, { credits: 1000, period: 'month', thresholds: [50, 80, 100], hard_limit: false })

    const hook = (await must('POST', '/v1/webhooks', {
      workspace_id: ws,
      url: `http://127.0.0.1:${receiver.port}/hooks`,
      events: ['webhook.test', 'workflow.run.completed', 'workflow.run.cancelled'],
      secret: 'whsec_console-e2e-secret-0123456789',
    })).data.id as string
    const ping = await must('POST', `/v1/webhooks/${hook}/ping`)
    const failedDeliveryId = ping.data.id as string

    const waitWorkflowId = (await must('POST', '/v1/workflows', {
      workspace_id: ws,
      name: 'Cool down then answer',
      graph: chain(
        { id: 'start', type: 'start', config: {} },
        { id: 'cool_down', type: 'wait', config: { seconds: 300 } },
        { id: 'end', type: 'end', config: { outputs: { done: 'yes' } } },
      ),
    })).data.id as string
    const quickWorkflowId = (await must('POST', '/v1/workflows', {
      workspace_id: ws,
      name: 'Greeting',
      graph: chain(
        { id: 'start', type: 'start', config: { inputs: [{ name: 'name', type: 'string', default: 'world' }] } } as never,
        { id: 'greet', type: 'template', config: { template: 'Hello {{inputs.name}}' } } as never,
        { id: 'end', type: 'end', config: { outputs: { text: '{{nodes.greet.output.text}}' } } },
      ),
    })).data.id as string
    const completed = await must('POST', `/v1/workflows/${quickWorkflowId}/runs`, { inputs: { name: 'Ada' }, user_id: 'dana' })

    const kbId = (await must('POST', '/v1/knowledge-bases', { workspace_id: ws, name: 'Help centre' })).data.id as string
    const doc = await must('POST', `/v1/knowledge-bases/${kbId}/documents`, {
      type: 'text',
      name: 'refunds.md',
      content: '# Refunds\n\nRefunds are paid back within 5 business days to the original card.\n\n# Shipping\n\nParcels ship within 2 days from our warehouse.',
      metadata: { lang: 'en' },
    })
    const xss = await must('POST', `/v1/knowledge-bases/${kbId}/documents`, { type: 'text', name: XSS_NAME, content: 'A harmless body <script>window.__xss=2</script> with markup in it.' })
    const agentId = (await must('POST', '/v1/agents', {
      workspace_id: ws,
      name: 'Support assistant',
      type: 'agent',
      model: 'local-chat',
      instructions: 'Answer from the help centre.',
      knowledge_base_ids: [kbId],
    })).data.id as string

    const world: ConsoleWorld = {
      service,
      receiver,
      setReceiverStatus: (s) => (status = s),
      receiverHits: () => hits,
      workspaceId: ws,
      webhookId: hook,
      failedDeliveryId,
      waitWorkflowId,
      quickWorkflowId,
      completedRunId: completed.run_id as string,
      kbId,
      documentId: doc.document_id as string,
      xssDocumentId: xss.document_id as string,
      agentId,
      call,
      close,
    }
    // The ping's two attempts (500, then 500 after 300 ms) fail it; the documents get ready.
    await waitFor(async () => (await call('GET', `/v1/webhooks/${hook}/deliveries/${failedDeliveryId}`)).body?.data?.status === 'failed', { timeoutMs: 20_000, what: 'the ping delivery to fail' })
    for (const d of [world.documentId, world.xssDocumentId]) {
      await waitFor(async () => (await call('GET', `/v1/documents/${d}`)).body?.status === 'ready', { timeoutMs: 30_000, what: `document ${d} to be ready` })
    }
    return world
  } catch (err) {
    await close()
    throw new Error(`${(err as Error).message}\n--- service output ---\n${service.output().slice(-4000)}`)
  }
}

/** Debian's Chromium, headless, as the issue asks; null when it is not installed. */
export const CHROMIUM = '/usr/bin/chromium'
export const CHROMIUM_ARGS = ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run']
