import { Elysia } from 'elysia'
import type { Config } from '../../config'
import { CONSOLE_CSP } from '../console'
import { DOCS_CSP } from '../docs'
import { stateOf } from './request-state'

/**
 * The security headers of every answer: no sniffing, no framing, no referrer, no caching, and a
 * Content-Security-Policy that allows nothing (an API answers no page), except for the reference
 * page at /docs and the console, which load their own scripts and styles from this service only.
 */
export function securityHeaders(config: Config) {
  const security: Record<string, string> = {
    'x-content-type-options': 'nosniff',
    'x-frame-options': 'DENY',
    'referrer-policy': 'no-referrer',
    'cache-control': 'no-store',
  }
  if (config.tls) security['strict-transport-security'] = 'max-age=31536000; includeSubDomains'
  const docsSecurity = { ...security, 'content-security-policy': DOCS_CSP }
  security['content-security-policy'] = "default-src 'none'; frame-ancestors 'none'"
  const consolePrefix = `${config.basePath}/console`
  const consoleSecurity = { ...security, 'content-security-policy': CONSOLE_CSP }
  return new Elysia({ name: 'conventions.security-headers' }).onRequest(({ request, set }) => {
    const path = stateOf(request).path
    Object.assign(set.headers, path.startsWith('/docs') ? docsSecurity : path.startsWith(consolePrefix) ? consoleSecurity : security)
  })
}
