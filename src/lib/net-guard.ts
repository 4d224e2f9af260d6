import ipaddr from 'ipaddr.js'
import { lookup } from 'node:dns/promises'

/**
 * The SSRF rules (docs/webhooks.md, "Registering" and "A delivery") for URLs the service calls on a
 * client's behalf (webhook receivers, workflow `http_request` nodes, agents' `http` tools and MCP
 * servers): https only, and every address the host resolves to must be public unicast. Checked when
 * the URL is saved and again at every call (`resolveDestination`), and the connection then goes to
 * the checked address only (`pinnedFetch`), so a DNS answer that changes in between cannot send the
 * request to the inside (DNS rebinding).
 */
export interface UrlPolicy {
  allowHttp: boolean
  allowPrivate: boolean
}

/** The rule the operator set for every outgoing call to a client's URL (WEBHOOK_ALLOW_HTTP, WEBHOOK_ALLOW_PRIVATE_NETWORKS). */
export function urlPolicy(config: { webhookAllowHttp: boolean; webhookAllowPrivateNetworks: boolean }): UrlPolicy {
  return { allowHttp: config.webhookAllowHttp, allowPrivate: config.webhookAllowPrivateNetworks }
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

/**
 * Whether `address` is a public unicast address (not loopback, private, link-local, multicast...).
 * An IPv6 address that stands for an IPv4 one (IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible
 * `::a.b.c.d`, SIIT `::ffff:0:a.b.c.d`, NAT64 `64:ff9b::a.b.c.d`) is judged as that IPv4 address:
 * `[::127.0.0.1]` is `::7f00:1`, loopback. Every other IPv6 address that carries an IPv4 one (6to4
 * 2002::/16, both of Teredo's, an ISATAP interface identifier) is public only if what it carries is,
 * and only if the IPv6 address is public itself (6to4, Teredo and the local-use NAT64 prefix
 * 64:ff9b:1::/48 never are: they reach the IPv4 network through relays of someone else's choosing).
 */
export function isPublicAddress(address: string): boolean {
  if (!ipaddr.isValid(address)) return false
  const ip = ipaddr.parse(address)
  if (ip.kind() === 'ipv4') return ip.range() === 'unicast'
  const v6 = ip as ipaddr.IPv6
  const translated = translatedIPv4(v6)
  if (translated) return translated.range() === 'unicast'
  // NAT64's local-use prefix 64:ff9b:1::/48 (RFC 8215): where the IPv4 address sits depends on a
  // prefix length only the network knows, and it leads into that network's own translator.
  if (v6.parts[0] === 0x64 && v6.parts[1] === 0xff9b && v6.parts[2] === 1) return false
  if (!carriedIPv4(v6).every((v4) => v4.range() === 'unicast')) return false
  return v6.range() === 'unicast'
}

const ipv4Of = (hi: number, lo: number) => new ipaddr.IPv4([hi >> 8, hi & 0xff, lo >> 8, lo & 0xff])

/** The IPv4 address an IPv6 one is a stand-in for (the connection reaches that address), or null. */
function translatedIPv4(ip: ipaddr.IPv6): ipaddr.IPv4 | null {
  const s = ip.parts
  const zero = (from: number, to: number) => s.slice(from, to).every((p) => p === 0)
  // ::/96 minus :: and ::1 (unspecified and loopback as they are): IPv4-compatible, deprecated but parsed.
  if (zero(0, 6) && (s[6] !== 0 || s[7]! > 1)) return ipv4Of(s[6]!, s[7]!)
  // ::ffff:0:0/96 (IPv4-mapped) and ::ffff:0:0:0/96 (SIIT, RFC 6145).
  if (zero(0, 5) && s[5] === 0xffff) return ipv4Of(s[6]!, s[7]!)
  if (zero(0, 4) && s[4] === 0xffff && s[5] === 0) return ipv4Of(s[6]!, s[7]!)
  // NAT64's well-known prefix 64:ff9b::/96 (RFC 6052).
  if (s[0] === 0x64 && s[1] === 0xff9b && zero(2, 6)) return ipv4Of(s[6]!, s[7]!)
  return null
}

/** The IPv4 addresses an IPv6 address carries inside it (tunnels, ISATAP), to be checked too. */
function carriedIPv4(ip: ipaddr.IPv6): ipaddr.IPv4[] {
  const s = ip.parts
  const out: ipaddr.IPv4[] = []
  // 6to4: 2002:AABB:CCDD::/48 is the site behind AA.BB.CC.DD.
  if (s[0] === 0x2002) out.push(ipv4Of(s[1]!, s[2]!))
  // Teredo 2001:0::/32: the server's address, then the client's, inverted.
  if (s[0] === 0x2001 && s[1] === 0) out.push(ipv4Of(s[2]!, s[3]!), ipv4Of(~s[6]! & 0xffff, ~s[7]! & 0xffff))
  // ISATAP: an interface identifier 0000:5efe:a.b.c.d (0200:5efe, and the group-bit variants, too).
  if ((s[4]! & 0xfcff) === 0 && s[5] === 0x5efe) out.push(ipv4Of(s[6]!, s[7]!))
  return out
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

/** A URL that passed the rules, with the address its connections are pinned to. */
export interface Destination {
  url: URL
  address: PinnedAddress
}

/**
 * The URL's shape checked, its host resolved and every address checked (`checkUrlShape`, then
 * `resolveAllowed`, under `signal` when given). Fails with UnsafeUrlError.
 */
export async function resolveDestination(raw: string, policy: UrlPolicy, signal?: AbortSignal): Promise<Destination> {
  const url = checkUrlShape(raw, policy)
  return { url, address: await resolveAllowed(url, policy, signal) }
}

/**
 * A request to a checked destination, connected to its pinned address only: the Host header and the
 * TLS server name keep the URL's name, so the certificate is verified against it. `target` (another
 * path of the same server) defaults to the destination's URL; another origin was never checked and is
 * refused. A redirect is never followed (the 3xx is the answer): it would lead to a host nobody checked.
 */
export async function pinnedFetch(dest: Destination, init: RequestInit, target: URL = dest.url): Promise<Response> {
  if (target.origin !== dest.url.origin) throw new UnsafeUrlError(`refused a request to ${target.origin}: only ${dest.url.origin} was checked`)
  const headers = new Headers(init.headers)
  headers.set('host', target.host)
  const pinned = new URL(target)
  pinned.hostname = dest.address.family === 6 ? `[${dest.address.address}]` : dest.address.address
  const serverName = target.hostname.startsWith('[') ? undefined : target.hostname
  // `tls` is Bun's addition to fetch's init.
  return fetch(pinned, { ...init, headers, redirect: 'manual', tls: { serverName } } as RequestInit)
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
