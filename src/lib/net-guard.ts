import ipaddr from 'ipaddr.js'
import { lookup } from 'node:dns/promises'

/**
 * The SSRF rules (docs/webhooks.md, "Registering" and "A delivery") for URLs the service calls on a
 * client's behalf (webhook receivers, later workflow `http_request` nodes and agent `http` tools): https
 * only, and every address the host resolves to must be public unicast. Checked at registration and again,
 * with the address then pinned for the connection, at every call, so a DNS answer that changes in between
 * cannot redirect the request to the inside (DNS rebinding).
 */
export interface UrlPolicy {
  allowHttp: boolean
  allowPrivate: boolean
}

export class UnsafeUrlError extends Error {
  override name = 'UnsafeUrlError'
  /** A name that does not resolve now may resolve later; a refused address will not change. */
  constructor(message: string, readonly transient = false) {
    super(message)
  }
}

/** The checks that need no network: scheme, credentials, host. Returns the parsed URL. */
export function checkUrlShape(raw: string, policy: UrlPolicy): URL {
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    throw new UnsafeUrlError('is not a valid absolute URL')
  }
  if (url.protocol !== 'https:' && !(policy.allowHttp && url.protocol === 'http:')) {
    throw new UnsafeUrlError(policy.allowHttp ? 'must use https:// or http://' : 'must use https://')
  }
  if (url.username || url.password) throw new UnsafeUrlError('must not carry credentials (user:password@)')
  if (!url.hostname) throw new UnsafeUrlError('must name a host')
  return url
}

/** Whether `address` is a public unicast address (not loopback, private, link-local, multicast...). */
export function isPublicAddress(address: string): boolean {
  if (!ipaddr.isValid(address)) return false
  let ip = ipaddr.parse(address)
  if (ip.kind() === 'ipv6' && (ip as ipaddr.IPv6).isIPv4MappedAddress()) ip = (ip as ipaddr.IPv6).toIPv4Address()
  return ip.range() === 'unicast'
}

export interface PinnedAddress {
  address: string
  family: 4 | 6
}

/**
 * Resolves the URL's host and checks every address it resolves to (one private address among public
 * ones is refused: the connection could take any of them). Returns the address to connect to.
 */
export async function resolveAllowed(url: URL, policy: UrlPolicy, signal?: AbortSignal): Promise<PinnedAddress> {
  const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname
  let addresses: { address: string; family: number }[]
  if (ipaddr.isValid(host)) addresses = [{ address: host, family: host.includes(':') ? 6 : 4 }]
  else {
    try {
      const lookedUp = lookup(host, { all: true, verbatim: true })
      addresses = signal ? await abortable(lookedUp, signal) : await lookedUp
    } catch (err) {
      if (signal?.aborted) throw new UnsafeUrlError(`looking up host ${host} timed out`, true)
      throw new UnsafeUrlError(`host ${host} does not resolve (${(err as NodeJS.ErrnoException).code ?? 'lookup failed'})`, true)
    }
    if (addresses.length === 0) throw new UnsafeUrlError(`host ${host} does not resolve`, true)
  }
  if (!policy.allowPrivate) {
    const blocked = addresses.find((a) => !isPublicAddress(a.address))
    if (blocked) {
      throw new UnsafeUrlError(
        `host ${host} resolves to ${blocked.address}, a loopback, private, link-local or otherwise non-public address (WEBHOOK_ALLOW_PRIVATE_NETWORKS=true allows it)`,
      )
    }
  }
  const first = addresses[0]!
  return { address: first.address, family: first.family === 6 ? 6 : 4 }
}

function abortable<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason)
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason)
    signal.addEventListener('abort', onAbort, { once: true })
    promise.then(
      (v) => {
        signal.removeEventListener('abort', onAbort)
        resolve(v)
      },
      (e) => {
        signal.removeEventListener('abort', onAbort)
        reject(e)
      },
    )
  })
}
