/**
 * `bun run bench:agents`: an agent's chat turn beside its ceiling, the same upstream called
 * directly, in the same run (targets in bench/README.md). Three processes: this client, the real service
 * (`bun run src/main.ts`, embedded default, LOG_LEVEL=warn) and the fake OpenAI-compatible provider
 * (bench/fake-provider-server.ts) answering at once (20 one-token chunks, no delay).
 *
 *   (a) a synchronous turn (POST /v1/agents/{id}/chat) in a conversation holding 20 messages, against
 *       the streamed upstream request the service makes for it (system + 20 history messages + the
 *       new one), sent directly and read to its end; one at a time, alternating   target p50 + < 10 ms
 *   (b) a streamed turn: time to the first `message` event, against the time to the first content
 *       chunk of the same upstream request sent directly; alternating            target + < 5 ms
 *
 * Each measured turn uses a conversation of its own, made beforehand by 10 turns, so every one is
 * answered with the same 20-message history; the model is priced, so each turn also writes the
 * ledger. Environment: AGENTS_TURNS (300 per path), AGENTS_WARMUP (100 per path).
 */
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { EMBEDDED_ENV, freePort, log, machine, percentile, randomBase62, removeDir, sourceVersion, startFakeProvider, startServer, tempDir, verdict, whenInterrupted, writeResults, type Row } from './lib'

const TURNS = Number(process.env.AGENTS_TURNS ?? 300)
const WARMUP = Number(process.env.AGENTS_WARMUP ?? 100)
const TOKENS = 20
const work = tempDir('bench-agents-')
whenInterrupted(() => removeDir(work))
const ROOT_KEY = `ap_bench${randomBase62(36)}`
const INSTRUCTIONS = 'You are a terse assistant.'

/** Reads an SSE answer to its end; answers ms to the first matching block and to the end. */
async function readStream(res: Response, t0: number, isFirst: (block: string) => boolean) {
  if (res.status !== 200 || !res.body) throw new Error(`answered ${res.status}: ${await res.text()}`)
  const reader = res.body.getReader()
  const decoder = new TextDecoder()
  let buf = ''
  let first = NaN
  for (;;) {
    const r = await reader.read()
    if (r.done) break
    buf += decoder.decode(r.value, { stream: true })
    if (Number.isNaN(first)) {
      for (const block of buf.split('\n\n')) {
        if (block.startsWith('event: error')) throw new Error(block)
        if (isFirst(block)) {
          first = performance.now() - t0
          break
        }
      }
    }
  }
  if (buf.includes('event: error')) throw new Error(buf.slice(buf.indexOf('event: error'), 400))
  return { first, end: performance.now() - t0 }
}

const round3 = (n: number) => Math.round(n * 1000) / 1000
const summary = (xs: number[]) => {
  const v = [...xs].sort((a, b) => a - b)
  return { n: v.length, p50: round3(percentile(v, 50)), p99: round3(percentile(v, 99)) }
}

