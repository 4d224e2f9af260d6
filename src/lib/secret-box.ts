import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto'
import { chmodSync, existsSync, linkSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'

/**
 * Encrypts secrets at rest (webhook secrets) with AES-256-GCM under a key derived from SECRET_KEY.
 * A sealed value reads `v1.<key id>.<iv>.<ciphertext>.<tag>` (base64url): the key id (8 hex of the
 * key's own hash) lets a process started with another SECRET_KEY say so, instead of failing to
 * authenticate the ciphertext with a vague error.
 */
export class SecretBox {
  private readonly key: Buffer
  readonly keyId: string

  constructor(secretKey: string) {
    this.key = createHash('sha256').update(`agent-platform-api secret box\0${secretKey}`).digest()
    this.keyId = createHash('sha256').update(this.key).digest('hex').slice(0, 8)
  }

  seal(plain: string): string {
    const iv = randomBytes(12)
    const cipher = createCipheriv('aes-256-gcm', this.key, iv)
    const ct = Buffer.concat([cipher.update(plain, 'utf8'), cipher.final()])
    return ['v1', this.keyId, iv.toString('base64url'), ct.toString('base64url'), cipher.getAuthTag().toString('base64url')].join('.')
  }

  open(sealed: string): string {
    const parts = sealed.split('.')
    const [version, keyId, iv, ct, tag] = parts
    if (parts.length !== 5 || version !== 'v1' || !keyId || iv === undefined || ct === undefined || tag === undefined) throw new SecretBoxError('not a sealed secret')
    if (keyId !== this.keyId) {
      throw new SecretBoxError(`sealed with another SECRET_KEY (key id ${keyId}, this process has ${this.keyId}); every process must share one SECRET_KEY`)
    }
    const decipher = createDecipheriv('aes-256-gcm', this.key, Buffer.from(iv, 'base64url'))
    decipher.setAuthTag(Buffer.from(tag, 'base64url'))
    return Buffer.concat([decipher.update(Buffer.from(ct, 'base64url')), decipher.final()]).toString('utf8')
  }
}

export class SecretBoxError extends Error {
  override name = 'SecretBoxError'
}

/**
 * SECRET_KEY when set; otherwise the key kept in `DATA_DIR/secret.key` (created on first start,
 * mode 0600). Several processes of one deployment must share it: set SECRET_KEY in server mode.
 */
export function loadSecretKey(secretKey: string | null, dataDir: string): { key: string; generated: boolean; file: string | null } {
  if (secretKey) return { key: secretKey, generated: false, file: null }
  const file = join(dataDir, 'secret.key')
  if (existsSync(file)) {
    const key = readFileSync(file, 'utf8').trim()
    if (key.length < 32) throw new SecretBoxError(`${file} holds fewer than 32 characters; delete it only if no webhook exists yet`)
    return { key, generated: false, file }
  }
  mkdirSync(dataDir, { recursive: true })
  const key = randomBytes(32).toString('base64url')
  // Written whole to a file of its own, then linked into place: two processes starting at once on
  // one DATA_DIR both try, exactly one link succeeds, and neither can read a half-written key.
  const tmp = `${file}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`
  writeFileSync(tmp, `${key}\n`, { mode: 0o600, flag: 'wx' })
  chmodSync(tmp, 0o600)
  try {
    linkSync(tmp, file)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err
    return loadSecretKey(null, dataDir)
  } finally {
    rmSync(tmp, { force: true })
  }
  return { key, generated: true, file }
}
