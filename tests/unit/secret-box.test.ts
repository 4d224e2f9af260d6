import { afterAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync, mkdirSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { SecretBox, SecretBoxError, loadSecretKey } from '../../src/lib/secret-box'

setDefaultTimeout(TEST_TIMEOUT_MS)

/** AES-256-GCM at rest for webhook secrets, and the key file in DATA_DIR. */
const tmp = mkdtempSync(join(tmpdir(), 'ap-unit-secret-box-'))
afterAll(() => rmSync(tmp, { recursive: true, force: true }))

const KEY = 'a-test-secret-key-that-is-long-enough-0123456789'
const box = new SecretBox(KEY)

/** The error `fn` throws. */
function thrown(fn: () => unknown): Error {
  try {
    fn()
  } catch (err) {
    return err as Error
  }
  throw new Error('expected a throw, nothing was thrown')
}

/** Flips one bit of the decoded bytes of a base64url part (a character swap could touch only padding bits). */
function flip(part: string, byte = 0): string {
  const bytes = Buffer.from(part, 'base64url')
  bytes[byte % bytes.length]! ^= 0x01
  return bytes.toString('base64url')
}

describe('seal and open', () => {
  test.each([
    ['ascii', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'],
    ['empty', ''],
    ['unicode', 'clé secrète — 秘密 🔑 ζ'],
    ['long', 'x'.repeat(10_000)],
    ['dots and newlines', 'a.b.c\n.d'],
  ])('round trip: %s', (_name, plain) => {
    const sealed = box.seal(plain)
    expect(sealed).not.toContain(plain || '\0')
    expect(box.open(sealed)).toBe(plain)
    expect(new SecretBox(KEY).open(sealed)).toBe(plain)
  })

  test('the sealed form is v1.<key id>.<iv>.<ciphertext>.<tag> in base64url', () => {
    const parts = box.seal('hello').split('.')
    expect(parts).toHaveLength(5)
    expect(parts[0]).toBe('v1')
    expect(parts[1]).toBe(box.keyId)
    expect(box.keyId).toMatch(/^[0-9a-f]{8}$/)
    for (const p of parts.slice(2)) expect(p).toMatch(/^[A-Za-z0-9_-]+$/)
    expect(Buffer.from(parts[2]!, 'base64url')).toHaveLength(12)
    expect(Buffer.from(parts[4]!, 'base64url')).toHaveLength(16)
  })

  test('two seals of the same value differ (random IV) and both open', () => {
    const a = box.seal('same value')
    const b = box.seal('same value')
    expect(a).not.toBe(b)
    expect(a.split('.')[2]).not.toBe(b.split('.')[2])
    expect(box.open(a)).toBe('same value')
    expect(box.open(b)).toBe('same value')
  })

  const sealed = box.seal('the webhook secret')
  const parts = sealed.split('.')
  const withPart = (i: number, value: string) => parts.map((p, j) => (j === i ? value : p)).join('.')
  test.each([
    ['version', withPart(0, 'v2')],
    ['key id', withPart(1, '00000000')],
    ['iv, first byte', withPart(2, flip(parts[2]!, 0))],
    ['iv, last byte', withPart(2, flip(parts[2]!, 11))],
    ['ciphertext, first byte', withPart(3, flip(parts[3]!, 0))],
    ['ciphertext, last byte', withPart(3, flip(parts[3]!, -1 + Buffer.from(parts[3]!, 'base64url').length))],
    ['ciphertext, one byte more', withPart(3, Buffer.concat([Buffer.from(parts[3]!, 'base64url'), Buffer.from([0])]).toString('base64url'))],
    ['ciphertext, one byte less', withPart(3, Buffer.from(parts[3]!, 'base64url').subarray(1).toString('base64url'))],
    ['tag, first byte', withPart(4, flip(parts[4]!, 0))],
    ['tag, last byte', withPart(4, flip(parts[4]!, 15))],
    ['tag truncated to 12 bytes', withPart(4, Buffer.from(parts[4]!, 'base64url').subarray(0, 12).toString('base64url'))],
    ['tag truncated to 4 bytes', withPart(4, Buffer.from(parts[4]!, 'base64url').subarray(0, 4).toString('base64url'))],
    ['tag empty', withPart(4, '')],
    ['tag missing', parts.slice(0, 4).join('.')],
    ['iv and ciphertext swapped with another seal', [parts[0], parts[1], ...box.seal('the webhook secret').split('.').slice(2, 4), parts[4]].join('.')],
    ['empty string', ''],
    ['plain text', 'the webhook secret'],
  ])('tampering (%s) throws', (_name, tampered) => {
    expect(tampered).not.toBe(sealed)
    const err = thrown(() => box.open(tampered))
    expect(err).toBeInstanceOf(Error)
  })

  test('a box sealed under another key throws a SecretBoxError naming SECRET_KEY and both key ids', () => {
    const other = new SecretBox('another-secret-key-also-long-enough-9876543210')
    expect(other.keyId).not.toBe(box.keyId)
    const err = thrown(() => other.open(sealed))
    expect(err).toBeInstanceOf(SecretBoxError)
    expect(err.message).toContain('SECRET_KEY')
    expect(err.message).toContain(box.keyId)
    expect(err.message).toContain(other.keyId)
  })

  test('something that is not a sealed secret throws a SecretBoxError', () => {
    const err = thrown(() => box.open('v1.only-two'))
    expect(err).toBeInstanceOf(SecretBoxError)
    expect(err.message).toContain('not a sealed secret')
  })
})

describe('loadSecretKey', () => {
  test('unset: generates DATA_DIR/secret.key (mode 0600, creating DATA_DIR), then returns the same key', () => {
    const dataDir = join(tmp, 'generated', 'nested')
    const first = loadSecretKey(null, dataDir)
    const file = join(dataDir, 'secret.key')
    expect(first).toEqual({ key: first.key, generated: true, file })
    expect(first.key.length).toBeGreaterThanOrEqual(32)
    expect(statSync(file).mode & 0o777).toBe(0o600)
    expect(readFileSync(file, 'utf8').trim()).toBe(first.key)

    const second = loadSecretKey(null, dataDir)
    expect(second).toEqual({ key: first.key, generated: false, file })
    // A process restarted on the same DATA_DIR opens what the first one sealed.
    expect(new SecretBox(second.key).open(new SecretBox(first.key).seal('kept'))).toBe('kept')
  })

  test('two data dirs get two different keys', () => {
    const a = loadSecretKey(null, join(tmp, 'a'))
    const b = loadSecretKey(null, join(tmp, 'b'))
    expect(a.key).not.toBe(b.key)
  })

  test('an explicit key is preferred: no file read or written', () => {
    const dataDir = join(tmp, 'explicit')
    expect(loadSecretKey(KEY, dataDir)).toEqual({ key: KEY, generated: false, file: null })
    expect(existsSync(join(dataDir, 'secret.key'))).toBe(false)

    const withFile = join(tmp, 'explicit-with-file')
    const generated = loadSecretKey(null, withFile).key
    expect(loadSecretKey(KEY, withFile)).toEqual({ key: KEY, generated: false, file: null })
    expect(readFileSync(join(withFile, 'secret.key'), 'utf8').trim()).toBe(generated)
  })

  test('an empty SECRET_KEY counts as unset', () => {
    expect(loadSecretKey('', join(tmp, 'empty')).generated).toBe(true)
  })

  test('a key file written by hand is taken, trimmed', () => {
    const dataDir = join(tmp, 'by-hand')
    mkdirSync(dataDir, { recursive: true })
    writeFileSync(join(dataDir, 'secret.key'), `  ${'k'.repeat(40)}\n\n`)
    expect(loadSecretKey(null, dataDir)).toEqual({ key: 'k'.repeat(40), generated: false, file: join(dataDir, 'secret.key') })
  })

  test.each([
    ['short', 'too-short\n'],
    ['empty', ''],
    ['31 characters', `${'k'.repeat(31)}\n`],
  ])('refuses a %s key file with a SecretBoxError naming the file', (name, content) => {
    const dataDir = join(tmp, `short-${name.replace(/\W/g, '-')}`)
    mkdirSync(dataDir, { recursive: true })
    const file = join(dataDir, 'secret.key')
    writeFileSync(file, content)
    const err = thrown(() => loadSecretKey(null, dataDir))
    expect(err).toBeInstanceOf(SecretBoxError)
    expect(err.message).toContain(file)
    expect(err.message).toContain('fewer than 32 characters')
    expect(readFileSync(file, 'utf8')).toBe(content)
  })
})

describe('sealed format', () => {
  test('a sealed value with an extra part does not open', () => {
    const box = new SecretBox('k'.repeat(40))
    const sealed = box.seal('value')
    let threw = false
    try {
      box.open(`${sealed}.junk`)
    } catch {
      threw = true
    }
    expect(threw).toBe(true)
  })
})

describe('loadSecretKey from processes starting at once', () => {
  test('ten concurrent first starts on one DATA_DIR agree on one key and none fails', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ap-secret-race-'))
    try {
      const script = `import { loadSecretKey } from ${JSON.stringify(join(import.meta.dir, '../../src/lib/secret-box.ts'))}; console.log(loadSecretKey(null, ${JSON.stringify(dir)}).key)`
      const procs = Array.from({ length: 10 }, () => Bun.spawn(['bun', '-e', script], { stdout: 'pipe', stderr: 'pipe' }))
      const outs = await Promise.all(procs.map(async (p) => ({ code: await p.exited, out: (await new Response(p.stdout).text()).trim(), err: await new Response(p.stderr).text() })))
      for (const o of outs) expect(o).toMatchObject({ code: 0, err: '' })
      expect(new Set(outs.map((o) => o.out)).size).toBe(1)
      expect(readFileSync(join(dir, 'secret.key'), 'utf8').trim()).toBe(outs[0]!.out)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
