import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

/** A self-signed certificate (and its key) in a temp dir of its own, made with openssl. */
export interface Certificate {
  dir: string
  certFile: string
  keyFile: string
  /** The certificate in PEM; also the CA to trust it by (`fetch(url, { tls: { ca: cert } })`). */
  cert: string
  /** The private key in PEM. */
  key: string
  /** Removes `dir`. */
  remove(): void
}

/**
 * A certificate for `localhost`: CN localhost, SAN DNS:localhost and IP:127.0.0.1, valid for a day.
 * ECDSA P-256, not RSA: a handshake costs a fraction of RSA's, which matters when hundreds of
 * deliveries open connections to one receiver at once (RSA handshakes then time out under load).
 */
export function createCertificate(): Certificate {
  const dir = mkdtempSync(join(tmpdir(), 'ap-test-cert-'))
  const certFile = join(dir, 'cert.pem')
  const keyFile = join(dir, 'key.pem')
  const openssl = Bun.spawnSync(
    [
      'openssl', 'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1', '-subj', '/CN=localhost',
      '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1', '-keyout', keyFile, '-out', certFile,
    ],
    { stdout: 'pipe', stderr: 'pipe' },
  )
  if (openssl.exitCode !== 0) {
    rmSync(dir, { recursive: true, force: true })
    throw new Error(`openssl failed: ${openssl.stderr.toString()}`)
  }
  return {
    dir,
    certFile,
    keyFile,
    cert: readFileSync(certFile, 'utf8'),
    key: readFileSync(keyFile, 'utf8'),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  }
}
