import { decode } from 'gpt-tokenizer/encoding/o200k_base'
import { embedText } from '../src/domain/models/local/embed'
import { LocalProvider } from '../src/domain/models/providers/local'
import { countTokens, tokenize } from '../src/lib/tokens'

/**
 * `bun run bench/local-embed.ts`: local-embed throughput on one core (JavaScript runs on one thread;
 * CPU time is printed beside wall time so a helper thread would show). Texts: LOCAL_EMBED_TEXTS
 * (default 4 000) distinct English-like texts of exactly 512 o200k tokens (~2 300 characters), from a
 * seeded generator, so every run embeds the same texts. Three rounds per subject after a warm-up;
 * the median round is reported. One JSON object on stdout.
 *   - embed: embedText alone (the hashing embedder);
 *   - count: countTokens alone (what usage costs);
 *   - provider: LocalProvider.embed in batches of 256, as the gateway calls it (embedding, token
 *     count, the event-loop yield every 32 texts).
 */
const N = Number(process.env.LOCAL_EMBED_TEXTS ?? 4000)
const TOKENS = 512

const VOCABULARY = (
  'the of and to in a is that for it as was with be by on not he this are or his from at which but have an they ' +
  'you were her she there been one all we their has would when if so no what up out more can who about them some ' +
  'system data model request server client network latency throughput memory process thread queue message event ' +
  'workflow agent document knowledge search index vector embedding token language question answer result error ' +
  'record database transaction replica partition cluster storage cache policy budget credit invoice customer ' +
  'engineer measure benchmark performance reliability deployment container kubernetes configuration secret ' +
  'webhook delivery retry backoff timeout failure recovery snapshot migration schema column table query ' +
  'river mountain forest weather garden kitchen recipe flour butter oven bread coffee morning evening winter ' +
  'summer children school teacher library history museum painting music concert guitar piano orchestra ' +
  'football match season player coach stadium election parliament minister policy economy inflation market ' +
  'hospital doctor patient medicine vaccine research laboratory experiment molecule protein energy climate ' +
  'carefully quickly rarely often usually important different possible available necessary significant ' +
  'understand consider describe provide include continue develop establish require suggest remember believe'
).split(' ')

function mulberry32(seed: number) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296
  }
}

/** A Zipf-like draw (function words dominate, as in English), sentences of 8–24 words. */
function makeText(random: () => number): string {
  let text = ''
  while (text.length < 3200) {
    const words = 8 + Math.floor(random() * 17)
    let sentence = ''
    for (let w = 0; w < words; w++) {
      const word = VOCABULARY[Math.floor(VOCABULARY.length * random() ** 2.2)]!
      sentence += (w === 0 ? word[0]!.toUpperCase() + word.slice(1) : ` ${word}`) + (w > 2 && w < words - 2 && random() < 0.08 ? ',' : '')
    }
    text += `${sentence}. `
  }
  return decode(tokenize(text).slice(0, TOKENS))
}

function median(xs: number[]): number {
  return [...xs].sort((a, b) => a - b)[xs.length >> 1]!
}

async function measure(texts: string[], run: (batch: string[]) => unknown | Promise<unknown>) {
  await run(texts.slice(0, Math.min(500, texts.length)))
  const rounds: { rate: number; cpuPerWall: number }[] = []
  for (let r = 0; r < 3; r++) {
    const cpu0 = process.cpuUsage()
    const t0 = Bun.nanoseconds()
    await run(texts)
    const wall = (Bun.nanoseconds() - t0) / 1e9
    const cpu = process.cpuUsage(cpu0)
    rounds.push({ rate: texts.length / wall, cpuPerWall: (cpu.user + cpu.system) / 1e6 / wall })
  }
  const rate = median(rounds.map((r) => r.rate))
  return { texts_per_s: Math.round(rate), us_per_text: Number((1e6 / rate).toFixed(1)), cpu_cores: Number(median(rounds.map((r) => r.cpuPerWall)).toFixed(2)) }
}

const random = mulberry32(20261122)
const texts = Array.from({ length: N }, () => makeText(random))
const chars = texts.reduce((n, t) => n + t.length, 0) / N
const provider = new LocalProvider()
const signal = new AbortController().signal
let sink = 0

const embed = await measure(texts, (batch) => {
  for (const t of batch) sink += embedText(t)[0]!
})
const count = await measure(texts, (batch) => {
  for (const t of batch) sink += countTokens(t)
})
const viaProvider = await measure(texts, async (batch) => {
  for (let i = 0; i < batch.length; i += 256) sink += (await provider.embed('local-embed', batch.slice(i, i + 256), signal)).tokens
})

console.log(JSON.stringify({
  texts: N,
  tokens_per_text: TOKENS,
  chars_per_text: Math.round(chars),
  embed,
  count_tokens: count,
  provider: viaProvider,
  target_texts_per_s: 2000,
  pass: viaProvider.texts_per_s >= 2000,
  sink: sink !== 0,
}, null, 2))
