import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { DEFAULT_CHUNKING } from '../../src/domain/knowledge/chunk'
import { DocumentSandbox } from '../../src/domain/knowledge/sandbox'
import { DEFAULT_SANDBOX_LIMITS } from '../../src/domain/knowledge/sandbox-protocol'
import { embedText } from '../../src/domain/models/local/embed'
import { countTokens } from '../../src/lib/tokens'
import { readFileSync } from 'node:fs'
import { inflatingDocx } from '../helpers/hostile-documents'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The document processes (src/domain/knowledge/sandbox.ts): several read documents side by side,
 * one reads them in turn, and with `embed` each chunk comes back with its local-embed vector.
 */
const bytes = (text: string) => new TextEncoder().encode(text)
const TEXT = `# Shipping\n\n${Array.from({ length: 6 }, (_, i) => `Parcel ${i} leaves the depot on day ${i + 1} and reaches the customer two days later.`).join('\n\n')}`

describe('DocumentSandbox', () => {
  test('two processes take two documents at once: the second is handed over while the first still waits for its bytes', async () => {
    const sandbox = new DocumentSandbox(DEFAULT_SANDBOX_LIMITS, 2)
    try {
      let secondLoaded: () => void = () => {}
      const second = new Promise<void>((resolve) => (secondLoaded = resolve))
      // The first document's bytes come only once the second's have been asked for: with one process the second would wait behind the first forever.
      const a = sandbox.process('md', async () => (await second, bytes(TEXT)), DEFAULT_CHUNKING)
      const b = sandbox.process('md', async () => (secondLoaded(), bytes(TEXT)), DEFAULT_CHUNKING)
      const [ca, cb] = await Promise.all([a, b])
      expect(ca.length).toBeGreaterThan(0)
      expect(cb).toEqual(ca)
    } finally {
      await sandbox.close()
    }
  }, 60_000)

  test('while every started process reads, the next one is started ahead: a document coming then does not wait for a process to start', async () => {
    const sandbox = new DocumentSandbox(DEFAULT_SANDBOX_LIMITS, 3)
    try {
      expect(sandbox.alive).toBe(0)
      let release: () => void = () => {}
      const held = new Promise<void>((resolve) => (release = resolve))
      const a = sandbox.process('md', async () => (await held, bytes(TEXT)), DEFAULT_CHUNKING)
      // The first document's process, and one more started ahead; not the third.
      expect(sandbox.alive).toBe(2)
      release()
      expect((await a).length).toBeGreaterThan(0)
      // One is free now: nothing more is started ahead.
      expect(sandbox.alive).toBe(2)
    } finally {
      await sandbox.close()
    }
    expect(sandbox.alive).toBe(0)
  }, 60_000)

  test('one process reads documents in turn: the second is not handed over while the first waits for its bytes', async () => {
    const sandbox = new DocumentSandbox(DEFAULT_SANDBOX_LIMITS, 1)
    try {
      const order: string[] = []
      let release: () => void = () => {}
      const gate = new Promise<void>((resolve) => (release = resolve))
      const a = sandbox.process('md', async () => (order.push('a'), await gate, bytes(TEXT)), DEFAULT_CHUNKING)
      const b = sandbox.process('md', async () => (order.push('b'), bytes(TEXT)), DEFAULT_CHUNKING)
      while (order.length === 0) await new Promise((resolve) => setImmediate(resolve))
      // Turns of the event loop with the first document's bytes still on their way: the second waits.
      for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve))
      expect(order).toEqual(['a'])
      release()
      await Promise.all([a, b])
      expect(order).toEqual(['a', 'b'])
    } finally {
      await sandbox.close()
    }
  }, 60_000)

  test('with embed, every chunk carries its local-embed vector as pgvector text or as float4 values; without, none', async () => {
    const sandbox = new DocumentSandbox(DEFAULT_SANDBOX_LIMITS, 1)
    try {
      const settings = { chunk_size: 24, chunk_overlap: 4 }
      const embedded = await sandbox.process('md', async () => bytes(TEXT), settings, undefined, 'text')
      expect(embedded.length).toBeGreaterThan(2)
      for (const c of embedded) {
        expect(c.tokens).toBe(countTokens(c.content))
        expect((c.vector as string).slice(1, -1).split(',').map((v) => Math.fround(Number(v)))).toEqual(embedText(c.content).map((v) => Math.fround(v)))
      }
      const float4 = await sandbox.process('md', async () => bytes(TEXT), settings, undefined, 'float4')
      expect(float4.map((c) => c.content)).toEqual(embedded.map((c) => c.content))
      for (const c of float4) {
        expect(c.vector).toBeInstanceOf(Float32Array)
        expect(Array.from(c.vector as Float32Array)).toEqual(embedText(c.content).map((v) => Math.fround(v)))
      }
      const plain = await sandbox.process('md', async () => bytes(TEXT), settings)
      expect(plain.map((c) => c.content)).toEqual(embedded.map((c) => c.content))
      expect(plain.every((c) => c.vector === undefined)).toBe(true)
    } finally {
      await sandbox.close()
    }
  }, 60_000)

  test('the document process holds its time limit itself: with this side unable to (its loop held), it ends at the limit, and the document fails processing_timeout', async () => {
    const sandbox = new DocumentSandbox({ ...DEFAULT_SANDBOX_LIMITS, timeoutMs: 1_000 }, 1)
    const alive = (pid: number) => {
      try {
        return !readFileSync(`/proc/${pid}/status`, 'utf8').includes('State:\tZ')
      } catch {
        return false
      }
    }
    // ~40 KB that mammoth reads for seconds (15 MiB of Word XML): sent at once, read long after.
    const docx = inflatingDocx(15 * 1024 * 1024)
    try {
      let goneWhileHeld = false
      // Once the document is sent (a turn of this loop), the loop is held until the process is gone:
      // no timer of this side fires, its limit is not enforced here.
      const begin = async () => {
        const pid = sandbox.pid!
        setTimeout(() => {
          const until = Date.now() + 30_000
          while (Date.now() < until) if (!alive(pid)) return void (goneWhileHeld = true)
        }, 50)
      }
      const err = await sandbox.process('docx', async () => docx, DEFAULT_CHUNKING, undefined, false, '', begin).catch((e: unknown) => e)
      expect(goneWhileHeld).toBe(true)
      expect(err).toMatchObject({ code: 'processing_timeout', message: 'parsing and chunking the document took longer than 1 s' })
    } finally {
      await sandbox.close()
    }
  }, 120_000)

  describe('fair between workspaces', () => {
    /** Turns of the event loop until `done()` or `ms` have passed. */
    const until = async (done: () => boolean, ms = 10_000) => {
      const deadline = Date.now() + ms
      while (!done() && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 5))
    }

    test('two processes, one each per workspace: A\'s second document waits while B\'s is read beside A\'s first', async () => {
      const sandbox = new DocumentSandbox(DEFAULT_SANDBOX_LIMITS, 2, 1)
      try {
        const order: string[] = []
        let release: () => void = () => {}
        const gate = new Promise<void>((resolve) => (release = resolve))
        // A's first document holds its process (its bytes still on their way, as a long document would).
        const a1 = sandbox.process('md', async () => (order.push('a1'), await gate, bytes(TEXT)), DEFAULT_CHUNKING, undefined, false, 'A')
        const a2 = sandbox.process('md', async () => (order.push('a2'), bytes(TEXT)), DEFAULT_CHUNKING, undefined, false, 'A')
        const b = sandbox.process('md', async () => (order.push('b'), bytes(TEXT)), DEFAULT_CHUNKING, undefined, false, 'B')
        await until(() => order.includes('b'))
        // Before: A's second document took the other process and B's waited behind A's first.
        expect(order).toEqual(['a1', 'b'])
        expect((await b).length).toBeGreaterThan(0)
        release()
        await Promise.all([a1, a2])
        expect(order).toEqual(['a1', 'b', 'a2'])
      } finally {
        await sandbox.close()
      }
    }, 30_000)

    test('one process: a document of another workspace goes before the rest of the first one\'s', async () => {
      const sandbox = new DocumentSandbox(DEFAULT_SANDBOX_LIMITS, 1)
      try {
        const order: string[] = []
        let release: () => void = () => {}
        const gate = new Promise<void>((resolve) => (release = resolve))
        const docs = [
          sandbox.process('md', async () => (order.push('a1'), await gate, bytes(TEXT)), DEFAULT_CHUNKING, undefined, false, 'A'),
          sandbox.process('md', async () => (order.push('a2'), bytes(TEXT)), DEFAULT_CHUNKING, undefined, false, 'A'),
          sandbox.process('md', async () => (order.push('a3'), bytes(TEXT)), DEFAULT_CHUNKING, undefined, false, 'A'),
          sandbox.process('md', async () => (order.push('b1'), bytes(TEXT)), DEFAULT_CHUNKING, undefined, false, 'B'),
        ]
        await until(() => order.length > 0)
        release()
        await Promise.all(docs)
        // Before: in the order they came (a1, a2, a3, b1).
        expect(order).toEqual(['a1', 'b1', 'a2', 'a3'])
      } finally {
        await sandbox.close()
      }
    }, 30_000)

    test('a document stopped while it waits its turn leaves the queue at once (SandboxAborted)', async () => {
      const sandbox = new DocumentSandbox(DEFAULT_SANDBOX_LIMITS, 1)
      try {
        let release: () => void = () => {}
        const gate = new Promise<void>((resolve) => (release = resolve))
        const first = sandbox.process('md', async () => (await gate, bytes(TEXT)), DEFAULT_CHUNKING, undefined, false, 'A')
        const ac = new AbortController()
        const waiting = sandbox.process('md', async () => bytes(TEXT), DEFAULT_CHUNKING, ac.signal, false, 'A')
        ac.abort()
        expect(await waiting.then(() => 'read', (err) => (err as Error).name)).toBe('SandboxAborted')
        release()
        expect((await first).length).toBeGreaterThan(0)
      } finally {
        await sandbox.close()
      }
    }, 30_000)
  })
})
