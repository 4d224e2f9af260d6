import { afterAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { appendFileSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { MemoryRedis } from '../../src/store/redis/memory'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The in-process stand-in's journal: the keys it is told to keep (idempotency records) come back in a
 * new instance on the same directory, as they were last written, with their expiry; the others do
 * not. Real files in a temporary directory, a controlled clock.
 */
const root = mkdtempSync(join(tmpdir(), 'ap-redis-journal-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))

let n = 0
const HOUR = 3_600_000

function fixture(start = 1_800_000_000_000) {
  const dir = join(root, String(n++))
  const clock = { now: start }
  const open = () => new MemoryRedis(() => clock.now, { dir, prefixes: ['idem:'] })
  return { dir, clock, open }
}

describe('MemoryRedis with a journal', () => {
  test('durable keys come back after a restart with their value and remaining TTL; other keys do not', async () => {
    const { clock, open } = fixture()
    const a = open()
    expect(await a.setIfAbsent('idem:pending', 'p', 600_000)).toBe(true)
    await a.set('idem:done', 'd1', 86_400_000)
    await a.set('idem:done', 'd2', 86_400_000)
    await a.set('lock:retention', 'x', 60_000)
    await a.close()
    clock.now += 1_000
    const b = open()
    expect(await b.get('idem:pending')).toBe('p')
    expect(await b.pttl('idem:pending')).toBe(599_000)
    expect(await b.get('idem:done')).toBe('d2')
    expect(await b.pttl('idem:done')).toBe(86_399_000)
    expect(await b.get('lock:retention')).toBeNull()
    // NX sees the journaled key.
    expect(await b.setIfAbsent('idem:done', 'd3', 1_000)).toBe(false)
    await b.close()
  })

  test('a deleted key stays deleted; an expired one is not loaded and may be taken again', async () => {
    const { clock, open } = fixture()
    const a = open()
    await a.setIfAbsent('idem:released', 'p', 600_000)
    await a.del('idem:released')
    await a.set('idem:short', 'v', 5_000)
    await a.close()
    clock.now += 5_000
    const b = open()
    expect(await b.get('idem:released')).toBeNull()
    expect(await b.get('idem:short')).toBeNull()
    expect(await b.setIfAbsent('idem:short', 'again', 1_000)).toBe(true)
    await b.close()
  })

  test('killed mid-write: the torn last line is skipped, everything before it is kept, and the next process writes a file of its own', async () => {
    const { dir, open } = fixture()
    const a = open()
    await a.set('idem:kept', 'v', 86_400_000)
    // What a process killed inside write(2) may leave: half a line, no newline.
    const [file] = readdirSync(dir)
    appendFileSync(join(dir, file!), '["s","idem:torn",18')
    // No close(): the process is gone.
    const b = open()
    expect(await b.get('idem:kept')).toBe('v')
    expect(await b.get('idem:torn')).toBeNull()
    await b.set('idem:after', 'w', 86_400_000)
    await b.close()
    expect(readdirSync(dir)).toHaveLength(2)
    const c = open()
    expect([await c.get('idem:kept'), await c.get('idem:after')]).toEqual(['v', 'w'])
    await c.close()
    await a.close()
  })

  test('a value is kept exactly: quotes, newlines, non-ASCII', async () => {
    const { open } = fixture()
    const value = JSON.stringify({ s: 'done', body: '{"a":"line\\nbreak \\"quoted\\" é 😀"}' })
    const a = open()
    await a.set('idem:exact', value, 60_000)
    await a.close()
    const b = open()
    expect(await b.get('idem:exact')).toBe(value)
    await b.close()
  })

  test('a file of several MiB is read back whole: lines across read boundaries, multi-byte characters', async () => {
    const { open } = fixture()
    const a = open()
    const valueOf = (i: number) => `${i}:${'é😀x'.repeat(100 + (i % 37))}`
    for (let i = 0; i < 4000; i++) await a.set(`idem:${i}`, valueOf(i), 60_000)
    await a.close()
    const b = open()
    for (let i = 0; i < 4000; i++) if ((await b.get(`idem:${i}`)) !== valueOf(i)) throw new Error(`record ${i} came back wrong`)
    await b.close()
  })

  test('hourly segments; one whose every key expired is deleted, oldest first, and a live one is kept', async () => {
    const { dir, clock, open } = fixture()
    const a = open()
    await a.set('idem:day', 'long', 24 * HOUR)
    clock.now += HOUR
    await a.set('idem:short', 'brief', 60_000) // a second segment (an hour later)
    clock.now += HOUR
    await a.set('idem:third', 'x', 24 * HOUR)
    await a.close()
    expect(readdirSync(dir)).toHaveLength(3)
    // The second segment expired, but the first (older, still live) is kept, so it is too.
    const b = open()
    await b.close()
    expect(readdirSync(dir).length).toBeGreaterThanOrEqual(3)
    clock.now += 22 * HOUR // the first segment's key has expired now
    const c = open()
    expect(await c.get('idem:day')).toBeNull()
    expect(await c.get('idem:third')).toBe('x')
    await c.close()
    const files = readdirSync(dir)
    const contents = files.map((f) => readFileSync(join(dir, f), 'utf8')).join('')
    expect(contents).not.toContain('idem:day')
    expect(contents).not.toContain('idem:short')
    expect(contents).toContain('idem:third')
  })
})
