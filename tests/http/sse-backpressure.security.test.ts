import { afterAll, beforeAll, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import type { Server } from 'bun'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { connect, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { keyFor, startHarness, waitFor, workspaceOf, type Harness } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * An SSE client that never reads (docs/hardening.md): the service must not buffer an endless
 * stream for it. A loopback OpenAI-compatible provider streams chat chunks for as long as it is
 * asked for more (a pull-based body: Bun asks only when its socket can take them) and counts what
 * it produced; the client sends its request over a raw socket and then stops reading. What the
 * provider produced must stop growing (the service's answer stream pulls only as fast as the client
 * reads, and the upstream read follows it), other requests are still answered, and when the client
 * leaves, the upstream request is cancelled.
 */
let h: Harness
let provider: Server<undefined>
let service: Server<undefined>
let tmp: string
let key: string
let produced = 0
let upstreamCancelled = false

const PIECE = 'x'.repeat(1024)

beforeAll(async () => {
  provider = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    idleTimeout: 0,
    async fetch(req) {
      await req.text()
      const enc = new TextEncoder()
      let n = 0
      const body = new ReadableStream<Uint8Array>({
        pull(controller) {
          const chunk = { id: 'chatcmpl-endless', object: 'chat.completion.chunk', created: 1, model: 'up-endless', choices: [{ index: 0, delta: n++ === 0 ? { role: 'assistant', content: PIECE } : { content: PIECE }, finish_reason: null }] }
          const bytes = enc.encode(`data: ${JSON.stringify(chunk)}\n\n`)
          produced += bytes.length
          controller.enqueue(bytes)
        },
        cancel() {
          upstreamCancelled = true
        },
      }, { highWaterMark: 0 })
      return new Response(body, { headers: { 'content-type': 'text/event-stream' } })
    },
  })
  tmp = mkdtempSync(join(tmpdir(), 'ap-sse-backpressure-'))
  const file = join(tmp, 'models.json')
  writeFileSync(file, JSON.stringify({
    providers: [{ id: 'endless', kind: 'openai', base_url: `http://127.0.0.1:${provider.port}/v1`, api_key: 'sk-fake', timeout_ms: 600_000 }],
    models: [{ id: 'endless-chat', type: 'llm', vendor: 'endless', context_length: 8_000, routes: [{ provider: 'endless', model: 'up-endless' }] }],
  }))
  h = await startHarness({ MODELS_FILE: file, RATE_LIMIT_BURST: '100000', RATE_LIMIT_PER_SECOND: '100000' })
  key = await keyFor(h, 'sse-reader')
  await workspaceOf(h, key, 'SSE')
  service = Bun.serve({ hostname: '127.0.0.1', port: 0, idleTimeout: 0, fetch: (r) => h.app.handle(r) })
})

afterAll(async () => {
  service?.stop(true)
  await h?.close()
  provider?.stop(true)
  rmSync(tmp, { recursive: true, force: true })
})

/** Waits until `produced` has not moved for `quietMs`; fails if it passes `limit` first. */
async function stalls(limit: number, quietMs: number): Promise<number> {
  let last = -1
  let since = performance.now()
  return waitFor<number | false>(() => {
    if (produced > limit) throw new Error(`the provider was read for ${produced} bytes: nothing held the stream back`)
    if (produced !== last) {
      last = produced
      since = performance.now()
      return false
    }
    return produced > 0 && performance.now() - since >= quietMs ? produced : false
  }, { timeoutMs: 20_000, intervalMs: 50, what: 'the upstream stream to stall' }).then(Number)
}

test('a streaming client that never reads holds the upstream back, and its leaving cancels it', async () => {
  const body = JSON.stringify({ model: 'endless-chat', stream: true, max_tokens: 1_000_000, messages: [{ role: 'user', content: 'talk forever' }] })
  const socket: Socket = connect({ host: '127.0.0.1', port: service.port! })
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject))
  socket.pause()
  socket.write(
    `POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${key}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  )
  try {
    // Loopback socket buffers hold a few MB; an unbounded buffer would pass 64 MB in seconds.
    const held = await stalls(64 * 1024 * 1024, 1_500)
    expect(held).toBeGreaterThan(0)
    expect(upstreamCancelled).toBe(false)
    // The service answers others meanwhile.
    const other = await fetch(`http://127.0.0.1:${service.port}/healthz`)
    expect(other.status).toBe(200)
    // Still held half a second later: the subject is that nothing more is produced, so this waits a
    // fixed time on purpose (there is no condition to wait for).
    await Bun.sleep(500)
    expect(produced - held).toBeLessThan(256 * 1024)
  } finally {
    socket.destroy()
  }
  await waitFor(() => upstreamCancelled, { timeoutMs: 10_000, what: 'the upstream request to be cancelled' })
}, 60_000)