async function main() {
  const { commit, src_dirty } = sourceVersion()
  log(`bench:agents at ${commit}${src_dirty ? ' (src dirty)' : ''}; ${TURNS} turns per path`)
  const fake = await startFakeProvider({ 'bench-agent': { tokens: TOKENS, delayMs: 0 } })
  const modelsFile = join(work, 'models.json')
  writeFileSync(modelsFile, JSON.stringify({
    providers: [{ id: 'fake', kind: 'openai', base_url: `${fake.url}/v1`, api_key: 'sk-bench', timeout_ms: 60_000 }],
    models: [{ id: 'bench-agent', type: 'llm', vendor: 'bench', context_length: 128_000, routes: [{ provider: 'fake', model: 'bench-agent' }], pricing: { input_per_1k: 0.5, output_per_1k: 1.5 } }],
  }))
  const port = freePort()
  const service = await startServer({
    cmd: ['bun', 'run', 'src/main.ts'],
    env: { PORT: String(port), HOST: '127.0.0.1', DATA_DIR: join(work, 'data'), BOOTSTRAP_API_KEY: ROOT_KEY, MODELS_FILE: modelsFile, RATE_LIMIT_PER_SECOND: '1000000000', RATE_LIMIT_BURST: '1000000000', LOG_LEVEL: 'warn', ...EMBEDDED_ENV },
    port, logFile: join(work, 'service.log'), readyPath: '/healthz',
  })
  const url = `http://127.0.0.1:${port}`
  const auth = { authorization: `Bearer ${ROOT_KEY}`, 'content-type': 'application/json' }
  const post = async (path: string, body: unknown) => {
    const res = await fetch(url + path, { method: 'POST', headers: auth, body: JSON.stringify(body) })
    const json = (await res.json()) as any
    if (res.status >= 300) throw new Error(`${path}: ${res.status} ${JSON.stringify(json)}`)
    return json
  }
  const ws = (await post('/v1/workspaces', { name: 'bench agents' })).data.id
  const agent = (await post('/v1/agents', { workspace_id: ws, name: 'bench', type: 'agent', model: 'bench-agent', instructions: INSTRUCTIONS })).data.id

  // Conversations of 20 messages each (10 turns), one per measured service turn.
  const total = 2 * (TURNS + WARMUP)
  log(`seeding ${total} conversations of 20 messages`)
  const conversations: string[] = []
  const seed = async () => {
    let conv: string | undefined
    for (let turn = 0; turn < 10; turn++) {
      const r = await post(`/v1/agents/${agent}/chat`, { message: `Question ${turn}: what comes next in the sequence?`, user_id: 'bench', ...(conv ? { conversation_id: conv } : {}) })
      conv = r.conversation_id
    }
    conversations.push(conv!)
  }
  for (let i = 0; i < total; i += 8) await Promise.all(Array.from({ length: Math.min(8, total - i) }, seed))

  // The upstream body the service sends for such a turn (its history as the fake provider answered it).
  const answer = Array.from({ length: TOKENS }, (_, i) => ` t${i}`).join('')
  const messages = [{ role: 'system', content: INSTRUCTIONS }]
  for (let turn = 0; turn < 10; turn++) messages.push({ role: 'user', content: `Question ${turn}: what comes next in the sequence?` }, { role: 'assistant', content: answer })
  messages.push({ role: 'user', content: 'And after that?' })
  const directBody = JSON.stringify({ model: 'bench-agent', messages, stream: true, stream_options: { include_usage: true }, user: 'bench' })
  const direct = async () => {
    const t0 = performance.now()
    const res = await fetch(`${fake.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: 'Bearer sk-bench' }, body: directBody })
    return readStream(res, t0, (b) => b.includes('"content":" t'))
  }
  let next = 0
  const sync = async () => {
    const t0 = performance.now()
    const res = await fetch(`${url}/v1/agents/${agent}/chat`, { method: 'POST', headers: auth, body: JSON.stringify({ message: 'And after that?', user_id: 'bench', conversation_id: conversations[next++] }) })
    const body = (await res.json()) as any
    if (res.status !== 200 || body.message.content !== answer || !(body.usage.credits > 0)) throw new Error(`chat answered ${res.status}: ${JSON.stringify(body).slice(0, 300)}`)
    return performance.now() - t0
  }
  const streamed = async () => {
    const t0 = performance.now()
    const res = await fetch(`${url}/v1/agents/${agent}/chat`, { method: 'POST', headers: { ...auth, accept: 'text/event-stream' }, body: JSON.stringify({ message: 'And after that?', user_id: 'bench', conversation_id: conversations[next++], stream: true }) })
    return readStream(res, t0, (b) => b.startsWith('event: message'))
  }

  const a = { service: [] as number[], direct: [] as number[] }
  const b = { service: [] as number[], direct: [] as number[] }
  for (let i = 0; i < WARMUP + TURNS; i++) {
    const keep = i >= WARMUP
    // Alternating order (A B, B A ...), so neither path always runs second.
    const pair = i % 2 ? [sync, direct] as const : [direct, sync] as const
    for (const f of pair) {
      if (f === sync) {
        const ms = await sync()
        if (keep) a.service.push(ms)
      } else {
        const r = await direct()
        if (keep) a.direct.push(r.end)
      }
    }
  }
  for (let i = 0; i < WARMUP + TURNS; i++) {
    const keep = i >= WARMUP
    const s = i % 2 ? [await streamed(), await direct()] : [await direct(), await streamed()].reverse()
    if (keep) {
      b.service.push(s[0]!.first)
      b.direct.push(s[1]!.first)
    }
  }
  await service.stop()
  fake.stop()

  const as = summary(a.service)
  const ad = summary(a.direct)
  const bs = summary(b.service)
  const bd = summary(b.direct)
  const results = {
    commit, src_dirty, machine: machine(), at: new Date().toISOString(),
    sync_turn: { service: as, direct: ad, overhead_p50_ms: round3(as.p50 - ad.p50), overhead_p99_ms: round3(as.p99 - ad.p99) },
    first_message_event: { service: bs, direct_first_chunk: bd, overhead_p50_ms: round3(bs.p50 - bd.p50), overhead_p99_ms: round3(bs.p99 - bd.p99) },
    pass: { sync_overhead: as.p50 - ad.p50 < 10, first_event: bs.p50 - bd.p50 < 5 },
  }
  log(`(a) sync turn: service p50 ${as.p50} ms p99 ${as.p99}; direct p50 ${ad.p50} p99 ${ad.p99}; overhead p50 ${results.sync_turn.overhead_p50_ms} ms`)
  log(`(b) first message event: service p50 ${bs.p50} ms p99 ${bs.p99}; direct first chunk p50 ${bd.p50} p99 ${bd.p99}; overhead p50 ${results.first_message_event.overhead_p50_ms} ms`)
  process.stdout.write(`${JSON.stringify(results, null, 2)}\n`)
  // The summary table's rows: one per target of the header comment, with the same pass conditions.
  const ms = (n: number) => `${n.toFixed(1)} ms`
  const diff = (n: number) => `${n >= 0 ? '+' : ''}${ms(n)}`
  const rows: Row[] = [
    { figure: '(a) synchronous turn, 20-message history, p50', measured: `p50 ${ms(as.p50)}`, ceiling: `provider direct p50 ${ms(ad.p50)} (same upstream request, to its end)`, share: diff(results.sync_turn.overhead_p50_ms), target: '< +10 ms', result: verdict(results.pass.sync_overhead) },
    { figure: '(a) synchronous turn, 20-message history, p99', measured: `p99 ${ms(as.p99)}`, ceiling: `provider direct p99 ${ms(ad.p99)}`, share: diff(results.sync_turn.overhead_p99_ms), target: '', result: 'info' },
    { figure: '(b) streamed turn, first message event, p50', measured: `p50 ${ms(bs.p50)}`, ceiling: `provider direct first chunk p50 ${ms(bd.p50)}`, share: diff(results.first_message_event.overhead_p50_ms), target: '< +5 ms', result: verdict(results.pass.first_event) },
    { figure: '(b) streamed turn, first message event, p99', measured: `p99 ${ms(bs.p99)}`, ceiling: `provider direct first chunk p99 ${ms(bd.p99)}`, share: diff(results.first_message_event.overhead_p99_ms), target: '', result: 'info' },
  ]
  writeResults('agents', results, rows)
}

try {
  await main()
} finally {
  removeDir(work)
}
