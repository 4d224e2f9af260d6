import { createHmac } from 'node:crypto'

/**
 * The signatures of a webhook delivery: the service's own `X-Service-Signature` (hex HMAC-SHA256 of the raw
 * body, key = the secret's UTF-8 bytes) and the Standard Webhooks `webhook-signature` (base64
 * HMAC-SHA256 of `id.timestamp.body`). For the latter the key follows Standard Webhooks: a secret
 * `whsec_<base64>` signs with the decoded bytes, any other secret with its UTF-8 bytes, so a receiver
 * using a Standard Webhooks library passes `whsec_` + base64(secret).
 */
export function serviceSignature(secret: string, body: string): string {
  return `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`
}

export function standardKey(secret: string): Buffer {
  return secret.startsWith('whsec_') ? Buffer.from(secret.slice(6), 'base64') : Buffer.from(secret, 'utf8')
}

/** `v1,<sig>` for each secret, space-separated (the current secret first). */
export function standardSignature(secrets: readonly string[], id: string, timestamp: number, body: string): string {
  return secrets.map((s) => `v1,${createHmac('sha256', standardKey(s)).update(`${id}.${timestamp}.${body}`).digest('base64')}`).join(' ')
}
